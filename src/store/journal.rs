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
//! 4. At start, records after sled's applied sequence number are applied again (replay).
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
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
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
use super::{BoxFuture, Op, Store, StoreError, SyncRow, UserMeta, UserRecord};

const MAGIC: u32 = 0x4C4E_4A50; // "PJNL"
/// The magic of frames whose payload ends in [`END`] (this binary's); `MAGIC` frames, written
/// before segments were zero-filled, have no end byte and are still read.
const MAGIC_END: u32 = 0x324E_4A50; // "PJN2"
/// The magic of the frame that starts each batch (one append + sync): its sequence number is
/// the batch's first record's, its payload the end byte alone. Only the last batch can be
/// unsynced at a power cut, and a cut may keep any subset of its sectors: damage followed by a
/// later batch's marker is damage in synced data (refused); damage with no batch after it, where
/// a sector never landed, is that last batch torn (dropped, never acknowledged). An older
/// binary reads this magic as a later format and asks to be upgraded.
const MAGIC_BATCH: u32 = 0x334E_4A50; // "PJN3"
/// The last byte of a `MAGIC_END` frame: never zero, so a frame whose end is zero never landed.
const END: u8 = 0xA5;
/// Disks land writes in whole sectors: a torn append's lost part starts at a multiple of this.
const SECTOR: usize = 512;
const HEADER: usize = 24;
/// Format of a journal payload (the version byte that starts it). Format 1 records (before
/// delta sync and idempotency keys) are still read, as [`OpV1`].
const PAYLOAD_FORMAT: u8 = 2;
const PAYLOAD_FORMAT_V1: u8 = 1;

/// An operation as journal payload format 1 wrote it.
#[derive(serde::Deserialize)]
enum OpV1 {
    Commit { user: UserRecord, change: crate::domain::engine::Change },
    DeleteUser { user: UserRecord },
}

impl From<OpV1> for Op {
    fn from(op: OpV1) -> Op {
        match op {
            OpV1::Commit { user, change } => Op::Commit { user, change, sync: None, idem: None },
            OpV1::DeleteUser { user } => Op::DeleteUser { user },
        }
    }
}
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
    failed: Vec<Op>,
    last_seq: u64,
    journal_bytes: u64,
}

struct Submitter {
    next_seq: u64,
    tx: Option<Sender<Entry>>,
}

/// State shared by the store and its threads.
struct Shared {
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
    /// Test hook: the next append fails as a full disk would (`FAIL_WRITE`), or its sync fails
    /// as a failing disk's does (`FAIL_SYNC`).
    fail_next_append: AtomicU8,
    /// Test hook: that failure waits until this channel's sender sends or is dropped.
    failure_gate: Mutex<Option<mpsc::Receiver<()>>>,
    /// Test hook: the applier thread waits this long before each batch it stages.
    #[cfg(test)]
    slow_applier_ms: AtomicU64,
    /// Bytes per journal segment.
    segment_bytes: u64,
}

/// How the embedded engine runs (`--checkpoint-interval-ms`, `--journal-segment-bytes`).
#[derive(Debug, Clone, Copy)]
pub struct JournalOptions {
    pub checkpoint_every: Duration,
    pub segment_bytes: u64,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions { checkpoint_every: CHECKPOINT_EVERY, segment_bytes: SEGMENT_BYTES }
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

const FAIL_WRITE: u8 = 1;
const FAIL_SYNC: u8 = 2;

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

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    super::sync_path(dir).map_err(|e| io(dir, e))
}

/// A frame without its sequence number: the costly part (encoding, payload checksum), done on
/// the caller's thread outside the queue lock.
/// A commit is encoded piece by piece, into exactly the bytes bincode writes for the whole
/// operation, noting where each row value lies (see [`ValueSpans`]).
fn encode_frame_body(op: &Op) -> Result<(Vec<u8>, Option<ValueSpans>), StoreError> {
    // Sized like this thread's last frame: a frame grown from empty by many small writes is
    // reallocated several times.
    thread_local! {
        static LAST_LEN: std::cell::Cell<usize> = const { std::cell::Cell::new(1024) };
    }
    let mut f = Vec::with_capacity(LAST_LEN.get().clamp(256, 64 << 10) * 5 / 4);
    f.resize(HEADER, 0);
    f.push(PAYLOAD_FORMAT);
    let spans = match op {
        Op::Commit { user, change, sync, idem } => Some(encode_commit(&mut f, user, change, sync, idem)),
        Op::DeleteUser { .. } => {
            enc(op, &mut f)?;
            None
        }
    };
    f.push(END);
    let len = u32::try_from(f.len() - HEADER).map_err(|_| StoreError::Codec("operation too large".into()))?;
    f[0..4].copy_from_slice(&MAGIC_END.to_le_bytes());
    f[4..8].copy_from_slice(&len.to_le_bytes());
    let pcrc = crc32fast::hash(&f[HEADER..]);
    f[20..24].copy_from_slice(&pcrc.to_le_bytes());
    LAST_LEN.set(f.len());
    Ok((f, spans))
}

/// Appends bincode's encoding of `v` (standard configuration, as for whole frames) to `f`;
/// returns where it lies.
fn enc<T: serde::Serialize + ?Sized>(v: &T, f: &mut Vec<u8>) -> Result<std::ops::Range<usize>, StoreError> {
    let start = f.len();
    bincode::serde::encode_into_std_write(v, f, bincode::config::standard())
        .map_err(|e| StoreError::Codec(e.to_string()))?;
    Ok(start..f.len())
}

/// `Op::Commit` as bincode writes it: the variant index (a varint), then the fields in order;
/// a sequence is its length (a varint u64) then its elements, a tuple its elements, an option
/// a 0 or 1 byte then the value. A test holds this to bincode's own encoding.
fn encode_commit(
    f: &mut Vec<u8>,
    user: &UserRecord,
    c: &crate::domain::engine::Change,
    sync: &Option<SyncRow>,
    idem: &Option<super::IdemWrite>,
) -> ValueSpans {
    let mut s = ValueSpans {
        rows: Vec::with_capacity(c.accounts.len() + c.records.len() + c.days.len() + c.track.len()),
        ..ValueSpans::default()
    };
    0u32.put(f);
    s.user = put(user, f);
    // Change, field by field in declaration order.
    (c.accounts.len() as u64).put(f);
    for a in &c.accounts {
        s.rows.push(put(&**a, f));
    }
    c.removed.put(f);
    enc_rows(&c.records, f, &mut s.rows);
    enc_rows(&c.days, f, &mut s.rows);
    enc_rows(&c.track, f, &mut s.rows);
    c.ledger.put(f);
    c.main_txids.put(f);
    s.sync = put_option(sync, f);
    match idem {
        None => 0u8.put(f),
        Some(w) => {
            1u8.put(f);
            s.idem_put = put_option(&w.put, f);
            w.remove.put(f);
        }
    }
    s
}

/// Appends `v` as bincode writes it (see [`Bin`]); returns where it lies.
fn put<T: Bin + ?Sized>(v: &T, f: &mut Vec<u8>) -> std::ops::Range<usize> {
    let start = f.len();
    v.put(f);
    start..f.len()
}

/// A sequence of (account, position, value) rows: its length, then each row; notes where each
/// value lies.
fn enc_rows<P: Bin, V: Bin>(
    rows: &[(AccountId, P, V)],
    f: &mut Vec<u8>,
    spans: &mut Vec<std::ops::Range<usize>>,
) {
    (rows.len() as u64).put(f);
    for (acc, pos, v) in rows {
        acc.put(f);
        pos.put(f);
        spans.push(put(v, f));
    }
}

/// An option: a 0 or 1 byte, then the value; returns where the value lies.
fn put_option<T: Bin>(v: &Option<T>, f: &mut Vec<u8>) -> Option<std::ops::Range<usize>> {
    (v.is_some() as u8).put(f);
    v.as_ref().map(|x| put(x, f))
}

/// Stamps the sequence number and the header checksum into a frame body.
/// The frame that starts a batch whose first record is `seq` (see [`MAGIC_BATCH`]).
fn batch_marker(seq: u64) -> [u8; HEADER + 1] {
    let mut f = [0u8; HEADER + 1];
    f[0..4].copy_from_slice(&MAGIC_BATCH.to_le_bytes());
    f[4..8].copy_from_slice(&1u32.to_le_bytes());
    f[HEADER] = END;
    f[20..24].copy_from_slice(&crc32fast::hash(&[END]).to_le_bytes());
    stamp(&mut f, seq);
    f
}

/// Whether a whole batch marker starts anywhere in `bytes` at or after `from`.
fn batch_marker_at_or_after(bytes: &[u8], from: usize) -> bool {
    let magic = MAGIC_BATCH.to_le_bytes();
    let mut at = from;
    while let Some(i) = bytes.get(at..).and_then(|r| memchr::memmem::find(r, &magic)) {
        let off = at + i;
        let f = &bytes[off..];
        if f.len() > HEADER
            && crc32fast::hash(&f[0..16]) == u32_at(f, 16)
            && u32_at(f, 4) == 1
            && f[HEADER] == END
        {
            return true;
        }
        at = off + 1;
    }
    false
}

