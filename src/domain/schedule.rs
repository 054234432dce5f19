//! Scheduled transactions (docs/schedules.md): what moves, how much, when, and what became of
//! each occurrence. Pure: the service's poster and the endpoints decide when to ask.
//!
//! An occurrence is settled once posted or skipped. Occurrences before `next` are all settled;
//! `done` holds the settled ones after it (an occurrence posted ahead of an earlier one that
//! failed). Each occurrence posts under the transaction id `sch:<schedule>:<n>`, which the index
//! of transaction ids holds: whatever crashes or races, an occurrence is posted at most once.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::recur::{Occurrence, Recurrence};
use super::text::Text;
use super::tree::AccountId;

/// The key prefix of schedules among a user's settings (`sched:<id>`).
pub const KEY_PREFIX: &str = "sched:";
/// The key of the counter of schedule ids.
pub const NEXT_ID_KEY: &str = "sched-next";
/// Schedules one user may keep.
pub const MAX_SCHEDULES: usize = 200;
/// Failed occurrences a schedule remembers; older ones are dropped (and stay unposted).
pub const MAX_FAILED: usize = 100;
/// Skipped occurrences a schedule remembers.
pub const MAX_SKIPPED: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum What {
    /// Money in: deposited into the account (and so down its subtree).
    Deposit { to: AccountId },
    /// Money out of an envelope.
    Withdraw { from: AccountId },
    /// Money moved between two accounts of the tree.
    Move { from: AccountId, to: AccountId },
}

impl What {
    pub fn name(self) -> &'static str {
        match self {
            What::Deposit { .. } => "deposit",
            What::Withdraw { .. } => "withdraw",
            What::Move { .. } => "move",
        }
    }

    /// Every account it names.
    pub fn accounts(self) -> Vec<AccountId> {
        match self {
            What::Deposit { to } => vec![to],
            What::Withdraw { from } => vec![from],
            What::Move { from, to } => vec![from, to],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub id: u64,
    pub name: Text,
    pub what: What,
    pub amount_cents: i64,
    /// How far (percent) an imported line's amount may differ and still be this schedule's.
    pub approx_pct: u8,
    pub recur: Recurrence,
    /// Posts by itself when due; otherwise a due occurrence waits for approval.
    pub auto: bool,
    /// Every occurrence before this index is settled.
    pub next: u32,
    /// Settled occurrences at or after `next`.
    pub done: BTreeSet<u32>,
    /// Occurrences skipped (the most recent [`MAX_SKIPPED`]).
    pub skipped: BTreeSet<u32>,
    /// Due occurrences the engine refused, with why (retried until they post or are skipped).
    pub failed: BTreeMap<u32, Text>,
    /// Raised each time the rule changes: occurrences are numbered afresh, and their
    /// transaction ids carry the revision so they never meet an earlier rule's.
    pub rev: u32,
}

/// What became, or will become, of one occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Posted,
    Skipped,
    /// Due and not posted: waiting for approval, or its posting is on its way.
    Due,
    /// Due, and refused when posted (why).
    Failed(Text),
    /// Not due yet.
    Scheduled,
}

impl State {
    pub fn name(&self) -> &'static str {
        match self {
            State::Posted => "posted",
            State::Skipped => "skipped",
            State::Due => "due",
            State::Failed(_) => "failed",
            State::Scheduled => "scheduled",
        }
    }
}

impl Schedule {
    /// The transaction id occurrence `n` posts under.
    pub fn txid(&self, n: u32) -> Text {
        match self.rev {
            0 => Text::from(format!("sch:{}:{n}", self.id)),
            r => Text::from(format!("sch:{}r{r}:{n}", self.id)),
        }
    }

    /// A new rule: the series starts afresh from `today` (nothing before today is owed, as for a
    /// new schedule) under a new revision.
    pub fn renumber(&mut self, today: i64) {
        self.rev += 1;
        self.next = self.recur.next_from(today).map_or(u32::MAX, |o| o.n);
        self.done.clear();
        self.skipped.clear();
        self.failed.clear();
    }
}

/// The settings key of schedule `id`.
pub fn key(id: u64) -> Text {
    Text::from(format!("{KEY_PREFIX}{id}"))
}

impl Schedule {
    pub fn settled(&self, n: u32) -> bool {
        n < self.next || self.done.contains(&n)
    }

