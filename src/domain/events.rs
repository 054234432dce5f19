//! Webhooks (docs/webhooks.md): what a user's webhooks listen for, the events a write makes, and
//! each delivery with its attempts. All of it is the user's settings (`domain::docs`), so an event
//! is committed in the same atomic operation as the write that caused it: no event without its
//! write, no write without its event. Pure: the service's sender decides when to send.
//!
//! A delivery is one event for one webhook. It stays among the settings while it waits, and after
//! it ends (delivered, or given up after three days) as the webhook's delivery log, of which the
//! newest [`MAX_FINISHED`] are kept.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::dates::day_of;
use super::docs::{with_prefix, Doc, Docs};
use super::engine::TxRecord;
use super::note::Note;
use super::text::Text;
use super::tree::{AccountId, Kind as AccKind, Tree};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    Recorded,
    AccountCreated,
    AccountChanged,
    AccountDeleted,
    Funded,
    BillDue,
}

super::docs::names!(Kind:
    Recorded = "transaction.recorded",
    AccountCreated = "account.created",
    AccountChanged = "account.changed",
    AccountDeleted = "account.deleted",
    Funded = "envelope.funded",
    BillDue = "bill.due");

/// Key prefix of webhooks among the settings (`hook:<id>`).
pub const HOOK_PREFIX: &str = "hook:";
/// Key of the counter of webhook ids.
pub const NEXT_ID_KEY: &str = "hook-next";
/// Key prefix of deliveries (`out:<webhook>:<created>:<event id>`), so a webhook's deliveries
/// are one range, oldest first.
pub const OUT_PREFIX: &str = "out:";
/// Webhooks one user may keep.
pub const MAX_HOOKS: usize = 20;
/// Finished deliveries kept per webhook (its delivery log).
pub const MAX_FINISHED: usize = 50;
/// Waiting deliveries one webhook may have: the write that would pass it disables the webhook
/// instead (and says why), so a dead receiver cannot grow a user's settings without bound.
pub const MAX_WAITING: usize = 10_000;
/// Attempts a delivery remembers (the oldest are dropped; the count goes on).
pub const MAX_ATTEMPTS_KEPT: usize = 40;
/// Records one `transaction.recorded` event lists (the event says how many there were).
pub const MAX_EVENT_RECORDS: usize = 1_000;
/// How long a delivery is retried after its first attempt, and how long a webhook may fail
/// without a success before it is disabled.
pub const GIVE_UP_SECS: i64 = 3 * 86_400;
/// Default notice of `bill.due`: days before the due date.
pub const DEFAULT_BILL_DAYS: u32 = 3;
const DAY: i64 = 86_400;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    pub id: u64,
    pub url: Text,
    pub kinds: Vec<Kind>,
    /// The signing secret. Kept because every delivery is signed with it; shown once.
    pub secret: Text,
    pub description: Text,
    pub created_secs: i64,
    /// `bill.due` is sent this many days before a Bill's due date.
    pub bill_days: u32,
    /// Why it no longer delivers, when it was disabled (by its owner, or after failing for
    /// [`GIVE_UP_SECS`]).
    pub disabled: Option<Text>,
    /// The first failed attempt since the last success.
    pub failing_since: Option<i64>,
    /// Each Bill's due date already announced (seconds), so a notice is sent once per date.
    pub noticed: BTreeMap<AccountId, i64>,
}

impl Webhook {
    pub fn live(&self) -> bool {
        self.disabled.is_none()
    }

    pub fn wants(&self, k: Kind) -> bool {
        self.live() && self.kinds.contains(&k)
    }
}

/// One event, as committed with its write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub id: Text,
    pub kind: Kind,
    pub at_secs: i64,
    pub data: Data,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Data {
    /// Records appended by one write, in order, and how many there were in all.
    Records { list: Vec<Rec>, total: u64 },
    /// An account as it is after the event (before it, for a deletion).
    Account(Arc<super::tree::Account>),
    /// A Bill due on `due_secs`.
    Bill { account: Arc<super::tree::Account>, due_secs: i64 },
}

/// A record of a `transaction.recorded` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rec {
    pub account: AccountId,
    pub account_name: Text,
    pub seq: u64,
    pub rec: TxRecord,
    /// The record's note (a record's own is not stored with it).
    pub note: Option<Note>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    Waiting,
    Delivered,
    /// Given up: retried for [`GIVE_UP_SECS`], or its webhook was disabled or deleted.
    Failed,
}

