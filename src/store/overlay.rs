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
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use sled::IVec;

use super::StoreError;

/// A row to write: key and new value, or `None` to remove it.
pub type Row = (Vec<u8>, Option<IVec>);

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

fn eng(e: sled::Error) -> StoreError {
    StoreError::Engine(e.to_string())
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
        sled::Tree::get(self, key).map_err(eng)
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
            it.rev().take(max).map(|kv| kv.map_err(eng)).collect()
        } else {
            it.take(max).map(|kv| kv.map_err(eng)).collect()
        }
    }
}

#[derive(Default)]
pub struct Memtable {
    rows: BTreeMap<Vec<u8>, Option<IVec>>,
    /// Key and value bytes held (replaced values are not subtracted: an estimate that only errs
    /// towards checkpointing sooner).
    bytes: usize,
    /// The journal record the last rows came from.
    last_seq: u64,
}

impl Memtable {
    pub fn rows(&self) -> impl Iterator<Item = (&Vec<u8>, &Option<IVec>)> {
        self.rows.iter()
    }
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn last_seq(&self) -> u64 {
        self.last_seq
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
            t.active.bytes += k.len() + v.as_ref().map_or(0, |v| v.len()) + 32;
            t.active.rows.insert(k, v);
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
            if let Some(v) = t.active.rows.get(key) {
                return Ok(v.clone());
            }
            if let Some(v) = t.frozen.as_ref().and_then(|f| f.rows.get(key)) {
                return Ok(v.clone());
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
        let over: Vec<(Vec<u8>, Option<IVec>)> = {
            let t = self.ov.tables.read();
            self.check();
            match &t.frozen {
                None => t.active.rows.range::<[u8], _>(b).map(|(k, v)| (k.clone(), v.clone())).collect(),
                Some(f) => {
                    let mut m: BTreeMap<&[u8], &Option<IVec>> = BTreeMap::new();
                    for (k, v) in f.rows.range::<[u8], _>(b).chain(t.active.rows.range::<[u8], _>(b)) {
                        m.insert(k.as_slice(), v);
                    }
                    m.into_iter().map(|(k, v)| (k.to_vec(), v.clone())).collect()
                }
            }
        };
        let mut o: Box<dyn Iterator<Item = (Vec<u8>, Option<IVec>)>> =
            if rev { Box::new(over.into_iter().rev()) } else { Box::new(over.into_iter()) };
        let it = self.db.range::<&[u8], _>(b);
        let mut s: Box<dyn Iterator<Item = sled::Result<(IVec, IVec)>>> =
            if rev { Box::new(it.rev()) } else { Box::new(it) };
        let mut out = Vec::new();
        let mut on = o.next();
        let mut sn = s.next().transpose().map_err(eng)?;
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
                sn = s.next().transpose().map_err(eng)?;
                if ord == std::cmp::Ordering::Greater {
                    out.extend(taken);
                    continue;
                }
            }
            if let Some((k, Some(v))) = on.take() {
                out.push((IVec::from(k), v));
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

    fn db() -> (tempfile::TempDir, sled::Db) {
        let d = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(d.path()).temporary(true).open().unwrap();
        (d, db)
    }

    fn keys(rows: &[(IVec, IVec)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        rows.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
    }

    fn put(k: &[u8], v: &[u8]) -> Row {
        (k.to_vec(), Some(IVec::from(v)))
    }

    #[test]
    fn tables_replace_and_remove_sled_rows_in_both_directions() {
        let (_d, db) = db();
        for k in [b"a1", b"a3", b"a5", b"b1"] {
            db.insert(k, &b"sled"[..]).unwrap();
        }
        let ov = Overlay::default();
        ov.stage(vec![put(b"a2", b"t1"), put(b"a3", b"t1"), (b"a5".to_vec(), None)], 1);
        assert!(ov.freeze().is_some());
        ov.stage(vec![put(b"a3", b"t2"), put(b"a4", b"t2"), (b"a2".to_vec(), None)], 2);
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
            db.insert(k.as_slice(), v.clone().unwrap()).unwrap();
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

    #[test]
    fn successor_of_a_prefix() {
        assert_eq!(successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(successor(&[1, 255]), Some(vec![2]));
        assert_eq!(successor(&[255, 255]), None);
    }
}
