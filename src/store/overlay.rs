//! Rows applied but not yet written to sled: a memtable in front of it.
//!
//! Why: writing every operation's rows into sled as it becomes durable cost as much CPU as the
//! rest of a deposit together (a deposit rewrites the same user, account and day rows again and
//! again). The applier now puts rows here, the last value of a key replacing the earlier ones,
//! and a checkpoint writes the memtable into sled in large batches, once per key.
//!
//! Two memtables: the active one takes new rows; a checkpoint freezes it and writes the frozen
//! one into sled while the next one fills. A read looks at the active table, then the frozen
//! one, then sled. A reader copies what it needs of the tables under the lock and then reads
//! sled without it. The `epoch` moves whenever the layers change: when a table is frozen (sled
//! may then take rows newer than a reader's copy) and when a written table is dropped (its rows
//! then sit in sled only, joined into runs whose keys differ from the single rows a reader saw
//! one call earlier). A read that several calls make up starts again if the epoch moved.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use sled::IVec;

use super::codec::{self, Val};
use super::sled_store::sled_err;
use super::StoreError;

/// A row to write: key and new value, or `None` to remove it.
pub type Row = (codec::Key, Option<Val>);

/// Reading rows, from sled alone or through the memtables.
pub trait Rows {
    fn fetch(&self, key: &[u8]) -> Result<Option<IVec>, StoreError>;
    /// Rows with `lo <= key < hi` (`hi` `None`: to the end), in key order or reversed, at most
    /// `max` of them.
    fn range_rows(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        rev: bool,
        max: usize,
    ) -> Result<Vec<(IVec, IVec)>, StoreError>;

    fn prefix_rows(&self, prefix: &[u8]) -> Result<Vec<(IVec, IVec)>, StoreError> {
        let hi = successor(prefix);
        self.range_rows(prefix, hi.as_deref(), false, usize::MAX)
    }
}

/// The smallest key greater than every key starting with `prefix` (`None`: there is none).
pub fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut k = prefix.to_vec();
    while let Some(last) = k.pop() {
        if last < u8::MAX {
            k.push(last + 1);
            return Some(k);
        }
    }
    None
}

type KeyRange<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

fn bounds<'a>(lo: &'a [u8], hi: Option<&'a [u8]>) -> Option<KeyRange<'a>> {
    match hi {
        Some(h) if h <= lo => None,
        Some(h) => Some((Bound::Included(lo), Bound::Excluded(h))),
        None => Some((Bound::Included(lo), Bound::Unbounded)),
    }
}

impl Rows for sled::Db {
    fn fetch(&self, key: &[u8]) -> Result<Option<IVec>, StoreError> {
        sled::Tree::get(self, key).map_err(sled_err("get row"))
    }

    fn range_rows(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        rev: bool,
        max: usize,
    ) -> Result<Vec<(IVec, IVec)>, StoreError> {
        let Some(b) = bounds(lo, hi) else { return Ok(Vec::new()) };
        let it = self.range::<&[u8], _>(b);
        if rev {
            it.rev().take(max).map(|kv| kv.map_err(sled_err("read range"))).collect()
        } else {
            it.take(max).map(|kv| kv.map_err(sled_err("read range"))).collect()
        }
    }
}

/// A memtable row's key: its bucket's prefix, then, for keys that split
/// ([`codec::split_key`]), an 8-byte big-endian suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowKey<'a> {
    pub prefix: &'a [u8],
    pub suffix: Option<u64>,
}

impl RowKey<'_> {
    pub fn to_vec(&self) -> Vec<u8> {
        self.to_key().to_vec()
    }

    pub fn to_key(&self) -> codec::Key {
        let mut k = codec::Key::from(self.prefix);
        if let Some(s) = self.suffix {
            k.extend_from_slice(&s.to_be_bytes());
        }
        k
    }

    fn cmp_bytes(&self, other: &[u8]) -> std::cmp::Ordering {
        let s = self.suffix.map(u64::to_be_bytes);
        self.prefix.iter().chain(s.iter().flatten()).cmp(other.iter())
    }
}