/// Whether part of a write never landed between `from` and `to`: zeros from `from` to the end
/// of its sector, or a whole sector of zeros after it (segments are zero-filled, and sectors
/// past a file's synced size read as zeros; a sector shared with the batch before keeps that
/// batch's bytes).
fn unlanded_sector(bytes: &[u8], from: usize, to: usize) -> bool {
    let to = to.min(bytes.len());
    let zeros = |r: std::ops::Range<usize>| bytes[r].iter().all(|b| *b == 0);
    let first_end = from.next_multiple_of(SECTOR).min(to);
    (from < first_end && zeros(from..first_end))
        || (first_end..to).step_by(SECTOR).any(|s| zeros(s..(s + SECTOR).min(to)))
}

fn stamp(f: &mut [u8], seq: u64) {
    f[8..16].copy_from_slice(&seq.to_le_bytes());
    let hcrc = crc32fast::hash(&f[0..16]);
    f[16..20].copy_from_slice(&hcrc.to_le_bytes());
}

#[cfg(test)]
fn encode_frame(seq: u64, op: &Op) -> Result<Vec<u8>, StoreError> {
    let (mut f, _) = encode_frame_body(op)?;
    stamp(&mut f, seq);
    Ok(f)
}

/// One record read back from a segment.
struct Frame {
    seq: u64,
    payload_start: usize,
    end: usize,
}

