//! The sled engine: the materialised state under the journal ([`super::journal`]). One sled
//! tree holds every row, so one operation's rows, with the journal sequence number they come
//! from, are one atomic `apply_batch`. Key layout and encoding (`codec`) stay inside.

use std::collections::{HashMap, HashSet};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::domain::engine::TxRecord;
use crate::domain::tree::{Account, AccountId, DaySums, TrackRow, Tree};
use crate::domain::txid::IdKey;

use super::codec::{self, decode, decode_compat, encode, Val};
use super::overlay::{successor, Row, RowKey, Rows};
use super::v1::AccountV1;
use super::writes::{row_writes, RowWrite};
use super::{IdemRecord, Op, StoreError, SyncRow, UserMeta, UserRecord};
use sled::IVec;

/// Most entries in one run (bounds the bytes a read of a few entries decodes).
const RUN_MAX: usize = 128;
/// Most value bytes joined into one run. Why: sled 0.34 splits a leaf only past 16 entries and
/// writes a page over a quarter of its 512 KiB segment to a file of its own (a blob), which
/// its flush never syncs; with runs of up to 128 records, leaves grew to 130-250 KB and every
/// rewrite of one created and deleted such a file (over 30 a second at 26k deposits/s). At
/// 4 KiB a full leaf of runs stays near half that limit.
const RUN_BYTES: usize = 4 << 10;

/// An open run: its first key, the next sequence number, the values it joins, their bytes.
type Run<'a> = (RowKey<'a>, u64, Vec<&'a Val>, usize);

/// The row of a finished run: a single row as it was, or a run row.
fn close_run(run: Option<Run<'_>>, out: &mut Vec<Row>) -> Result<(), StoreError> {
    if let Some((k, _, vals, _)) = run {
        let v = match vals.as_slice() {
            [one] => (*one).clone(),
            many => Val::Bytes(IVec::from(codec::encode_run(many.iter().copied())?)),
        };
        out.push((k.to_key(), Some(v)));
    }
    Ok(())
}

/// How long [`SledStore::close`] waits for sled to let go of its file lock.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub struct SledStore {
    db: sled::Db,
    id_secret: [u64; 2],
    /// sled's directory of blob files, and the blobs synced so far (see [`SledStore::flush`]);
    /// `None` until the first flush, which syncs the directory itself too.
    blobs: PathBuf,
    blobs_synced: parking_lot::Mutex<Option<HashSet<u64>>>,
}

/// Why sled 0.34 could not lock its file: it reports every failure alike ("could not acquire
/// lock"), so the lock is tried again here to tell a holder elsewhere from another cause.
fn lock_failure(path: &Path, e: std::io::Error) -> StoreError {
    let file = path.join("db");
    match try_lock(&file) {
        Err(p) if p.kind() == std::io::ErrorKind::WouldBlock => {
            StoreError::InUse { path: path.to_path_buf(), source: e }
        }
        Err(p) => StoreError::Io { op: "cannot lock", path: file, source: p },
        // Free again by now (the probe's lock goes with its file handle).
        Ok(()) => StoreError::LockFailed { file, source: e },
    }
}

/// Takes and at once lets go of the exclusive lock sled holds on `file`, its main file (the
/// probe's lock goes with its handle): `WouldBlock` while a handle elsewhere holds it.
fn try_lock(file: &Path) -> std::io::Result<()> {
    OpenOptions::new().read(true).write(true).open(file).and_then(|f| fs2::FileExt::try_lock_exclusive(&f))
}

/// Storage that cannot be opened or lost writes it once held: refuse to start, naming its files.
pub fn damaged(path: &Path, what: &str) -> StoreError {
    let mut files: Vec<String> = std::fs::read_dir(path)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path().display().to_string()).collect())
        .unwrap_or_default();
    files.sort();
    StoreError::Corrupt(format!(
        "storage in {} is damaged ({what}); files: {}; refusing to start rather than drop acknowledged writes",
        path.display(),
        files.join(", ")
    ))
}

/// A sled error, with what was asked of sled (kept whole: a full disk is told apart from a failed
/// sync, see `journal::Halt`).
pub(super) fn sled_err(op: &'static str) -> impl Fn(sled::Error) -> StoreError {
    move |source| StoreError::Sled { op, source }
}

impl SledStore {
    /// Opens (or creates) the database under `dir`, migrating an older format in place and
    /// refusing a newer one.
    pub fn open(dir: &Path) -> Result<SledStore, StoreError> {
        SledStore::open_with_cache(dir, None)
    }

