//! Per-day aggregates of one account, shaped so that a write costs the same whatever the length
//! of the history, and a range read costs a bounded number of lookups.
//!
//! Days are grouped in buckets of [`BUCKET_DAYS`] days, each shared copy-on-write (`Arc`), and
//! buckets are rolled up into spans of [`SPAN_DAYS`] days. Recording a day touches that day, its
//! bucket total and its span total; cloning an account (the copy-on-write step of a mutation)
//! copies bucket pointers, never day maps. A range sum reads at most two partial buckets, the
//! whole buckets of two partial spans and the spans between, whatever the number of records.
//! Storage keeps only the day rows; bucket and span totals are rebuilt when a user is loaded.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Days per bucket: a bucket's day map is the largest thing a write clones.
pub const BUCKET_DAYS: i64 = 32;
/// Days per span (32 buckets, about 2.8 years).
pub const SPAN_DAYS: i64 = BUCKET_DAYS * 32;

/// Per-day sums of one account's own records, keyed by the day of the record's `Date`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaySums {
    /// Deposits with `By` exactly `User` (total_income).
    pub dep_user: i128,
    /// Withdrawals with `By` exactly `User` (spending).
    pub wd_user: i128,
    /// All deposits (allocated_amount, own part).
    pub dep_all: i128,
    /// Deposits that count for an ancestor's allocated_amount: `By User`, or `By System` with a
    /// `returned extra allocation-up` channel.
    pub dep_alloc: i128,
}

impl DaySums {
    pub fn add(&mut self, o: &DaySums) {
        self.dep_user += o.dep_user;
        self.wd_user += o.wd_user;
        self.dep_all += o.dep_all;
        self.dep_alloc += o.dep_alloc;
    }

    pub fn minus(&self, o: &DaySums) -> DaySums {
        DaySums {
            dep_user: self.dep_user - o.dep_user,
            wd_user: self.wd_user - o.wd_user,
            dep_all: self.dep_all - o.dep_all,
            dep_alloc: self.dep_alloc - o.dep_alloc,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Bucket {
    total: DaySums,
    days: BTreeMap<i64, DaySums>,
    /// Cumulative sums inside the bucket: the entry of day d holds the bucket's days <= d, so a
    /// partial bucket is two lookups (a write updates at most the bucket's 32 entries).
    cum: BTreeMap<i64, DaySums>,
}

impl Bucket {
    fn upto(&self, day: i64) -> DaySums {
        self.cum.range(..=day).next_back().map(|(_, v)| *v).unwrap_or_default()
    }
}

/// The day sums of one account (see the module comment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DayLedger {
    buckets: BTreeMap<i64, Arc<Bucket>>,
    spans: BTreeMap<i64, DaySums>,
}

fn bucket_of(day: i64) -> i64 {
    day.div_euclid(BUCKET_DAYS)
}

fn span_of(day: i64) -> i64 {
    day.div_euclid(SPAN_DAYS)
}

impl DayLedger {
    /// Adds `delta` to `day`; returns the day's new sums (the row storage keeps).
    pub fn add(&mut self, day: i64, delta: &DaySums) -> DaySums {
        self.spans.entry(span_of(day)).or_default().add(delta);
        let b = Arc::make_mut(self.buckets.entry(bucket_of(day)).or_default());
        b.total.add(delta);
        if !b.cum.contains_key(&day) {
            let base = b.upto(day);
            b.cum.insert(day, base);
        }
        for (_, v) in b.cum.range_mut(day..) {
            v.add(delta);
        }
        let d = b.days.entry(day).or_default();
        d.add(delta);
        *d
    }

    /// The sums of one day.
    pub fn day(&self, day: i64) -> DaySums {
        self.buckets.get(&bucket_of(day)).and_then(|b| b.days.get(&day)).copied().unwrap_or_default()
    }

    /// Sums over `[from, to]`.
    pub fn range(&self, from: i64, to: i64) -> DaySums {
        let mut s = DaySums::default();
        if from > to {
            return s;
        }
        let (fs, ts) = (span_of(from), span_of(to));
        if fs == ts {
            return self.range_in_span(from, to);
        }
        s.add(&self.range_in_span(from, (fs + 1) * SPAN_DAYS - 1));
        for (_, v) in self.spans.range(fs + 1..ts) {
            s.add(v);
        }
        s.add(&self.range_in_span(ts * SPAN_DAYS, to));
        s
    }

    /// Sums over `[from, to]`, both inside one span.
    fn range_in_span(&self, from: i64, to: i64) -> DaySums {
        let (fb, tb) = (bucket_of(from), bucket_of(to));
        if fb == tb {
            return self.range_in_bucket(fb, from, to);
        }
        let mut s = self.range_in_bucket(fb, from, to);
        for (_, b) in self.buckets.range(fb + 1..tb) {
            s.add(&b.total);
        }
        s.add(&self.range_in_bucket(tb, from, to));
        s
    }

    fn range_in_bucket(&self, b: i64, from: i64, to: i64) -> DaySums {
        match self.buckets.get(&b) {
            Some(bk) => bk.upto(to).minus(&bk.upto(from - 1)),
            None => DaySums::default(),
        }
    }

    /// The per-day sums of the days in `[from, to]` that have records, in day order.
    pub fn daily(&self, from: i64, to: i64) -> impl Iterator<Item = (i64, DaySums)> + '_ {
        let bounds = (from <= to).then(|| (bucket_of(from), bucket_of(to)));
        bounds
            .into_iter()
            .flat_map(move |(fb, tb)| self.buckets.range(fb..=tb))
            .flat_map(move |(_, b)| b.days.range(from..=to).map(|(d, s)| (*d, *s)))
    }
}

/// The last tracker row of one wall-clock day (only the latest row in a range is ever used).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackRow {
    pub amount_due: i64,
    pub balance: i64,
}

