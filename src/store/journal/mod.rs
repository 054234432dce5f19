//! The embedded engine's durability point: a group-committed, checksummed, append-only journal,
//! with sled as the materialised state behind it.
//!
//! Why: sled's own flush costs about 200 us of CPU per write whatever the concurrency, which
//! capped durable writes far below what the disk allows. A journal append is one `write` and one
//! `fdatasync` shared by every operation waiting, like the raw baseline.
//!
//! The road of one operation:
//! 1. [`JournalStore::commit`] takes a sequence number and queues the operation, under one
//!    short lock, so queue order is sequence order.
//! 2. The journal thread takes everything queued, encodes it as checksummed frames, appends
//!    them, calls `fdatasync` once, and only then acknowledges each operation, in order.
//! 3. Right after answering a batch, the journal thread puts each operation's rows in a memtable
//!    ([`super::overlay`]); a batch with a deletion, which lists rows in storage, goes to the
//!    applier thread instead, with the batches after it until it is done (see `Lanes`).
//!    Every few seconds (or once it is large) the checkpoint thread writes the frozen table into
//!    sled in large batches (log records and change rows joined into runs), flushes sled, and
//!    deletes the journal segments that flush covers.
//! 4. At start, records after the checkpoint marker are applied again (replay).
//!
//! Reads of storage (a user's rows, a log, a transaction id) first wait until every operation
//! already acknowledged is staged, then read the tables over sled, so they never
//! miss an acknowledged write; transaction ids of operations queued but not yet staged are kept
//! in memory for the /deposit duplicate check. If an append or sync fails, the batch is cut off
//! the file again and fails, and every later operation computed from the same state (`basis`)
//! fails too.
//!
//! Frame: magic u32 | payload length u32 | sequence u64 | header crc32 | payload crc32 |
//! payload (format version byte + bincode of the operation + [`END`]), little-endian.
//!
//! Segments are zero-filled ahead of use under sustained writes (a spare is prepared in the
//! background): overwriting blocks that are already allocated and written lets `fdatasync`
//! write the data alone, not the file's size and block map, which about halved its latency and
//! its CPU here. The written part of a segment then ends where its zeros begin, and the frames
//! this binary writes end in a non-zero byte, so a record whose end lies in those zeros was
//! never whole on disk: a torn tail (etcd's WAL tells torn writes from damage the same way).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::domain::engine::TxRecord;
use crate::domain::tree::{AccountId, Text, Tree};

use super::bin::Bin;
use super::overlay::{Memtable, Overlay, Rows};
use super::sled_store::{self, SledStore, ValueSpans};
use super::{BoxFuture, Op, Store, StoreError, SyncRow, UserMeta, UserRecord, WriteTxn};

mod append;
mod applier;
mod checkpoint;
mod frame;
mod fs;
mod recovery;
#[cfg(test)]
mod sim;

use append::*;
use applier::*;
use checkpoint::*;
use frame::*;
use fs::{Disk, Fs, FsFile};
use recovery::*;