    /// [`SledStore::open`] with a page cache of `cache` bytes (`None`: sled's default, 1 GiB).
    pub fn open_with_cache(dir: &Path, cache: Option<u64>) -> Result<SledStore, StoreError> {
        let path = dir.join("db");
        // sled 0.34 may panic on a damaged file instead of answering an error; either way the
        // message names the files, so an operator knows what to restore.
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let config = sled::Config::new();
            let config = match cache {
                Some(bytes) => config.cache_capacity(bytes),
                None => config,
            };
            config
                .path(&path)
                // The journal is the durability point: sled is flushed at checkpoints only,
                // not every 500 ms on its own.
                .flush_every_ms(None)
                .mode(sled::Mode::HighThroughput)
                .open()
        }));
        let db = match opened {
            Ok(Ok(db)) => db,
            // sled 0.34 reports a lock held elsewhere as an error of kind `Other` that only its
            // message tells apart.
            Ok(Err(sled::Error::Io(e)))
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.to_string().contains("could not acquire lock") =>
            {
                return Err(lock_failure(&path, e))
            }
            Ok(Err(e)) => return Err(damaged(&path, &e.to_string())),
            Err(_) => return Err(damaged(&path, "sled panicked while opening it")),
        };
        let mut store = SledStore {
            db,
            id_secret: [0; 2],
            blobs: path.join("blobs"),
            blobs_synced: parking_lot::Mutex::new(None),
        };
        // sled creates its directory and files without syncing their names: a fresh database
        // would vanish whole at a power cut, whatever its own syncs made durable.
        let syncing = |p: &Path, source| StoreError::Io { op: "syncing", path: p.to_path_buf(), source };
        super::sync_path(&path).map_err(|e| syncing(&path, e))?;
        super::sync_parent(&path).map_err(|e| syncing(path.parent().unwrap_or(Path::new(".")), e))?;
        store.check_format(&path)?;
        store.id_secret = store.load_id_secret()?;
        Ok(store)
    }

    /// The database's id secret, made (and flushed) on first use. A directory of an earlier
    /// binary has none: its generated ids were random and indexed, and stay so.
    fn load_id_secret(&self) -> Result<[u64; 2], StoreError> {
        let parse = |v: &[u8]| -> Option<[u64; 2]> {
            let a = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
            let b = u64::from_be_bytes(v.get(8..16)?.try_into().ok()?);
            Some([a, b])
        };
        if let Some(v) = self.db.get(codec::META_ID_SECRET).map_err(sled_err("get id secret"))? {
            return parse(&v).ok_or_else(|| StoreError::Corrupt("bad id secret row".into()));
        }
        let mut fresh = [0u8; 16];
        getrandom::fill(&mut fresh).map_err(StoreError::Random)?;
        // Another writer cannot race this (sled holds the directory's lock), but keep whatever
        // is there should it ever be set already.
        let _ = self
            .db
            .compare_and_swap(codec::META_ID_SECRET, None as Option<&[u8]>, Some(&fresh[..]))
            .map_err(sled_err("store id secret"))?;
        self.db.flush().map_err(sled_err("flush"))?;
        let v = self.db.get(codec::META_ID_SECRET).map_err(sled_err("get id secret"))?;
        v.as_deref().and_then(parse).ok_or_else(|| StoreError::Corrupt("id secret not stored".into()))
    }

    /// The secret generated transaction ids are derived under.
    pub fn id_secret(&self) -> [u64; 2] {
        self.id_secret
    }

    fn check_format(&self, path: &Path) -> Result<(), StoreError> {
        let stored = self
            .db
            .get(codec::META_FORMAT)
            .map_err(sled_err("get format marker"))?
            .map(|v| v.first().copied().unwrap_or(0));
        match stored {
            Some(v) if v == codec::FORMAT => Ok(()),
            Some(v) if v > codec::FORMAT => Err(StoreError::NewerFormat(format!(
                "{} has storage format {v}, newer than this binary's {}: upgrade pfm",
                path.display(),
                codec::FORMAT
            ))),
            // No marker: a new directory, or one written by format 1 (which had no marker). An
            // older marker (2, 3): no format 1 row is found, only the marker moves.
            _ => {
                let migrated = self.migrate_v1()?;
                if migrated > 0 {
                    tracing::info!(accounts = migrated, path = %path.display(), "migrated storage format 1 to 2");
                }
                self.db
                    .insert(codec::META_FORMAT, &[codec::FORMAT])
                    .map_err(sled_err("store format marker"))?;
                self.db.flush().map_err(sled_err("flush"))?;
                Ok(())
            }
        }
    }

    /// Rewrites every format 1 account row as an account row plus day and tracker rows, one
    /// account per atomic batch; rows already migrated (format 2) are skipped, so an interrupted
    /// migration simply resumes.
    fn migrate_v1(&self) -> Result<usize, StoreError> {
        let mut n = 0;
        for kv in self.db.scan_prefix([codec::ACCOUNT]) {
            let (k, v) = kv.map_err(sled_err("scan format 1 accounts"))?;
            if v.first() != Some(&codec::FORMAT_V1) {
                continue;
            }
            let user_no = k.get(1..9).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
            let user_no = user_no.ok_or_else(|| StoreError::Corrupt(format!("bad account key {k:?}")))?;
            let m = codec::decode_v1::<AccountV1>(&v)?.migrate();
            let mut batch = sled::Batch::default();
            let id = m.account.uuid;
            for (day, sums) in &m.days {
                batch.insert(&*codec::day_key(codec::DAY, user_no, id, *day), encode(sums)?);
            }
            for (day, row) in &m.track {
                batch.insert(&*codec::day_key(codec::TRACK, user_no, id, *day), encode(row)?);
            }
            batch.insert(k, encode(&m.account)?);
            self.db.apply_batch(batch).map_err(sled_err("write migrated account"))?;
            n += 1;
        }
        Ok(n)
    }

    /// The journal sequence number of the last operation applied.
    pub fn applied_seq(&self) -> Result<u64, StoreError> {
        Ok(self
            .db
            .get(codec::META_APPLIED)
            .map_err(sled_err("get applied sequence number"))?
            .and_then(|v| v.as_ref().try_into().ok().map(u64::from_be_bytes))
            .unwrap_or(0))
    }

    /// The rows as they are in sled, for reads through the memtables.
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// Writes rows as one atomic batch, with the journal record they reach if `seq` is given.
    pub fn apply_rows<'a>(
        &self,
        rows: impl Iterator<Item = (&'a [u8], Option<&'a Val>)>,
        seq: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut b = sled::Batch::default();
        for (k, v) in rows {
            match v {
                Some(v) => b.insert(k, v.to_ivec()),
                None => b.remove(k),
            }
        }
        if let Some(s) = seq {
            b.insert(codec::META_APPLIED, &s.to_be_bytes());
        }
        self.db.apply_batch(b).map_err(sled_err("write rows"))
    }

    /// Writes a memtable's rows in batches of `chunk` rows, consecutive single log records of
    /// one account, and change rows of one user, joined into runs (fewer, larger rows: a new
    /// key costs sled far more than its bytes); the last batch carries journal record
    /// `last_seq`. Not atomic as a whole: a restart replays the journal from the previous
    /// table's record.
    pub fn write_table<'a>(
        &self,
        rows: impl Iterator<Item = (RowKey<'a>, &'a Option<Val>)>,
        last_seq: u64,
        chunk: usize,
        mut pace: impl FnMut(),
    ) -> Result<(), StoreError> {
        let mut out: Vec<Row> = Vec::with_capacity(chunk);
        let mut run: Option<Run<'a>> = None;
        for (i, (k, v)) in rows.enumerate() {
            if i % 256 == 255 {
                pace();
            }
            let single = match (v, k.suffix) {
                (Some(v), Some(seq)) if codec::runs_join(k.prefix) && v.first() != Some(codec::RUN) => {
                    Some((v, seq))
                }
                _ => None,
            };
            if let Some((v, seq)) = single {
                if let Some((first, next, vals, bytes)) = &mut run {
                    if first.prefix == k.prefix
                        && *next == seq
                        && vals.len() < RUN_MAX
                        && *bytes + v.len() <= RUN_BYTES
                    {
                        vals.push(v);
                        *next += 1;
                        *bytes += v.len();
                        continue;
                    }
                }
                close_run(run.take(), &mut out)?;
                run = Some((k, seq + 1, vec![v], v.len()));
            } else {
                close_run(run.take(), &mut out)?;
                out.push((k.to_key(), v.clone()));
            }
            if out.len() >= chunk {
                self.apply_rows(out.iter().map(|(k, v)| (&**k, v.as_ref())), None)?;
                out.clear();
                pace();
            }
        }
        close_run(run, &mut out)?;
        self.apply_rows(out.iter().map(|(k, v)| (&**k, v.as_ref())), Some(last_seq))?;
        self.flush()
    }

    /// Drops the handle, then waits (at most `CLOSE_WAIT`) until sled's file lock is free: sled's
    /// I/O threads let go of the file a moment after the handle goes, and whoever opens the
    /// directory next in this process (a restart, a reopen after a failed checkpoint) needs it.
    pub fn close(self) {
        let file = self.blobs.with_file_name("db");
        drop(self);
        let deadline = std::time::Instant::now() + CLOSE_WAIT;
        loop {
            match try_lock(&file) {
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(2))
                }
                // Free, gone, or still held past the wait.
                _ => return,
            }
        }
    }

    /// Makes everything applied so far durable in sled, blob files included: sled 0.34's own
    /// flush syncs only its main file, not the files it writes large pages to (`blobs/<lsn>`,
    /// see [`RUN_BYTES`]), nor their directory entries, which a power loss after a checkpoint
    /// let the journal go would take.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map_err(sled_err("flush"))?;
        self.sync_blobs()
    }

    fn sync_blobs(&self) -> Result<(), StoreError> {
        let fail =
            |p: &Path, e: std::io::Error| StoreError::Io { op: "syncing", path: p.to_path_buf(), source: e };
        let mut synced = self.blobs_synced.lock();
        let entries = match std::fs::read_dir(&self.blobs) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(fail(&self.blobs, e)),
        };
        let mut now = HashSet::new();
        let mut fresh = false;
        for e in entries {
            let e = e.map_err(|e| fail(&self.blobs, e))?;
            let Some(n) = e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) else { continue };
            if !synced.as_ref().is_some_and(|s| s.contains(&n)) {
                match super::sync_path(&e.path()) {
                    Ok(()) => fresh = true,
                    // Collected by sled meanwhile: nothing of it is needed.
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(err) => return Err(fail(&e.path(), err)),
                }
            }
            now.insert(n);
        }
        // New entries need their directory synced; the first time, the directory's own too.
        let first = synced.is_none();
        if fresh || first {
            let dirs = [Some(self.blobs.as_path()), self.blobs.parent().filter(|_| first)];
            for d in dirs.into_iter().flatten() {
                super::sync_path(d).map_err(|e| fail(d, e))?;
            }
        }
        *synced = Some(now);
        Ok(())
    }

    /// A user number never used before (+1 so that 0 never is one).
    pub fn new_user_no(&self) -> Result<u64, StoreError> {
        self.db.generate_id().map(|n| n + 1).map_err(sled_err("generate user number"))
    }
}

