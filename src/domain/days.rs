//! Per-day aggregates of one account, shaped so that a write costs the same whatever the length
//! of the history, and a range read costs a bounded number of lookups.
//!
//! Days are grouped in buckets of [`BUCKET_DAYS`] days, each shared copy-on-write (`Arc`), and
//! buckets are rolled up into spans of [`SPAN_DAYS`] days. Recording a day touches that day, its
//! bucket total and its span total; cloning an account (the copy-on-write step of a mutation)
//! copies one pointer to the history, and writes to the day last written (today, nearly
//! always) stay beside it until another day is written. A range sum reads at most two partial buckets, the
//! whole buckets of two partial spans and the spans between, whatever the number of records.
//! Storage keeps only the day rows; bucket and span totals are rebuilt when a user is loaded.

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
    pub dep_user_cents: i128,
    /// Withdrawals with `By` exactly `User` (spending).
    pub wd_user_cents: i128,
    /// All deposits (allocated_amount, own part).
    pub dep_all_cents: i128,
    /// Deposits that count for an ancestor's allocated_amount: `By User`, or `By System` with a
    /// `returned extra allocation-up` channel.
    pub dep_alloc_cents: i128,
}

impl DaySums {
    pub fn add(&mut self, o: &DaySums) {
        self.dep_user_cents += o.dep_user_cents;
        self.wd_user_cents += o.wd_user_cents;
        self.dep_all_cents += o.dep_all_cents;
        self.dep_alloc_cents += o.dep_alloc_cents;
    }

    pub fn minus(&self, o: &DaySums) -> DaySums {
        DaySums {
            dep_user_cents: self.dep_user_cents - o.dep_user_cents,
            wd_user_cents: self.wd_user_cents - o.wd_user_cents,
            dep_all_cents: self.dep_all_cents - o.dep_all_cents,
            dep_alloc_cents: self.dep_alloc_cents - o.dep_alloc_cents,
        }
    }
}

/// The entry of `key` in a vector sorted by key, inserted with a default value if missing.
fn slot<T: Default>(v: &mut Vec<(i64, T)>, key: i64) -> &mut T {
    let i = match v.binary_search_by_key(&key, |e| e.0) {
        Ok(i) => i,
        Err(i) => {
            v.insert(i, (key, T::default()));
            i
        }
    };
    &mut v[i].1
}

/// The entries of a vector sorted by key whose keys lie in `[lo, hi]`.
fn within<T>(v: &[(i64, T)], lo: i64, hi: i64) -> &[(i64, T)] {
    let a = v.partition_point(|e| e.0 < lo);
    let b = v.partition_point(|e| e.0 <= hi);
    &v[a..b.max(a)]
}

fn get<T>(v: &[(i64, T)], key: i64) -> Option<&T> {
    v.binary_search_by_key(&key, |e| e.0).ok().map(|i| &v[i].1)
}

/// One day of a bucket: its sums and the cumulative sums of the bucket's days up to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Day {
    sums: DaySums,
    /// The bucket's days <= this one, so a partial bucket is two lookups (a write updates at
    /// most the bucket's 32 entries).
    cum: DaySums,
}

/// Days in sorted vectors rather than B-trees: a bucket holds at most 32 days, and copying a
/// small vector is one allocation where copying a B-tree node is one allocation of ~800 bytes
/// whatever it holds (the copy-on-write step of every write pays it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Bucket {
    total: DaySums,
    days: Vec<(i64, Day)>,
}

impl Bucket {
    fn upto(&self, day: i64) -> DaySums {
        let i = self.days.partition_point(|e| e.0 <= day);
        if i == 0 {
            DaySums::default()
        } else {
            self.days[i - 1].1.cum
        }
    }
}

