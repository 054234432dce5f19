//! Tests of `domain::forecast`.

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

fn add_grand(t: &mut Tree, id: AccountId, parent: AccountId, alloc: i64, prio: i64, b: Bill) -> AccountId {
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
    assert_eq!(f.unapplied[0].reason, Refusal::NotCovered { balance_cents: 25_000, shortfall_cents: 15_000 });
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
            let b =
                Bill { fixed, due: Some(at(TODAY) + due), freq, kind: if is_bill { "Bill" } else { "Debt" } };
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