/// Records `from..to` of an account's log.
pub fn read_log(
    r: &dyn Rows,
    user_no: u64,
    acc: AccountId,
    from: u64,
    to: u64,
) -> Result<Vec<TxRecord>, StoreError> {
    let mut recs: Vec<TxRecord> =
        read_runs(r, &codec::account_prefix(codec::LOG, user_no, acc), from, to, usize::MAX)?;
    if from < to {
        let (lo, hi) = (codec::note_key(user_no, acc, from), codec::note_key(user_no, acc, to));
        for (k, v) in r.range_rows(&lo, Some(&hi), false, usize::MAX)? {
            let seq = k
                .get(25..33)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
                .ok_or_else(|| StoreError::Corrupt(format!("bad note key {k:?}")))?;
            if let Some(rec) = seq.checked_sub(from).and_then(|i| recs.get_mut(i as usize)) {
                rec.note = Some(Arc::new(decode(&v)?));
            }
        }
    }
    Ok(recs)
}

/// Entries `from..to` (at most `max`) of rows keyed by `prefix` + sequence number, single rows
/// or runs (written by checkpoints). An entry may be in both (a restart's replay writes single
/// rows over a checkpoint cut short): each sequence number is taken once.
fn read_runs<T: serde::de::DeserializeOwned>(
    r: &dyn Rows,
    prefix: &[u8],
    from: u64,
    to: u64,
    max: usize,
) -> Result<Vec<T>, StoreError> {
    if from >= to || max == 0 {
        return Ok(Vec::new());
    }
    let key = |seq: u64| {
        let mut k = prefix.to_vec();
        k.extend_from_slice(&seq.to_be_bytes());
        k
    };
    let end = key(to);
    let mut next = key(from);
    // A run that starts before `from` may reach into the range.
    let mut rows = r.range_rows(prefix, Some(&next), true, 1)?;
    let page = max.clamp(64, 4096);
    let mut out: std::collections::BTreeMap<u64, T> = std::collections::BTreeMap::new();
    loop {
        let more = r.range_rows(&next, Some(&end), false, page)?;
        let full = more.len() == page;
        if let Some((k, _)) = more.last() {
            next = k.to_vec();
            next.push(0);
        }
        rows.extend(more);
        for (k, v) in rows.drain(..) {
            let first =
                codec::run_key(&k).ok_or_else(|| StoreError::Corrupt(format!("bad run key {k:?}")))?.1;
            for (i, e) in codec::decode_run::<T>(&v)?.into_iter().enumerate() {
                let seq = first + i as u64;
                if (from..to).contains(&seq) {
                    out.entry(seq).or_insert(e);
                }
            }
        }
        if !full || out.len() >= max {
            return Ok(out.into_values().take(max).collect());
        }
    }
}