/// The day sums of one account (see the module comment): the history, shared, and what was
/// added to the last day written since it was folded into the history.
///
/// Why the pending day: nearly every write goes to today, and a write to the history copies
/// its bucket list, span list and written bucket (four allocations, and up to a month of days
/// copied) where adding to the pending day copies nothing. The history takes the pending day
/// when a write goes to another day.
#[derive(Debug, Clone, Default)]
pub struct DayLedger {
    p: Pending<Hist, DaySums>,
}

/// A history shared copy-on-write, and the row of the day last written beside it, folded into
/// the history when a write goes to another day (see [`DayLedger`] for why).
#[derive(Debug, Clone)]
struct Pending<H, T> {
    /// `None` until a day is folded in: an account with one day of history (a fresh one) or
    /// none is then copied without touching a reference count.
    hist: Option<Arc<H>>,
    row: Option<(i64, T)>,
}

impl<H, T> Default for Pending<H, T> {
    fn default() -> Self {
        Pending { hist: None, row: None }
    }
}

impl<H: Clone + Default, T: Copy> Pending<H, T> {
    /// The pending row of `day` (`new` if there is none yet), once a pending row of another
    /// day is folded into the history by `fold`.
    fn row_mut(&mut self, day: i64, new: T, fold: impl FnOnce(&mut H, i64, T)) -> &mut T {
        if let Some((d, r)) = self.row.filter(|(d, _)| *d != day) {
            fold(Arc::make_mut(self.hist.get_or_insert_default()), d, r);
            self.row = None;
        }
        &mut self.row.get_or_insert((day, new)).1
    }

    /// The pending row, if its day lies in `[from, to]`.
    fn within(&self, from: i64, to: i64) -> Option<(i64, T)> {
        self.row.filter(|(d, _)| from <= *d && *d <= to)
    }

    fn hist(&self) -> Option<&H> {
        self.hist.as_deref()
    }
}

impl PartialEq for DayLedger {
    /// Equal when every day's sums are, however much of each is still pending.
    fn eq(&self, o: &DayLedger) -> bool {
        self.daily(i64::MIN, i64::MAX).eq(o.daily(i64::MIN, i64::MAX))
    }
}

impl Eq for DayLedger {}

impl DayLedger {
    /// Bytes of heap the history holds, as the allocator is asked for them (the user cache's
    /// budget, `store::cost`): one pass over the buckets, not over the days.
    pub fn heap_bytes(&self) -> usize {
        self.p.hist().map_or(0, |h| {
            size_of::<Hist>()
                + h.buckets.capacity() * size_of::<(i64, Arc<Bucket>)>()
                + h.spans.capacity() * size_of::<(i64, DaySums)>()
                + h.buckets
                    .iter()
                    .map(|(_, b)| 16 + size_of::<Bucket>() + b.days.capacity() * size_of::<(i64, Day)>())
                    .sum::<usize>()
        })
    }

    /// Adds `delta` to `day`; returns the day's new sums (the row storage keeps).
    pub fn add(&mut self, day: i64, delta: &DaySums) -> DaySums {
        self.p.row_mut(day, DaySums::default(), |h, d, s| h.add(d, &s)).add(delta);
        self.day(day)
    }

    /// The sums of one day.
    pub fn day(&self, day: i64) -> DaySums {
        let mut s = self.p.hist().map(|h| h.day(day)).unwrap_or_default();
        if let Some((_, p)) = self.p.within(day, day) {
            s.add(&p);
        }
        s
    }

    /// Sums over `[from, to]`.
    pub fn range(&self, from: i64, to: i64) -> DaySums {
        let mut s = self.p.hist().map(|h| h.range(from, to)).unwrap_or_default();
        if let Some((_, p)) = self.p.within(from, to) {
            s.add(&p);
        }
        s
    }

    /// The per-day sums of the days in `[from, to]` that have records, in day order.
    pub fn daily(&self, from: i64, to: i64) -> impl Iterator<Item = (i64, DaySums)> + '_ {
        let hist = self.p.hist().into_iter().flat_map(move |h| h.daily(from, to));
        with_pending(hist, self.p.within(from, to), |mut h, p| {
            h.add(&p);
            h
        })
    }
}

