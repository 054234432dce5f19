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
mod tests {
    use super::*;
    use crate::domain::tree::{check_invariants, Grand};
    use proptest::prelude::*;
    use std::sync::Arc;

    /// 2024-10-04.
    const TODAY: i64 = 20_000;

    fn at(day: i64) -> i64 {
        day * DAY_SECS
    }

    fn terms(amount_cents: i64, date_secs: i64) -> Posting<'static> {
        Posting { amount_cents, by: &Origin::User, channel: &CHANNEL, txid: None, date_secs, note: None }
    }

    fn add_child(t: &mut Tree, id: AccountId, parent: AccountId, alloc: i64, prio: i64) -> AccountId {
        let mut a = Account::new(id, format!("C{id}").into(), Kind::Child, Some(parent), None);
        a.allocation_ppm = alloc;
        a.priority_ppm = prio;
        Ctx::new(t, 0).attach(a).unwrap()
    }

    struct Bill {
        fixed: i64,
        due: Option<i64>,
        freq: Option<u32>,
        kind: &'static str,
    }

    fn add_grand(
        t: &mut Tree,
        id: AccountId,
        parent: AccountId,
        alloc: i64,
        prio: i64,
        b: Bill,
    ) -> AccountId {
        let g = Grand {
            due_date_secs: b.due,
            fixed_amount_cents: b.fixed,
            amount_due_cents: b.fixed,
            account_type: b.kind.into(),
            freq_days: b.freq,
            periods: Frac::ONE,
        };
        let mut a = Account::new(id, format!("G{id}").into(), Kind::Grandchild, Some(parent), Some(g));
        a.allocation_ppm = alloc;
        a.priority_ppm = prio;
        Ctx::new(t, 0).attach(a).unwrap()
    }

    fn open(fixed: i64) -> Bill {
        Bill { fixed, due: None, freq: None, kind: "Expense" }
    }

    fn bill(fixed: i64, due_day: i64, freq: u32) -> Bill {
        Bill { fixed, due: Some(at(due_day)), freq: Some(freq), kind: "Bill" }
    }

    /// Main (1) with Needs (2, 0.6) over Rent (4: Bill 400.00 due in 10 days every 30, 0.5) and
    /// Food (5, 0.5), and Fun (3, 0.4) over Games (6); 1000.00 deposited into main yesterday.
    fn sample() -> Tree {
        let mut t = Tree::new_user(1, 0);
        add_child(&mut t, 2, 1, 600_000, 2_000_000);
        add_child(&mut t, 3, 1, 400_000, 1_000_000);
        add_grand(&mut t, 4, 2, 500_000, 1_000_000, bill(40_000, TODAY + 10, 30));
        add_grand(&mut t, 5, 2, 500_000, 0, open(0));
        add_grand(&mut t, 6, 3, 1_000_000, 0, open(0));
        Ctx::new(&mut t, at(TODAY - 1)).deposit(1, terms(100_000, at(TODAY - 1)), Mode::External).unwrap();
        t
    }

    fn planned(day: i64, movement: Movement, amount_cents: i64) -> Planned {
        Planned { day, movement, amount_cents, schedule: 0, n: 0 }
    }

    fn account(f: &Forecast, id: AccountId) -> &AccountForecast {
        f.accounts.iter().find(|a| a.id == id).unwrap()
    }

    /// Every account's content, compared by value (the `Arc`s could hide nothing anyway).
    fn contents(t: &Tree) -> Vec<(AccountId, Account)> {
        let mut v: Vec<_> = t.accounts.iter().map(|(k, a)| (*k, (**a).clone())).collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    #[test]
    fn the_tree_given_is_never_changed() {
        let t = sample();
        let (before, ledger) = (contents(&t), t.ledger.clone());
        let plan = [
            planned(TODAY, Movement::Deposit { to: 1 }, 250_000),
            planned(TODAY + 11, Movement::Withdraw { from: 4 }, 40_000),
            planned(TODAY + 12, Movement::Move { from: 5, to: 6 }, 1_000),
            planned(TODAY + 13, Movement::Withdraw { from: 6 }, 999_999),
            planned(TODAY + 50, Movement::Deposit { to: 4 }, 5_000),
        ];
        let f = forecast(&t, &plan, TODAY, 90, None);
        assert_eq!(f.unapplied.len(), 1, "{:?}", f.unapplied);
        assert!(f.accounts.iter().any(|a| !a.points.is_empty()));
        assert_eq!(contents(&t), before);
        assert_eq!(t.ledger, ledger);
    }

    #[test]
    fn without_movements_balances_stay_and_bills_still_fall_due() {
        let t = sample();
        let (f, end) = simulate(&t, &[], TODAY, 365, None);
        for a in &f.accounts {
            assert!(a.points.is_empty(), "{a:?}");
            assert_eq!(a.balance_end_cents(), t.get(a.id).unwrap().balance_cents);
            // Nothing flows, so nothing rolls over: amounts due stay as stored.
            assert_eq!(a.amount_due_end_cents, a.amount_due_today_cents);
        }
        assert_eq!(contents(&end), contents(&t));
        assert_eq!(f.money.start_cents, f.money.end_cents);
        // Rent: due on days 10, 40, ..., 340; funded with 300.00 of 400.00, nothing paid: each
        // due date counts one more period.
        let rent = t.get(4).unwrap();
        assert_eq!(rent.balance_cents, 30_000);
        assert_eq!(f.bills.len(), 12);
        for (j, b) in f.bills.iter().enumerate() {
            let j = j as i64;
            assert_eq!((b.id, b.day, b.due_secs), (4, TODAY + 10 + 30 * j, at(TODAY + 10 + 30 * j)));
            assert_eq!(b.amount_due_cents, i128::from(40_000 * (1 + j)));
            assert_eq!((b.balance_cents, b.paid_cents), (30_000, 0));
            assert_eq!(b.shortfall_cents, i128::from(40_000 * (1 + j) - 30_000));
        }
    }

    #[test]
    fn a_deposit_splits_as_the_engine_does() {
        let t = sample();
        let day = TODAY + 3;
        let f = forecast(&t, &[planned(day, Movement::Deposit { to: 1 }, 123_457)], TODAY, 30, None);
        let mut direct = t.clone();
        Ctx::new(&mut direct, at(day)).deposit(1, terms(123_457, at(day)), Mode::External).unwrap();
        for a in &f.accounts {
            let want = direct.get(a.id).unwrap();
            assert_eq!(a.balance_end_cents(), want.balance_cents, "{}", a.id);
            assert_eq!(a.amount_due_end_cents, want.grand.as_ref().map(|g| g.amount_due_cents));
            let changed = want.balance_cents != a.balance_today_cents;
            assert_eq!(a.points, if changed { vec![(day, want.balance_cents)] } else { vec![] });
        }
        // Rent took only the 100.00 it needed, the rest went back to Needs.
        assert_eq!(account(&f, 4).balance_end_cents(), 40_000);
        assert_eq!(f.money.deposited_cents, 123_457);
        assert_eq!(f.money.end_cents, f.money.start_cents + 123_457);
    }

    #[test]
    fn a_withdrawal_larger_than_the_balance_is_reported_not_applied() {
        let t = sample();
        let food = t.get(5).unwrap().balance_cents;
        let plan = [
            Planned { schedule: 7, n: 3, ..planned(TODAY + 1, Movement::Withdraw { from: 5 }, food + 1) },
            planned(TODAY + 2, Movement::Withdraw { from: 5 }, food),
            planned(TODAY + 3, Movement::Move { from: 5, to: 6 }, 1),
            planned(TODAY + 3, Movement::Move { from: 6, to: 6 }, 1),
        ];
        let f = forecast(&t, &plan, TODAY, 10, None);
        assert_eq!(
            f.unapplied,
            [
                Unapplied {
                    index: 0,
                    day: TODAY + 1,
                    schedule: 7,
                    n: 3,
                    reason: Refusal::NotCovered { balance_cents: food, shortfall_cents: 1 }
                },
                Unapplied {
                    index: 2,
                    day: TODAY + 3,
                    schedule: 0,
                    n: 0,
                    reason: Refusal::NotCovered { balance_cents: 0, shortfall_cents: 1 }
                },
                Unapplied { index: 3, day: TODAY + 3, schedule: 0, n: 0, reason: Refusal::SameAccount },
            ]
        );
        assert_eq!(account(&f, 5).points, [(TODAY + 2, 0)]);
        assert_eq!(f.money.withdrawn_cents, i128::from(food));
    }

    #[test]
    fn a_deposit_or_move_into_an_inactive_account_changes_nothing() {
        let mut t = sample();
        // Fun is inactive; Rent is a Bill funded to 400.00 (inactive) until its due date passes.
        Arc::make_mut(t.accounts.get_mut(&3).unwrap()).status = Status::Inactive;
        Ctx::new(&mut t, at(TODAY)).deposit(4, terms(10_000, at(TODAY)), Mode::External).unwrap();
        assert_eq!(t.get(4).unwrap().status, Status::Inactive);
        let plan = [
            planned(TODAY, Movement::Deposit { to: 3 }, 500),
            planned(TODAY + 1, Movement::Move { from: 5, to: 4 }, 500),
            planned(TODAY + 1, Movement::Deposit { to: 99 }, 500),
            planned(TODAY + 1, Movement::Deposit { to: 5 }, 0),
            planned(TODAY - 1, Movement::Deposit { to: 5 }, 10),
            planned(TODAY + 6, Movement::Deposit { to: 5 }, 10),
            // After the due date the rollover reopens Rent first: accepted.
            planned(TODAY + 11, Movement::Move { from: 5, to: 4 }, 500),
        ];
        let f = forecast(&t, &plan, TODAY, 5, None);
        let reasons: Vec<_> = f.unapplied.iter().map(|u| (u.index, u.reason)).collect();
        assert_eq!(
            reasons,
            [
                (4, Refusal::OutsideWindow),
                (5, Refusal::OutsideWindow),
                (6, Refusal::OutsideWindow),
                (0, Refusal::NotActive(3)),
                (1, Refusal::NotActive(4)),
                (2, Refusal::UnknownAccount(99)),
                (3, Refusal::NotPositive),
            ]
        );
        assert!(f.accounts.iter().all(|a| a.points.is_empty()));
        let f = forecast(&t, &plan, TODAY, 20, None);
        assert!(f.unapplied.iter().all(|u| u.index != 6));
        assert_eq!(account(&f, 4).points, [(TODAY + 11, 40_500)]);
    }

    #[test]
    fn a_bills_shortfall_is_computed_on_its_due_date() {
        let mut t = Tree::new_user(1, 0);
        add_child(&mut t, 2, 1, 1_000_000, 0);
        // Due at noon: the postings of its due day (at midnight) still count for it.
        let due = at(TODAY + 5) + 12 * 3600;
        add_grand(&mut t, 3, 2, 500_000, 1, Bill { due: Some(due), ..bill(40_000, 0, 30) });
        add_grand(&mut t, 4, 2, 500_000, 0, open(0));
        let plan = [
            // Rent gets 250.00 of it.
            planned(TODAY + 1, Movement::Deposit { to: 1 }, 50_000),
            // Paid on the due day, partly.
            planned(TODAY + 5, Movement::Withdraw { from: 3 }, 40_000),
            planned(TODAY + 5, Movement::Withdraw { from: 3 }, 20_000),
        ];
        let f = forecast(&t, &plan, TODAY, 40, None);
        assert_eq!(f.unapplied.len(), 1);
        assert_eq!(
            f.unapplied[0].reason,
            Refusal::NotCovered { balance_cents: 25_000, shortfall_cents: 15_000 }
        );
        assert_eq!(
            f.bills,
            [
                BillDue {
                    id: 3,
                    due_secs: due,
                    day: TODAY + 5,
                    amount_due_cents: 40_000,
                    paid_cents: 20_000,
                    balance_cents: 5_000,
                    shortfall_cents: 15_000,
                },
                // 200.00 of the first still unpaid, the next 400.00 due, 50.00 held.
                BillDue {
                    id: 3,
                    due_secs: due + 30 * DAY_SECS,
                    day: TODAY + 35,
                    amount_due_cents: 60_000,
                    paid_cents: 0,
                    balance_cents: 5_000,
                    shortfall_cents: 55_000,
                },
            ]
        );
        // Scoped to the other envelope: no bills, one account.
        let f = forecast(&t, &plan, TODAY, 40, Some(4));
        assert!(f.bills.is_empty());
        assert_eq!(f.accounts.len(), 1);
        assert_eq!(f.accounts[0].points, [(TODAY + 1, 25_000)]);
        assert!(forecast(&t, &plan, TODAY, 40, Some(77)).accounts.is_empty());
    }

    #[test]
    fn an_operation_the_engine_refuses_leaves_no_trace() {
        let mut t = Tree::new_user(1, 0);
        add_child(&mut t, 2, 1, 500_000, 0);
        add_grand(&mut t, 3, 2, 1_000_000, 0, open(100));
        add_child(&mut t, 4, 1, 500_000, 0);
        // Its target does not fit 64-bit cents: the engine refuses any money reaching it, after
        // the ledger counted it and, for a move, after debiting the source.
        let huge = Frac::int(i64::MAX / 2);
        Arc::make_mut(t.accounts.get_mut(&3).unwrap()).grand.as_mut().unwrap().periods = huge;
        let plan = [
            planned(TODAY, Movement::Deposit { to: 4 }, 800),
            planned(TODAY, Movement::Deposit { to: 1 }, 1_000),
            planned(TODAY + 1, Movement::Withdraw { from: 4 }, 300),
            planned(TODAY + 1, Movement::Deposit { to: 3 }, 500),
            planned(TODAY + 2, Movement::Move { from: 4, to: 2 }, 100),
            planned(TODAY + 2, Movement::Deposit { to: 2 }, MAX_AMOUNT_CENTS + 1),
        ];
        let (f, end) = simulate(&t, &plan, TODAY, 5, None);
        let reasons: Vec<_> = f.unapplied.iter().map(|u| (u.index, u.reason)).collect();
        let engine = Refusal::Engine(OpError::TooLarge);
        assert_eq!(reasons, [(1, engine), (3, engine), (4, engine), (5, Refusal::TooLarge)]);
        for a in &f.accounts {
            let want: &[(i64, i64)] = if a.id == 4 { &[(TODAY, 800), (TODAY + 1, 500)] } else { &[] };
            assert_eq!(a.points, want, "{}", a.id);
        }
        assert_eq!(check_invariants(&end), Ok(()));
        assert_eq!(end.ledger.deposits_cents, 800);
        let want = MoneyFlow { start_cents: 0, deposited_cents: 800, withdrawn_cents: 300, end_cents: 500 };
        assert_eq!(f.money, want);
    }

    /// The service's answer to one movement: its checks before the engine runs (6.1, 6.2, 6.4),
    /// then the engine on a copy that is kept only if it succeeds.
    fn as_the_service(t: &mut Tree, p: &Planned) -> bool {
        let a = p.amount_cents;
        let has = |id: AccountId| t.get(id).is_some_and(|x| x.balance_cents >= a);
        let ok = a > 0
            && match p.movement {
                Movement::Deposit { to } => t.get(to).is_some(),
                Movement::Withdraw { from } => has(from),
                Movement::Move { from, to } => t.get(to).is_some() && from != to && has(from),
            };
        if !ok {
            return false;
        }
        let mut copy = t.clone();
        let now = at(p.day);
        let mut ctx = Ctx::new(&mut copy, now);
        let done = match p.movement {
            Movement::Deposit { to } => ctx.deposit(to, terms(a, now), Mode::External),
            Movement::Withdraw { from } => ctx.withdraw(from, terms(a, now)),
            Movement::Move { from, to } => ctx.transfer(from, to, a),
        };
        if done.is_ok() {
            *t = copy;
        }
        done.is_ok()
    }

    /// One grandchild: allocation weight, priority, status pick, fixed amount, is a Bill, due
    /// offset (seconds), frequency, sub-accounts.
    type GSpec = (u8, u8, u8, i64, bool, i64, Option<u32>, u8);

    fn g_spec() -> impl Strategy<Value = GSpec> {
        (
            0u8..5,
            0u8..3,
            0u8..12,
            prop_oneof![Just(0i64), 1i64..60_000],
            any::<bool>(),
            -40 * DAY_SECS..40 * DAY_SECS,
            prop_oneof![Just(None), Just(Some(0u32)), (1u32..45).prop_map(Some)],
            0u8..3,
        )
    }

    fn status(pick: u8) -> Status {
        match pick {
            0 => Status::Inactive,
            1 => Status::Closed,
            2 => Status::Other("paused".into()),
            _ => Status::Active,
        }
    }

    /// Allocations in millionths from weights, summing to at most 1 (less when `short`).
    fn allocations(weights: &[u8], short: bool) -> Vec<i64> {
        let sum: i64 = weights.iter().map(|w| i64::from(*w)).sum::<i64>().max(1);
        let one = if short { 700_000 } else { 1_000_000 };
        weights.iter().map(|w| i64::from(*w) * one / sum).collect()
    }

    fn build(children: &[(u8, u8, u8, Vec<GSpec>)], short: bool, periods: i64) -> Tree {
        let mut t = Tree::new_user(1, 10_000);
        let mut next: AccountId = 1;
        let weights: Vec<u8> = children.iter().map(|c| c.0).collect();
        for ((_, prio, st, grands), alloc) in children.iter().zip(allocations(&weights, short)) {
            next += 1;
            let c = add_child(&mut t, next, 1, alloc, i64::from(*prio));
            Arc::make_mut(t.accounts.get_mut(&c).unwrap()).status =
                if alloc == 0 { Status::Inactive } else { status(*st) };
            let gw: Vec<u8> = grands.iter().map(|g| g.0).collect();
            for (g, alloc) in grands.iter().zip(allocations(&gw, short)) {
                let &(_, prio, st, fixed, is_bill, due, freq, subs) = g;
                let b = Bill {
                    fixed,
                    due: Some(at(TODAY) + due),
                    freq,
                    kind: if is_bill { "Bill" } else { "Debt" },
                };
                next += 1;
                let id = add_grand(&mut t, next, c, alloc, i64::from(prio), b);
                let a = Arc::make_mut(t.accounts.get_mut(&id).unwrap());
                a.status = if alloc == 0 { Status::Inactive } else { status(st) };
                a.grand.as_mut().unwrap().periods = Frac::int(periods);
                let parent = next;
                for s in 0..subs {
                    next += 1;
                    add_grand(&mut t, next, parent, 400_000, i64::from(s), open(i64::from(s) * 7_000));
                }
            }
        }
        t
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// For random trees and plans: applying the same movements one by one as the service
        /// would gives every account's projected balances (at the end of each day), the refused
        /// movements, and the amounts due; money is conserved; the copy keeps every invariant;
        /// each bill's figures are what the engine's own rollover gives at its due instant.
        #[test]
        fn the_forecast_is_the_service_applied_day_by_day(
            children in prop::collection::vec((0u8..5, 0u8..3, 0u8..12, prop::collection::vec(g_spec(), 0..5)), 1..5),
            short in any::<bool>(),
            periods in 0i64..3,
            setup in prop::collection::vec((any::<prop::sample::Index>(), 1i64..200_000), 0..8),
            moves in prop::collection::vec(
                (0u8..3, any::<prop::sample::Index>(), any::<prop::sample::Index>(),
                 prop_oneof![8 => 1i64..50_000, 2 => 1i64..12, 1 => -3i64..1], 0i64..1000),
                0..40),
            days in prop_oneof![1 => Just(0u32), 6 => 1u32..45],
            pay in 0i64..5,
        ) {
            let mut t = build(&children, short, periods);
            let mut ids: Vec<AccountId> = t.preorder(1);
            // Money in the tree before the window, through the engine as the service puts it.
            for (i, (who, amount)) in setup.iter().enumerate() {
                let to = if i % 2 == 0 { 1 } else { *who.get(&ids) };
                let day = TODAY - 10 + i as i64;
                as_the_service(&mut t, &planned(day, Movement::Deposit { to }, *amount));
            }
            ids.push(999); // unknown
            let mut plan: Vec<Planned> = moves.iter().enumerate().map(|(n, (kind, a, b, amount, off))| {
                let (a, b) = (*a.get(&ids), *b.get(&ids));
                let movement = match kind {
                    0 => Movement::Deposit { to: a },
                    1 => Movement::Withdraw { from: a },
                    _ => Movement::Move { from: a, to: b },
                };
                // A day in the window, or up to two days either side of it.
                let day = TODAY - 2 + off * (i64::from(days) + 5) / 1000;
                Planned { day, movement, amount_cents: *amount, schedule: *kind as u64, n: n as u32 }
            }).collect();
            // Bills paid (`pay` quarters of their fixed amount) on their due days, after the rest.
            for &id in &ids {
                let Some(g) = t.get(id).and_then(|a| a.grand.clone()) else { continue };
                let (Some(due), Some(f)) = (g.due_date_secs, g.freq_days.filter(|f| *f >= 1)) else { continue };
                for j in -3..8 {
                    let day = day_of(due + j * i64::from(f) * DAY_SECS);
                    let amount_cents = g.fixed_amount_cents * pay / 4;
                    if pay > 0 && g.account_type == "Bill" && amount_cents > 0 && (TODAY..=TODAY + 45).contains(&day) {
                        plan.push(Planned { day, movement: Movement::Withdraw { from: id }, amount_cents, schedule: 9, n: 0 });
                    }
                }
            }
            let before = contents(&t);
            let (f, end) = simulate(&t, &plan, TODAY, days, None);
            prop_assert_eq!(contents(&t), before);
            prop_assert_eq!(check_invariants(&end), Ok(()));

            // The oracle, day by day.
            let last = TODAY + i64::from(days);
            let mut order: Vec<usize> = (0..plan.len()).filter(|i| (TODAY..=last).contains(&plan[*i].day)).collect();
            order.sort_by_key(|i| plan[*i].day);
            let mut o = t.clone();
            let (mut refused, mut dep, mut wd) = (Vec::new(), 0i128, 0i128);
            let mut points: Vec<Vec<(i64, i64)>> = vec![Vec::new(); f.accounts.len()];
            let mut bills = f.bills.iter().peekable();
            for day in TODAY..=last {
                let mut paid: Vec<(AccountId, i64)> = Vec::new();
                for &i in order.iter().filter(|i| plan[**i].day == day) {
                    let p = &plan[i];
                    if !as_the_service(&mut o, p) {
                        refused.push(i);
                        continue;
                    }
                    match p.movement {
                        Movement::Deposit { .. } => dep += i128::from(p.amount_cents),
                        Movement::Withdraw { from } => {
                            wd += i128::from(p.amount_cents);
                            paid.push((from, p.amount_cents));
                        }
                        Movement::Move { from, .. } => paid.push((from, p.amount_cents)),
                    }
                }
                for (k, a) in f.accounts.iter().enumerate() {
                    let bal = o.get(a.id).unwrap().balance_cents;
                    if points[k].last().map_or(a.balance_today_cents, |p| p.1) != bal {
                        points[k].push((day, bal));
                    }
                }
                while let Some(b) = bills.next_if(|b| b.day == day) {
                    let mut r = o.clone();
                    Ctx::new(&mut r, b.due_secs).rollover(b.id, b.due_secs).unwrap();
                    let g = r.get(b.id).unwrap();
                    let gr = g.grand.as_ref().unwrap();
                    prop_assert_eq!(gr.due_date_secs, Some(b.due_secs));
                    let target = gr.periods.times_round(gr.fixed_amount_cents);
                    let p: i64 = paid.iter().filter(|x| x.0 == b.id).map(|x| x.1).sum();
                    prop_assert_eq!((b.amount_due_cents, b.paid_cents), (target + i128::from(p), p));
                    prop_assert_eq!(b.balance_cents, g.balance_cents);
                    prop_assert_eq!(b.shortfall_cents, (target - i128::from(g.balance_cents)).max(0));
                }
            }
            prop_assert!(bills.next().is_none());
            for (k, a) in f.accounts.iter().enumerate() {
                let want = o.get(a.id).unwrap();
                prop_assert_eq!(a.balance_end_cents(), want.balance_cents);
                prop_assert_eq!(&a.points, &points[k]);
                prop_assert_eq!(a.amount_due_end_cents, want.grand.as_ref().map(|g| g.amount_due_cents));
            }
            prop_assert_eq!(f.accounts.len(), t.accounts.len());
            let mut got: Vec<usize> = f.unapplied.iter().map(|u| u.index).collect();
            let outside = plan.iter().filter(|p| !(TODAY..=last).contains(&p.day)).count();
            prop_assert_eq!(got.len(), refused.len() + outside);
            got.sort_unstable();
            let mut want: Vec<usize> = refused;
            want.extend((0..plan.len()).filter(|i| !(TODAY..=last).contains(&plan[*i].day)));
            want.sort_unstable();
            prop_assert_eq!(got, want);
            prop_assert_eq!((f.money.deposited_cents, f.money.withdrawn_cents), (dep, wd));
            prop_assert_eq!(f.money.end_cents, f.money.start_cents + dep - wd);
            prop_assert_eq!(f.money.end_cents, o.get(1).unwrap().sub_balance_cents);
        }
    }
}