super::docs::names!(State: Waiting = "waiting", Delivered = "delivered", Failed = "failed");

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub at_secs: i64,
    pub status: Option<u16>,
    pub latency_ms: u32,
    pub error: Option<Text>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub webhook: u64,
    pub event: Arc<Event>,
    pub state: State,
    /// When it is next sent (while waiting).
    pub next_secs: i64,
    /// The first attempt of this round (a redelivery starts a new round).
    pub first_secs: Option<i64>,
    /// Attempts made, in all.
    pub tries: u32,
    /// The last [`MAX_ATTEMPTS_KEPT`] attempts.
    pub attempts: Vec<Attempt>,
    /// Until when a node is sending it (shared engines: the node that took it, by a write under
    /// the user's row lock, is the only one to send it until then).
    pub lease_secs: i64,
}

impl Delivery {
    pub fn due(&self, now: i64) -> bool {
        self.state == State::Waiting && self.next_secs <= now && self.lease_secs <= now
    }

    /// Records an attempt. `retry_in`: the delay before the next one when it failed and may be
    /// retried; `None` when the failure is final.
    pub fn attempted(&mut self, a: Attempt, ok: bool, retry_in: Option<i64>) {
        let at = a.at_secs;
        self.first_secs.get_or_insert(at);
        self.tries = self.tries.saturating_add(1);
        self.attempts.push(a);
        if self.attempts.len() > MAX_ATTEMPTS_KEPT {
            self.attempts.remove(0);
        }
        self.lease_secs = 0;
        let first = self.first_secs.unwrap_or(at);
        // The last try falls on the third day's end, not before it.
        self.state = match (ok, retry_in) {
            (true, _) => State::Delivered,
            (false, Some(d)) if at - first < GIVE_UP_SECS => {
                self.next_secs = (at + d.max(1)).min(first + GIVE_UP_SECS);
                State::Waiting
            }
            (false, _) => State::Failed,
        };
    }
}

pub fn hook_key(id: u64) -> Text {
    Text::from(format!("{HOOK_PREFIX}{id:010}"))
}

pub fn out_key(webhook: u64, e: &Event) -> Text {
    Text::from(format!("{OUT_PREFIX}{webhook:010}:{:012}:{}", e.at_secs.max(0), e.id))
}

fn out_prefix(webhook: u64) -> String {
    format!("{OUT_PREFIX}{webhook:010}:")
}

pub fn webhooks(docs: &Docs) -> impl Iterator<Item = &Webhook> {
    with_prefix(docs, HOOK_PREFIX).filter_map(|(_, d)| match &**d {
        Doc::Webhook(w) => Some(w),
        _ => None,
    })
}

/// Deliveries of `webhook` (every webhook's with `None`), oldest first.
pub fn deliveries(docs: &Docs, webhook: Option<u64>) -> impl Iterator<Item = (&Text, &Delivery)> {
    let p = webhook.map_or_else(|| OUT_PREFIX.to_string(), out_prefix);
    with_prefix(docs, p).filter_map(|(k, d)| match &**d {
        Doc::Delivery(x) => Some((k, x)),
        _ => None,
    })
}

/// Whether settings written hold a delivery never tried yet (the waker should run now).
pub fn new_work(written: &[(Text, Option<Arc<Doc>>)]) -> bool {
    written.iter().any(|(k, d)| {
        k.starts_with(OUT_PREFIX)
            && matches!(d.as_deref(), Some(Doc::Delivery(x)) if x.state == State::Waiting && x.lease_secs == 0)
    })
}

/// Whether a write of this tree must watch for events. (Every write asks: no allocation.)
pub fn listening(docs: &Docs) -> bool {
    webhooks(docs).any(Webhook::live)
}

/// What a write touched, as it was before: captured the first time the write touches each
/// account, only while the user has a live webhook.
#[derive(Debug, Default)]
pub struct Before(pub HashMap<AccountId, Option<Arc<super::tree::Account>>>);

/// The events of one write, from what it touched and the records it appended.
pub fn of_write(
    tree: &Tree,
    before: &Before,
    records: &[(AccountId, u64, TxRecord)],
    now: i64,
) -> Vec<Event> {
    let mut out = Vec::new();
    let ev = |kind, data| Event { id: new_id(), kind, at_secs: now, data };
    // Records of accounts deleted later in the write are dropped with them.
    let kept = || records.iter().filter(|(a, _, _)| tree.get(*a).is_some());
    let total = kept().count();
    if total > 0 {
        let list = kept()
            .take(MAX_EVENT_RECORDS)
            .map(|(a, seq, r)| Rec {
                account: *a,
                account_name: tree.get(*a).map(|x| x.name.clone()).unwrap_or_default(),
                seq: *seq,
                rec: r.clone(),
                note: r.note.as_deref().cloned(),
            })
            .collect();
        out.push(ev(Kind::Recorded, Data::Records { list, total: total as u64 }));
    }
    let mut touched: Vec<_> = before.0.iter().collect();
    // One order whatever the hash map's: the order accounts are numbered in.
    touched.sort_by_key(|(id, _)| **id);
    for (id, was) in touched {
        let now_acc = tree.accounts.get(id);
        match (was, now_acc) {
            (None, Some(a)) => out.push(ev(Kind::AccountCreated, Data::Account(a.clone()))),
            (Some(b), None) => out.push(ev(Kind::AccountDeleted, Data::Account(b.clone()))),
            (Some(b), Some(a)) => {
                if changed(b, a, records.is_empty()) {
                    out.push(ev(Kind::AccountChanged, Data::Account(a.clone())));
                }
                if funded(b, a) {
                    out.push(ev(Kind::Funded, Data::Account(a.clone())));
                }
            }
            (None, None) => {}
        }
    }
    out
}