/// The rows of `hist` (in day order) with the pending row merged in at its day: beside them,
/// or `combine`d with the history's row of the same day.
fn with_pending<T: Copy>(
    hist: impl Iterator<Item = (i64, T)>,
    mut pending: Option<(i64, T)>,
    combine: impl Fn(T, T) -> T,
) -> impl Iterator<Item = (i64, T)> {
    let mut hist = hist.peekable();
    std::iter::from_fn(move || match (hist.peek(), pending) {
        (Some(&(d, _)), Some((p, _))) if d < p => hist.next(),
        (Some(&(d, h)), Some((p, pv))) if d == p => {
            hist.next();
            pending = None;
            Some((d, combine(h, pv)))
        }
        (_, Some(p)) => {
            pending = None;
            Some(p)
        }
        (_, None) => hist.next(),
    })
}

/// The folded history of a [`DayLedger`].
#[derive(Debug, Clone, Default)]
struct Hist {
    buckets: Vec<(i64, Arc<Bucket>)>,
    spans: Vec<(i64, DaySums)>,
}

fn bucket_of(day: i64) -> i64 {
    day.div_euclid(BUCKET_DAYS)
}

fn span_of(day: i64) -> i64 {
    day.div_euclid(SPAN_DAYS)
}

impl Hist {
    fn add(&mut self, day: i64, delta: &DaySums) {
        slot(&mut self.spans, span_of(day)).add(delta);
        let b = Arc::make_mut(slot(&mut self.buckets, bucket_of(day)));
        b.total.add(delta);
        let i = match b.days.binary_search_by_key(&day, |e| e.0) {
            Ok(i) => i,
            Err(i) => {
                let base = if i == 0 { DaySums::default() } else { b.days[i - 1].1.cum };
                b.days.insert(i, (day, Day { sums: DaySums::default(), cum: base }));
                i
            }
        };
        for (_, d) in &mut b.days[i..] {
            d.cum.add(delta);
        }
        b.days[i].1.sums.add(delta);
    }

    fn day(&self, day: i64) -> DaySums {
        get(&self.buckets, bucket_of(day)).and_then(|b| get(&b.days, day)).map(|d| d.sums).unwrap_or_default()
    }

    fn range(&self, from: i64, to: i64) -> DaySums {
        let mut s = DaySums::default();
        if from > to {
            return s;
        }
        let (fs, ts) = (span_of(from), span_of(to));
        if fs == ts {
            return self.range_in_span(from, to);
        }
        s.add(&self.range_in_span(from, (fs + 1) * SPAN_DAYS - 1));
        for (_, v) in within(&self.spans, fs + 1, ts - 1) {
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
        for (_, b) in within(&self.buckets, fb + 1, tb - 1) {
            s.add(&b.total);
        }
        s.add(&self.range_in_bucket(tb, from, to));
        s
    }

    fn range_in_bucket(&self, b: i64, from: i64, to: i64) -> DaySums {
        match get(&self.buckets, b) {
            Some(bk) => bk.upto(to).minus(&bk.upto(from - 1)),
            None => DaySums::default(),
        }
    }

    fn daily(&self, from: i64, to: i64) -> impl Iterator<Item = (i64, DaySums)> + '_ {
        let bounds = (from <= to).then(|| (bucket_of(from), bucket_of(to)));
        bounds
            .into_iter()
            .flat_map(move |(fb, tb)| within(&self.buckets, fb, tb))
            .flat_map(move |(_, b)| within(&b.days, from, to).iter().map(|(d, s)| (*d, s.sums)))
    }
}

/// The last tracker row of one wall-clock day (only the latest row in a range is ever used).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackRow {
    pub amount_due_cents: i64,
    pub balance_cents: i64,
}

/// One bucket of tracker rows, in day order.
type TrackBucket = Vec<(i64, TrackRow)>;