/// Users who need the service at `upto_secs` or before, at most `max`.
pub fn wake_users(r: &dyn Rows, upto_secs: i64, max: usize) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    for (k, v) in r.prefix_rows(&[codec::WAKE])? {
        if decode::<i64>(&v)? <= upto_secs {
            let id = std::str::from_utf8(&k[1..])
                .map_err(|_| StoreError::Corrupt(format!("bad wake key {k:?}")))?;
            out.push(id.to_string());
            if out.len() >= max {
                break;
            }
        }
    }
    Ok(out)
}

/// Every user id, in key order.
pub fn user_ids(r: &dyn Rows) -> Result<Vec<String>, StoreError> {
    r.prefix_rows(&[codec::USER])?
        .into_iter()
        .map(|(k, _)| {
            String::from_utf8(k[1..].to_vec()).map_err(|_| StoreError::Corrupt(format!("bad user key {k:?}")))
        })
        .collect()
}

/// The last change row's knowledge (one reverse seek) and every kept key of `user_no`.
pub fn load_meta(r: &dyn Rows, user_no: u64) -> Result<UserMeta, StoreError> {
    let prefix = codec::user_prefix(codec::CHANGE, user_no);
    let hi = successor(&prefix);
    let knowledge = match r.range_rows(&prefix, hi.as_deref(), true, 1)?.first() {
        Some((_, v)) => codec::decode_run::<SyncRow>(v)?.last().map_or(0, |c| c.knowledge),
        None => 0,
    };
    let mut idem = Vec::new();
    for (_, v) in r.prefix_rows(&codec::user_prefix(codec::IDEM, user_no))? {
        idem.push(decode::<IdemRecord>(&v)?);
    }
    Ok(UserMeta { knowledge, idem })
}