/// The rows under one prefix. Why buckets: a memtable holds hundreds of thousands of log and
/// change rows, and one B-tree of whole keys made every insert a chain of cache misses through
/// heap-allocated keys. Per prefix (an account's log, a user's change rows) new rows almost
/// always come last, so an insert is a push onto a vector found in a small, warm map.
#[derive(Default)]
struct Bucket {
    /// The row whose key is the prefix itself (every key that does not split).
    whole: Option<Option<Val>>,
    /// Rows keyed prefix + suffix, sorted by suffix.
    tail: Vec<(u64, Option<Val>)>,
}

impl Bucket {
    /// Puts a row; returns the value it replaced, if the row was here.
    fn put(&mut self, suffix: u64, v: Option<Val>) -> Option<Option<Val>> {
        match self.tail.last_mut() {
            None => self.tail.push((suffix, v)),
            Some(last) if last.0 < suffix => self.tail.push((suffix, v)),
            Some(last) if last.0 == suffix => return Some(std::mem::replace(&mut last.1, v)),
            Some(_) => match self.tail.binary_search_by_key(&suffix, |e| e.0) {
                Ok(i) => return Some(std::mem::replace(&mut self.tail[i].1, v)),
                Err(i) => self.tail.insert(i, (suffix, v)),
            },
        }
        None
    }

    fn get(&self, suffix: Option<u64>) -> Option<&Option<Val>> {
        match suffix {
            None => self.whole.as_ref(),
            Some(s) => self.tail.binary_search_by_key(&s, |e| e.0).ok().map(|i| &self.tail[i].1),
        }
    }

    /// Its rows with keys `>= lo`, in key order, found by binary search: a range read that
    /// starts inside a long log (a page of transactions, the one record a derived id names)
    /// must not walk the rows before it.
    fn rows_from<'a>(
        &'a self,
        prefix: &'a [u8],
        lo: &[u8],
    ) -> impl Iterator<Item = (RowKey<'a>, &'a Option<Val>)> {
        let start = match lo.strip_prefix(prefix) {
            Some(rest) => self.tail.partition_point(|(s, _)| s.to_be_bytes().as_slice() < rest),
            // The prefix differs from `lo` before its end: every key here sorts wholly before
            // `lo`, or wholly after it.
            None if prefix < lo => self.tail.len(),
            None => 0,
        };
        let whole =
            self.whole.as_ref().filter(|_| prefix >= lo).map(|v| (RowKey { prefix, suffix: None }, v));
        whole
            .into_iter()
            .chain(self.tail[start..].iter().map(move |(s, v)| (RowKey { prefix, suffix: Some(*s) }, v)))
    }

    /// Its rows in key order: the whole row sorts before every longer key.
    fn rows<'a>(&'a self, prefix: &'a [u8]) -> impl Iterator<Item = (RowKey<'a>, &'a Option<Val>)> {
        let whole = self.whole.as_ref().map(|v| (RowKey { prefix, suffix: None }, v));
        whole.into_iter().chain(self.tail.iter().map(move |(s, v)| (RowKey { prefix, suffix: Some(*s) }, v)))
    }
}

fn split(k: &[u8]) -> (&[u8], Option<u64>) {
    match codec::split_key(k) {
        Some(n) => {
            let (p, s) = k.split_at(n);
            let mut b = [0u8; 8];
            b.copy_from_slice(s);
            (p, Some(u64::from_be_bytes(b)))
        }
        None => (k, None),
    }
}

#[derive(Default)]
pub struct Memtable {
    buckets: Vec<Bucket>,
    /// Buckets by prefix, for inserts and single reads (a hash: no chain of key comparisons;
    /// prefixes are made by the server, so a fast seeded hash is enough)...
    index: HashMap<Box<[u8]>, usize, foldhash::fast::RandomState>,
    /// ...and in key order, for ranges and checkpoints. A prefix is new only with a new user,
    /// account or tag, so this map changes rarely.
    order: BTreeMap<Box<[u8]>, usize>,
    /// Key and value bytes held, plus a fixed overhead per row (an estimate of the table's
    /// memory: a replaced value's bytes are given back).
    bytes: usize,
    /// The journal record the last rows came from.
    last_seq: u64,
}

