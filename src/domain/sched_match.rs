//! Statement lines taken for scheduled occurrences (docs/import.md, "What a line does"): a
//! line is the payment a schedule foresaw when it goes the same way (a debit for a withdrawal,
//! a credit for a deposit), its amount is within the schedule's `approx_pct` percent of the
//! schedule's amount, and it is dated within a few days of an occurrence not yet posted or
//! skipped. Each occurrence is taken by at most one line. Pure: the import decides what to do
//! with a match.

use super::schedule::{Schedule, What};
use super::tree::AccountId;

/// Whether `actual_cents` is within `pct` percent of `expected_cents` (0: exactly it). Exact
/// integer arithmetic: 1020.00 is within 2 % of 1000.00, 1020.01 is not.
pub fn within_pct(expected_cents: i64, actual_cents: i64, pct: u8) -> bool {
    let diff = (i128::from(expected_cents) - i128::from(actual_cents)).abs();
    diff * 100 <= i128::from(expected_cents).abs() * i128::from(pct)
}

/// An occurrence a statement line may be taken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    pub schedule: u64,
    pub n: u32,
    pub day: i64,
    /// Money in (a deposit schedule) or out (a withdrawal).
    pub deposit: bool,
    /// The account deposited into or withdrawn from.
    pub account: AccountId,
    pub amount_cents: i64,
    pub approx_pct: u8,
}

impl Open {
    /// Whether a line of signed `amount_cents` dated `day` may be this occurrence's payment.
    pub fn fits(&self, amount_cents: i64, day: i64, window: i64) -> bool {
        amount_cents != 0
            && self.deposit == (amount_cents > 0)
            && (self.day - day).abs() <= window
            && within_pct(self.amount_cents, amount_cents.abs(), self.approx_pct)
    }
}

/// The unsettled occurrences of the deposit and withdraw schedules (a move is no statement
/// line) dated within `window` days of one of `line_days`, ordered by day. `line_days` need not
/// be sorted.
pub fn open_near(schedules: &[&Schedule], line_days: &[i64], window: i64) -> Vec<Open> {
    let mut days = line_days.to_vec();
    days.sort_unstable();
    days.dedup();
    let (Some(&first), Some(&last)) = (days.first(), days.last()) else { return Vec::new() };
    let near = |day: i64| {
        // The first line day at or after `day - window` is within the window if any is.
        let i = days.partition_point(|&d| d < day - window);
        days.get(i).is_some_and(|&d| d <= day + window)
    };
    let mut out = Vec::new();
    for s in schedules {
        let (deposit, account) = match s.what {
            What::Deposit { to } => (true, to),
            What::Withdraw { from } => (false, from),
            What::Move { .. } => continue,
        };
        let series = s.recur.iter_from(first - window).take_while(|o| o.day <= last + window);
        for o in series.filter(|o| !s.settled(o.n) && near(o.day)) {
            out.push(Open {
                schedule: s.id,
                n: o.n,
                day: o.day,
                deposit,
                account,
                amount_cents: s.amount_cents,
                approx_pct: s.approx_pct,
            });
        }
    }
    out.sort_by_key(|o| (o.day, o.schedule, o.n));
    out
}