/// Whether what a person set on the account changed. A write that moved money also moves
/// statuses and due dates by the rules of SPEC 10; those alone are not a change of the account.
fn changed(b: &super::tree::Account, a: &super::tree::Account, settings_write: bool) -> bool {
    let g = |x: &super::tree::Account| {
        x.grand.as_ref().map(|g| (g.fixed_amount_cents, g.account_type.clone(), g.freq_days))
    };
    let set = b.name != a.name
        || b.parent != a.parent
        || b.allocation_ppm != a.allocation_ppm
        || b.priority_ppm != a.priority_ppm
        || g(b) != g(a);
    set || (settings_write
        && (b.status != a.status
            || b.grand.as_ref().map(|g| g.due_date_secs) != a.grand.as_ref().map(|g| g.due_date_secs)))
}

/// An envelope with a fixed amount whose amount due fell to zero: fully funded (SPEC 10.3).
fn funded(b: &super::tree::Account, a: &super::tree::Account) -> bool {
    let due = |x: &super::tree::Account| {
        x.grand.as_ref().filter(|g| g.fixed_amount_cents > 0).map(|g| g.amount_due_cents)
    };
    matches!((due(b), due(a)), (Some(x), Some(0)) if x > 0)
}

pub fn new_id() -> Text {
    Text::from(format!("evt_{}", uuid::Uuid::new_v4().simple()))
}

/// The settings to write for `events`: one delivery per event and webhook that wants it, and
/// each webhook that would pass [`MAX_WAITING`], disabled.
pub type Emitted = Vec<(Text, Doc)>;

pub fn deliveries_for(docs: &Docs, events: Vec<Event>, now: i64) -> Emitted {
    let mut put = Vec::new();
    let hooks: Vec<&Webhook> = webhooks(docs).filter(|w| w.live()).collect();
    let events: Vec<Arc<Event>> = events.into_iter().map(Arc::new).collect();
    for w in hooks {
        let wanted: Vec<&Arc<Event>> = events.iter().filter(|e| w.wants(e.kind)).collect();
        if wanted.is_empty() {
            continue;
        }
        let waiting = deliveries(docs, Some(w.id)).filter(|(_, d)| d.state == State::Waiting).count();
        if waiting + wanted.len() > MAX_WAITING {
            let mut off = w.clone();
            off.disabled = Some(Text::from(format!(
                "disabled: more than {MAX_WAITING} deliveries were waiting; enable it once the receiver answers"
            )));
            put.push((hook_key(w.id), Doc::Webhook(off)));
            continue;
        }
        for e in wanted {
            let d = Delivery {
                webhook: w.id,
                event: e.clone(),
                state: State::Waiting,
                next_secs: now,
                first_secs: None,
                tries: 0,
                attempts: Vec::new(),
                lease_secs: 0,
            };
            put.push((out_key(w.id, e), Doc::Delivery(d)));
        }
    }
    put
}

/// Finished deliveries of `webhook` past the newest [`MAX_FINISHED`]: to remove.
pub fn evicted(docs: &Docs, webhook: u64) -> Vec<Text> {
    let finished: Vec<&Text> =
        deliveries(docs, Some(webhook)).filter(|(_, d)| d.state != State::Waiting).map(|(k, _)| k).collect();
    let n = finished.len().saturating_sub(MAX_FINISHED);
    finished.into_iter().take(n).cloned().collect()
}

/// Bills whose due date is within a webhook's notice and not yet announced to it, on `today`:
/// (webhook, account, due date in seconds).
pub fn bill_notices(tree: &Tree, today: i64) -> Vec<(u64, AccountId, i64)> {
    let mut out = Vec::new();
    for w in webhooks(&tree.docs).filter(|w| w.wants(Kind::BillDue)) {
        for (acc, due) in bills(tree) {
            let d = day_of(due);
            if d >= today && d - i64::from(w.bill_days) <= today && w.noticed.get(&acc) != Some(&due) {
                out.push((w.id, acc, due));
            }
        }
    }
    out
}