impl Memtable {
    /// Every row, in key order.
    pub fn rows(&self) -> impl Iterator<Item = (RowKey<'_>, &Option<Val>)> {
        self.order.iter().flat_map(|(p, &i)| self.buckets[i].rows(p))
    }
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
    /// Frees the table a bucket at a time, calling `pace` between buckets (a table holds
    /// seconds of writes: freed at once it is a burst of work).
    pub fn drop_paced(mut self, mut pace: impl FnMut()) {
        self.index = HashMap::default();
        self.order = BTreeMap::new();
        while let Some(b) = self.buckets.pop() {
            drop(b);
            pace();
        }
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    fn insert(&mut self, k: &[u8], v: Option<Val>) {
        let len = |v: &Option<Val>| v.as_ref().map_or(0, Val::len);
        self.bytes += len(&v);
        let (p, s) = split(k);
        let i = match self.index.get(p) {
            Some(&i) => i,
            None => {
                let i = self.buckets.len();
                self.buckets.push(Bucket::default());
                self.index.insert(p.into(), i);
                self.order.insert(p.into(), i);
                i
            }
        };
        let b = &mut self.buckets[i];
        let replaced = match s {
            None => b.whole.replace(v),
            Some(s) => b.put(s, v),
        };
        // A replaced row gives its value's bytes back (an account or day row is rewritten by
        // every write to it): the count follows what the table holds, not how often it changed.
        match replaced {
            Some(old) => self.bytes = self.bytes.saturating_sub(len(&old)),
            None => self.bytes += k.len() + 32,
        }
    }

    fn get(&self, k: &[u8]) -> Option<&Option<Val>> {
        let (p, s) = split(k);
        self.buckets[*self.index.get(p)?].get(s)
    }

    /// Rows with `lo <= key < hi`, in key order. A bucket's keys all start with its prefix,
    /// and no prefix starts another bucket's (see [`codec::split_key`]), so the buckets to look
    /// at are the last one not after `lo` and those from `lo` up to `hi`.
    fn range<'a>(
        &'a self,
        lo: &'a [u8],
        hi: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (RowKey<'a>, &'a Option<Val>)> + 'a {
        let first = self.order.range::<[u8], _>((Bound::Unbounded, Bound::Included(lo))).next_back();
        let upper = match hi {
            None => Bound::Unbounded,
            Some(h) if h > lo => Bound::Excluded(h),
            // An empty range (BTreeMap's range refuses an inverted one).
            Some(_) => Bound::Included(lo),
        };
        let rest = self.order.range::<[u8], _>((Bound::Excluded(lo), upper));
        first
            .into_iter()
            .flat_map(move |(p, &i)| self.buckets[i].rows_from(p, lo))
            .chain(rest.flat_map(move |(p, &i)| self.buckets[i].rows(p)))
            .take_while(move |(k, _)| hi.is_none_or(|h| k.cmp_bytes(h).is_lt()))
    }
}

struct Tables {
    active: Memtable,
    frozen: Option<Arc<Memtable>>,
}

pub struct Overlay {
    tables: RwLock<Tables>,
    /// Moves each time a table is frozen (before it is written into sled) or dropped.
    epoch: AtomicU64,
}

impl Default for Overlay {
    fn default() -> Self {
        Overlay {
            tables: RwLock::new(Tables { active: Memtable::default(), frozen: None }),
            epoch: AtomicU64::new(0),
        }
    }
}

impl Overlay {
    /// Adds one operation's rows (journal record `seq`).
    pub fn stage(&self, rows: Vec<Row>, seq: u64) {
        let mut t = self.tables.write();
        for (k, v) in rows {
            t.active.insert(&k, v);
        }
        t.active.last_seq = t.active.last_seq.max(seq);
    }

    pub fn active_bytes(&self) -> usize {
        self.tables.read().active.bytes
    }

    pub fn has_frozen(&self) -> bool {
        self.tables.read().frozen.is_some()
    }

    /// Freezes the active table for writing into sled, if it holds rows and no frozen table is
    /// still being written.
    pub fn freeze(&self) -> Option<Arc<Memtable>> {
        let mut t = self.tables.write();
        if t.frozen.is_some() || t.active.is_empty() {
            return None;
        }
        let last_seq = t.active.last_seq;
        let m = Arc::new(std::mem::replace(&mut t.active, Memtable { last_seq, ..Memtable::default() }));
        t.frozen = Some(m.clone());
        self.epoch.fetch_add(1, Ordering::AcqRel);
        Some(m)
    }

