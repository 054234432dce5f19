//! Cash-flow forecast: planned deposits, withdrawals and moves applied day by day to a copy of a
//! tree through the engine, as the service would post them, and what results: each account's
//! balance on the days it changes, every Bill's due dates with what it needs then, and the
//! movements the service would refuse.
//!
//! Pure: no I/O, no clock reads. The tree given is never changed: the forecast works on a clone,
//! whose accounts are shared copy-on-write, so only the accounts money reaches are copied.
//!
//! Semantics (SPEC 10):
//! - The window is the days `today ..= today + days`, both ends included. Movements planned on
//!   another day are reported as [`Refusal::OutsideWindow`].
//! - The movements of one day are applied in the order given (a stable sort by day), each as one
//!   operation of its own at the clock `day * 86400`, posted and dated then: a deposit is
//!   `Ctx::deposit(to, .., Mode::External)` by `User`, a withdrawal `Ctx::withdraw` by `User`, a
//!   move `Ctx::transfer`. Bill rollovers therefore happen exactly when the engine does them (when
//!   money reaches the bill or its parent splits); reads, this forecast's included, never roll
//!   over.
//! - A movement the service would refuse changes nothing and is reported with why: an amount
//!   not positive or too large, an unknown account, a move to itself, an amount the account does
//!   not hold (6.2 error 10, 6.4 error 10), a destination not active after its rollover (6.1
//!   error 12, 6.4 error 11), or the engine's own refusal.
//! - Bills are reported at the end of each due day inside the window (see [`BillDue`]).
//!
//! Cost: one engine operation per movement applied and one look per bill due date; days without
//! either cost nothing.

use super::dates::{day_of, DAY_SECS};
use super::engine::{Ctx, Mode, OpError, Origin, Posting};
use super::frac::Frac;
use super::num::div_round;
use super::text::Text;
use super::tree::{Account, AccountId, IdMap, Kind, Status, Tree};

/// What a planned movement does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Movement {
    /// Money from outside into `to` (/deposit): it splits down the tree.
    Deposit { to: AccountId },
    /// Money out of the tree from `from` (/withdraw).
    Withdraw { from: AccountId },
    /// An internal transfer (/move_balance).
    Move { from: AccountId, to: AccountId },
}

/// One occurrence of a planned movement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// Days since the epoch.
    pub day: i64,
    pub movement: Movement,
    pub amount_cents: i64,
    /// The caller's id of the schedule this occurrence comes from, carried through to reports.
    pub schedule: u64,
    /// Which occurrence of that schedule this is.
    pub n: u32,
}

/// Why a planned movement was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Planned before `today` or after `today + days`.
    OutsideWindow,
    /// The amount is not positive.
    NotPositive,
    /// The amount is above the largest the service takes (SPEC 3.4: 1,000,000,000,000.00).
    TooLarge,
    /// No such account in the tree.
    UnknownAccount(AccountId),
    /// A move from an account to itself.
    SameAccount,
    /// The account to take the money from holds less than the amount.
    NotCovered { balance_cents: i64, shortfall_cents: i64 },
    /// The account to credit is child-kind and not active after its rollover check.
    NotActive(AccountId),
    /// The engine refused it (a value would leave 64-bit cents); nothing of it was applied.
    Engine(OpError),
}

/// A planned movement that was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unapplied {
    /// Its position in the `planned` slice.
    pub index: usize,
    pub day: i64,
    pub schedule: u64,
    pub n: u32,
    pub reason: Refusal,
}

/// The projection of one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountForecast {
    pub id: AccountId,
    /// Its own balance at the start of the window.
    pub balance_today_cents: i64,
    /// `(day, balance at the end of that day)` for each day the balance ends different from the
    /// day before, in day order.
    pub points: Vec<(i64, i64)>,
    /// Its `amount_due` today and at the end of the window, as the service would store it
    /// (grandchild-kind accounts only).
    pub amount_due_today_cents: Option<i64>,
    pub amount_due_end_cents: Option<i64>,
}

impl AccountForecast {
    /// The projected balance at the end of `day` (the balance today before the window).
    pub fn balance_on(&self, day: i64) -> i64 {
        let i = self.points.partition_point(|(d, _)| *d <= day);
        if i == 0 {
            self.balance_today_cents
        } else {
            self.points[i - 1].1
        }
    }

    /// The projected balance at the end of the window.
    pub fn balance_end_cents(&self) -> i64 {
        self.points.last().map_or(self.balance_today_cents, |p| p.1)
    }
}