/// The occurrence of `open` (ordered by day, as [`open_near`] gives them) a line of signed
/// `amount_cents` dated `day` is taken for, among those not `used` yet: the nearest date, then
/// the nearest amount, then the earliest schedule and occurrence. Marks it used.
pub fn take(open: &[Open], used: &mut [bool], amount_cents: i64, day: i64, window: i64) -> Option<usize> {
    let from = open.partition_point(|o| o.day < day - window);
    let best = open[from..]
        .iter()
        .enumerate()
        .take_while(|(_, o)| o.day <= day + window)
        .map(|(i, o)| (from + i, o))
        .filter(|(i, o)| !used[*i] && o.fits(amount_cents, day, window))
        .min_by_key(|(_, o)| {
            ((o.day - day).abs(), (o.amount_cents - amount_cents.abs()).abs(), o.schedule, o.n)
        })
        .map(|(i, _)| i)?;
    used[best] = true;
    Some(best)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;
    use crate::domain::recur::{End, Recurrence, Unit, Weekend};

    fn sched(id: u64, what: What, amount_cents: i64, approx_pct: u8) -> Schedule {
        Schedule {
            id,
            name: "Rent".into(),
            what,
            amount_cents,
            approx_pct,
            recur: Recurrence {
                start_day: 100,
                every: 10,
                unit: Unit::Days,
                month_day: None,
                nth_weekday: None,
                end: End::Never,
                weekend: Weekend::Keep,
            },
            auto: true,
            next: 0,
            done: BTreeSet::new(),
            skipped: BTreeSet::new(),
            failed: BTreeMap::new(),
            rev: 0,
        }
    }

    #[test]
    fn an_amount_fits_within_its_percent_exactly() {
        assert!(within_pct(100_000, 102_000, 2));
        assert!(!within_pct(100_000, 102_001, 2));
        assert!(within_pct(100_000, 98_000, 2));
        assert!(within_pct(100_000, 100_000, 0));
        assert!(!within_pct(100_000, 100_001, 0));
        assert!(within_pct(i64::MAX, 0, 100));
    }

    #[test]
    fn a_line_takes_the_nearest_open_occurrence_of_its_direction_once() {
        let mut rent = sched(1, What::Withdraw { from: 7 }, 100_000, 5);
        rent.settle(0, false); // day 100 posted
        let pay = sched(2, What::Deposit { to: 3 }, 100_000, 0);
        let mv = sched(3, What::Move { from: 3, to: 7 }, 100_000, 50);
        let open = open_near(&[&rent, &pay, &mv], &[103, 111, 140], 3);
        let keys: Vec<(u64, u32, i64)> = open.iter().map(|o| (o.schedule, o.n, o.day)).collect();
        // Day 100's rent is settled; the move never matches; day 120 and 130 are no line's.
        assert_eq!(keys, [(2, 0, 100), (1, 1, 110), (2, 1, 110), (1, 4, 140), (2, 4, 140)]);
        let mut used = vec![false; open.len()];
        // A debit 2 % off is the rent of day 110; the same again finds none left near day 111.
        assert_eq!(take(&open, &mut used, -102_000, 111, 3), Some(1));
        assert_eq!(take(&open, &mut used, -102_000, 111, 3), None);
        // 10 % off is not the rent; a credit of the exact amount is the pay of day 110.
        assert_eq!(take(&open, &mut used, -110_000, 140, 3), None);
        assert_eq!(take(&open, &mut used, 100_001, 111, 3), None);
        assert_eq!(take(&open, &mut used, 100_000, 111, 3), Some(2));
        // Day 100's pay is 3 days from day 103: still in the window; 4 days is not.
        assert_eq!(take(&open, &mut used, 100_000, 104, 3), None);
        assert_eq!(take(&open, &mut used, 100_000, 103, 3), Some(0));
        assert!(open_near(&[&rent], &[], 3).is_empty());
    }

    proptest! {
        /// Whatever the occurrences and lines: a line takes only an occurrence it fits, each
        /// occurrence is taken once at most, and a line left alone had no free occurrence it
        /// fits when its turn came (nothing fitting is skipped).
        #[test]
        fn lines_take_fitting_occurrences_once_and_skip_none(
            occ in proptest::collection::vec((0i64..60, any::<bool>(), 1i64..2_000, 0u8..20), 0..30),
            lines in proptest::collection::vec((0i64..60, -2_000i64..2_000), 0..30),
            window in 0i64..5,
        ) {
            let mut open: Vec<Open> = occ
                .iter()
                .enumerate()
                .map(|(i, &(day, deposit, amount_cents, approx_pct))| Open {
                    schedule: i as u64, n: 0, day, deposit, account: 1, amount_cents, approx_pct,
                })
                .collect();
            open.sort_by_key(|o| (o.day, o.schedule, o.n));
            let mut used = vec![false; open.len()];
            for &(day, amount) in &lines {
                let before = used.clone();
                match take(&open, &mut used, amount, day, window) {
                    Some(i) => {
                        prop_assert!(!before[i] && open[i].fits(amount, day, window));
                        prop_assert_eq!(used.iter().filter(|u| **u).count(), before.iter().filter(|u| **u).count() + 1);
                    }
                    None => {
                        prop_assert_eq!(&used, &before);
                        prop_assert!(open.iter().zip(&before).all(|(o, u)| *u || !o.fits(amount, day, window)));
                    }
                }
            }
        }
    }
}