/// A segment is closed and a new one started past this size (the default of
/// `--journal-segment-bytes`).
pub const SEGMENT_BYTES: u64 = 64 << 20;
/// A spare segment is zero-filled only once the journal wrote this share of a segment into a
/// growing one (1/64: 1 MiB by default), so a server that sees a few writes never writes one.
const PREPARE_SHARE: u64 = 64;
/// The spare segment being zero-filled, in the journal directory (never read by replay).
const SPARE_NAME: &str = "spare.tmp";
/// A failed spare (too little free space, an I/O error) is tried again after this long.
const SPARE_RETRY: Duration = Duration::from_secs(10);
/// Bytes of zeros written between a spare segment's syncs: a journal sync waits behind what is
/// in flight. Measured at 128 connections, 15 s after 20 s of load, four runs each: syncs over
/// 5 ms were 27-54 at 8 MiB, 16-33 at 1 MiB.
const SPARE_SYNC_STEP: u64 = 1 << 20;
/// Most operations in one append + sync (bounds a batch's memory and latency).
const MAX_BATCH: usize = 4096;
/// Sled is written and flushed, and covered segments deleted, at least this often while writes
/// arrive (the default of `--checkpoint-interval-ms`)...
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);
/// ...or once this much journal was written since the last checkpoint.
const CHECKPOINT_BYTES: u64 = 128 << 20;
/// The memtable is frozen and written into sled once it holds this much...
const MEMTABLE_BYTES: usize = 128 << 20;
/// ...and the applier waits for the checkpoint when it holds this much while the previous table
/// is still being written (bounds memory when sled falls behind).
const MEMTABLE_HARD_BYTES: usize = 512 << 20;
/// Rows per sled batch when a frozen table is written.
const CHECKPOINT_CHUNK: usize = 2048;
/// A checkpoint rests this many times as long as it worked (see `Pace`).
const CHECKPOINT_PACE: u32 = 2;
/// Free space sled is given beyond twice a table's size before it is written (its snapshot and
/// segment overhead): sled must never meet a full disk.
const ROOM_TO_SPARE: u64 = 8 << 20;
/// Longest wait at shutdown for a checkpoint still running (the journal holds its rows anyway).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);
/// Longest wait of a read for the applier (a stalled applier is an engine error, not a hang).
const CATCH_UP_LIMIT: Duration = Duration::from_secs(10);
/// Longest pause between two attempts to bring a failed sled back.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// The operation is boxed: it is about half a KB, and an entry is moved from queue to batch to
/// applier.
struct Entry {
    seq: u64,
    basis: u64,
    /// The record, encoded by the journal thread (empty until then).
    frame: Vec<u8>,
    spans: Option<ValueSpans>,
    op: Box<Op>,
    ack: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
}

/// A durable operation on its way to the memtable, with its journal record (whose bytes hold
/// its row values, see [`ValueSpans`]).
struct Durable {
    seq: u64,
    op: Box<Op>,
    /// Shared: the memtable's rows keep their values inside it (`codec::Val`).
    frame: Arc<Vec<u8>>,
    spans: Option<ValueSpans>,
}

/// A batch to stage: operations now durable, and the highest sequence number handled (durable
/// or failed), so the staged watermark passes failed ones too.
struct Handled {
    durable: Vec<Durable>,
    last_seq: u64,
    journal_bytes: u64,
}

struct Submitter {
    next_seq: u64,
    tx: Option<Sender<Entry>>,
}

/// State shared by the store and its threads.
struct Shared {
    /// Where the journal's files live (the disk, or a simulated one in tests).
    fs: Arc<dyn Fs>,
    /// `None` only while the checkpoint thread reopens it after a failure.
    sled: parking_lot::RwLock<Option<SledStore>>,
    /// Rows applied but not yet written into sled.
    overlay: Overlay,
    /// sled's id secret (it never changes once made).
    id_secret: [u64; 2],
    /// The data directory (sled lives under it) and the journal directory.
    data_dir: PathBuf,
    dir: PathBuf,
    /// Highest sequence number the journal thread has acknowledged or failed.
    handled: AtomicU64,
    /// Highest sequence number staged (applied or skipped).
    processed: AtomicU64,
    caught_up: tokio::sync::Notify,
    /// Main-account transaction ids of operations queued but not applied yet, per user.
    pending_txids: Mutex<PendingTxids>,
    /// Closed journal segments: (first sequence number, path), oldest first.
    segments: Mutex<Vec<(u64, PathBuf)>>,
    /// Set when a sync failed, or a failed append could not be cut off: no more writes until
    /// a restart (see [`Halt`]).
    halt: Halt,
    /// Set while sled cannot take checkpoints (the checkpoint thread retries, reopening it).
    stalled: AtomicBool,
    /// Set once the store stops: a checkpoint waiting for room gives up.
    stopping: AtomicBool,
    /// Set while the journal's last append failed (a full disk): checkpoints wait, because a
    /// sled flush then fails too and sled 0.34 refuses everything after a failed write.
    append_failing: AtomicBool,
    /// Failures tests provoke (see [`Hooks`]).
    #[cfg(any(test, feature = "test-hooks"))]
    hooks: Hooks,
    /// Test hook: the applier thread waits this long before each batch it stages.
    #[cfg(test)]
    slow_applier_ms: AtomicU64,
    /// Bytes per journal segment.
    segment_bytes: u64,
    /// sled's page cache, bytes (`None`: sled's default); kept for a reopen.
    sled_cache: Option<u64>,
}