/// Tracker rows of one grandchild-kind account, one per day, bucketed like [`DayLedger`], and,
/// like it, with the row of the day last written beside the shared history (every deposit into
/// a tracked envelope writes today's row).
#[derive(Debug, Clone, Default)]
pub struct TrackLog {
    p: Pending<TrackHist, TrackRow>,
}

impl PartialEq for TrackLog {
    fn eq(&self, o: &TrackLog) -> bool {
        self.range(i64::MIN, i64::MAX).eq(o.range(i64::MIN, i64::MAX))
    }
}

impl Eq for TrackLog {}

impl TrackLog {
    /// Bytes of heap the tracker rows hold (see [`DayLedger::heap_bytes`]).
    pub fn heap_bytes(&self) -> usize {
        self.p.hist().map_or(0, |h| {
            size_of::<TrackHist>()
                + h.buckets.capacity() * size_of::<(i64, Arc<TrackBucket>)>()
                + h.buckets
                    .iter()
                    .map(|(_, b)| 16 + size_of::<TrackBucket>() + b.capacity() * size_of::<(i64, TrackRow)>())
                    .sum::<usize>()
        })
    }

    pub fn insert(&mut self, day: i64, row: TrackRow) {
        *self.p.row_mut(day, row, |h, d, r| h.insert(d, r)) = row;
    }

    /// The latest row dated inside `[from, to]` (the pending row replaces its day's).
    pub fn latest(&self, from: i64, to: i64) -> Option<TrackRow> {
        match (self.p.hist().and_then(|h| h.latest(from, to)), self.p.within(from, to)) {
            (Some((d, r)), Some((p, _))) if d > p => Some(r),
            (_, Some((_, r))) => Some(r),
            (h, None) => h.map(|(_, r)| r),
        }
    }

    /// Every row dated inside `[from, to]`, in day order.
    pub fn range(&self, from: i64, to: i64) -> impl Iterator<Item = (i64, TrackRow)> + '_ {
        let hist = self.p.hist().into_iter().flat_map(move |h| h.range(from, to));
        // The pending row replaces its day's.
        with_pending(hist, self.p.within(from, to), |_, p| p)
    }
}

/// The folded history of a [`TrackLog`].
#[derive(Debug, Clone, Default)]
struct TrackHist {
    buckets: Vec<(i64, Arc<TrackBucket>)>,
}

impl TrackHist {
    fn insert(&mut self, day: i64, row: TrackRow) {
        let b = Arc::make_mut(slot(&mut self.buckets, bucket_of(day)));
        match b.binary_search_by_key(&day, |e| e.0) {
            Ok(i) => b[i].1 = row,
            Err(i) => b.insert(i, (day, row)),
        }
    }

    /// The latest row dated inside `[from, to]`, with its day. Every stored bucket holds a
    /// row, so at most the two edge buckets can miss before one answers.
    fn latest(&self, from: i64, to: i64) -> Option<(i64, TrackRow)> {
        if from > to {
            return None;
        }
        within(&self.buckets, bucket_of(from), bucket_of(to))
            .iter()
            .rev()
            .find_map(|(_, b)| within(b, from, to).last().copied())
    }