    /// The frozen table is in sled (and flushed): reads no longer need it.
    pub fn release_frozen(&self) {
        let mut t = self.tables.write();
        t.frozen = None;
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Runs `f` against the memtables over `db`, again if a checkpoint raced with it.
    pub fn read<T>(
        &self,
        db: &sled::Db,
        f: impl Fn(&dyn Rows) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        loop {
            let v =
                Merged { ov: self, db, epoch: self.epoch.load(Ordering::Acquire), raced: Cell::new(false) };
            let r = f(&v);
            if !v.raced.get() {
                return r;
            }
        }
    }
}

struct Merged<'a> {
    ov: &'a Overlay,
    db: &'a sled::Db,
    epoch: u64,
    raced: Cell<bool>,
}

impl Merged<'_> {
    fn check(&self) {
        if self.ov.epoch.load(Ordering::Acquire) != self.epoch {
            self.raced.set(true);
        }
    }
}

impl Rows for Merged<'_> {
    fn fetch(&self, key: &[u8]) -> Result<Option<IVec>, StoreError> {
        {
            let t = self.ov.tables.read();
            self.check();
            if let Some(v) = t.active.get(key) {
                return Ok(v.as_ref().map(Val::to_ivec));
            }
            if let Some(v) = t.frozen.as_ref().and_then(|f| f.get(key)) {
                return Ok(v.as_ref().map(Val::to_ivec));
            }
        }
        let r = self.db.fetch(key);
        self.check();
        r
    }

    fn range_rows(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        rev: bool,
        max: usize,
    ) -> Result<Vec<(IVec, IVec)>, StoreError> {
        let Some(b) = bounds(lo, hi) else { return Ok(Vec::new()) };
        // The tables' rows in range, the active table's winning.
        // Values stay as the tables hold them (a reference each) until they are taken: a page of
        // a long log must not copy out every record in its range.
        let over: Vec<(Vec<u8>, Option<Val>)> = {
            let t = self.ov.tables.read();
            self.check();
            match &t.frozen {
                None => t.active.range(lo, hi).map(|(k, v)| (k.to_vec(), v.clone())).collect(),
                Some(f) => {
                    let mut m: BTreeMap<Vec<u8>, &Option<Val>> = BTreeMap::new();
                    for (k, v) in f.range(lo, hi).chain(t.active.range(lo, hi)) {
                        m.insert(k.to_vec(), v);
                    }
                    m.into_iter().map(|(k, v)| (k, v.clone())).collect()
                }
            }
        };
        let mut o: Box<dyn Iterator<Item = (Vec<u8>, Option<Val>)>> =
            if rev { Box::new(over.into_iter().rev()) } else { Box::new(over.into_iter()) };
        let it = self.db.range::<&[u8], _>(b);
        let mut s: Box<dyn Iterator<Item = sled::Result<(IVec, IVec)>>> =
            if rev { Box::new(it.rev()) } else { Box::new(it) };
        let mut out = Vec::new();
        let mut on = o.next();
        let mut sn = s.next().transpose().map_err(sled_err("read range"))?;
        while out.len() < max {
            let ord = match (&on, &sn) {
                (None, None) => break,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some((ok, _)), Some((sk, _))) => {
                    let c = ok.as_slice().cmp(sk.as_ref());
                    if rev {
                        c.reverse()
                    } else {
                        c
                    }
                }
            };
            // Equal keys: the table's row (or its removal) replaces sled's.
            if ord != std::cmp::Ordering::Less {
                let taken = sn.take();
                sn = s.next().transpose().map_err(sled_err("read range"))?;
                if ord == std::cmp::Ordering::Greater {
                    out.extend(taken);
                    continue;
                }
            }
            if let Some((k, Some(v))) = on.take() {
                out.push((IVec::from(k), v.to_ivec()));
            }
            on = o.next();
        }
        self.check();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn db() -> (tempfile::TempDir, sled::Db) {
        let d = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(d.path()).temporary(true).open().unwrap();
        (d, db)
    }

    fn keys(rows: &[(IVec, IVec)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        rows.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
    }

    fn put(k: &[u8], v: &[u8]) -> Row {
        (k.into(), Some(Val::from(v)))
    }

    #[test]
    fn a_table_is_freed_a_bucket_at_a_time() {
        let mut m = Memtable::default();
        for acc in 1..=3 {
            for seq in 0..4 {
                m.insert(&codec::log_key(7, acc, seq), Some(Val::from(&[9u8; 40][..])));
            }
        }
        m.insert(&codec::account_key(7, 1), Some(Val::from(&[1u8; 40][..])));
        let buckets = m.buckets.len();
        assert!(buckets >= 4, "{buckets}");
        let mut paces = 0;
        m.drop_paced(|| paces += 1);
        assert_eq!(paces, buckets);
    }

    /// The size that decides when a table is written follows what it holds: rewriting a row
    /// (an account's row changes with every write to it) does not grow it.
    #[test]
    fn rewriting_a_row_counts_its_bytes_once() {
        let mut m = Memtable::default();
        let acc = codec::account_key(7, 1);
        m.insert(&acc, Some(Val::from(&[1u8; 100][..])));
        let one = m.bytes();
        assert!(one >= 100 + acc.len());
        for _ in 0..10 {
            m.insert(&acc, Some(Val::from(&[2u8; 100][..])));
        }
        assert_eq!(m.bytes(), one);
        m.insert(&acc, Some(Val::from(&[3u8; 150][..])));
        assert_eq!(m.bytes(), one + 50);
        m.insert(&acc, None);
        assert_eq!(m.bytes(), one - 100);
        // Rows under one prefix (log records): each new one adds, a rewritten one does not.
        let before = m.bytes();
        for seq in 0..3 {
            m.insert(&codec::log_key(7, 1, seq), Some(Val::from(&[4u8; 40][..])));
        }
        let three = m.bytes();
        assert!(three >= before + 3 * 40);
        m.insert(&codec::log_key(7, 1, 1), Some(Val::from(&[5u8; 40][..])));
        assert_eq!(m.bytes(), three);
    }

    #[test]
    fn tables_replace_and_remove_sled_rows_in_both_directions() {
        let (_d, db) = db();
        for k in [b"a1", b"a3", b"a5", b"b1"] {
            db.insert(k, &b"sled"[..]).unwrap();
        }
        let ov = Overlay::default();
        ov.stage(vec![put(b"a2", b"t1"), put(b"a3", b"t1"), (b"a5"[..].into(), None)], 1);
        assert!(ov.freeze().is_some());
        ov.stage(vec![put(b"a3", b"t2"), put(b"a4", b"t2"), (b"a2"[..].into(), None)], 2);
        let fwd = ov.read(&db, |r| r.prefix_rows(b"a")).unwrap();
        let want = vec![
            (b"a1".to_vec(), b"sled".to_vec()),
            (b"a3".to_vec(), b"t2".to_vec()),
            (b"a4".to_vec(), b"t2".to_vec()),
        ];
        assert_eq!(keys(&fwd), want);
        let rev = ov.read(&db, |r| r.range_rows(b"a", Some(b"b"), true, 2)).unwrap();
        assert_eq!(keys(&rev), vec![want[2].clone(), want[1].clone()]);
        assert_eq!(ov.read(&db, |r| r.fetch(b"a5")).unwrap(), None);
        assert_eq!(ov.read(&db, |r| r.fetch(b"a3")).unwrap().as_deref(), Some(&b"t2"[..]));
        assert_eq!(ov.read(&db, |r| r.fetch(b"a1")).unwrap().as_deref(), Some(&b"sled"[..]));
        assert!(ov.read(&db, |r| r.range_rows(b"b", Some(b"a"), false, 9)).unwrap().is_empty());
    }

    #[test]
    fn a_read_racing_a_freeze_starts_again() {
        let (_d, db) = db();
        let ov = Overlay::default();
        ov.stage(vec![put(b"k", b"1")], 1);
        let runs = Cell::new(0);
        let v = ov
            .read(&db, |r| {
                runs.set(runs.get() + 1);
                if runs.get() == 1 {
                    // A checkpoint freezes a table between this read's table copy and its sled read.
                    ov.freeze();
                }
                r.fetch(b"k")
            })
            .unwrap();
        assert_eq!(runs.get(), 2);
        assert_eq!(v.as_deref(), Some(&b"1"[..]));
    }

    #[test]
    fn a_read_across_a_dropped_table_starts_again() {
        let (_d, db) = db();
        let ov = Overlay::default();
        ov.stage(vec![put(b"k1", b"1"), put(b"k2", b"2")], 1);
        let m = ov.freeze().unwrap();
        for (k, v) in m.rows() {
            db.insert(k.to_vec(), v.as_ref().unwrap().to_ivec()).unwrap();
        }
        let runs = Cell::new(0);
        let v = ov
            .read(&db, |r| {
                runs.set(runs.get() + 1);
                let first = r.fetch(b"k1")?;
                if runs.get() == 1 {
                    // The checkpoint finishes between two calls of one read.
                    ov.release_frozen();
                }
                Ok((first, r.fetch(b"k2")?))
            })
            .unwrap();
        assert_eq!(runs.get(), 2);
        assert_eq!((v.0.as_deref(), v.1.as_deref()), (Some(&b"1"[..]), Some(&b"2"[..])));
    }

    /// A key of every shape the engine writes, from a few small numbers (so that keys collide).
    fn any_key() -> impl Strategy<Value = Vec<u8>> {
        (0u8..8, 1u64..4, 1u128..4, 0u64..12).prop_map(|(shape, u, a, n)| {
            let k = match shape {
                0 => codec::log_key(u, a, n),
                1 => codec::change_key(u, n),
                2 => codec::day_key(codec::DAY, u, a, n as i64 - 6),
                3 => codec::day_key(codec::TRACK, u, a, n as i64),
                4 => codec::account_key(u, a),
                5 => codec::txid_key(u, &format!("id{n}")),
                6 => codec::user_key(&format!("user{n}")),
                // Keys of 30 to 41 bytes: on both sides of `codec::Key`'s inline size.
                _ => codec::user_key(&"u".repeat(29 + n as usize)),
            };
            k.to_vec()
        })
    }

    /// Range bounds as the readers build them: whole keys, prefixes of keys (a user's or an
    /// account's rows) and a key followed by a zero byte (the first key after it).
    fn any_bound() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any_key(),
            (any_key(), 1usize..34).prop_map(|(k, n)| k[..n.min(k.len())].to_vec()),
            any_key().prop_map(|mut k| {
                k.push(0);
                k
            }),
        ]
    }

    proptest! {
        /// The bucketed memtable answers exactly what one ordered map of whole keys would: every
        /// row in order, single rows, and ranges with any bounds.
        #[test]
        fn buckets_keep_whole_key_order(
            puts in proptest::collection::vec((any_key(), proptest::option::of(0u8..255)), 0..200),
            bounds in proptest::collection::vec((any_bound(), any_bound()), 1..20),
        ) {
            let mut m = Memtable::default();
            let mut want: BTreeMap<Vec<u8>, Option<Val>> = BTreeMap::new();
            for (k, v) in &puts {
                let v = v.map(|b| Val::from(&[b][..]));
                m.insert(k, v.clone());
                want.insert(k.clone(), v);
            }
            let got: Vec<_> = m.rows().map(|(k, v)| (k.to_vec(), v.clone())).collect();
            prop_assert_eq!(&got, &want.clone().into_iter().collect::<Vec<_>>());
            for (k, v) in &want {
                prop_assert_eq!(m.get(k), Some(v));
            }
            for (lo, hi) in &bounds {
                let (lo, hi) = (lo.min(hi), lo.max(hi));
                for hi in [Some(hi), None] {
                    let got: Vec<_> = m.range(lo, hi.map(|h| h.as_slice())).map(|(k, _)| k.to_vec()).collect();
                    let exp: Vec<_> = want
                        .keys()
                        .filter(|k| k.as_slice() >= lo.as_slice() && hi.is_none_or(|h| k < &h))
                        .cloned()
                        .collect();
                    prop_assert_eq!(got, exp);
                }
                prop_assert_eq!(m.get(lo), want.get(lo));
            }
        }
    }

    #[test]
    fn successor_of_a_prefix() {
        assert_eq!(successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(successor(&[1, 255]), Some(vec![2]));
        assert_eq!(successor(&[255, 255]), None);
    }
}