/// How the embedded engine runs (`--checkpoint-interval-ms`, `--journal-segment-bytes`).
#[derive(Debug, Clone, Copy)]
pub struct JournalOptions {
    pub checkpoint_every: Duration,
    pub segment_bytes: u64,
    /// sled's page cache in bytes (`None`: sled's default, 1 GiB).
    pub sled_cache: Option<u64>,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions { checkpoint_every: CHECKPOINT_EVERY, segment_bytes: SEGMENT_BYTES, sled_cache: None }
    }
}

pub struct JournalStore {
    shared: Arc<Shared>,
    submit: Mutex<Submitter>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn io(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io { op: "journal", path: path.to_path_buf(), source: e }
}

/// Test hooks: failures a test provokes. Only in builds with tests (the `test-hooks` feature,
/// which the tests' dependency on this crate enables): a release binary has none of them.
#[cfg(any(test, feature = "test-hooks"))]
#[derive(Default)]
struct Hooks {
    /// The next append fails as a full disk would (`FAIL_WRITE`), or its sync fails as a failing
    /// disk's does (`FAIL_SYNC`).
    fail_next_append: std::sync::atomic::AtomicU8,
    /// That failure waits until this channel's sender sends or is dropped.
    failure_gate: Mutex<Option<mpsc::Receiver<()>>>,
}

#[cfg(any(test, feature = "test-hooks"))]
const FAIL_WRITE: u8 = 1;
#[cfg(any(test, feature = "test-hooks"))]
const FAIL_SYNC: u8 = 2;

/// The failure a test armed for this append, if any, once its gate lets it through:
/// `(sync_failed, error)` as [`append::write_batch`] answers.
#[cfg(any(test, feature = "test-hooks"))]
fn injected_failure(shared: &Shared) -> Option<(bool, std::io::Error)> {
    let hook = shared.hooks.fail_next_append.swap(0, Ordering::SeqCst);
    if hook == 0 {
        return None;
    }
    if let Some(gate) = shared.hooks.failure_gate.lock().take() {
        let _ = gate.recv();
    }
    Some(if hook == FAIL_SYNC {
        (true, std::io::Error::from_raw_os_error(libc::EIO))
    } else {
        (false, std::io::Error::from_raw_os_error(libc::ENOSPC))
    })
}

#[cfg(not(any(test, feature = "test-hooks")))]
#[inline(always)]
fn injected_failure(_: &Shared) -> Option<(bool, std::io::Error)> {
    None
}

/// Once the disk fails a sync, the store takes no more writes until a restart: the kernel may
/// have dropped the unsynced pages and marked them clean, so a later sync would succeed
/// without them, and nothing written since the last good sync can be trusted to be on disk
/// (PostgreSQL stops for the same reason). The write whose sync failed is not acknowledged;
/// reads go on from memory; a restart recovers from what the disk holds, replaying the journal
/// from the last checkpoint marker. A full disk is not a failed sync: the write fails before
/// anything of it is synced, and writes resume once there is room.
#[derive(Default)]
struct Halt {
    on: AtomicBool,
    why: Mutex<Option<String>>,
}

impl Halt {
    fn halt(&self, why: String) {
        let mut w = self.why.lock();
        if w.is_none() {
            tracing::error!(reason = %why, "storage takes no more writes until pfm is restarted");
            *w = Some(why);
        }
        self.on.store(true, Ordering::Release);
    }

    fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    fn error(&self) -> StoreError {
        StoreError::Halted(self.why.lock().clone().unwrap_or_default())
    }
}

fn segment_path(dir: &Path, first_seq: u64) -> PathBuf {
    dir.join(format!("{first_seq:020}.wal"))
}

fn sync_dir(fs: &dyn Fs, dir: &Path) -> Result<(), StoreError> {
    fs.sync_dir(dir).map_err(|e| io(dir, e))
}

/// A journal file: a segment, the spare, the checkpoint marker.
type JFile = Box<dyn FsFile>;

impl Shared {
    /// The state of a store whose journal continues from `last_seq` in segment `seg`.
    fn new(
        fs: Arc<dyn Fs>,
        data_dir: &Path,
        sled: Option<SledStore>,
        id_secret: [u64; 2],
        last_seq: u64,
        seg: PathBuf,
        segment_bytes: u64,
    ) -> Shared {
        Shared {
            fs,
            id_secret,
            sled: parking_lot::RwLock::new(sled),
            overlay: Overlay::default(),
            data_dir: data_dir.to_path_buf(),
            dir: data_dir.join("journal"),
            handled: AtomicU64::new(last_seq),
            processed: AtomicU64::new(last_seq),
            caught_up: tokio::sync::Notify::new(),
            pending_txids: Mutex::new(PendingTxids::default()),
            segments: Mutex::new(vec![(last_seq + 1, seg)]),
            halt: Halt::default(),
            stalled: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            append_failing: AtomicBool::new(false),
            #[cfg(any(test, feature = "test-hooks"))]
            hooks: Hooks::default(),
            #[cfg(test)]
            slow_applier_ms: AtomicU64::new(0),
            segment_bytes,
            sled_cache: None,
        }
    }

    fn with_sled<T>(&self, f: impl FnOnce(&SledStore) -> Result<T, StoreError>) -> Result<T, StoreError> {
        match self.sled.read().as_ref() {
            Some(s) => f(s),
            None => Err(StoreError::Reopening),
        }
    }

    /// Reads rows through the memtables.
    fn read<T>(&self, f: impl Fn(&dyn Rows) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.with_sled(|s| self.overlay.read(s.db(), f))
    }
}

fn main_txids(op: &Op) -> (u64, &[Text]) {
    match op {
        Op::Commit { user, change, .. } => (user.user_no, &change.main_txids),
        Op::DeleteUser { user } => (user.user_no, &[]),
    }
}

impl JournalStore {
    /// Opens the sled state under `dir`, replays the journal into it, and starts the journal
    /// and applier threads.
    pub fn open(dir: &Path) -> Result<JournalStore, StoreError> {
        Self::open_with(dir, JournalOptions::default())
    }