/// One due date of a Bill inside the window.
///
/// The due day is the day of the due instant; every posting of that day is dated at or before
/// the instant, so it still counts for the period that ends then (rollover needs a later date).
/// The figures are those at the end of that day. A payment out of the bill that day (a withdrawal
/// or move) lowers its periods and its balance by the same amount (10.7), so it is added back to
/// both: `amount_due_cents` is what the bill had to hold, and the shortfall is unchanged by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BillDue {
    pub id: AccountId,
    /// The due instant (seconds since the epoch).
    pub due_secs: i64,
    pub day: i64,
    /// The target for the periods counted at the due instant (10.1, rollovers up to it included),
    /// before that day's payments out of the bill.
    pub amount_due_cents: i128,
    /// Withdrawn or moved out of the bill that day.
    pub paid_cents: i64,
    /// The projected balance at the end of the due day (after those payments).
    pub balance_cents: i64,
    /// `amount_due - (balance + paid)` when positive, else 0.
    pub shortfall_cents: i128,
}

/// The whole tree's money over the window: `end = start + deposited - withdrawn` exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoneyFlow {
    pub start_cents: i128,
    pub deposited_cents: i128,
    pub withdrawn_cents: i128,
    pub end_cents: i128,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forecast {
    pub first_day: i64,
    /// Included.
    pub last_day: i64,
    /// The scope's subtree in pre-order (10.16); empty when the scope is not in the tree.
    pub accounts: Vec<AccountForecast>,
    /// Bills of the scope (type exactly `Bill`, a fixed amount and a due date; see [`BillDue`]), by
    /// due day, then in account order.
    pub bills: Vec<BillDue>,
    /// Movements not applied, in the order they came up (those outside the window first).
    pub unapplied: Vec<Unapplied>,
    /// The whole tree's money, whatever the scope (movements outside the scope move it too).
    pub money: MoneyFlow,
}

const CHANNEL: Text = Text::Static("Forecast");

/// The largest single amount the service accepts, in cents (SPEC 3.4 step 5; the API's
/// `MONEY_MAX_CENTS`, which the domain cannot name).
const MAX_AMOUNT_CENTS: i64 = 100_000_000_000_000;

/// Projects `tree` over `today ..= today + days` under `planned` (see the module comment), and
/// reports on the subtree of `scope` (the whole tree when `None`).
pub fn forecast(
    tree: &Tree,
    planned: &[Planned],
    today: i64,
    days: u32,
    scope: Option<AccountId>,
) -> Forecast {
    simulate(tree, planned, today, days, scope).0
}