    /// Marks occurrence `n` settled (posted or skipped) and moves `next` past every settled one.
    pub fn settle(&mut self, n: u32, skipped: bool) {
        self.failed.remove(&n);
        if skipped {
            self.skipped.insert(n);
        }
        if n >= self.next {
            self.done.insert(n);
        }
        while self.done.remove(&self.next) {
            self.next += 1;
        }
        // Skips are kept so /upcoming shows them; the oldest go first.
        while self.skipped.len() > MAX_SKIPPED {
            self.skipped.pop_first();
        }
    }

    /// The state of occurrence `o` on `today`.
    pub fn state(&self, o: &Occurrence, today: i64) -> State {
        if self.skipped.contains(&o.n) {
            return State::Skipped;
        }
        if self.settled(o.n) {
            return State::Posted;
        }
        if let Some(why) = self.failed.get(&o.n) {
            return State::Failed(why.clone());
        }
        if o.day <= today {
            State::Due
        } else {
            State::Scheduled
        }
    }

    /// Unsettled occurrences due on or before `today`, in order (at most `max`): what the poster
    /// posts (an automatic schedule) or what waits for approval.
    pub fn due(&self, today: i64, max: usize) -> Vec<Occurrence> {
        let mut out = Vec::new();
        let mut n = self.next;
        while out.len() < max {
            let Some(o) = self.recur.occurrence(n) else { break };
            if o.day > today {
                break;
            }
            if !self.settled(n) {
                out.push(o);
            }
            n += 1;
        }
        out
    }

    /// What /upcoming and the forecast look at: every occurrence still open from before `today`
    /// (due, waiting or failed; at most `max`), then every occurrence of `today ..= last`, each
    /// once, in order.
    pub fn open_and_coming(&self, today: i64, last: i64, max: usize) -> Vec<Occurrence> {
        let mut seen = BTreeSet::new();
        let mut out = self.due(today - 1, max);
        out.extend(self.recur.occurrences_between(today, last));
        out.retain(|o| seen.insert(o.n));
        out
    }

    /// The first unsettled occurrence, due or not.
    pub fn first_open(&self) -> Option<Occurrence> {
        let mut n = self.next;
        loop {
            let o = self.recur.occurrence(n)?;
            if !self.settled(n) {
                return Some(o);
            }
            n += 1;
        }
    }

    /// The day the poster should next look at this schedule: its first unsettled occurrence's,
    /// or tomorrow while a due occurrence keeps failing (retried once a day). `None` when it
    /// posts nothing by itself.
    pub fn wake_day(&self, today: i64) -> Option<i64> {
        if !self.auto {
            return None;
        }
        let open = self.first_open()?.day;
        if self.failed.is_empty() {
            Some(open)
        } else {
            Some(open.max(today + 1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::recur::{End, Unit, Weekend};

    fn sched(auto: bool) -> Schedule {
        Schedule {
            id: 1,
            name: "Rent".into(),
            what: What::Withdraw { from: 7 },
            amount_cents: 100,
            approx_pct: 0,
            recur: Recurrence {
                start_day: 100,
                every: 1,
                unit: Unit::Days,
                month_day: None,
                nth_weekday: None,
                end: End::After(10),
                weekend: Weekend::Keep,
            },
            auto,
            next: 0,
            done: BTreeSet::new(),
            skipped: BTreeSet::new(),
            failed: BTreeMap::new(),
            rev: 0,
        }
    }

    #[test]
    fn settling_out_of_order_moves_next_only_past_a_settled_run() {
        let mut s = sched(true);
        s.settle(1, false);
        assert_eq!(s.next, 0);
        assert!(s.settled(1) && !s.settled(0));
        s.failed.insert(0, "not enough money".into());
        assert_eq!(s.due(105, 10).iter().map(|o| o.n).collect::<Vec<_>>(), vec![0, 2, 3, 4, 5]);
        // A failed occurrence retries tomorrow.
        assert_eq!(s.wake_day(103), Some(104));
        s.settle(0, false);
        assert_eq!((s.next, s.done.len()), (2, 0));
        assert!(s.failed.is_empty());
        assert_eq!(s.wake_day(101), Some(102));
        s.settle(3, true);
        assert_eq!(s.state(&s.recur.occurrence(3).unwrap(), 200), State::Skipped);
        assert_eq!(s.state(&s.recur.occurrence(2).unwrap(), 101), State::Scheduled);
        assert_eq!(s.state(&s.recur.occurrence(2).unwrap(), 102), State::Due);
        s.settle(2, false);
        assert_eq!(s.next, 4);
        // Past its last occurrence, nothing is due and the poster need not wake.
        for n in 4..10 {
            s.settle(n, false);
        }
        assert!(s.due(10_000, 10).is_empty());
        assert_eq!(s.wake_day(10_000), None);
        assert_eq!(sched(false).wake_day(0), None);
    }
}