    /// As [`JournalStore::open`], with the given checkpoint interval and segment size.
    pub fn open_with(dir: &Path, opts: JournalOptions) -> Result<JournalStore, StoreError> {
        let checkpoint_every = opts.checkpoint_every;
        let fs: Arc<dyn Fs> = Arc::new(Disk);
        fs.create_dir_durable(dir).map_err(|e| io(dir, e))?;
        let sled = SledStore::open_with_cache(dir, opts.sled_cache)?;
        let jdir = dir.join("journal");
        fs.create_dir_durable(&jdir).map_err(|e| io(&jdir, e))?;
        let last_seq = replay(&*fs, &sled, &jdir)?;
        let next_seq = last_seq + 1;
        let (seg, file) = start_journal(&*fs, &jdir, next_seq)?;
        let id_secret = sled.id_secret();
        let mut shared =
            Shared::new(fs, dir, Some(sled), id_secret, last_seq, seg.clone(), opts.segment_bytes);
        shared.sled_cache = opts.sled_cache;
        let shared = Arc::new(shared);
        let (tx, rx) = mpsc::channel::<Entry>();
        let (atx, arx) = mpsc::channel::<Handled>();
        let (ctx, crx) = mpsc::channel::<Arc<Memtable>>();
        let applier = Arc::new(Mutex::new(Applier::new(ctx, checkpoint_every)));
        let queued = Arc::new(AtomicUsize::new(0));
        let lanes = Lanes { applier: applier.clone(), atx, queued: queued.clone() };
        let s1 = shared.clone();
        let journal = std::thread::Builder::new()
            .name("pfm-journal".into())
            .spawn(move || {
                journal_thread(
                    s1,
                    rx,
                    lanes,
                    Segment { file, path: seg, pos: 0, cap: 0, first_seq: next_seq },
                )
            })
            .map_err(|source| StoreError::Spawn { what: "the journal thread", source })?;
        let s2 = shared.clone();
        let applier = std::thread::Builder::new()
            .name("pfm-applier".into())
            .spawn(move || applier_thread(s2, arx, applier, queued))
            .map_err(|source| StoreError::Spawn { what: "the applier thread", source })?;
        let s3 = shared.clone();
        let checkpointer = std::thread::Builder::new()
            .name("pfm-checkpoint".into())
            .spawn(move || checkpoint_thread(s3, crx))
            .map_err(|source| StoreError::Spawn { what: "the checkpoint thread", source })?;
        Ok(JournalStore {
            shared,
            submit: Mutex::new(Submitter { next_seq, tx: Some(tx) }),
            threads: Mutex::new(vec![journal, applier, checkpointer]),
        })
    }

    /// Test hook: make the next append fail as a full disk would.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn fail_next_append(&self) {
        self.shared.hooks.fail_next_append.store(FAIL_WRITE, Ordering::SeqCst);
    }