/// [`forecast`] and the projected tree at the end of the window.
fn simulate(
    tree: &Tree,
    planned: &[Planned],
    today: i64,
    days: u32,
    scope: Option<AccountId>,
) -> (Forecast, Tree) {
    let last_day = today.saturating_add(i64::from(days));
    let root = scope.unwrap_or(tree.root);
    let ids = if tree.get(root).is_some() { tree.preorder(root) } else { Vec::new() };
    let mut slot: IdMap<usize> = IdMap::default();
    slot.reserve(ids.len());
    let mut accounts = Vec::with_capacity(ids.len());
    for id in &ids {
        let Some(a) = tree.get(*id) else { continue };
        slot.insert(*id, accounts.len());
        let due = a.grand.as_ref().map(|g| g.amount_due_cents);
        accounts.push(AccountForecast {
            id: *id,
            balance_today_cents: a.balance_cents,
            points: Vec::new(),
            amount_due_today_cents: due,
            amount_due_end_cents: due,
        });
    }
    let occurrences = bill_occurrences(tree, &ids, today, last_day);

    let mut unapplied = Vec::new();
    let mut order: Vec<usize> = Vec::with_capacity(planned.len());
    for (i, p) in planned.iter().enumerate() {
        if (today..=last_day).contains(&p.day) {
            order.push(i);
        } else {
            unapplied.push(refused(i, p, Refusal::OutsideWindow));
        }
    }
    // Stable: one day's movements keep the order they were given in.
    order.sort_by_key(|&i| planned[i].day);

    let start_cents = total(tree);
    let mut work = tree.clone();
    let (mut deposited_cents, mut withdrawn_cents) = (0i128, 0i128);
    let mut applied: Vec<usize> = Vec::with_capacity(order.len());
    let mut bills = Vec::with_capacity(occurrences.len());
    // End-of-day balances of the scope's accounts that had postings today, which those are, and
    // the day each was last listed (so listing is one comparison, not a search of the list).
    let mut day_balance = vec![0i64; accounts.len()];
    let mut touched: Vec<usize> = Vec::new();
    let mut listed = vec![i64::MIN; accounts.len()];
    // Today's withdrawals and moves out, by account (a bill's payments on its due day).
    let mut outflows: Vec<(AccountId, i64)> = Vec::new();
    // The engine's record list, kept between operations for its capacity.
    let mut records = Vec::new();
    let (mut pi, mut bi) = (0, 0);
    loop {
        let next_planned = order.get(pi).map(|&i| planned[i].day);
        let next_bill = occurrences.get(bi).map(|o| o.day);
        let Some(day) = next_planned.into_iter().chain(next_bill).min() else { break };
        outflows.clear();
        while let Some(&i) = order.get(pi).filter(|&&i| planned[i].day == day) {
            pi += 1;
            let p = &planned[i];
            let now = day.saturating_mul(DAY_SECS);
            if let Err(reason) = check(&work, p, now) {
                unapplied.push(refused(i, p, reason));
                continue;
            }
            let mut ctx = Ctx::new(&mut work, now);
            ctx.records = std::mem::take(&mut records);
            let posted = post(&mut ctx, p);
            records = std::mem::take(&mut ctx.records);
            drop(ctx);
            if let Err(e) = posted {
                // The service discards a failed operation whole; its partial effects are undone
                // by replaying what did apply (only a value overflowing 64 bits gets here).
                records.clear();
                work = replay(tree, planned, &applied);
                unapplied.push(refused(i, p, Refusal::Engine(e)));
                continue;
            }
            applied.push(i);
            for (acc, _, rec) in records.drain(..) {
                if let Some(&s) = slot.get(&acc) {
                    if listed[s] != day {
                        listed[s] = day;
                        touched.push(s);
                    }
                    day_balance[s] = rec.balance_cents;
                }
            }
            match p.movement {
                Movement::Deposit { .. } => deposited_cents += i128::from(p.amount_cents),
                Movement::Withdraw { from } => {
                    withdrawn_cents += i128::from(p.amount_cents);
                    outflows.push((from, p.amount_cents));
                }
                Movement::Move { from, .. } => outflows.push((from, p.amount_cents)),
            }
        }
        for s in touched.drain(..) {
            let acc = &mut accounts[s];
            if acc.balance_end_cents() != day_balance[s] {
                acc.points.push((day, day_balance[s]));
            }
        }
        while let Some(o) = occurrences.get(bi).filter(|o| o.day == day) {
            bi += 1;
            if let Some(b) = work.get(o.id).and_then(|a| bill_due(a, o, &outflows)) {
                bills.push(b);
            }
        }
    }
    for a in &mut accounts {
        a.amount_due_end_cents = work.get(a.id).and_then(|x| x.grand.as_ref()).map(|g| g.amount_due_cents);
    }
    let money = MoneyFlow { start_cents, deposited_cents, withdrawn_cents, end_cents: total(&work) };
    debug_assert_eq!(money.end_cents, money.start_cents + money.deposited_cents - money.withdrawn_cents);
    debug_assert_eq!(super::tree::check_ledger(&work, &work.ledger), Ok(()));
    (Forecast { first_day: today, last_day, accounts, bills, unapplied, money }, work)
}

fn refused(index: usize, p: &Planned, reason: Refusal) -> Unapplied {
    Unapplied { index, day: p.day, schedule: p.schedule, n: p.n, reason }
}

fn total(t: &Tree) -> i128 {
    t.get(t.root).map_or(0, |r| r.sub_balance_cents)
}

/// The service's checks before it runs the operation (6.1, 6.2, 6.4), in its order. Predicted
/// rather than tried, since an operation the engine refuses half way (a move whose destination is
/// not active has already debited its source) would have to be undone.
fn check(t: &Tree, p: &Planned, now: i64) -> Result<(), Refusal> {
    if p.amount_cents <= 0 {
        return Err(Refusal::NotPositive);
    }
    if p.amount_cents > MAX_AMOUNT_CENTS {
        return Err(Refusal::TooLarge);
    }
    let get = |id| t.get(id).ok_or(Refusal::UnknownAccount(id));
    let covers = |a: &Account| {
        if p.amount_cents > a.balance_cents {
            Err(Refusal::NotCovered {
                balance_cents: a.balance_cents,
                shortfall_cents: p.amount_cents - a.balance_cents,
            })
        } else {
            Ok(())
        }
    };
    match p.movement {
        Movement::Deposit { to } => accepts(get(to)?, now),
        Movement::Withdraw { from } => covers(get(from)?),
        Movement::Move { from, to } => {
            let (src, dst) = (get(from)?, get(to)?);
            if from == to {
                return Err(Refusal::SameAccount);
            }
            covers(src)?;
            accepts(dst, now)
        }
    }
}

/// Whether a deposit or transfer into `a` at `d` passes the engine's status check, which for a
/// grandchild comes after its rollover at `d` (10.3; 10.6 step 4 makes it active unless closed).
fn accepts(a: &Account, d: i64) -> Result<(), Refusal> {
    let active = match a.kind {
        Kind::Main => true,
        Kind::Child => a.status == Status::Active,
        Kind::Grandchild => a.status == Status::Active || (a.status != Status::Closed && rolls_over(a, d)),
    };
    if active {
        Ok(())
    } else {
        Err(Refusal::NotActive(a.uuid))
    }
}

