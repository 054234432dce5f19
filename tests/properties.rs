//! Property tests of the pure domain: the split rule, and random sequences of every
//! money-moving and tree operation keeping every invariant of SPEC 13.2 item 10 while every
//! aggregate equals its value recomputed from the transaction log.

use std::collections::{BTreeMap, HashMap};

use pfm::domain::engine::{largest_remainder, Ctx, Mode, OpError, Origin, Posting, TxRecord};
use pfm::domain::frac::Frac;
use pfm::domain::tree::{
    check_invariants, Account, AccountId, DaySums, Grand, Kind, Status, Tree, ALLOC_ONE, MAX_ACCOUNTS,
    MAX_CHILDREN, MAX_DEPTH,
};
use proptest::prelude::*;

proptest! {
    #[test]
    fn split_conserves_and_follows_largest_remainder(amount in 0i64..10_000_000_000, weights in prop::collection::vec(0i64..=1_000_000, 1..12)) {
        let Some(shares) = largest_remainder(amount, &weights) else {
            prop_assert!(weights.iter().all(|w| *w == 0));
            return Ok(());
        };
        prop_assert_eq!(shares.iter().sum::<i64>(), amount);
        let w_sum: i128 = weights.iter().map(|w| i128::from(*w)).sum();
        let exact: Vec<(i128, i128)> = weights.iter().map(|w| {
            let p = i128::from(amount) * i128::from(*w);
            (p / w_sum, p % w_sum)
        }).collect();
        for (i, s) in shares.iter().enumerate() {
            prop_assert!(*s >= 0);
            let extra = i128::from(*s) - exact[i].0;
            prop_assert!(extra == 0 || extra == 1);
        }
        // Everyone who got an extra cent has a remainder at least as large as everyone who did
        // not, and among equal remainders the extras go to the earlier children.
        for i in 0..shares.len() {
            for j in 0..shares.len() {
                let ei = i128::from(shares[i]) - exact[i].0;
                let ej = i128::from(shares[j]) - exact[j].0;
                if ei == 1 && ej == 0 {
                    prop_assert!(exact[i].1 > exact[j].1 || (exact[i].1 == exact[j].1 && i < j));
                }
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add { parent: usize, alloc: i64, priority: i64, fixed: i64, bill: bool, due_days: i64, freq: u32 },
    Deposit { acc: usize, amount: i64, user: bool },
    Withdraw { acc: usize, amount: i64 },
    Distribute { acc: usize, amount: i64 },
    Transfer { from: usize, to: usize, amount: i64 },
    SetAlloc { acc: usize, alloc: i64 },
    Status { acc: usize, status: usize },
    Delete { acc: usize },
    Time { days: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<usize>(), 0i64..=600_000, 0i64..4, prop_oneof![Just(0i64), 1i64..50_000], any::<bool>(), -40i64..40, 0u32..40)
            .prop_map(|(parent, alloc, priority, fixed, bill, due_days, freq)| Op::Add { parent, alloc, priority, fixed, bill, due_days, freq }),
        4 => (any::<usize>(), 1i64..300_000, any::<bool>()).prop_map(|(acc, amount, user)| Op::Deposit { acc, amount, user }),
        2 => (any::<usize>(), 1i64..100_000).prop_map(|(acc, amount)| Op::Withdraw { acc, amount }),
        2 => (any::<usize>(), 1i64..100_000).prop_map(|(acc, amount)| Op::Distribute { acc, amount }),
        2 => (any::<usize>(), any::<usize>(), 1i64..100_000).prop_map(|(from, to, amount)| Op::Transfer { from, to, amount }),
        1 => (any::<usize>(), 0i64..=700_000).prop_map(|(acc, alloc)| Op::SetAlloc { acc, alloc }),
        1 => (any::<usize>(), 0usize..4).prop_map(|(acc, status)| Op::Status { acc, status }),
        1 => any::<usize>().prop_map(|acc| Op::Delete { acc }),
        1 => (0i64..20).prop_map(|days| Op::Time { days }),
    ]
}

struct Model {
    tree: Tree,
    now: i64,
    log: HashMap<AccountId, Vec<TxRecord>>,
    next_id: u128,
}

impl Model {
    fn pick(&self, i: usize) -> AccountId {
        let all = self.tree.preorder(self.tree.root);
        all[i % all.len()]
    }

    /// Applies one operation with the endpoint's preconditions; an engine error discards it.
    fn apply(&mut self, op: &Op) {
        let mut work = self.tree.clone();
        let now = self.now;
        let mut ctx = Ctx::new(&mut work, now);
        let res: Result<(), OpError> = (|| {
            match op.clone() {
                Op::Add { parent, alloc, priority, fixed, bill, due_days, freq } => {
                    let p = self.pick(parent);
                    let pa = ctx.acc(p)?;
                    if ctx.tree.depth(p) + 1 > MAX_DEPTH
                        || pa.children.len() >= MAX_CHILDREN
                        || ctx.tree.accounts.len() >= MAX_ACCOUNTS
                        || ctx.tree.total_allocation(p) + alloc > ALLOC_ONE
                    {
                        return Ok(());
                    }
                    let kind = if pa.kind == Kind::Main { Kind::Child } else { Kind::Grandchild };
                    let grand = (kind == Kind::Grandchild).then(|| Grand {
                        due_date_secs: Some(now + due_days * 86_400),
                        fixed_amount_cents: fixed,
                        amount_due_cents: fixed,
                        account_type: if bill { "Bill".into() } else { "Expense".into() },
                        freq_days: Some(freq),
                        periods: Frac::ONE,
                    });
                    self.next_id += 1;
                    let mut acc =
                        Account::new(self.next_id, format!("A{}", self.next_id).into(), kind, Some(p), grand);
                    acc.allocation_ppm = alloc;
                    acc.priority_ppm = priority * 1_000_000;
                    acc.status = if alloc == 0 { "inactive".into() } else { "active".into() };
                    ctx.attach(acc)?;
                }
                Op::Deposit { acc, amount, user } => {
                    let x = self.pick(acc);
                    let by = Origin::from(if user { "User" } else { "Payroll" });
                    let terms = Posting {
                        amount_cents: amount,
                        by: &by,
                        channel: &"ch".into(),
                        txid: None,
                        date_secs: now,
                        note: None,
                    };
                    ctx.deposit(x, terms, Mode::External)?;
                }
                Op::Withdraw { acc, amount } => {
                    let x = self.pick(acc);
                    if amount <= ctx.acc(x)?.balance_cents {
                        let terms = Posting {
                            amount_cents: amount,
                            by: &Origin::User,
                            channel: &"ch".into(),
                            txid: None,
                            date_secs: now,
                            note: None,
                        };
                        ctx.withdraw(x, terms)?;
                    }
                }
                Op::Distribute { acc, amount } => {
                    let x = self.pick(acc);
                    if amount <= ctx.acc(x)?.balance_cents {
                        ctx.split(x, amount, None, &"System".into())?;
                    }
                }
                Op::Transfer { from, to, amount } => {
                    let (f, t) = (self.pick(from), self.pick(to));
                    if f != t && amount <= ctx.acc(f)?.balance_cents {
                        ctx.transfer(f, t, amount)?;
                    }
                }
                Op::SetAlloc { acc, alloc } => {
                    let c = self.pick(acc);
                    let a = ctx.acc(c)?;
                    if let Some(p) = a.parent {
                        if ctx.tree.total_allocation(p) - a.allocation_ppm + alloc <= ALLOC_ONE {
                            ctx.set_allocation(c, alloc)?;
                        }
                    }
                }
                Op::Status { acc, status } => {
                    let c = self.pick(acc);
                    let a = ctx.acc(c)?;
                    let s = ["active", "inactive", "closed", "custom"][status];
                    if a.parent.is_some()
                        && !(s == "closed" && (a.status == Status::Closed || a.balance_cents > 0))
                    {
                        ctx.acc_mut(c)?.status = s.into();
                    }
                }
                Op::Delete { acc } => {
                    let x = self.pick(acc);
                    if x != ctx.tree.root {
                        return ctx.delete_sub(x);
                    }
                }
                Op::Time { .. } => {}
            }
            Ok(())
        })();
        if let Op::Time { days } = op {
            self.now += days * 86_400 + 3_600;
        }
        if res.is_err() {
            return;
        }
        let change = ctx.finish();
        for (r, len) in &change.removed {
            assert_eq!(self.log.get(r).map_or(0, Vec::len) as u64, *len, "log length of a removed account");
            self.log.remove(r);
        }
        for (acc, seq, rec) in change.records {
            assert!(rec.amount_cents > 0, "non-positive record");
            let log = self.log.entry(acc).or_default();
            assert_eq!(seq, log.len() as u64, "sequence number of a new record");
            log.push(rec);
        }
        // The change carries every day row it touched with the tree's new value.
        for (acc, day, sums) in &change.days {
            assert_eq!(work.get(*acc).map(|a| a.days.day(*day)), Some(*sums), "day row in the change");
        }
        assert_eq!(change.ledger, work.ledger, "ledger in the change");
        self.tree = work;
    }

    fn check(&self) -> Result<(), TestCaseError> {
        check_invariants(&self.tree).map_err(|e| TestCaseError::fail(format!("invariant: {e}")))?;
        for (id, acc) in &self.tree.accounts {
            let recs = self.log.get(id).map(Vec::as_slice).unwrap_or(&[]);
            prop_assert_eq!(acc.log_len as usize, recs.len());
            let mut days: BTreeMap<i64, DaySums> = BTreeMap::new();
            for r in recs {
                let d = days.entry(r.date_secs.div_euclid(86_400)).or_default();
                let a = i128::from(r.amount_cents);
                if r.deposit {
                    d.dep_all_cents += a;
                    if r.by == Origin::User {
                        d.dep_user_cents += a;
                    }
                    if r.by == Origin::User
                        || (r.by == Origin::System
                            && r.channel.to_lowercase().contains("returned extra allocation-up"))
                    {
                        d.dep_alloc_cents += a;
                    }
                } else if r.by == Origin::User {
                    d.wd_user_cents += a;
                }
            }
            days.retain(|_, s| *s != DaySums::default());
            let mut stored: BTreeMap<i64, DaySums> = acc.days.daily(i64::MIN / 4, i64::MAX / 4).collect();
            stored.retain(|_, s| *s != DaySums::default());
            prop_assert_eq!(&stored, &days, "day sums of {}", acc.name);
            let today = self.now.div_euclid(86_400);
            for (from, to) in [(today - 3, today), (today - 40, today - 10), (today, today)] {
                let mut want = DaySums::default();
                for (_, s) in days.range(from..=to) {
                    want.add(s);
                }
                prop_assert_eq!(acc.days.range(from, to), want);
            }
            if let Some(last) = recs.last() {
                prop_assert_eq!(last.balance_cents, acc.balance_cents);
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn random_operations_keep_invariants_and_aggregates(initial in 0i64..1_000_000, ops in prop::collection::vec(op(), 1..80)) {
        let mut m = Model { tree: Tree::new_user(0, initial), now: 1_752_137_415, log: HashMap::new(), next_id: 0 };
        for op in &ops {
            m.apply(op);
            m.check()?;
        }
    }
}