pub fn read_changes(
    r: &dyn Rows,
    user_no: u64,
    after: u64,
    upto: u64,
    max: usize,
) -> Result<Vec<SyncRow>, StoreError> {
    if after >= upto {
        return Ok(Vec::new());
    }
    read_runs(r, &codec::user_prefix(codec::CHANGE, user_no), after + 1, upto.saturating_add(1), max)
}

pub fn main_txid_exists(r: &dyn Rows, user_no: u64, id: &str) -> Result<bool, StoreError> {
    Ok(r.fetch(&codec::txid_key(user_no, id))?.is_some())
}

pub fn load_user(r: &dyn Rows, user_id: &str) -> Result<Option<(UserRecord, Tree)>, StoreError> {
    let Some(v) = r.fetch(&codec::user_key(user_id))? else {
        return Ok(None);
    };
    let user: UserRecord = decode_compat(&v)?;
    let no = user.user_no;
    let mut accounts: HashMap<AccountId, Account> = HashMap::new();
    for (_, v) in r.prefix_rows(&codec::user_prefix(codec::ACCOUNT, no))? {
        let a: Account = decode(&v)?;
        accounts.insert(a.uuid, a);
    }
    for (k, v) in r.prefix_rows(&codec::user_prefix(codec::DAY, no))? {
        let (acc, day) = codec::parse_day_key(&k).ok_or_else(|| StoreError::Corrupt("bad day key".into()))?;
        let sums: DaySums = decode(&v)?;
        if let Some(a) = accounts.get_mut(&acc) {
            a.days.add(day, &sums);
        }
    }
    for (k, v) in r.prefix_rows(&codec::user_prefix(codec::TRACK, no))? {
        let (acc, day) =
            codec::parse_day_key(&k).ok_or_else(|| StoreError::Corrupt("bad tracker key".into()))?;
        let row: TrackRow = decode(&v)?;
        if let Some(a) = accounts.get_mut(&acc) {
            a.track.insert(day, row);
        }
    }
    let mut docs = crate::domain::docs::Docs::new();
    let prefix = codec::user_prefix(codec::DOC, no);
    for (k, v) in r.prefix_rows(&prefix)? {
        let key = std::str::from_utf8(&k[prefix.len()..])
            .map_err(|_| StoreError::Corrupt(format!("bad setting key {k:?}")))?;
        docs.insert(key.into(), Arc::new(decode(&v)?));
    }
    let tree = Tree {
        root: user.root,
        accounts: accounts.into_iter().map(|(id, a)| (id, Arc::new(a))).collect(),
        ledger: user.ledger.clone(),
        id_key: None,
        docs: Arc::new(docs),
    };
    Ok(Some((user, tree)))
}

/// Whether writing `op` lists rows to find what to delete (so it must see every earlier row).
pub fn lists_rows(op: &Op) -> bool {
    match op {
        Op::DeleteUser { .. } => true,
        Op::Commit { change, .. } => !change.removed.is_empty(),
    }
}

thread_local! {
    /// Where a row is encoded before its bytes are copied into the one allocation its value
    /// keeps: an `IVec` made from a `Vec` copies it anyway, so a buffer per row was waste.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where each row value of a commit already sits, encoded, in the bytes of its journal record:
/// a value's row encoding is its version byte followed by exactly these bytes (bincode writes a
/// struct as its fields one after another), so the applier copies them instead of encoding the
/// same values a second time. Made by the journal's frame encoder; indices follow the change.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ValueSpans {
    pub user: std::ops::Range<usize>,
    /// The values of the change's accounts, records, day rows and tracker rows, in that order,
    /// in one list (one allocation where four lists were four); where each part starts follows
    /// from the change's own lengths.
    pub rows: Vec<std::ops::Range<usize>>,
    pub sync: Option<std::ops::Range<usize>>,
    pub idem_put: Option<std::ops::Range<usize>>,
}

/// A row's value: its encoded bytes in a journal record when there are some, else encoded now.
#[derive(Clone, Copy)]
struct Source<'a>(Option<(&'a Arc<Vec<u8>>, &'a ValueSpans)>);

impl Source<'_> {
    fn put<T: serde::Serialize>(
        &self,
        out: &mut Vec<Row>,
        k: codec::Key,
        v: &T,
        span: impl FnOnce(&ValueSpans) -> Option<&std::ops::Range<usize>>,
    ) -> Result<(), StoreError> {
        // A span missing or outside its record (an encoder bug) costs an encoding, not a row.
        match self.0.and_then(|(frame, spans)| Val::framed(frame, span(spans)?.clone())) {
            Some(framed) => {
                out.push((k, Some(framed)));
                Ok(())
            }
            None => put(out, k, v),
        }
    }
}

fn put<T: serde::Serialize>(out: &mut Vec<Row>, k: codec::Key, v: &T) -> Result<(), StoreError> {
    put_with(out, k, |b| codec::encode_into(v, b))
}