/// The condition of ROLLOVER(G, d) (10.6), as `Ctx::rollover` tests it.
fn rolls_over(a: &Account, d: i64) -> bool {
    a.grand.as_ref().is_some_and(|g| {
        g.account_type == "Bill"
            && g.freq_days.is_some_and(|f| f >= 1)
            && g.due_date_secs.is_some_and(|due| d > due)
    })
}

fn post(ctx: &mut Ctx<'_>, p: &Planned) -> Result<(), OpError> {
    let terms = Posting {
        amount_cents: p.amount_cents,
        by: &Origin::User,
        channel: &CHANNEL,
        txid: None,
        date_secs: ctx.now_secs,
        note: None,
    };
    match p.movement {
        Movement::Deposit { to } => ctx.deposit(to, terms, Mode::External),
        Movement::Withdraw { from } => ctx.withdraw(from, terms),
        Movement::Move { from, to } => ctx.transfer(from, to, p.amount_cents),
    }
}

/// `tree` with the movements `applied` applied again, as they were.
fn replay(tree: &Tree, planned: &[Planned], applied: &[usize]) -> Tree {
    let mut t = tree.clone();
    for &i in applied {
        let p = &planned[i];
        let mut ctx = Ctx::new(&mut t, p.day.saturating_mul(DAY_SECS));
        // Each applied before on this very state, and the engine is deterministic in everything
        // but generated ids.
        let r = post(&mut ctx, p);
        debug_assert!(r.is_ok(), "{r:?}");
    }
    t
}

/// One due instant of a bill.
#[derive(Debug, Clone, Copy)]
struct Occurrence {
    day: i64,
    due_secs: i64,
    id: AccountId,
}

/// The due instants inside the window of the Bills among `ids`. Rollovers move a due date by
/// whole periods, so its dates are those of the tree given, plus multiples of its period.
fn bill_occurrences(tree: &Tree, ids: &[AccountId], first: i64, last: i64) -> Vec<Occurrence> {
    let mut out = Vec::new();
    let start = first.saturating_mul(DAY_SECS);
    for &id in ids {
        let Some(g) = tree.get(id).and_then(|a| a.grand.as_ref()) else { continue };
        let Some(due) = g.due_date_secs else { continue };
        if g.account_type != "Bill" || g.fixed_amount_cents <= 0 {
            continue;
        }
        match g.freq_days.filter(|f| *f >= 1) {
            Some(f) => {
                let period = i64::from(f) * DAY_SECS;
                let skip = if due >= start {
                    0
                } else {
                    start.saturating_sub(due).saturating_add(period - 1) / period
                };
                let mut t = due.saturating_add(skip.saturating_mul(period));
                while day_of(t) <= last && t < i64::MAX - period {
                    out.push(Occurrence { day: day_of(t), due_secs: t, id });
                    t += period;
                }
            }
            // Without a period the bill never rolls over: one due date.
            None if (first..=last).contains(&day_of(due)) => {
                out.push(Occurrence { day: day_of(due), due_secs: due, id })
            }
            None => {}
        }
    }
    // Stable: equal days keep account order.
    out.sort_by_key(|o| o.day);
    out
}

/// The figures of bill `a` at the end of its due day (see [`BillDue`]). The tree may not have
/// rolled it over to this due date yet (only money flowing does): the periods it would have
/// are counted as the rollover would count them at the due instant.
fn bill_due(a: &Account, o: &Occurrence, outflows: &[(AccountId, i64)]) -> Option<BillDue> {
    let g = a.grand.as_ref()?;
    let mut k = 0;
    if let (Some(due), Some(f)) = (g.due_date_secs, g.freq_days) {
        if g.account_type == "Bill" && f >= 1 && o.due_secs > due {
            let period = i64::from(f) * DAY_SECS;
            k = (o.due_secs - due + period - 1) / period;
        }
    }
    // target(periods + k, fixed) without reducing the fraction (`Frac::add_int` does, with
    // 128-bit divisions, for every due date); rounding does not depend on the representation.
    let Frac { num, den } = g.periods;
    let periods_num = i128::from(num) + i128::from(k) * i128::from(den);
    let target = div_round(periods_num.checked_mul(i128::from(g.fixed_amount_cents))?, i128::from(den));
    let paid: i64 = outflows.iter().filter(|(id, _)| *id == a.uuid).map(|(_, c)| *c).sum();
    let balance = i128::from(a.balance_cents);
    Some(BillDue {
        id: a.uuid,
        due_secs: o.due_secs,
        day: o.day,
        amount_due_cents: target + i128::from(paid),
        paid_cents: paid,
        balance_cents: a.balance_cents,
        shortfall_cents: (target - balance).max(0),
    })
}

#[cfg(test)]
#[path = "forecast_tests.rs"]
mod tests;