/// How reading a segment ended.
enum Tail {
    Clean,
    /// The last record is cut short (or zero-filled): the writer died mid-append, before its
    /// sync, so nothing there was acknowledged.
    Torn(usize),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

/// Parses every frame of a segment. Zeros after the last frame are unused space (a segment is
/// zero-filled ahead of use). A damaged complete record is corruption, an error naming the file
/// and offset; only a last record that never landed whole may be a torn tail: cut short by the
/// file's end, or, for a frame with an end byte, one whose end lies in the zeros after the last
/// sector written (an acknowledged frame's end byte is on disk and never zero; rounding up to
/// a whole sector keeps a damaged end byte in a record's last sector from passing for a tear).
fn parse_segment(path: &Path, bytes: &[u8], last: bool) -> Result<(Vec<Frame>, Tail), StoreError> {
    let corrupt = |off: usize, what: &str| {
        StoreError::Corrupt(format!(
            "journal {} is damaged at offset {off}: {what}; refusing to start rather than drop acknowledged writes",
            path.display()
        ))
    };
    // Where the written bytes end: past it the segment holds only zeros. `landed`: the end of
    // the sector holding the last of them, where a torn append's lost sectors begin.
    let written = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    let landed = written.next_multiple_of(SECTOR);
    // The last batch torn by a power cut that kept some of its sectors and not others (see
    // [`MAGIC_BATCH`]): damage at `off` with no later batch, in a segment of batches.
    let unlanded_batch = |off: usize| {
        last && (off == 0 || batch_marker_at_or_after(bytes, 0))
            && !batch_marker_at_or_after(bytes, off + 1)
            && unlanded_sector(bytes, off, written)
    };
    let mut frames = Vec::new();
    let mut off = 0usize;
    let mut prev_seq = 0u64;
    while off < written {
        let rest = &bytes[off..];
        let magic = if rest.len() >= HEADER { u32_at(rest, 0) } else { 0 };
        let header_ok = (magic == MAGIC || magic == MAGIC_END || magic == MAGIC_BATCH)
            && crc32fast::hash(&rest[0..16]) == u32_at(rest, 16);
        // A whole header of a later frame format ("PJN4" on): a newer binary wrote it.
        if !header_ok
            && rest.len() >= HEADER
            && rest[..3] == *b"PJN"
            && (b'4'..=b'9').contains(&rest[3])
            && crc32fast::hash(&rest[0..16]) == u32_at(rest, 16)
        {
            return Err(StoreError::NewerFormat(format!(
                "journal {} holds a record of frame format {} at offset {off}; this binary reads PJN3: upgrade pfm",
                path.display(),
                String::from_utf8_lossy(&rest[..4])
            )));
        }
        if !header_ok {
            // A header cut short by the file's end or by sectors that never landed.
            return if last && (rest.len() < HEADER || landed < off + HEADER) || unlanded_batch(off) {
                Ok((frames, Tail::Torn(off)))
            } else if rest.len() < HEADER {
                Err(corrupt(off, "truncated record header"))
            } else {
                Err(corrupt(off, "record header checksum mismatch"))
            };
        }
        let len = u32_at(rest, 4) as usize;
        let mut s = [0u8; 8];
        s.copy_from_slice(&rest[8..16]);
        let seq = u64::from_le_bytes(s);
        if len > rest.len() - HEADER {
            return if last { Ok((frames, Tail::Torn(off))) } else { Err(corrupt(off, "truncated record")) };
        }
        let with_end = magic == MAGIC_END || magic == MAGIC_BATCH;
        if crc32fast::hash(&rest[HEADER..HEADER + len]) != u32_at(rest, 20) {
            // Whole but for its end byte: on disk, since its content got there. Its sector
            // can look unwritten (the end byte alone, or after zeros, in the record's last
            // sector): a torn append looks the same, but dropping the record could lose an
            // acknowledged write, so it is damage either way.
            if unlanded_batch(off) {
                return Ok((frames, Tail::Torn(off)));
            }
            if with_end && len > 0 && {
                let mut h = crc32fast::Hasher::new();
                h.update(&rest[HEADER..HEADER + len - 1]);
                h.update(&[END]);
                h.finalize() == u32_at(rest, 20)
            } {
                return Err(corrupt(off, &format!("record {seq} has a damaged end byte")));
            }
            return if last && with_end && off + HEADER + len > landed {
                Ok((frames, Tail::Torn(off)))
            } else {
                Err(corrupt(off, &format!("checksum mismatch in record {seq}")))
            };
        }
        if with_end && (len == 0 || rest[HEADER + len - 1] != END) {
            return Err(corrupt(off, &format!("record {seq} lacks its end byte")));
        }
        if magic == MAGIC_BATCH {
            // The batch's first record follows with the same number.
            if seq <= prev_seq {
                return Err(corrupt(off, "sequence numbers go backwards"));
            }
            off += HEADER + len;
            continue;
        }
        if seq <= prev_seq {
            return Err(corrupt(off, "sequence numbers go backwards"));
        }
        prev_seq = seq;
        let end = off + HEADER + len - usize::from(with_end);
        frames.push(Frame { seq, payload_start: off + HEADER, end });
        off += HEADER + len;
    }
    Ok((frames, Tail::Clean))
}

fn decode_payload(path: &Path, seq: u64, p: &[u8]) -> Result<Op, StoreError> {
    let corrupt = |e: bincode::error::DecodeError| {
        StoreError::Corrupt(format!("journal {} record {seq}: {e}", path.display()))
    };
    match p.split_first() {
        Some((&PAYLOAD_FORMAT, body)) => bincode::serde::decode_from_slice(body, bincode::config::standard())
            .map(|(op, _)| op)
            .map_err(corrupt),
        Some((&PAYLOAD_FORMAT_V1, body)) => {
            bincode::serde::decode_from_slice::<OpV1, _>(body, bincode::config::standard())
                .map(|(op, _)| op.into())
                .map_err(corrupt)
        }
        Some((v, _)) => Err(StoreError::NewerFormat(format!(
            "journal {} record {seq} has format {v}; this binary reads {PAYLOAD_FORMAT}: upgrade pfm",
            path.display()
        ))),
        None => Err(StoreError::Corrupt(format!("journal {} record {seq} is empty", path.display()))),
    }
}

impl Shared {
    fn with_sled<T>(&self, f: impl FnOnce(&SledStore) -> Result<T, StoreError>) -> Result<T, StoreError> {
        match self.sled.read().as_ref() {
            Some(s) => f(s),
            None => Err(StoreError::Engine("storage is reopening".into())),
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
        super::create_dir_durable(dir).map_err(|e| io(dir, e))?;
        let sled = SledStore::open(dir)?;
        let jdir = dir.join("journal");
        super::create_dir_durable(&jdir).map_err(|e| io(&jdir, e))?;
        let last_seq = replay(&sled, &jdir)?;
        // A spare left by an earlier run may be half filled: the next one starts afresh. A
        // segment an earlier run was deleting is covered by its checkpoint.
        for entry in std::fs::read_dir(&jdir).map_err(|e| io(&jdir, e))? {
            let p = entry.map_err(|e| io(&jdir, e))?.path();
            if p.file_name().is_some_and(|n| n == SPARE_NAME)
                || p.extension().is_some_and(|x| x == DROPPING_EXT)
            {
                std::fs::remove_file(&p).map_err(|e| io(&p, e))?;
            }
        }
        let next_seq = last_seq + 1;
        let seg = segment_path(&jdir, next_seq);
        let file =
            OpenOptions::new().create(true).write(true).truncate(true).open(&seg).map_err(|e| io(&seg, e))?;
        sync_dir(&jdir)?;
        let id_secret = sled.id_secret();
        let shared = Arc::new(Shared {
            id_secret,
            sled: parking_lot::RwLock::new(Some(sled)),
            overlay: Overlay::default(),
            data_dir: dir.to_path_buf(),
            dir: jdir,
            handled: AtomicU64::new(last_seq),
            processed: AtomicU64::new(last_seq),
            caught_up: tokio::sync::Notify::new(),
            pending_txids: Mutex::new(PendingTxids::default()),
            segments: Mutex::new(vec![(next_seq, seg.clone())]),
            halt: Halt::default(),
            stalled: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            append_failing: AtomicBool::new(false),
            fail_next_append: AtomicU8::new(0),
            failure_gate: Mutex::new(None),
            #[cfg(test)]
            slow_applier_ms: AtomicU64::new(0),
            segment_bytes: opts.segment_bytes,
        });
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
            .map_err(|e| StoreError::Engine(e.to_string()))?;
        let s2 = shared.clone();
        let applier = std::thread::Builder::new()
            .name("pfm-applier".into())
            .spawn(move || applier_thread(s2, arx, applier, queued))
            .map_err(|e| StoreError::Engine(e.to_string()))?;
        let s3 = shared.clone();
        let checkpointer = std::thread::Builder::new()
            .name("pfm-checkpoint".into())
            .spawn(move || checkpoint_thread(s3, crx))
            .map_err(|e| StoreError::Engine(e.to_string()))?;
        Ok(JournalStore {
            shared,
            submit: Mutex::new(Submitter { next_seq, tx: Some(tx) }),
            threads: Mutex::new(vec![journal, applier, checkpointer]),
        })
    }

    /// Test hook: make the next append fail as a full disk would.
    pub fn fail_next_append(&self) {
        self.shared.fail_next_append.store(FAIL_WRITE, Ordering::SeqCst);
    }

    /// Test hook: make the next append's sync fail with EIO, as a failing disk's does.
    pub fn fail_next_sync(&self) {
        self.shared.fail_next_append.store(FAIL_SYNC, Ordering::SeqCst);
    }

    /// Test hook: [`Self::fail_next_append`], with the failure answered only once the returned
    /// sender sends or is dropped (so a test can act while the failing write is in flight).
    pub fn fail_next_append_when_released(&self) -> mpsc::Sender<()> {
        let (tx, rx) = mpsc::channel();
        *self.shared.failure_gate.lock() = Some(rx);
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
                return Err(StoreError::Engine("storage did not catch up with the journal".into()));
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

/// At start, applies every journal record after the checkpoint marker again; returns the
/// last sequence number in the journal (or sled's, if higher). A torn tail is cut off, and the
/// segments are deleted once sled, flushed, holds all of them.
fn replay(sled: &SledStore, jdir: &Path) -> Result<u64, StoreError> {
    let applied = sled.applied_seq()?;
    // Journal segments are deleted once a sled flush holds them; the marker says how far that
    // was. sled holding less means it lost flushed writes (its recovery stops at a damaged
    // record), which the journal can no longer restore.
    let marked = read_checkpoint(jdir)?;
    if applied < marked {
        let db = jdir.parent().unwrap_or(jdir).join("db");
        return Err(super::sled_store::damaged(
            &db,
            &format!("it holds writes up to journal record {applied}, but records up to {marked} were flushed to it"),
        ));
    }
    let mut segs: Vec<PathBuf> = std::fs::read_dir(jdir)
        .map_err(|e| io(jdir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    segs.sort();
    let mut last = applied;
    let mut replayed = 0usize;
    // Records are gathered in a memtable and written into sled as the checkpoints write them
    // (log records joined into runs, in large batches): one sled batch per record made a
    // restart after heavy writes take 20 s for 400 MB of journal. A record that lists rows (a
    // deletion) reads them through the memtable over sled, as the applier does.
    let overlay = Overlay::default();
    let id_secret = Some(sled.id_secret());
    // Where the previous segment ended: each is named one past the last record before it.
    let mut before: Option<(&PathBuf, Option<u64>)> = None;
    for (i, path) in segs.iter().enumerate() {
        let bytes = std::fs::read(path).map_err(|e| io(path, e))?;
        let (frames, tail) = parse_segment(path, &bytes, i + 1 == segs.len())?;
        check_chain(path, before, applied, frames.first().map(|f| f.seq))?;
        before = Some((path, frames.last().map(|f| f.seq)));
        for f in &frames {
            // From the marker, not from what sled says it holds: sled's files are trusted only
            // as far as a checkpoint synced them. Past that, a run that failed a sync may have
            // left sled's pages in the page cache, marked clean but never written (see
            // `Halt`); replaying rewrites them. Replaying a record sled holds is harmless.
            if f.seq > marked {
                let op = decode_payload(path, f.seq, &bytes[f.payload_start..f.end])?;
                let rows = overlay.read(sled.db(), |r| {
                    let mut rows = Vec::with_capacity(op.rows());
                    sled_store::rows_into(r, &mut rows, &op, id_secret).map(|_| rows)
                })?;
                overlay.stage(rows, f.seq);
                if overlay.active_bytes() >= MEMTABLE_BYTES {
                    write_replayed(sled, &overlay)?;
                }
                replayed += 1;
            }
            last = last.max(f.seq);
        }
        if let Tail::Torn(off) = tail {
            tracing::warn!(file = %path.display(), offset = off, bytes = bytes.len() - off,
                "dropping a torn journal tail (an append cut short before its sync; never acknowledged)");
            let f = OpenOptions::new().write(true).open(path).map_err(|e| io(path, e))?;
            f.set_len(off as u64).and_then(|_| f.sync_all()).map_err(|e| io(path, e))?;
        }
    }
    write_replayed(sled, &overlay)?;
    sled.flush()?;
    write_checkpoint(jdir, sled.applied_seq()?)?;
    for path in &segs {
        std::fs::remove_file(path).map_err(|e| io(path, e))?;
    }
    if replayed > 0 {
        tracing::info!(records = replayed, "replayed the journal into storage");
    }
    Ok(last)
}

/// Writes the records replayed so far into sled, the last journal record they reach with them.
/// Not atomic as a whole, like a checkpoint: stopped part-way, the next start replays them again
/// from the record sled says it holds.
fn write_replayed(sled: &SledStore, overlay: &Overlay) -> Result<(), StoreError> {
    if let Some(m) = overlay.freeze() {
        sled.write_table(m.rows(), m.last_seq(), CHECKPOINT_CHUNK, || {})?;
        overlay.release_frozen();
    }
    Ok(())
}

/// A segment must follow on from the one before it, whose last record is one before its name
/// (the first segment: from what storage holds), and hold no record before its name: a
/// segment gone missing would otherwise drop acknowledged writes without a word.
fn check_chain(
    path: &Path,
    before: Option<(&PathBuf, Option<u64>)>,
    applied: u64,
    first: Option<u64>,
) -> Result<(), StoreError> {
    let refuse = |what: String| {
        StoreError::Corrupt(format!(
            "journal {}: {what}; refusing to start rather than drop acknowledged writes",
            path.display()
        ))
    };
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| refuse("its name is not a record number".into()))?;
    match before {
        None if name > applied.saturating_add(1) => {
            return Err(refuse(format!(
                "it starts at record {name}, but storage holds records up to {applied} only: a segment is missing"
            )))
        }
        Some((prev, ended)) if ended.map(|l| l.saturating_add(1)) != Some(name) => {
            let ended = ended.map_or("no record".to_string(), |l| format!("record {l}"));
            return Err(refuse(format!(
                "it starts at record {name}, but {} ends at {ended}: a segment is missing",
                prev.display()
            )));
        }
        _ => {}
    }
    match first {
        Some(f) if f < name => Err(refuse(format!("it holds record {f}, before record {name} of its name"))),
        _ => Ok(()),
    }
}

/// The segment being appended to: `pos` is where the next batch goes; `cap` the size it was
/// zero-filled to (0: it grows with each append).
struct Segment {
    file: File,
    path: PathBuf,
    pos: u64,
    cap: u64,
    /// The sequence number in its name: one past the last record written before it, so
    /// segments chain (replay checks that none is missing).
    first_seq: u64,
}

/// The next segment, zero-filled by the spare thread.
enum Spare {
    Idle,
    Pending,
    Ready(File),
    Failed(Instant),
}

fn journal_thread(shared: Arc<Shared>, rx: Receiver<Entry>, lanes: Lanes, seg: Segment) {
    let (req_tx, req_rx) = mpsc::channel::<u64>();
    let (done_tx, done_rx) = mpsc::channel::<Result<File, String>>();
    let sh = &*shared;
    std::thread::scope(|scope| {
        let spare = std::thread::Builder::new()
            .name("pfm-journal-spare".into())
            .spawn_scoped(scope, move || spare_thread(sh, req_rx, done_tx));
        if let Err(e) = &spare {
            tracing::warn!(error = %e, "no spare-segment thread; segments grow with each append");
        }
        append_loop(&shared, rx, &lanes, seg, req_tx, done_rx);
    });
}

/// Lowers the calling thread's scheduling priority (nice 10): background work (checkpoints,
/// spare segments) then waits while request threads want the CPU, instead of taking a core from
/// them in bursts, which showed as latency spikes. Best effort: without permission it keeps its
/// priority.
fn yield_to_requests() {
    // SAFETY: gettid and setpriority take no pointers; on Linux a thread id names one thread.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10) };
    if r != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "background thread keeps its priority");
    }
}

/// Zero-fills spare segments on request, off the journal thread (a segment takes seconds).
fn spare_thread(shared: &Shared, req: Receiver<u64>, done: Sender<Result<File, String>>) {
    yield_to_requests();
    while let Ok(size) = req.recv() {
        if done.send(prepare_spare(shared, size)).is_err() {
            break;
        }
    }
}

/// Zero-fills `spare.tmp` to `size` and syncs it; gives up when the store stops (the next open
/// deletes what is left). A failed sync halts the store, as the journal's own does.
fn prepare_spare(shared: &Shared, size: u64) -> Result<File, String> {
    let (dir, stop) = (&shared.dir, &shared.stopping);
    let path = dir.join(SPARE_NAME);
    // The spare never takes a disk's last space: a full disk must fail appends the usual way,
    // and sled's checkpoints need room too.
    let free = fs2::available_space(dir).map_err(|e| format!("free space of {}: {e}", dir.display()))?;
    if free < size.saturating_mul(2).saturating_add(ROOM_TO_SPARE) {
        return Err(format!("{free} bytes free, too few for a spare segment of {size}"));
    }
    let synced = |r: std::io::Result<()>| r.map_err(|e| (true, e));
    let fill = || -> Result<File, (bool, std::io::Error)> {
        let f =
            OpenOptions::new().create(true).write(true).truncate(true).open(&path).map_err(|e| (false, e))?;
        let zeros = vec![0u8; SPARE_SYNC_STEP as usize];
        let mut at = 0u64;
        while at < size {
            if stop.load(Ordering::Acquire) {
                return Err((false, std::io::Error::other("the store is stopping")));
            }
            let n = (size - at).min(zeros.len() as u64) as usize;
            std::os::unix::fs::FileExt::write_all_at(&f, &zeros[..n], at).map_err(|e| (false, e))?;
            at += n as u64;
            // Written out as it goes, so no large burst of dirty pages delays the journal's syncs.
            synced(f.sync_data())?;
        }
        synced(f.sync_all())?;
        Ok(f)
    };
    fill().map_err(|(sync_failed, e)| {
        let _ = std::fs::remove_file(&path);
        if sync_failed {
            shared.halt.halt(format!("syncing {} failed: {e}", path.display()));
        }
        format!("{}: {e}", path.display())
    })
}

fn append_loop(
    shared: &Shared,
    rx: Receiver<Entry>,
    lanes: &Lanes,
    mut seg: Segment,
    spare_req: Sender<u64>,
    spare_done: Receiver<Result<File, String>>,
) {
    let seg_bytes = shared.segment_bytes;
    let prepare_after = seg_bytes / PREPARE_SHARE;
    let mut spare = Spare::Idle;
    let mut poisoned: HashMap<u64, ()> = HashMap::new();
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    // The last record written: the next segment is named one past it (not after the first
    // record it will hold, which refused writes can leave a gap before).
    let mut last_written = seg.first_seq - 1;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        let last_seq = batch.last().map_or(0, |e| e.seq);
        // Once the journal's tail is unknown (a failed append could not be cut off), nothing more
        // is appended after it: every later entry fails until a restart sorts the tail out.
        let broken = shared.halt.is_on();
        // Frames are encoded here rather than on the async workers, which on a small machine
        // are what limits the write rate; this thread mostly waits for the disk. One that
        // cannot be encoded fails like a failed append: with every write built on it.
        let batch: Vec<Entry> = batch
            .into_iter()
            .filter_map(|mut e| {
                if broken || poisoned.contains_key(&e.basis) {
                    return Some(e); // refused below, unencoded
                }
                match encode_frame_body(&e.op) {
                    Ok((mut frame, spans)) => {
                        stamp(&mut frame, e.seq);
                        e.frame = frame;
                        e.spans = spans;
                        Some(e)
                    }
                    Err(err) => {
                        tracing::error!(error = %err, seq = e.seq, "a write could not be encoded; it and the writes built on it are refused");
                        poisoned.insert(e.basis, ());
                        forget_txids(shared, std::iter::once(&*e.op));
                        let _ = e.ack.send(Err(err));
                        None
                    }
                }
            })
            .collect();
        // (An entry is most of a KB: the usual batch, all of it live, is not copied apart.)
        let (live, dead): (Vec<Entry>, Vec<Entry>) = if !broken && poisoned.is_empty() {
            (batch, Vec::new())
        } else {
            batch.into_iter().partition(|e| !broken && !poisoned.contains_key(&e.basis))
        };
        let failed: Vec<Op> = Vec::new();
        // Ids of refused operations leave the 409 index before their answer goes out, so a
        // retry is never told "already made".
        forget_txids(shared, dead.iter().map(|e| &*e.op));
        for e in dead {
            let err = if broken {
                shared.halt.error()
            } else {
                StoreError::Refused("an earlier write this one builds on failed".into())
            };
            let _ = e.ack.send(Err(err));
        }
        if live.is_empty() {
            finish_batch(shared, lanes, Vec::new(), Vec::new(), failed, last_seq, 0);
            continue;
        }
        buf.clear();
        buf.extend_from_slice(&batch_marker(live[0].seq));
        for e in &live {
            buf.extend_from_slice(&e.frame);
        }
        match spare_done.try_recv() {
            Ok(Ok(f)) => spare = Spare::Ready(f),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "no spare journal segment; segments grow with each append for now");
                spare = Spare::Failed(Instant::now());
            }
            Err(_) => {}
        }
        let ready = matches!(spare, Spare::Ready(_));
        // Never away from an empty segment: the next would take its name.
        let full = seg.pos > 0
            && if seg.cap > 0 {
                seg.pos + buf.len() as u64 > seg.cap
            } else {
                seg.pos >= seg_bytes || (ready && seg.pos >= prepare_after)
            };
        if full {
            let zeroed = match std::mem::replace(&mut spare, Spare::Idle) {
                Spare::Ready(f) => Some(f),
                other => {
                    spare = other;
                    None
                }
            };
            match rotate(shared, last_written + 1, zeroed) {
                Ok(s) => seg = s,
                Err(e) => {
                    tracing::error!(error = %e, "journal rotation failed; appending to the current segment")
                }
            }
        }
        // The next spare is asked for while this segment fills: at once after a zero-filled one,
        // after `prepare_after` bytes of a growing one.
        let retry = match spare {
            Spare::Idle => true,
            Spare::Failed(at) => at.elapsed() >= SPARE_RETRY,
            Spare::Pending | Spare::Ready(_) => false,
        };
        if retry && (seg.cap > 0 || seg.pos >= prepare_after) && spare_req.send(seg_bytes).is_ok() {
            spare = Spare::Pending;
        }
        // Err((synced, error)): whether the write went through and its sync failed.
        let written = match shared.fail_next_append.swap(0, Ordering::SeqCst) {
            0 => {
                let _timer = crate::metrics::flush_timer();
                std::os::unix::fs::FileExt::write_all_at(&seg.file, &buf, seg.pos)
                    .map_err(|e| (false, e))
                    .and_then(|_| seg.file.sync_data().map_err(|e| (true, e)))
            }
            hook => {
                if let Some(gate) = shared.failure_gate.lock().take() {
                    let _ = gate.recv();
                }
                Err(if hook == FAIL_SYNC {
                    (true, std::io::Error::from_raw_os_error(libc::EIO))
                } else {
                    (false, std::io::Error::from_raw_os_error(libc::ENOSPC))
                })
            }
        };
        crate::metrics::flush_commits(live.len() as u64);
        match written {
            Ok(()) => {
                shared.append_failing.store(false, Ordering::Release);
                seg.pos += buf.len() as u64;
                last_written = live.last().map_or(last_written, |e| e.seq);
                let mut durable = Vec::with_capacity(live.len());
                let mut acks = Vec::with_capacity(live.len());
                for e in live {
                    durable.push(Durable { seq: e.seq, op: e.op, frame: Arc::new(e.frame), spans: e.spans });
                    acks.push(e.ack);
                }
                finish_batch(shared, lanes, durable, acks, failed, last_seq, buf.len() as u64);
            }
            Err((sync_failed, err)) => {
                tracing::error!(error = %err, file = %seg.path.display(), sync_failed, "journal append failed; the batch is refused");
                // Cut the partial append off so the file ends on a whole record again: then the
                // batch is known not to be durable. After a failed write (a full disk) the
                // journal goes on, in a segment that grows from here; after a failed sync it
                // stops (see `Halt`), the cut only keeps the refused batch from being replayed.
                shared.append_failing.store(true, Ordering::Release);
                let cut = seg.file.set_len(seg.pos).and_then(|_| seg.file.sync_all());
                seg.cap = 0;
                if sync_failed {
                    shared.halt.halt(format!("syncing journal {} failed: {err}", seg.path.display()));
                } else if let Err(e) = &cut {
                    shared.halt.halt(format!(
                        "a failed append ({err}) could not be cut off journal {}: {e}",
                        seg.path.display()
                    ));
                }
                let msg = format!("journal append failed: {err}");
                forget_txids(shared, live.iter().map(|e| &*e.op));
                for e in live {
                    poisoned.insert(e.basis, ());
                    let r = if shared.halt.is_on() {
                        shared.halt.error()
                    } else {
                        StoreError::Refused(msg.clone())
                    };
                    let _ = e.ack.send(Err(r));
                }
                finish_batch(shared, lanes, Vec::new(), Vec::new(), failed, last_seq, 0);
            }
        }
    }
}