fn put_with(
    out: &mut Vec<Row>,
    k: codec::Key,
    fill: impl FnOnce(&mut Vec<u8>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let value = SCRATCH.with(|b| {
        let mut b = b.borrow_mut();
        b.clear();
        fill(&mut b)?;
        let value = Val::from(&b[..]);
        // One large row must not pin its buffer for the thread's life.
        if b.capacity() > 64 << 10 {
            *b = Vec::new();
        }
        Ok::<_, StoreError>(value)
    })?;
    out.push((k, Some(value)));
    Ok(())
}

/// The rows `op` writes and removes; rows to delete are found by listing them in `r`.
/// `id_secret` is the database's (see [`SledStore::id_secret`]).
pub fn rows_into(
    r: &dyn Rows,
    out: &mut Vec<Row>,
    op: &Op,
    id_secret: Option<[u64; 2]>,
) -> Result<(), StoreError> {
    rows_from(r, out, op, None, id_secret)
}

/// [`rows_into`], taking the values from `frame`, the operation's journal record, at `spans`.
pub fn rows_from_frame(
    r: &dyn Rows,
    out: &mut Vec<Row>,
    op: &Op,
    frame: &Arc<Vec<u8>>,
    spans: &ValueSpans,
    id_secret: Option<[u64; 2]>,
) -> Result<(), StoreError> {
    rows_from(r, out, op, Some((frame, spans)), id_secret)
}

fn rows_from(
    r: &dyn Rows,
    out: &mut Vec<Row>,
    op: &Op,
    encoded: Option<(&Arc<Vec<u8>>, &ValueSpans)>,
    id_secret: Option<[u64; 2]>,
) -> Result<(), StoreError> {
    let src = Source(encoded);
    let no = op.user().user_no;
    let key = id_secret.map(|s| IdKey::new(s, no));
    // Where the records', day rows' and tracker rows' values start in `ValueSpans::rows`.
    let (records, days, track) = match op {
        Op::Commit { change: c, .. } => {
            let records = c.accounts.len();
            (records, records + c.records.len(), records + c.records.len() + c.days.len())
        }
        Op::DeleteUser { .. } => (0, 0, 0),
    };
    row_writes(op, key.as_ref(), |w| match w {
        RowWrite::User(user) => src.put(out, codec::user_key(&user.user_id), user, |s| Some(&s.user)),
        RowWrite::Account { i, account } => {
            src.put(out, codec::account_key(no, account.uuid), account, |s| s.rows.get(i))
        }
        RowWrite::Record { i, acc, seq, rec } => {
            src.put(out, codec::log_key(no, acc, seq), rec, |s| s.rows.get(records + i))
        }
        // `new` needs no check here: this engine has one writer per user, whose check under the
        // user's lock (`WriteGuard::main_txid_exists`) is exact.
        RowWrite::Txid { id, .. } => {
            out.push((codec::txid_key(no, id), Some(Val::Bytes(IVec::default()))));
            Ok(())
        }
        RowWrite::Day { i, acc, day, sums } => {
            src.put(out, codec::day_key(codec::DAY, no, acc, day), sums, |s| s.rows.get(days + i))
        }
        RowWrite::Track { i, acc, day, row } => {
            src.put(out, codec::day_key(codec::TRACK, no, acc, day), row, |s| s.rows.get(track + i))
        }
        RowWrite::RemoveAccount(id) => {
            out.push((codec::account_key(no, id), None));
            // Log rows are single records or runs: their keys are listed, like day and tracker
            // rows (one per day with activity).
            remove_listed(
                r,
                out,
                [codec::LOG, codec::NOTE, codec::DAY, codec::TRACK].map(|t| codec::account_prefix(t, no, id)),
            )
        }
        RowWrite::Note { acc, seq, note } => put(out, codec::note_key(no, acc, seq), note),
        RowWrite::Doc { key, doc: Some(doc) } => put(out, codec::doc_key(no, key), doc),
        RowWrite::Wake { user_id, at_secs: Some(at) } => put(out, codec::wake_key(user_id), &at),
        RowWrite::Wake { user_id, at_secs: None } => {
            out.push((codec::wake_key(user_id), None));
            Ok(())
        }
        RowWrite::Doc { key, doc: None } => {
            out.push((codec::doc_key(no, key), None));
            Ok(())
        }
        RowWrite::Change(row) => src.put(out, codec::change_key(no, row.knowledge), row, |s| s.sync.as_ref()),
        RowWrite::IdemRemove(k) => {
            out.push((codec::idem_key(no, k), None));
            Ok(())
        }
        RowWrite::IdemPut(rec) => src.put(out, codec::idem_key(no, &rec.key), rec, |s| s.idem_put.as_ref()),
        RowWrite::RemoveUser(user) => {
            out.push((codec::user_key(&user.user_id), None));
            out.push((codec::wake_key(&user.user_id), None));
            remove_listed(r, out, codec::USER_TAGS.map(|t| codec::user_prefix(t, no)))
        }
    })
}

/// Removes every row under each of `prefixes`, found by listing them in `r`.
fn remove_listed<const N: usize>(
    r: &dyn Rows,
    out: &mut Vec<Row>,
    prefixes: [codec::Key; N],
) -> Result<(), StoreError> {
    for prefix in prefixes {
        for (k, _) in r.prefix_rows(&prefix)? {
            out.push((codec::Key::from(&*k), None));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::engine::Change;
    use crate::store::overlay::Overlay;

    /// A lock held elsewhere reads "in use"; any other failure says what it was.
    #[test]
    fn a_lock_failure_says_whether_the_database_is_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let sled_err = || std::io::Error::other("could not acquire lock");
        let store = SledStore::open(dir.path()).unwrap();
        let held = lock_failure(&dir.path().join("db"), sled_err());
        assert!(matches!(held, StoreError::InUse { .. }), "{held:?}");
        assert!(held.to_string().contains("is in use by another process"), "{held}");
        assert!(SledStore::open(dir.path()).err().unwrap().to_string().contains("in use"));
        // Closed, the directory's lock is free at once (a plain drop frees it a moment later).
        store.close();
        let free = lock_failure(&dir.path().join("db"), sled_err());
        assert!(matches!(free, StoreError::LockFailed { .. }), "{free:?}");
        assert!(free.to_string().contains("it is free now"), "{free}");
        let missing = lock_failure(&dir.path().join("nowhere"), sled_err()).to_string();
        assert!(missing.contains("cannot lock") && !missing.contains("in use"), "{missing}");
    }

    fn rec(n: u64) -> TxRecord {
        TxRecord {
            deposit: true,
            by: "User".into(),
            id: format!("t{n}").into(),
            channel: "c".into(),
            amount_cents: n as i64 + 1,
            balance_cents: 0,
            amount_due_cents: 0,
            overall_balance_cents: 0,
            date_secs: 0,
            note: None,
        }
    }

    fn ids(v: &[TxRecord]) -> Vec<String> {
        v.iter().map(|r| r.id.to_string()).collect()
    }

    fn want(seqs: std::ops::Range<u64>) -> Vec<String> {
        seqs.map(|n| format!("t{n}")).collect()
    }

    #[test]
    fn checkpoints_join_log_records_into_runs_that_read_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        let (no, a, b) = (7u64, 11u128, 12u128);
        let ov = Overlay::default();
        let mut rows: Vec<Row> = Vec::new();
        for n in 0..300 {
            rows.push((codec::log_key(no, a, n), Some(Val::from(&encode(&rec(n)).unwrap()[..]))));
        }
        // Account b's records sit in one journal record, as the applier stages them: each row
        // is the version byte then the record's bytes there.
        let mut frame = vec![0xEE; 3];
        let mut at = Vec::new();
        for n in 0..5 {
            let body = &encode(&rec(n)).unwrap()[1..];
            at.push(frame.len()..frame.len() + body.len());
            frame.extend_from_slice(body);
        }
        let frame = Arc::new(frame);
        for (n, r) in at.into_iter().enumerate() {
            rows.push((codec::log_key(no, b, n as u64), Val::framed(&frame, r)));
        }
        rows.push((codec::txid_key(no, "x"), Some(Val::Bytes(IVec::default()))));
        for k in 1..=300 {
            let c = SyncRow { knowledge: k, ..SyncRow::default() };
            rows.push((codec::change_key(no, k), Some(Val::from(&encode(&c).unwrap()[..]))));
        }
        ov.stage(rows, 9);
        let m = ov.freeze().unwrap();
        s.write_table(m.rows(), m.last_seq(), 50, || ()).unwrap();
        ov.release_frozen();
        assert_eq!(s.applied_seq().unwrap(), 9);
        // 300 records in runs of at most 128; account b's five in one run.
        assert_eq!(s.db.scan_prefix(codec::account_prefix(codec::LOG, no, a)).count(), 3);
        assert_eq!(s.db.scan_prefix(codec::account_prefix(codec::LOG, no, b)).count(), 1);
        let r: &dyn Rows = &s.db;
        assert_eq!(ids(&read_log(r, no, a, 0, 300).unwrap()), want(0..300));
        assert_eq!(ids(&read_log(r, no, a, 130, 140).unwrap()), want(130..140));
        assert_eq!(ids(&read_log(r, no, a, 250, 400).unwrap()), want(250..300));
        assert_eq!(ids(&read_log(r, no, b, 2, 3).unwrap()), want(2..3));
        assert!(read_log(r, no, a, 5, 5).unwrap().is_empty());
        assert!(main_txid_exists(r, no, "x").unwrap());
        // Change rows join into runs too; pages cross run boundaries.
        assert_eq!(s.db.scan_prefix(codec::user_prefix(codec::CHANGE, no)).count(), 3);
        let knows = |after, upto, max| -> Vec<u64> {
            read_changes(r, no, after, upto, max).unwrap().iter().map(|c| c.knowledge).collect()
        };
        assert_eq!(knows(0, 300, 10), (1..=10).collect::<Vec<_>>());
        assert_eq!(knows(125, 140, 100), (126..=140).collect::<Vec<_>>());
        assert_eq!(knows(100, 300, 1000), (101..=300).collect::<Vec<_>>());
        assert!(knows(300, 300, 10).is_empty());
        assert_eq!(load_meta(r, no).unwrap().knowledge, 300);
        // A checkpoint cut short before its last batch leaves runs whose records a restart's
        // replay writes again as single rows (on the runs' own keys too): each record is still
        // read once, in order.
        let singles: Vec<Row> = (128..300)
            .map(|n| (codec::log_key(no, a, n), Some(Val::from(&encode(&rec(n)).unwrap()[..]))))
            .collect();
        s.apply_rows(singles.iter().map(|(k, v)| (&**k, v.as_ref())), None).unwrap();
        assert_eq!(ids(&read_log(r, no, a, 120, 135).unwrap()), want(120..135));
        assert_eq!(ids(&read_log(r, no, a, 0, 300).unwrap()), want(0..300));
        // Removing the account lists its runs and singles and removes every one.
        let user = UserRecord {
            user_id: "u".into(),
            user_no: no,
            password_hash: None,
            role: "user".into(),
            created_at: 0,
            root: b,
            ledger: Default::default(),
        };
        let change = Change { removed: vec![(a, 300)], ..Change::default() };
        let op = Op::Commit { user, change, sync: None, idem: None };
        let mut out = Vec::new();
        rows_into(r, &mut out, &op, None).unwrap();
        s.apply_rows(out.iter().map(|(k, v)| (&**k, v.as_ref())), None).unwrap();
        assert!(read_log(r, no, a, 0, 300).unwrap().is_empty());
        assert_eq!(s.db.scan_prefix(codec::account_prefix(codec::LOG, no, a)).count(), 0);
        assert_eq!(ids(&read_log(r, no, b, 0, 5).unwrap()), want(0..5));
    }

    /// Runs stop at `RUN_BYTES`, so sled keeps every page in its own log, which its flush
    /// syncs, and writes no blob files (which it never syncs).
    #[test]
    fn runs_stay_small_enough_that_sled_writes_no_blob_files() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        let (no, a) = (3u64, 5u128);
        let long = |n: u64| TxRecord { channel: "x".repeat(300).into(), ..rec(n) };
        let ov = Overlay::default();
        let rows: Vec<Row> = (0..4096)
            .map(|n| (codec::log_key(no, a, n), Some(Val::from(&encode(&long(n)).unwrap()[..]))))
            .collect();
        let one = rows[0].1.as_ref().unwrap().len();
        ov.stage(rows, 1);
        let m = ov.freeze().unwrap();
        s.write_table(m.rows(), m.last_seq(), 512, || ()).unwrap();
        let sizes: Vec<usize> =
            s.db.scan_prefix(codec::account_prefix(codec::LOG, no, a)).map(|r| r.unwrap().1.len()).collect();
        assert!(sizes.len() > 4096 * one / RUN_BYTES, "{} runs", sizes.len());
        assert!(sizes.iter().all(|&n| n <= RUN_BYTES + 64), "{sizes:?}");
        let blobs = std::fs::read_dir(dir.path().join("db").join("blobs")).map_or(0, |d| d.count());
        assert_eq!(blobs, 0, "sled wrote blob files");
        assert_eq!(ids(&read_log(&s.db, no, a, 0, 4096).unwrap()), want(0..4096));
    }

    /// A flush syncs each blob file once, forgets the ones sled collected, and skips names
    /// that are not sled's.
    #[test]
    fn a_flush_syncs_the_blob_files_written_since_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        let blobs = dir.path().join("db").join("blobs");
        std::fs::create_dir_all(&blobs).unwrap();
        let synced = || {
            let mut v: Vec<u64> = s.blobs_synced.lock().iter().flatten().copied().collect();
            v.sort();
            v
        };
        for name in ["12", "40", "notes.txt"] {
            std::fs::write(blobs.join(name), b"x").unwrap();
        }
        s.flush().unwrap();
        assert_eq!(synced(), [12, 40]);
        std::fs::write(blobs.join("41"), b"x").unwrap();
        std::fs::remove_file(blobs.join("12")).unwrap();
        s.flush().unwrap();
        assert_eq!(synced(), [40, 41]);
    }

    #[test]
    fn older_markers_open_and_move_to_this_format_and_the_id_secret_stays() {
        // sled's background thread lets go of the directory's file lock a moment after the
        // handle is dropped: opening the same directory again waits for it.
        let open = |dir: &Path| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                match SledStore::open(dir) {
                    Err(e)
                        if e.to_string().contains("could not acquire lock")
                            && std::time::Instant::now() < deadline =>
                    {
                        std::thread::sleep(std::time::Duration::from_millis(10))
                    }
                    r => return r.unwrap(),
                }
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let secret = open(dir.path()).id_secret();
        for old in [codec::FORMAT_V2, codec::FORMAT_V3] {
            {
                let s = open(dir.path());
                s.db.insert(codec::META_FORMAT, &[old]).unwrap();
                s.db.flush().unwrap();
            }
            let s = open(dir.path());
            assert_eq!(s.db.get(codec::META_FORMAT).unwrap().as_deref(), Some(&[codec::FORMAT][..]));
            assert_eq!(s.id_secret(), secret);
        }
        assert_eq!(codec::FORMAT, codec::FORMAT_V4);
    }
}