    fn range(&self, from: i64, to: i64) -> impl Iterator<Item = (i64, TrackRow)> + '_ {
        let bounds = (from <= to).then(|| (bucket_of(from), bucket_of(to)));
        bounds
            .into_iter()
            .flat_map(move |(fb, tb)| within(&self.buckets, fb, tb))
            .flat_map(move |(_, b)| within(b, from, to).iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn sums(v: i128) -> DaySums {
        DaySums { dep_user_cents: v, wd_user_cents: 2 * v, dep_all_cents: 3 * v, dep_alloc_cents: v + 1 }
    }

    /// `n` additions of `sums(v)`.
    fn times(v: i128, n: usize) -> DaySums {
        let mut s = DaySums::default();
        for _ in 0..n {
            s.add(&sums(v));
        }
        s
    }

    proptest! {
        /// Every range answer equals the sum over a plain day map, for days spread over decades
        /// and ranges that cross bucket and span edges.
        #[test]
        fn ranges_match_a_plain_day_map(
            adds in prop::collection::vec((prop_oneof![-20_000i64..20_000, -40i64..40], 1i128..1000), 0..200),
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
            // Some days spread wide, some few (so days come back after others: the pending row
            // then replaces one already in the history).
            rows in prop::collection::vec((prop_oneof![-5_000i64..5_000, -40i64..40], 0i64..100), 0..100),
            ranges in prop::collection::vec((-6_000i64..6_000, 0i64..8_000), 1..40),
        ) {
            let mut t = TrackLog::default();
            let mut plain = BTreeMap::new();
            for (day, v) in rows {
                let r = TrackRow { amount_due_cents: v, balance_cents: -v };
                t.insert(day, r);
                plain.insert(day, r);
            }
            for (day, r) in &plain {
                prop_assert_eq!(t.latest(*day, *day), Some(*r));
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
        l.add(5, &sums(1));
        let before = l.clone();
        l.add(6, &sums(1));
        // Day 5 went into the history: only its bucket was copied, every other is still shared.
        let (a, b) = (&l.p.hist().unwrap().buckets, &before.p.hist().unwrap().buckets);
        let shared = a.iter().zip(b).filter(|(a, b)| Arc::ptr_eq(&a.1, &b.1)).count();
        assert_eq!(shared, a.len() - 1);
        assert_eq!(l.day(5), times(1, 2));
    }

    #[test]
    fn tracker_rows_of_the_pending_day_copy_nothing() {
        let row = |v| TrackRow { amount_due_cents: v, balance_cents: v };
        let mut t = TrackLog::default();
        for day in 0..100 {
            t.insert(day, row(day));
        }
        let before = t.clone();
        t.insert(99, row(-1));
        t.insert(99, row(-2));
        assert!(Arc::ptr_eq(t.p.hist.as_ref().unwrap(), before.p.hist.as_ref().unwrap()));
        assert_eq!(t.latest(0, 99), Some(row(-2)));
        assert_eq!(before.latest(0, 99), Some(row(99)));
        t.insert(5, row(-5));
        assert_eq!(t.latest(99, 99), Some(row(-2)));
        assert_eq!(t.latest(0, 5), Some(row(-5)));
    }

    #[test]
    fn one_day_of_history_has_no_shared_part() {
        let mut l = DayLedger::default();
        let mut t = TrackLog::default();
        for _ in 0..3 {
            l.add(3, &sums(1));
            t.insert(3, TrackRow { amount_due_cents: 1, balance_cents: 2 });
        }
        assert!(l.p.hist.is_none() && t.p.hist.is_none());
        assert_eq!(l.range(0, 9), times(1, 3));
        l.add(4, &sums(1));
        t.insert(4, TrackRow { amount_due_cents: 1, balance_cents: 2 });
        assert!(l.p.hist.is_some() && t.p.hist.is_some());
    }

    #[test]
    fn writes_to_the_pending_day_copy_nothing() {
        let mut l = DayLedger::default();
        for day in 0..100 {
            l.add(day, &sums(1));
        }
        let before = l.clone();
        let mut l2 = l.clone();
        for _ in 0..3 {
            l2.add(99, &sums(1));
        }
        assert!(Arc::ptr_eq(l2.p.hist.as_ref().unwrap(), before.p.hist.as_ref().unwrap()));
        assert_eq!(l2.day(99), times(1, 4));
        assert_eq!(before.day(99), sums(1));
        let mut want = before.range(0, 99);
        want.add(&times(1, 3));
        assert_eq!(l2.range(0, 99), want);
        assert_ne!(l2, before);
        // Equal ledgers compare equal however much is pending.
        let mut folded = DayLedger::default();
        for day in (0..100).rev() {
            folded.add(day, &times(1, if day == 99 { 4 } else { 1 }));
        }
        assert_eq!(folded, l2);
    }
}