fn bills(tree: &Tree) -> impl Iterator<Item = (AccountId, i64)> + '_ {
    tree.accounts.values().filter(|a| a.kind == AccKind::Grandchild).filter_map(|a| {
        let g = a.grand.as_ref()?;
        (g.account_type == "Bill").then_some(())?;
        Some((a.uuid, g.due_date_secs?))
    })
}

/// When the service should next look at this user for its webhooks (seconds): the earliest
/// waiting delivery, and the first day a Bill's notice is owed.
pub fn wake_secs(tree: &Tree, now: i64) -> Option<i64> {
    let today = day_of(now);
    let live: Vec<u64> = webhooks(&tree.docs).filter(|w| w.live()).map(|w| w.id).collect();
    let sending = deliveries(&tree.docs, None)
        .filter(|(_, d)| d.state == State::Waiting && live.contains(&d.webhook))
        .map(|(_, d)| d.next_secs.max(d.lease_secs))
        .min();
    let mut notice: Option<i64> = None;
    for w in webhooks(&tree.docs).filter(|w| w.wants(Kind::BillDue)) {
        for (acc, due) in bills(tree) {
            let d = day_of(due);
            if d < today || w.noticed.get(&acc) == Some(&due) {
                continue;
            }
            let at = (d - i64::from(w.bill_days)).max(today) * DAY;
            notice = Some(notice.map_or(at, |n| n.min(at)));
        }
    }
    [sending, notice].into_iter().flatten().min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(id: u64, kinds: &[Kind]) -> Webhook {
        Webhook {
            id,
            url: "https://example.com/h".into(),
            kinds: kinds.to_vec(),
            secret: "s".into(),
            description: "".into(),
            created_secs: 0,
            bill_days: 3,
            disabled: None,
            failing_since: None,
            noticed: BTreeMap::new(),
        }
    }

    fn ev(at: i64) -> Event {
        Event {
            id: new_id(),
            kind: Kind::Recorded,
            at_secs: at,
            data: Data::Records { list: vec![], total: 0 },
        }
    }

    #[test]
    fn a_delivery_is_retried_for_three_days_then_given_up() {
        let mut d = Delivery {
            webhook: 1,
            event: Arc::new(ev(0)),
            state: State::Waiting,
            next_secs: 0,
            first_secs: None,
            tries: 0,
            attempts: vec![],
            lease_secs: 0,
        };
        let fail = |at| Attempt { at_secs: at, status: Some(500), latency_ms: 1, error: None };
        d.attempted(fail(100), false, Some(60));
        assert_eq!((d.state, d.next_secs, d.tries), (State::Waiting, 160, 1));
        d.attempted(fail(100 + GIVE_UP_SECS - 10), false, Some(60));
        assert_eq!(
            (d.state, d.next_secs),
            (State::Waiting, 100 + GIVE_UP_SECS),
            "the last try: three days on"
        );
        d.attempted(fail(100 + GIVE_UP_SECS), false, Some(60));
        assert_eq!(d.state, State::Failed, "given up after three days");
        let mut e = d.clone();
        e.state = State::Waiting;
        e.attempted(Attempt { at_secs: 5, status: Some(200), latency_ms: 1, error: None }, true, None);
        assert_eq!(e.state, State::Delivered);
        for i in 0..100 {
            e.attempted(fail(i), false, None);
        }
        assert_eq!((e.attempts.len(), e.tries), (MAX_ATTEMPTS_KEPT, 104));
    }

    #[test]
    fn each_webhook_gets_the_events_it_wants_and_no_more_than_it_may_wait_for() {
        let mut docs = Docs::new();
        docs.insert(hook_key(1), Arc::new(Doc::Webhook(hook(1, &[Kind::Recorded]))));
        docs.insert(hook_key(2), Arc::new(Doc::Webhook(hook(2, &[Kind::Funded]))));
        let mut off = hook(3, &[Kind::Recorded]);
        off.disabled = Some("off".into());
        docs.insert(hook_key(3), Arc::new(Doc::Webhook(off)));
        let e = deliveries_for(&docs, vec![ev(10)], 10);
        assert_eq!(e.len(), 1);
        assert!(e[0].0.starts_with("out:0000000001:000000000010:evt_"));
        for (k, d) in e {
            docs.insert(k, Arc::new(d));
        }
        let one = docs.values().find(|d| matches!(***d, Doc::Delivery(_))).cloned().expect("a delivery");
        for i in 0..MAX_WAITING as i64 - 1 {
            docs.insert(Text::from(format!("{OUT_PREFIX}0000000001:{:012}:x", 20 + i)), one.clone());
        }
        let e = deliveries_for(&docs, vec![ev(1)], 1);
        assert_eq!(e.len(), 1);
        assert!(matches!(&e[0].1, Doc::Webhook(w) if w.id == 1 && w.disabled.is_some()));
        assert!(evicted(&docs, 1).is_empty(), "waiting deliveries are never evicted");
    }
}