/// Tracker rows of one grandchild-kind account, one per day, bucketed like [`DayLedger`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrackLog {
    buckets: BTreeMap<i64, Arc<BTreeMap<i64, TrackRow>>>,
}

impl TrackLog {
    pub fn insert(&mut self, day: i64, row: TrackRow) {
        Arc::make_mut(self.buckets.entry(bucket_of(day)).or_default()).insert(day, row);
    }

    /// The latest row dated inside `[from, to]`. Every stored bucket holds a row, so at most the
    /// two edge buckets can miss before one answers.
    pub fn latest(&self, from: i64, to: i64) -> Option<TrackRow> {
        if from > to {
            return None;
        }
        self.buckets
            .range(bucket_of(from)..=bucket_of(to))
            .rev()
            .find_map(|(_, b)| b.range(from..=to).next_back().map(|(_, r)| *r))
    }

    /// Every row dated inside `[from, to]`, in day order.
    pub fn range(&self, from: i64, to: i64) -> impl Iterator<Item = (i64, TrackRow)> + '_ {
        let bounds = (from <= to).then(|| (bucket_of(from), bucket_of(to)));
        bounds
            .into_iter()
            .flat_map(move |(fb, tb)| self.buckets.range(fb..=tb))
            .flat_map(move |(_, b)| b.range(from..=to).map(|(d, r)| (*d, *r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sums(v: i128) -> DaySums {
        DaySums { dep_user: v, wd_user: 2 * v, dep_all: 3 * v, dep_alloc: v + 1 }
    }

    proptest! {
        /// Every range answer equals the sum over a plain day map, for days spread over decades
        /// and ranges that cross bucket and span edges.
        #[test]
        fn ranges_match_a_plain_day_map(
            adds in prop::collection::vec((-20_000i64..20_000, 1i128..1000), 0..200),
            ranges in prop::collection::vec((-25_000i64..25_000, 0i64..30_000), 1..40),
        ) {
            let mut l = DayLedger::default();
            let mut plain: BTreeMap<i64, DaySums> = BTreeMap::new();
            for (day, v) in &adds {
                let got = l.add(*day, &sums(*v));
                let want = plain.entry(*day).or_default();
                want.add(&sums(*v));
                prop_assert_eq!(got, *want);
            }
            for (from, len) in ranges {
                let to = from + len;
                let mut want = DaySums::default();
                for (_, s) in plain.range(from..=to) {
                    want.add(s);
                }
                prop_assert_eq!(l.range(from, to), want);
                let daily: Vec<_> = l.daily(from, to).collect();
                let plain_daily: Vec<_> = plain.range(from..=to).map(|(d, s)| (*d, *s)).collect();
                prop_assert_eq!(daily, plain_daily);
            }
        }

        #[test]
        fn latest_track_row_matches_a_plain_map(
            rows in prop::collection::vec((-5_000i64..5_000, 0i64..100), 0..100),
            ranges in prop::collection::vec((-6_000i64..6_000, 0i64..8_000), 1..40),
        ) {
            let mut t = TrackLog::default();
            let mut plain = BTreeMap::new();
            for (day, v) in rows {
                let r = TrackRow { amount_due: v, balance: -v };
                t.insert(day, r);
                plain.insert(day, r);
            }
            for (from, len) in ranges {
                let to = from + len;
                prop_assert_eq!(t.latest(from, to), plain.range(from..=to).next_back().map(|(_, r)| *r));
                let all: Vec<_> = t.range(from, to).collect();
                let want: Vec<_> = plain.range(from..=to).map(|(d, r)| (*d, *r)).collect();
                prop_assert_eq!(all, want);
            }
        }
    }

    #[test]
    fn a_write_clones_one_bucket_not_the_history() {
        let mut l = DayLedger::default();
        for day in 0..700 {
            l.add(day, &sums(1));
        }
        let before = l.clone();
        l.add(5, &sums(1));
        // Only the written bucket was copied; every other bucket is still shared.
        let shared = l.buckets.iter().filter(|(k, b)| Arc::ptr_eq(b, &before.buckets[*k])).count();
        assert_eq!(shared, l.buckets.len() - 1);
    }
}