/// Ends a batch: answers its durable operations (`acks`) and stages them. `handled` moves
/// before the answers, so a read that follows one waits until the operations are staged; they
/// are staged after them, so answers do not wait for the staging.
fn finish_batch(
    shared: &Shared,
    lanes: &Lanes,
    durable: Vec<Durable>,
    acks: Vec<tokio::sync::oneshot::Sender<Result<(), StoreError>>>,
    failed: Vec<Op>,
    last_seq: u64,
    bytes: u64,
) {
    shared.handled.store(last_seq, Ordering::Release);
    for a in acks {
        let _ = a.send(Ok(()));
    }
    lanes.stage(shared, Handled { durable, failed, last_seq, journal_bytes: bytes });
}

/// Where handled batches are staged. The journal thread stages them itself, right after
/// answering them: handing each batch to another thread cost a wake-up and a context switch
/// per batch, which on a small machine was a tenth of a deposit's CPU. A batch with an
/// operation that must list rows in storage (a deletion, which may read many rows, or wait
/// while storage reopens) goes to the applier thread instead, and so does every batch after it
/// until the applier has staged them all: batches are staged in order, and a slow listing never
/// holds up appends.
struct Lanes {
    applier: Arc<Mutex<Applier>>,
    atx: Sender<Handled>,
    /// Batches sent to the applier thread and not yet staged.
    queued: Arc<AtomicUsize>,
}