    /// Test hook: make the next append's sync fail with EIO, as a failing disk's does.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn fail_next_sync(&self) {
        self.shared.hooks.fail_next_append.store(FAIL_SYNC, Ordering::SeqCst);
    }

    /// Test hook: [`Self::fail_next_append`], with the failure answered only once the returned
    /// sender sends or is dropped (so a test can act while the failing write is in flight).
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn fail_next_append_when_released(&self) -> mpsc::Sender<()> {
        let (tx, rx) = mpsc::channel();
        *self.shared.hooks.failure_gate.lock() = Some(rx);
        self.fail_next_append();
        tx
    }

    /// Every user id (`pfm migrate`).
    pub async fn user_ids(&self) -> Result<Vec<String>, StoreError> {
        self.read(sled_store::user_ids).await
    }

    /// Waits until sled holds every operation acknowledged (or failed) so far.
    async fn catch_up(&self) -> Result<(), StoreError> {
        let target = self.shared.handled.load(Ordering::Acquire);
        let deadline = tokio::time::Instant::now() + CATCH_UP_LIMIT;
        loop {
            let notified = self.shared.caught_up.notified();
            if self.shared.processed.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(StoreError::CatchUpTimeout);
            }
        }
    }

    /// Reads rows through the memtables once the applier holds every acknowledged operation.
    async fn read<T>(&self, f: impl Fn(&dyn Rows) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.catch_up().await?;
        self.read_now(f).await
    }

    /// Reads rows through the memtables. While sled is being brought back after a failure,
    /// waits for it (up to the catch-up limit) rather than fail the read: the rows are all in
    /// the tables or in what sled recovered.
    async fn read_now<T>(&self, f: impl Fn(&dyn Rows) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let deadline = Instant::now() + CATCH_UP_LIMIT;
        loop {
            match self.shared.read(&f) {
                Err(e) if self.shared.stalled.load(Ordering::Acquire) && Instant::now() < deadline => {
                    tracing::debug!(error = %e, "read waits for storage to reopen");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                r => return r,
            }
        }
    }

    fn stop_threads(&self) {
        // Dropping the sender ends the journal thread once the queue is empty; it then drops
        // the applier's sender, which ends the applier, which hands the checkpoint thread its
        // last table and ends it.
        self.submit.lock().tx = None;
        self.shared.stopping.store(true, Ordering::Release);
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for JournalStore {
    fn drop(&mut self) {
        self.stop_threads();
        // The directory is free once the store is gone (a restart in this process opens it).
        let sled = self.shared.sled.write().take();
        if let Some(s) = sled {
            s.close();
        }
    }
}

impl Store for JournalStore {
    fn load_user<'a>(
        &'a self,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<(UserRecord, Tree)>, StoreError>> {
        Box::pin(async move { self.read(|r| sled_store::load_user(r, user_id)).await })
    }

    fn read_log(
        &self,
        user_no: u64,
        acc: AccountId,
        from: u64,
        to: u64,
    ) -> BoxFuture<'_, Result<Vec<TxRecord>, StoreError>> {
        Box::pin(async move { self.read(|r| sled_store::read_log(r, user_no, acc, from, to)).await })
    }

    fn load_meta(&self, user_no: u64) -> BoxFuture<'_, Result<UserMeta, StoreError>> {
        Box::pin(async move { self.read(|r| sled_store::load_meta(r, user_no)).await })
    }

    fn read_changes(
        &self,
        user_no: u64,
        after: u64,
        upto: u64,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<SyncRow>, StoreError>> {
        Box::pin(async move { self.read(|r| sled_store::read_changes(r, user_no, after, upto, max)).await })
    }

    fn wake_users(&self, upto_secs: i64, max: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async move { self.read(|r| sled_store::wake_users(r, upto_secs, max)).await })
    }

    fn main_txid_exists<'a>(&'a self, user_no: u64, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            // Queued operations first: the applier removes an id only once its rows are staged.
            if self.shared.pending_txids.lock().get(&user_no).is_some_and(|m| m.contains_key(id)) {
                return Ok(true);
            }
            self.read_now(|r| sled_store::main_txid_exists(r, user_no, id)).await
        })
    }

    fn id_key(&self, user_no: u64) -> Option<crate::domain::txid::IdKey> {
        Some(crate::domain::txid::IdKey::new(self.shared.id_secret, user_no))
    }

    fn new_user_no(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move { self.shared.with_sled(|s| s.new_user_no()) })
    }

    /// Queues `op` for the next group commit. This engine keeps no versions (0), and holds
    /// nothing for a write: its queue orders them.
    fn commit(
        &self,
        op: Box<Op>,
        basis: u64,
        held: Option<Box<dyn WriteTxn>>,
    ) -> BoxFuture<'static, Result<u64, StoreError>> {
        let timer = crate::metrics::CommitTimer::start(op.rows());
        let (ack, rx) = tokio::sync::oneshot::channel();
        let queued = (|| {
            if held.is_some() {
                return Err(StoreError::Bug("a write held by another engine"));
            }
            if self.shared.halt.is_on() {
                return Err(self.shared.halt.error());
            }
            let mut sub = self.submit.lock();
            let seq = sub.next_seq;
            let tx = sub.tx.as_ref().ok_or(StoreError::Closed)?;
            let (no, ids) = main_txids(&op);
            if !ids.is_empty() {
                let mut map = self.shared.pending_txids.lock();
                let m = map.entry(no).or_default();
                for id in ids {
                    *m.entry(id.clone()).or_insert(0) += 1;
                }
            }
            if let Err(back) = tx.send(Entry { seq, basis, frame: Vec::new(), spans: None, op, ack }) {
                // Never queued: its ids must not answer 409 later.
                forget_txids(&self.shared, std::iter::once(&*back.0.op));
                return Err(StoreError::JournalStopped);
            }
            sub.next_seq += 1;
            Ok(())
        })();
        Box::pin(async move {
            let _timer = timer;
            queued?;
            rx.await.map_err(|_| StoreError::JournalStopped)?.map(|()| 0)
        })
    }

    fn healthy(&self) -> bool {
        !self.shared.halt.is_on() && !self.shared.stalled.load(Ordering::Acquire)
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.stop_threads();
        self.shared.with_sled(|s| s.flush())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::days::{DaySums, TrackRow};
    use crate::domain::frac::Frac;
    use crate::domain::tree::{Account, Grand, Kind};
    use crate::store::{IdemRecord, IdemWrite};

    /// A commit with every kind of row, its numbers drawn from `n` (so that varints of every
    /// width and negative values appear) and its optional parts chosen by `shape`.
    fn commit(n: &[i64], shape: u8) -> Op {
        let at = |i: usize| n[i % n.len()];
        let wide = |i: usize| (i128::from(at(i)) * i128::from(at(i + 1))).wrapping_mul(1_000_003);
        let accounts = (0..(shape % 4) as usize)
            .map(|i| {
                let grand = (i % 2 == 1).then(|| Grand {
                    due_date_secs: Some(at(i)),
                    fixed_amount_cents: at(i + 1),
                    amount_due_cents: at(i + 2),
                    account_type: "bill ü".into(),
                    freq_days: Some(at(i) as u32),
                    periods: Frac::int(at(i + 3) % 1000),
                });
                let kind = if grand.is_some() { Kind::Grandchild } else { Kind::Child };
                let mut a = Account::new(wide(i) as u128, format!("n{i}✓").into(), kind, Some(7), grand);
                a.balance_cents = at(i + 4);
                a.sub_balance_cents = wide(i + 5);
                a.children = vec![1, u128::MAX, wide(i) as u128];
                Arc::new(a)
            })
            .collect();
        let rec = |i: usize| TxRecord {
            deposit: i.is_multiple_of(2),
            by: "User".into(),
            id: format!("t{}", at(i)).into(),
            channel: "c".repeat(i % 3).into(),
            amount_cents: at(i),
            balance_cents: at(i + 1),
            amount_due_cents: wide(i + 2),
            overall_balance_cents: -wide(i + 3),
            date_secs: at(i + 4),
            note: None,
        };
        let change = crate::domain::engine::Change {
            accounts,
            removed: if shape & 4 != 0 { vec![(9, at(0) as u64)] } else { Vec::new() },
            records: (0..3).map(|i| (wide(i) as u128, at(i) as u64, rec(i))).collect(),
            days: (0..2)
                .map(|i| {
                    let s = DaySums {
                        dep_user_cents: wide(i),
                        wd_user_cents: -wide(i + 1),
                        dep_all_cents: 0,
                        dep_alloc_cents: wide(i + 2),
                    };
                    (3, at(i), s)
                })
                .collect(),
            track: (0..(shape % 3) as usize)
                .map(|i| (4, at(i), TrackRow { amount_due_cents: at(i + 1), balance_cents: at(i + 2) }))
                .collect(),
            ledger: Default::default(),
            main_txids: vec!["a".into(), format!("{}", at(3)).into()],
            notes: (0..(shape & 1) as usize)
                .map(|i| {
                    let n = crate::domain::note::Note {
                        payee: Some(format!("p{}", at(i)).into()),
                        memo: None,
                        import_id: Some("imp:x".into()),
                        schedule: Some(7),
                    };
                    (5, at(i) as u64, Arc::new(n))
                })
                .collect(),
            docs: if shape & 2 != 0 {
                vec![
                    ("csv:bank".into(), Some(Arc::new(crate::domain::docs::Doc::CsvMapping("{}".into())))),
                    ("rules".into(), None),
                ]
            } else {
                Vec::new()
            },
            wake: match shape % 3 {
                0 => None,
                1 => Some(None),
                _ => Some(Some(at(2))),
            },
        };
        let user = UserRecord {
            user_id: format!("user{}", at(0)).into(),
            user_no: at(1) as u64,
            password_hash: (shape & 8 != 0).then(|| "h".into()),
            role: "user".into(),
            created_at: at(2),
            root: 3,
            ledger: Default::default(),
        };
        let sync = (shape & 16 != 0).then(|| SyncRow::of(at(0) as u64, &change)).flatten();
        let idem = match shape / 32 % 3 {
            0 => None,
            1 => Some(IdemWrite { put: None, remove: vec!["k1".into()] }),
            _ => Some(IdemWrite {
                put: Some(IdemRecord {
                    key: "key".into(),
                    fingerprint: vec![1, 2, 3],
                    created_us: at(3),
                    status: 201,
                    body: "{}".into(),
                }),
                remove: vec!["k2".into(), "k3".into()],
            }),
        };
        Op::Commit { user, change, sync, idem }
    }

    proptest::proptest! {
        /// The piecewise encoder writes exactly bincode's bytes (frames stay readable by
        /// every binary that reads them today), and the rows the applier takes from those
        /// bytes are exactly the rows it would encode.
        #[test]
        fn commits_encode_piecewise_as_bincode_does_and_give_the_same_rows(
            n in proptest::collection::vec(proptest::prelude::any::<i64>(), 1..8),
            small in proptest::collection::vec(-300i64..300, 1..8),
            shape in 0u8..96,
        ) {
            let nums: Vec<i64> = n.iter().chain(&small).copied().collect();
            let op = commit(&nums, shape);
            let (frame, spans) = encode_frame_body(&op).unwrap();
            let whole = bincode::serde::encode_to_vec(&op, bincode::config::standard()).unwrap();
            proptest::prop_assert_eq!(&frame[HEADER + 1..frame.len() - 1], &whole[..]);
            let spans = spans.unwrap();
            let mut a = Vec::new();
            let mut b = Vec::new();
            // `removed` makes both list rows; no storage is needed when nothing is removed.
            if !sled_store::lists_rows(&op) {
                sled_store::rows_into(&NoRows, &mut a, &op, Some([1, 2])).unwrap();
                let frame = Arc::new(frame);
                sled_store::rows_from_frame(&NoRows, &mut b, &op, &frame, &spans, Some([1, 2])).unwrap();
                // Every value the commit carries is taken from its record, not encoded again.
                let framed = b.iter().filter(|(_, v)| matches!(v, Some(crate::store::codec::Val::Framed { .. }))).count();
                proptest::prop_assert_eq!(framed, 1 + spans.rows.len() + usize::from(spans.sync.is_some()) + usize::from(spans.idem_put.is_some()));
                proptest::prop_assert_eq!(a, b);
            }
        }
    }

    /// A batch handed to the applier thread (it lists rows to delete) is staged before every
    /// later batch, even one the journal thread could have staged at once: the later write wins.
    #[test]
    fn batches_after_a_listing_one_are_staged_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = JournalStore::open(dir.path()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        // This store's applier only (a static would slow every store of a `cargo test` process).
        store.shared.slow_applier_ms.store(300, Ordering::Release);
        // Shape 5: one account and a removal (which lists rows); shape 1: the account alone.
        // The same user and account, the balance last in `n`.
        let n = |balance: i64| [5, 7, 11, 13, balance];
        rt.block_on(store.commit(Box::new(commit(&n(100), 5)), 0, None)).unwrap();
        rt.block_on(store.commit(Box::new(commit(&n(200), 1)), 0, None)).unwrap();
        let balances = || {
            let (_, tree) = rt.block_on(store.load_user("user5")).unwrap().unwrap();
            tree.accounts.values().map(|a| a.balance_cents).collect::<Vec<i64>>()
        };
        assert_eq!(balances(), vec![200]);
        // Once the applier thread is surely done too.
        std::thread::sleep(Duration::from_millis(700));
        assert_eq!(balances(), vec![200]);
    }

    /// A dropped store leaves its directory free: a restart in the same process opens it at
    /// once, even right after writes (sled's I/O threads hold its file a moment longer).
    #[test]
    fn a_dropped_store_can_be_opened_again_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for round in 0..20i64 {
            let store = JournalStore::open(dir.path()).unwrap_or_else(|e| panic!("round {round}: {e}"));
            rt.block_on(store.commit(Box::new(commit(&[5, 7, 11, 13, round], 1)), 0, None)).unwrap();
            drop(store);
        }
    }
}