impl Lanes {
    fn stage(&self, shared: &Shared, mut h: Handled) {
        let slow = self.queued.load(Ordering::Acquire) > 0
            || h.durable.iter().any(|d| sled_store::lists_rows(&d.op));
        if slow {
            self.queued.fetch_add(1, Ordering::AcqRel);
            match self.atx.send(h) {
                Ok(()) => return,
                // The applier thread is gone (only when stopping, once checkpoints ended): here.
                Err(mpsc::SendError(back)) => {
                    self.queued.fetch_sub(1, Ordering::AcqRel);
                    h = back;
                }
            }
        }
        self.applier.lock().take(shared, Some(h));
    }
}

/// Starts segment `first_seq`: the zero-filled spare, renamed into place, or else an empty file.
fn rotate(shared: &Shared, first_seq: u64, zeroed: Option<File>) -> Result<Segment, StoreError> {
    let p = segment_path(&shared.dir, first_seq);
    let (file, cap) = match zeroed {
        Some(f) => {
            let cap = f.metadata().map_err(|e| io(&p, e))?.len();
            std::fs::rename(shared.dir.join(SPARE_NAME), &p).map_err(|e| io(&p, e))?;
            (f, cap)
        }
        None => {
            (OpenOptions::new().create(true).write(true).truncate(true).open(&p).map_err(|e| io(&p, e))?, 0)
        }
    };
    if let Err(e) = sync_dir(&shared.dir) {
        // No empty segment may sort after the current one, or after a crash that one would no
        // longer be the last and its torn tail would read as damage.
        let _ = std::fs::remove_file(&p);
        shared.halt.halt(format!("starting journal segment {}: {e}", p.display()));
        return Err(e);
    }
    shared.segments.lock().push((first_seq, p.clone()));
    Ok(Segment { file, path: p, pos: 0, cap, first_seq })
}

/// Stages the batches the journal thread hands over (see [`Lanes`]), and freezes the table once
/// it is due by time while no write arrives.
fn applier_thread(
    shared: Arc<Shared>,
    arx: Receiver<Handled>,
    applier: Arc<Mutex<Applier>>,
    queued: Arc<AtomicUsize>,
) {
    let tick = applier.lock().every.min(Duration::from_millis(500));
    loop {
        let h = match arx.recv_timeout(tick) {
            Ok(h) => Some(h),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let staged = h.is_some();
        #[cfg(test)]
        if staged {
            std::thread::sleep(Duration::from_millis(shared.slow_applier_ms.load(Ordering::Acquire)));
        }
        let go_on = applier.lock().take(&shared, h);
        if staged {
            queued.fetch_sub(1, Ordering::AcqRel);
        }
        if !go_on {
            break;
        }
    }
    applier.lock().close(&shared);
}

/// Stages durable operations in the memtable and hands full memtables to the checkpoint thread.
struct Applier {
    ctx: Sender<Arc<Memtable>>,
    every: Duration,
    since_checkpoint: u64,
    last_checkpoint: Instant,
}

impl Applier {
    fn new(ctx: Sender<Arc<Memtable>>, every: Duration) -> Applier {
        Applier { ctx, every, since_checkpoint: 0, last_checkpoint: Instant::now() }
    }

    /// Stages a handled batch (if any) and freezes the table when due; false once the
    /// checkpoint thread is gone.
    fn take(&mut self, shared: &Shared, h: Option<Handled>) -> bool {
        if let Some(h) = h {
            for d in &h.durable {
                stage(shared, d);
            }
            forget_txids(shared, h.durable.iter().map(|d| &*d.op).chain(h.failed.iter()));
            shared.processed.store(h.last_seq, Ordering::Release);
            shared.caught_up.notify_waiters();
            self.since_checkpoint += h.journal_bytes;
        }
        let bytes = shared.overlay.active_bytes();
        let due = bytes >= MEMTABLE_BYTES
            || self.since_checkpoint >= CHECKPOINT_BYTES
            || (bytes > 0 && self.last_checkpoint.elapsed() >= self.every);
        // While appends fail (a full disk) a sled write would fail too, and sled 0.34 refuses
        // everything after a failed write: the rows wait in memory, durable in the journal.
        if due && !shared.append_failing.load(Ordering::Acquire) {
            if let Some(m) = shared.overlay.freeze() {
                if self.ctx.send(m).is_err() {
                    return false;
                }
                self.since_checkpoint = 0;
                self.last_checkpoint = Instant::now();
            }
        }
        // Sled fell behind: hold the staging (and with it the reads and, on the journal thread,
        // the writes) rather than grow without bound.
        while shared.overlay.active_bytes() >= MEMTABLE_HARD_BYTES && shared.overlay.has_frozen() {
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// At shutdown: waits (bounded) for the checkpoint running, then hands over the last table.
    fn close(&mut self, shared: &Shared) {
        let deadline = Instant::now() + SHUTDOWN_WAIT;
        while shared.overlay.has_frozen() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !shared.append_failing.load(Ordering::Acquire) {
            if let Some(m) = shared.overlay.freeze() {
                let _ = self.ctx.send(m);
            }
        }
    }
}

/// Puts one durable operation's rows in the memtable. An operation that finds rows to delete
/// by listing them lists them through the memtable, so it sees every earlier row.
fn stage(shared: &Shared, d: &Durable) {
    let (seq, op) = (d.seq, &d.op);
    let rows_of = |r: &dyn Rows| {
        let mut rows = Vec::with_capacity(op.rows());
        match &d.spans {
            Some(spans) => {
                sled_store::rows_from_frame(r, &mut rows, op, &d.frame, spans, Some(shared.id_secret))
            }
            None => sled_store::rows_into(r, &mut rows, op, Some(shared.id_secret)),
        }
        .map(|_| rows)
    };
    let mut pause = Duration::from_millis(10);
    loop {
        let res = if sled_store::lists_rows(op) { shared.read(rows_of) } else { rows_of(&NoRows) };
        match res {
            Ok(rows) => return shared.overlay.stage(rows, seq),
            // Only a listing reads storage, and storage may be reopening: wait for it. The
            // operation is durable in the journal either way.
            Err(e) => {
                tracing::warn!(error = %e, seq, "cannot list rows for a journal record yet; retrying");
                std::thread::sleep(pause);
                pause = (pause * 2).min(RETRY_MAX);
            }
        }
    }
}

/// Rows of an operation that lists nothing never read storage.
struct NoRows;

impl Rows for NoRows {
    fn fetch(&self, _: &[u8]) -> Result<Option<sled::IVec>, StoreError> {
        Err(StoreError::Engine("an operation without listing read storage".into()))
    }
    fn range_rows(
        &self,
        _: &[u8],
        _: Option<&[u8]>,
        _: bool,
        _: usize,
    ) -> Result<Vec<(sled::IVec, sled::IVec)>, StoreError> {
        Err(StoreError::Engine("an operation without listing read storage".into()))
    }
}

/// Writes each frozen memtable into sled, flushes, records the checkpoint and deletes the
/// journal segments it covers; only then do reads stop looking at the table.
fn checkpoint_thread(shared: Arc<Shared>, crx: Receiver<Arc<Memtable>>) {
    yield_to_requests();
    while let Ok(m) = crx.recv() {
        let (started, bytes) = (Instant::now(), m.bytes());
        let mut pace = Pace::new(&shared);
        if !write_table(&shared, &m, &mut pace) {
            // Stopping with the table unwritten: keep it readable and the journal whole.
            break;
        }
        let written = started.elapsed();
        checkpoint(&shared);
        let flushed = started.elapsed();
        shared.overlay.release_frozen();
        // Freed here, paced. Reads look at the frozen table under the overlay's lock and keep
        // no reference to it, and the overlay let go of its own above: this one is the last.
        if let Ok(table) = Arc::try_unwrap(m) {
            table.drop_paced(|| pace.tick());
        }
        tracing::debug!(bytes, ?written, ?flushed, took = ?started.elapsed(), "checkpoint taken");
    }
}

/// Writes a frozen table into sled and flushes; false if it gave up because the store is
/// stopping (the journal still holds the rows: the next start replays them).
///
/// Sled is written only with room to spare on the disk: after an I/O error such as a full disk,
/// sled 0.34 refuses every later write, and some reads, until it is reopened, and reopening
/// needs room too (it writes a snapshot). While the disk is short of room the rows stay
/// durable in the journal and readable in the table. If a write fails anyway, sled is reopened
/// once there is room and the table written again. Writing the table over whatever sled
/// recovered is enough: sled holds at least everything up to the previous checkpoint, and the
/// table holds every row changed since.
fn write_table(shared: &Shared, m: &Memtable, pace: &mut Pace) -> bool {
    let mut warned = false;
    loop {
        if !wait_for_room(shared, m, &mut warned) {
            return false;
        }
        let res = shared
            .sled
            .read()
            .as_ref()
            .map(|s| s.write_table(m.rows(), m.last_seq(), CHECKPOINT_CHUNK, || pace.tick()));
        match res {
            Some(Ok(())) => {
                if shared.stalled.swap(false, Ordering::AcqRel) {
                    tracing::info!(seq = m.last_seq(), "storage takes checkpoints again");
                }
                return true;
            }
            // Only a full disk is retried: after any other failure (a failed sync above all)
            // what sled's files hold is unknown, and a reopen would trust the page cache.
            Some(Err(e)) if !e.is_disk_full() => {
                shared.halt.halt(format!("writing a checkpoint into storage failed: {e}"));
                return false;
            }
            // A full disk: said once, then retried once there is room.
            Some(Err(e)) if !shared.stalled.swap(true, Ordering::AcqRel) => {
                tracing::error!(error = %e, seq = m.last_seq(), "writing a checkpoint failed; reopening storage and retrying");
            }
            // Not reopened yet (short of room), or said already: try again.
            Some(Err(_)) | None => {}
        }
        if !wait_for_room(shared, m, &mut warned) {
            return false;
        }
        reopen(shared);
    }
}

/// Spreads a checkpoint's work: after each `PACE_WORK` of it, a rest `CHECKPOINT_PACE` times as
/// long. A table holds seconds of writes; written and freed flat out, it took most of a core
/// for half a second each time, and requests waited (deposits at 128 connections on two cores:
/// half the throughput and twice the latency in those windows). Behind (the next table already
/// half full) or stopping, it does not rest.
struct Pace<'a> {
    shared: &'a Shared,
    since: Instant,
}

/// Work between a checkpoint's rests (see [`Pace`]).
const PACE_WORK: Duration = Duration::from_millis(4);

impl Pace<'_> {
    fn new(shared: &Shared) -> Pace<'_> {
        Pace { shared, since: Instant::now() }
    }

    fn tick(&mut self) {
        let worked = self.since.elapsed();
        if worked < PACE_WORK {
            return;
        }
        let behind = self.shared.overlay.active_bytes() >= MEMTABLE_BYTES / 2;
        if !behind && !self.shared.stopping.load(Ordering::Acquire) {
            std::thread::sleep(worked * CHECKPOINT_PACE);
        }
        self.since = Instant::now();
    }
}

/// Waits until the disk has room for sled to take table `m` (twice its size, plus what a
/// reopen needs); false if the store stops meanwhile.
fn wait_for_room(shared: &Shared, m: &Memtable, warned: &mut bool) -> bool {
    let need = 2 * m.bytes() as u64 + ROOM_TO_SPARE;
    let mut pause = Duration::from_millis(10);
    loop {
        if shared.stopping.load(Ordering::Acquire) && (*warned || shared.stalled.load(Ordering::Acquire)) {
            return false;
        }
        // An unknown answer counts as room: the write itself then tells.
        match fs2::available_space(&shared.data_dir) {
            Ok(free) if free < need => {
                if !*warned {
                    *warned = true;
                    tracing::warn!(
                        free,
                        need,
                        "the disk is short of room; checkpoints wait, writes stay in the journal"
                    );
                }
            }
            _ => return true,
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(RETRY_MAX);
    }
}

fn reopen(shared: &Shared) {
    let mut slot = shared.sled.write();
    // The old handle must be gone before sled's file lock can be taken again.
    if let Some(s) = slot.take() {
        s.close();
    }
    let opened = SledStore::open(&shared.data_dir).and_then(|s| {
        let (held, marked) = (s.applied_seq()?, read_checkpoint(&shared.dir)?);
        if held < marked {
            return Err(super::sled_store::damaged(
                &shared.data_dir.join("db"),
                &format!(
                    "it reopened with writes up to journal record {held}, but {marked} were flushed to it"
                ),
            ));
        }
        Ok(s)
    });
    match opened {
        Ok(s) => *slot = Some(s),
        Err(e) => tracing::warn!(error = %e, "storage cannot be reopened yet"),
    }
}

/// Per user number, the main-account ids still queued and how many times. Hashed with seeded
/// foldhash (every deposit inserts and removes here; SipHash was 3 % of its instructions): a
/// client can only grow its own user's map, and only by writes still in flight.
type PendingTxids =
    HashMap<u64, HashMap<Text, u32, foldhash::fast::RandomState>, foldhash::fast::RandomState>;

fn forget_txids<'a>(shared: &Shared, ops: impl Iterator<Item = &'a Op>) {
    let mut map = shared.pending_txids.lock();
    for op in ops {
        let (no, ids) = main_txids(op);
        if ids.is_empty() {
            continue;
        }
        if let Some(m) = map.get_mut(&no) {
            for id in ids {
                if let Some(c) = m.get_mut(id) {
                    *c -= 1;
                    if *c == 0 {
                        m.remove(id);
                    }
                }
            }
            if m.is_empty() {
                map.remove(&no);
            }
        }
    }
}

const CHECKPOINT_FILE: &str = "checkpoint";

/// The journal record number the last completed checkpoint flushed into sled (0 if none).
fn read_checkpoint(jdir: &Path) -> Result<u64, StoreError> {
    let path = jdir.join(CHECKPOINT_FILE);
    match std::fs::read(&path) {
        Ok(b) => {
            let arr: [u8; 12] = b.as_slice().try_into().map_err(|_| {
                StoreError::Corrupt(format!("{} is damaged (length {})", path.display(), b.len()))
            })?;
            let (seq, crc) = arr.split_at(8);
            if crc32fast::hash(seq).to_le_bytes() != crc {
                return Err(StoreError::Corrupt(format!(
                    "{} is damaged (checksum mismatch)",
                    path.display()
                )));
            }
            let mut x = [0u8; 8];
            x.copy_from_slice(seq);
            Ok(u64::from_le_bytes(x))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(io(&path, e)),
    }
}

/// Records that sled holds every record up to `seq` (written aside, synced, then renamed).
fn write_checkpoint(jdir: &Path, seq: u64) -> Result<(), StoreError> {
    let tmp = jdir.join("checkpoint.tmp");
    let mut b = seq.to_le_bytes().to_vec();
    b.extend_from_slice(&crc32fast::hash(&seq.to_le_bytes()).to_le_bytes());
    let mut f = File::create(&tmp).map_err(|e| io(&tmp, e))?;
    f.write_all(&b).and_then(|_| f.sync_all()).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, jdir.join(CHECKPOINT_FILE)).map_err(|e| io(&tmp, e))?;
    sync_dir(jdir)
}

/// Flushes sled, then deletes every closed segment whose records that flush covers.
fn checkpoint(shared: &Shared) {
    if shared.append_failing.load(Ordering::Acquire) {
        return;
    }
    // What sled holds, not what the applier has seen: failed records are seen but never applied,
    // and the marker must never claim more than sled has.
    let flushed = match shared.sled.read().as_ref() {
        Some(s) => s.applied_seq().and_then(|covered| s.flush().map(|_| covered)),
        None => Err(StoreError::Engine("storage is reopening".into())),
    };
    let covered = match flushed {
        Ok(c) => c,
        Err(e) if e.is_disk_full() => {
            tracing::error!(error = %e, "sled flush failed; keeping the journal");
            return;
        }
        Err(e) => return shared.halt.halt(format!("flushing storage at a checkpoint failed: {e}")),
    };
    // The marker goes first: a segment is deleted only once the marker says sled holds it.
    if let Err(e) = write_checkpoint(&shared.dir, covered) {
        return shared.halt.halt(format!("recording a checkpoint failed: {e}"));
    }
    // Taken off the list under its lock, deleted after: the journal thread takes that lock to
    // start a segment, and must never wait for a deletion.
    let done: Vec<PathBuf> = {
        let mut segs = shared.segments.lock();
        // A segment is covered when the next one starts at or before covered + 1.
        let n = (1..segs.len()).take_while(|&i| segs[i].0 <= covered + 1).count();
        segs.drain(..n).map(|(_, p)| p).collect()
    };
    drop_segments(shared, &done);
}

/// Name of a covered segment while it is being deleted; start-up deletes any left over.
const DROPPING_EXT: &str = "dropping";
/// Step of a covered segment's deletion.
const DROP_STEP: u64 = 8 << 20;

/// Deletes covered segments, each cut down `DROP_STEP` at a time first. Measured on this
/// project's disk (ext4 mounted with `discard`): unlinking 4 x 64 MB at once stalled a
/// concurrent append's fdatasync 12-18 ms, cutting them down 8 MiB at a time first 2-3 ms
/// (`scripts/drop_segment.py`). Each is renamed first (and the rename synced), so a crash
/// midway leaves a file that replay skips and start-up deletes, never a segment cut short,
/// which would read as damage.
fn drop_segments(shared: &Shared, segs: &[PathBuf]) {
    let dir = &shared.dir;
    let mut renamed = Vec::with_capacity(segs.len());
    for p in segs {
        let gone = p.with_extension(DROPPING_EXT);
        match std::fs::rename(p, &gone) {
            Ok(()) => renamed.push(gone),
            Err(e) => {
                tracing::warn!(error = %e, file = %p.display(), "could not delete a covered journal segment")
            }
        }
    }
    if renamed.is_empty() {
        return;
    }
    if let Err(e) = sync_dir(dir) {
        // Unsynced renames could come back under the old names: leave the files whole.
        return shared.halt.halt(format!("deleting covered journal segments: {e}"));
    }
    for p in &renamed {
        if let Err(e) = cut_and_remove(p) {
            tracing::warn!(error = %e, file = %p.display(), "could not delete a covered journal segment");
        }
    }
}

fn cut_and_remove(p: &Path) -> std::io::Result<()> {
    let f = OpenOptions::new().write(true).open(p)?;
    let mut len = f.metadata()?.len();
    while len > 0 {
        len = len.saturating_sub(DROP_STEP);
        f.set_len(len)?;
    }
    drop(f);
    std::fs::remove_file(p)
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

    fn commit(&self, op: Box<Op>, basis: u64) -> BoxFuture<'static, Result<(), StoreError>> {
        let timer = crate::metrics::CommitTimer::start(op.rows());
        let (ack, rx) = tokio::sync::oneshot::channel();
        let queued = (|| {
            if self.shared.halt.is_on() {
                return Err(self.shared.halt.error());
            }
            let mut sub = self.submit.lock();
            let seq = sub.next_seq;
            let tx = sub.tx.as_ref().ok_or_else(|| StoreError::Engine("storage is closed".into()))?;
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
                return Err(StoreError::Engine("the journal thread stopped".into()));
            }
            sub.next_seq += 1;
            Ok(())
        })();
        Box::pin(async move {
            let _timer = timer;
            queued?;
            rx.await.map_err(|_| StoreError::Engine("the journal thread stopped".into()))?
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
                    due_date: Some(at(i)),
                    fixed_amount: at(i + 1),
                    amount_due: at(i + 2),
                    account_type: "bill ü".into(),
                    freq: Some(at(i) as u32),
                    periods: Frac::int(at(i + 3) % 1000),
                });
                let kind = if grand.is_some() { Kind::Grandchild } else { Kind::Child };
                let mut a = Account::new(wide(i) as u128, format!("n{i}✓").into(), kind, Some(7), grand);
                a.balance = at(i + 4);
                a.sub_balance = wide(i + 5);
                a.children = vec![1, u128::MAX, wide(i) as u128];
                Arc::new(a)
            })
            .collect();
        let rec = |i: usize| TxRecord {
            deposit: i.is_multiple_of(2),
            by: "User".into(),
            id: format!("t{}", at(i)).into(),
            channel: "c".repeat(i % 3).into(),
            amount: at(i),
            balance: at(i + 1),
            amount_due: wide(i + 2),
            overall_balance: -wide(i + 3),
            date: at(i + 4),
        };
        let change = crate::domain::engine::Change {
            accounts,
            removed: if shape & 4 != 0 { vec![(9, at(0) as u64)] } else { Vec::new() },
            records: (0..3).map(|i| (wide(i) as u128, at(i) as u64, rec(i))).collect(),
            days: (0..2)
                .map(|i| {
                    let s = DaySums {
                        dep_user: wide(i),
                        wd_user: -wide(i + 1),
                        dep_all: 0,
                        dep_alloc: wide(i + 2),
                    };
                    (3, at(i), s)
                })
                .collect(),
            track: (0..(shape % 3) as usize)
                .map(|i| (4, at(i), TrackRow { amount_due: at(i + 1), balance: at(i + 2) }))
                .collect(),
            ledger: Default::default(),
            main_txids: vec!["a".into(), format!("{}", at(3)).into()],
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
        rt.block_on(store.commit(Box::new(commit(&n(100), 5)), 0)).unwrap();
        rt.block_on(store.commit(Box::new(commit(&n(200), 1)), 0)).unwrap();
        let balances = || {
            let (_, tree) = rt.block_on(store.load_user("user5")).unwrap().unwrap();
            tree.accounts.values().map(|a| a.balance).collect::<Vec<i64>>()
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
            rt.block_on(store.commit(Box::new(commit(&[5, 7, 11, 13, round], 1)), 0)).unwrap();
            drop(store);
        }
    }

    #[test]
    fn a_deletion_encodes_whole_and_carries_no_spans() {
        let o = op(3);
        let (frame, spans) = encode_frame_body(&o).unwrap();
        let whole = bincode::serde::encode_to_vec(&o, bincode::config::standard()).unwrap();
        assert_eq!(&frame[HEADER + 1..frame.len() - 1], &whole[..]);
        assert!(spans.is_none());
    }

    fn op(n: u64) -> Op {
        Op::DeleteUser {
            user: UserRecord {
                user_id: format!("u{n}").into(),
                user_no: n,
                password_hash: None,
                role: "user".into(),
                created_at: 0,
                root: 1,
                ledger: Default::default(),
            },
        }
    }

    fn segment(n: u64) -> Vec<u8> {
        (1..=n).flat_map(|s| encode_frame(s, &op(s)).unwrap()).collect()
    }

    #[test]
    fn format_1_payloads_still_read_as_commits_without_sync_or_keys() {
        let user = match op(4) {
            Op::DeleteUser { user } => user,
            Op::Commit { .. } => unreachable!(),
        };
        let commit = Op::Commit { user, change: Default::default(), sync: None, idem: None };
        let mut p = vec![PAYLOAD_FORMAT];
        bincode::serde::encode_into_std_write(&commit, &mut p, bincode::config::standard()).unwrap();
        // Format 1 had no `sync` and `idem` fields: the same bytes without their two `None`s.
        let mut v1 = p[..p.len() - 2].to_vec();
        v1[0] = PAYLOAD_FORMAT_V1;
        assert!(matches!(decode_payload(Path::new("x"), 1, &v1).unwrap(),
            Op::Commit { user, sync: None, idem: None, .. } if user.user_no == 4));
        assert!(decode_payload(Path::new("x"), 1, &p).is_ok());
    }

    #[test]
    fn frames_read_back_in_order() {
        let b = segment(5);
        let (frames, tail) = parse_segment(Path::new("x"), &b, true).unwrap();
        assert!(matches!(tail, Tail::Clean));
        assert_eq!(frames.iter().map(|f| f.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
        let f = &frames[2];
        assert!(matches!(decode_payload(Path::new("x"), 3, &b[f.payload_start..f.end]).unwrap(),
            Op::DeleteUser { user } if user.user_no == 3));
        // The payload handed on stops before the end byte: bincode reads it all.
        for f in &frames {
            let body = &b[f.payload_start + 1..f.end];
            let (_, used): (Op, usize) =
                bincode::serde::decode_from_slice(body, bincode::config::standard()).unwrap();
            assert_eq!(used, body.len());
            assert_eq!(b[f.end], END);
        }
    }

    #[test]
    fn a_cut_last_record_is_a_torn_tail_and_only_it_is_dropped() {
        let b = segment(4);
        let whole = segment(3).len();
        for cut in [whole + 1, whole + HEADER - 1, whole + HEADER + 1, b.len() - 1] {
            let (frames, tail) = parse_segment(Path::new("x"), &b[..cut], true).unwrap();
            assert_eq!(frames.len(), 3, "cut at {cut}");
            assert!(matches!(tail, Tail::Torn(off) if off == whole));
        }
        // A zero-filled tail (a zero-filled segment's unused space, or a size that grew while
        // the data never landed) holds nothing: every record before it is kept.
        let mut z = segment(3);
        z.extend_from_slice(&[0u8; 100]);
        for last in [true, false] {
            let (frames, tail) = parse_segment(Path::new("x"), &z, last).unwrap();
            assert!(frames.len() == 3 && matches!(tail, Tail::Clean));
        }
        // In a closed segment, a cut record is damage, never silently dropped.
        assert!(parse_segment(Path::new("x"), &b[..b.len() - 1], false).is_err());
    }

    #[test]
    fn a_flipped_byte_anywhere_is_refused_with_file_and_offset() {
        // Also in a zero-filled segment, where the written part ends before the file does.
        for zeros in [0, 4096] {
            let mut b = segment(4);
            b.resize(b.len() + zeros, 0);
            let written = segment(4).len();
            for i in 0..written {
                for bit in [0x01, 0x40, 0x80] {
                    let mut d = b.clone();
                    d[i] ^= bit;
                    match parse_segment(Path::new("seg.wal"), &d, true) {
                        Err(StoreError::Corrupt(m)) => {
                            assert!(m.contains("seg.wal") && m.contains("offset"), "{m}")
                        }
                        other => panic!("byte {i} bit {bit}: {:?}", other.map(|(f, _)| f.len())),
                    }
                }
            }
        }
    }

    /// Frames of about 700 bytes: each spans a sector boundary.
    fn big_segment(n: u64) -> Vec<u8> {
        (1..=n)
            .flat_map(|s| {
                let mut o = op(s);
                if let Op::DeleteUser { user } = &mut o {
                    user.user_id = format!("u{s}-{}", "x".repeat(700)).into();
                }
                encode_frame(s, &o).unwrap()
            })
            .collect()
    }

    /// Batches as the journal thread writes them: a marker, then big frames `from..=to`.
    fn batch(from: u64, to: u64) -> Vec<u8> {
        let mut b = batch_marker(from).to_vec();
        b.extend((from..=to).flat_map(|s| {
            let mut o = op(s);
            if let Op::DeleteUser { user } = &mut o {
                user.user_id = format!("u{s}-{}", "x".repeat(700)).into();
            }
            encode_frame(s, &o).unwrap()
        }));
        b
    }

    /// A power cut keeps any subset of the last batch's sectors (the only unsynced one): with
    /// no batch after the damage and a sector that never landed, it is a torn tail, dropped
    /// from its first damaged record. The same damage before a later batch's marker is in
    /// synced, acknowledged data: refused. So is damage in the last batch where every sector
    /// landed (a flipped byte).
    #[test]
    fn a_last_batch_torn_in_any_sectors_is_dropped_and_damage_before_a_later_batch_is_refused() {
        let (first, second) = (batch(1, 10), batch(11, 20));
        let mut seg = [first.clone(), second.clone()].concat();
        seg.resize(seg.len().next_multiple_of(4096) + 8192, 0);
        let seqs = |b: &[u8]| -> Result<(Vec<u64>, Option<usize>), String> {
            parse_segment(Path::new("seg.wal"), b, true)
                .map(|(f, t)| {
                    let torn = match t {
                        Tail::Torn(o) => Some(o),
                        Tail::Clean => None,
                    };
                    (f.iter().map(|f| f.seq).collect(), torn)
                })
                .map_err(|e| e.to_string())
        };
        assert_eq!(seqs(&seg).unwrap(), ((1..=20).collect(), None));
        // Any one sector of the second batch lost, the first sector shared with the first
        // batch losing only the second's bytes: the first batch whole, the second cut at its
        // first damaged record.
        let start = first.len();
        for lost in (start / SECTOR..(start + second.len()).div_ceil(SECTOR)).map(|s| s * SECTOR) {
            let mut b = seg.clone();
            b[lost.max(start)..lost + SECTOR].fill(0);
            let (got, torn) = seqs(&b).unwrap_or_else(|e| panic!("sector at {lost}: {e}"));
            let torn = torn.unwrap_or_else(|| panic!("sector at {lost}: not torn"));
            assert!(torn >= start && torn <= lost.max(start), "sector at {lost}: torn at {torn}");
            assert!(got.len() >= 10 && got[..10] == (1..=10).collect::<Vec<_>>()[..], "{got:?}");
        }
        // Several sectors of it, the marker's among them.
        let mut b = seg.clone();
        b[start..(start + 1).next_multiple_of(SECTOR)].fill(0);
        b[start + 2048..start + 2048 + SECTOR].fill(0);
        assert_eq!(seqs(&b).unwrap(), ((1..=10).collect(), Some(start)));
        // A sector of the first batch lost, the second whole after it: refused.
        for lost in [SECTOR, 3 * SECTOR, (start - 1) / SECTOR * SECTOR] {
            let mut b = seg.clone();
            b[lost..(lost + SECTOR).min(start)].fill(0);
            let e = seqs(&b).expect_err("damage before a later batch");
            assert!(e.contains("seg.wal") && e.contains("damaged"), "{e}");
        }
        // A flipped byte in the last batch, every sector landed: refused.
        let mut b = seg.clone();
        b[start + 1500] ^= 0x40;
        assert!(seqs(&b).is_err());
    }

    /// In a zero-filled segment a torn append shows as a last record whose sectors from some
    /// boundary on are still zeros: it is dropped, and only it.
    #[test]
    fn a_record_ending_in_the_zeros_of_a_filled_segment_is_a_torn_tail() {
        let whole = big_segment(3).len();
        let full = big_segment(4);
        let cuts: Vec<usize> = (whole + 1..full.len()).filter(|c| c % SECTOR == 0).collect();
        assert!(!cuts.is_empty());
        for &cut in &cuts {
            let mut b = full[..cut].to_vec();
            b.resize(full.len() + 4096, 0);
            let (frames, tail) = parse_segment(Path::new("x"), &b, true).unwrap();
            assert_eq!(frames.len(), 3, "landed up to {cut}");
            assert!(matches!(tail, Tail::Torn(off) if off == whole), "landed up to {cut}");
            // Never in a closed segment: there it is damage.
            assert!(parse_segment(Path::new("x"), &b, false).is_err(), "landed up to {cut}");
        }
        // Its sectors landing out of order (a hole of zeros, the end byte on disk) is not told
        // apart from damage: refused, never dropped.
        let mut b = full.clone();
        let hole = whole + HEADER + 2;
        b[hole..hole + 3].fill(0);
        assert!(parse_segment(Path::new("x"), &b, true).is_err());
        // Nor is a damaged end byte turned to zero inside its record's last sector.
        let mut b = full.clone();
        b.resize(full.len() + 4096, 0);
        assert_ne!((full.len() - 1) % SECTOR, 0, "the end byte starts a sector: pick another size");
        b[full.len() - 1] = 0;
        assert!(matches!(parse_segment(Path::new("x"), &b, true), Err(StoreError::Corrupt(_))));
    }

    /// A last record whose end byte starts a sector, damaged to zero: the written part then
    /// seems to end a sector earlier, as if the append were torn, but the rest of the record
    /// checks out, so it landed: refused, never dropped as a torn tail.
    #[test]
    fn a_damaged_end_byte_alone_in_its_sector_is_refused_not_dropped() {
        let head = segment(3);
        let frame_with = |k: usize| {
            let mut o = op(4);
            if let Op::DeleteUser { user } = &mut o {
                user.user_id = format!("u4-{}", "x".repeat(k)).into();
            }
            encode_frame(4, &o).unwrap()
        };
        let k = (0..SECTOR)
            .find(|&k| (head.len() + frame_with(k).len() - 1).is_multiple_of(SECTOR))
            .expect("some length puts the end byte at a sector start");
        let mut b = head.clone();
        b.extend_from_slice(&frame_with(k));
        let end = b.len() - 1;
        b.resize(b.len() + 4096, 0);
        let (frames, _) = parse_segment(Path::new("x"), &b, true).unwrap();
        assert_eq!(frames.len(), 4, "intact, it reads whole");
        b[end] = 0;
        match parse_segment(Path::new("seg.wal"), &b, true) {
            Err(StoreError::Corrupt(m)) => {
                assert!(m.contains("seg.wal") && m.contains(&format!("offset {}", head.len())), "{m}");
                assert!(m.contains("end byte"), "{m}");
            }
            other => panic!(
                "a damaged acknowledged record was taken for a torn tail: {:?}",
                other.map(|(f, _)| f.len())
            ),
        }
    }

    /// A frame of a later format ("PJN4", its header checksum whole) asks for a newer binary.
    #[test]
    fn a_newer_frame_format_refuses_as_newer_not_as_damage() {
        let mut b = segment(3);
        let at = segment(2).len();
        b[at + 3] = b'4';
        let hcrc = crc32fast::hash(&b[at..at + 16]);
        b[at + 16..at + 20].copy_from_slice(&hcrc.to_le_bytes());
        match parse_segment(Path::new("seg.wal"), &b, true) {
            Err(StoreError::NewerFormat(m)) => assert!(m.contains("PJN4") && m.contains("upgrade"), "{m}"),
            other => panic!("{:?}", other.map(|(f, _)| f.len())),
        }
        // With a damaged header checksum it is damage, as before.
        b[at + 16] ^= 1;
        assert!(matches!(parse_segment(Path::new("seg.wal"), &b, true), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn segments_must_chain_on_from_storage_and_from_each_other() {
        let a = PathBuf::from("j/00000000000000000101.wal");
        let b = PathBuf::from("j/00000000000000000201.wal");
        // The first follows on from what storage holds (records up to 100, or further).
        assert!(check_chain(&a, None, 100, Some(101)).is_ok());
        assert!(check_chain(&a, None, 150, Some(120)).is_ok());
        let e = check_chain(&a, None, 99, Some(101)).unwrap_err().to_string();
        assert!(e.contains("101.wal") && e.contains("missing"), "{e}");
        // The next starts one past the previous one's last record; refused writes may leave a
        // gap before its own first record.
        assert!(check_chain(&b, Some((&a, Some(200))), 0, Some(201)).is_ok());
        assert!(check_chain(&b, Some((&a, Some(200))), 0, Some(205)).is_ok());
        assert!(check_chain(&b, Some((&a, None)), 0, None).is_err());
        let e = check_chain(&b, Some((&a, Some(150))), 0, Some(201)).unwrap_err().to_string();
        assert!(e.contains("201.wal") && e.contains("101.wal") && e.contains("record 150"), "{e}");
        // No record before its name, and a name that is a record number.
        assert!(check_chain(&b, Some((&a, Some(200))), 0, Some(199)).is_err());
        assert!(check_chain(Path::new("j/x.wal"), None, 0, None).is_err());
    }

    /// Frames written before the end byte (magic "PJNL") still read, and their payload decodes.
    #[test]
    fn frames_without_the_end_byte_still_read() {
        let mut b = Vec::new();
        for s in 1..=3u64 {
            let mut f = vec![0u8; HEADER];
            f.push(PAYLOAD_FORMAT);
            bincode::serde::encode_into_std_write(op(s), &mut f, bincode::config::standard()).unwrap();
            let len = (f.len() - HEADER) as u32;
            f[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            f[4..8].copy_from_slice(&len.to_le_bytes());
            let pcrc = crc32fast::hash(&f[HEADER..]);
            f[20..24].copy_from_slice(&pcrc.to_le_bytes());
            stamp(&mut f, s);
            b.extend_from_slice(&f);
        }
        b.extend_from_slice(&segment(5)[segment(3).len()..]);
        let (frames, tail) = parse_segment(Path::new("x"), &b, true).unwrap();
        assert!(matches!(tail, Tail::Clean));
        assert_eq!(frames.len(), 5);
        for f in &frames {
            assert!(matches!(decode_payload(Path::new("x"), f.seq, &b[f.payload_start..f.end]).unwrap(),
                Op::DeleteUser { user } if user.user_no == f.seq));
        }
        // An old frame cut short is still a torn tail.
        let old_end = frames[2].end;
        let (frames, tail) = parse_segment(Path::new("x"), &b[..old_end - 1], true).unwrap();
        assert!(frames.len() == 2 && matches!(tail, Tail::Torn(_)));
    }
}
