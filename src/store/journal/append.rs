//! Group commit: the journal thread appends queued operations as one batch, syncs once,
//! answers them in order and stages them; segments are zero-filled ahead by the spare thread
//! and started (rotated) when full.

use std::collections::HashSet;

use super::*;

/// The segment being appended to: `pos` is where the next batch goes; `cap` the size it was
/// zero-filled to (0: it grows with each append).
pub(super) struct Segment {
    pub(super) file: JFile,
    pub(super) path: PathBuf,
    pub(super) pos: u64,
    pub(super) cap: u64,
    /// The sequence number in its name: one past the last record written before it, so
    /// segments chain (replay checks that none is missing).
    pub(super) first_seq: u64,
}

/// The next segment, zero-filled by the spare thread.
pub(super) enum Spare {
    Idle,
    Pending,
    Ready(JFile),
    Failed(Instant),
}

pub(super) fn journal_thread(shared: Arc<Shared>, rx: Receiver<Entry>, lanes: Lanes, seg: Segment) {
    let (req_tx, req_rx) = mpsc::channel::<u64>();
    let (done_tx, done_rx) = mpsc::channel::<Result<JFile, String>>();
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
pub(super) fn yield_to_requests() {
    // SAFETY: gettid and setpriority take no pointers; on Linux a thread id names one thread.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10) };
    if r != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "background thread keeps its priority");
    }
}

/// Zero-fills spare segments on request, off the journal thread (a segment takes seconds).
pub(super) fn spare_thread(shared: &Shared, req: Receiver<u64>, done: Sender<Result<JFile, String>>) {
    yield_to_requests();
    while let Ok(size) = req.recv() {
        if done.send(prepare_spare(shared, size)).is_err() {
            break;
        }
    }
}

/// Zero-fills `spare.tmp` to `size` and syncs it; gives up when the store stops (the next open
/// deletes what is left). A failed sync halts the store, as the journal's own does.
pub(super) fn prepare_spare(shared: &Shared, size: u64) -> Result<JFile, String> {
    let (dir, stop) = (&shared.dir, &shared.stopping);
    let path = dir.join(SPARE_NAME);
    // The spare never takes a disk's last space: a full disk must fail appends the usual way,
    // and sled's checkpoints need room too.
    let free = shared.fs.available_space(dir).map_err(|e| format!("free space of {}: {e}", dir.display()))?;
    if free < size.saturating_mul(2).saturating_add(ROOM_TO_SPARE) {
        return Err(format!("{free} bytes free, too few for a spare segment of {size}"));
    }
    let synced = |r: std::io::Result<()>| r.map_err(|e| (true, e));
    let fill = || -> Result<JFile, (bool, std::io::Error)> {
        let f = shared.fs.create(&path).map_err(|e| (false, e))?;
        let zeros = vec![0u8; SPARE_SYNC_STEP as usize];
        let mut at = 0u64;
        while at < size {
            if stop.load(Ordering::Acquire) {
                return Err((false, std::io::Error::other("the store is stopping")));
            }
            let n = (size - at).min(zeros.len() as u64) as usize;
            f.write_all_at(&zeros[..n], at).map_err(|e| (false, e))?;
            at += n as u64;
            // Written out as it goes, so no large burst of dirty pages delays the journal's syncs.
            synced(f.sync_data())?;
        }
        synced(f.sync_all())?;
        Ok(f)
    };
    fill().map_err(|(sync_failed, e)| {
        // Halted first: the journal thread acknowledges nothing more from here.
        if sync_failed {
            shared.halt.halt(format!("syncing {} failed: {e}", path.display()));
        }
        let _ = shared.fs.remove(&path);
        format!("{}: {e}", path.display())
    })
}

pub(super) fn append_loop(
    shared: &Shared,
    rx: Receiver<Entry>,
    lanes: &Lanes,
    mut seg: Segment,
    spare_req: Sender<u64>,
    spare_done: Receiver<Result<JFile, String>>,
) {
    let seg_bytes = shared.segment_bytes;
    let prepare_after = seg_bytes / PREPARE_SHARE;
    let mut spare = Spare::Idle;
    let mut poisoned = Poisoned::default();
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
        // Once the store is halted (a failed sync, or a failed append that could not be cut
        // off), nothing more is appended: every later entry fails until a restart.
        let broken = shared.halt.is_on();
        // Frames are encoded here rather than on the async workers, which on a small machine
        // are what limits the write rate; this thread mostly waits for the disk. One that
        // cannot be encoded fails like a failed append: with every write built on it.
        let mut refused = false;
        let batch: Vec<Entry> = batch
            .into_iter()
            .filter_map(|mut e| {
                if broken || poisoned.refuses(&e.op, e.basis) {
                    refused = true;
                    return Some(e); // refused below, left unencoded (every frame has bytes)
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
                        poisoned.insert(&e.op, e.basis);
                        forget_txids(shared, std::iter::once(&*e.op));
                        let _ = e.ack.send(Err(err));
                        None
                    }
                }
            })
            .collect();
        // (An entry is most of a KB: the usual batch, all of it live, is not copied apart.)
        let (live, dead): (Vec<Entry>, Vec<Entry>) =
            if !refused { (batch, Vec::new()) } else { batch.into_iter().partition(|e| !e.frame.is_empty()) };
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
            finish_batch(shared, lanes, Vec::new(), Vec::new(), last_seq, 0);
            continue;
        }
        fill_batch(&mut buf, live[0].seq, live.iter().map(|e| &e.frame[..]));
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
        let written = match injected_failure(shared) {
            Some(failure) => Err(failure),
            None => {
                let _timer = crate::metrics::flush_timer();
                write_batch(&seg, &buf)
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
                finish_batch(shared, lanes, durable, acks, last_seq, buf.len() as u64);
            }
            Err((sync_failed, err)) => {
                fail_batch(shared, &mut seg, sync_failed, &err);
                let msg = format!("journal append failed: {err}");
                forget_txids(shared, live.iter().map(|e| &*e.op));
                for e in live {
                    poisoned.insert(&e.op, e.basis);
                    let r = if shared.halt.is_on() {
                        shared.halt.error()
                    } else {
                        StoreError::Refused(msg.clone())
                    };
                    let _ = e.ack.send(Err(r));
                }
                finish_batch(shared, lanes, Vec::new(), Vec::new(), last_seq, 0);
            }
        }
    }
}

/// Bases of failed writes: a later write with one of them was computed from a state that
/// held the lost write, so it is refused too (see [`Store::commit`]). Bounded by users, not by
/// failures: a user's writes in flight all share one basis, and its writer computes afresh, on a
/// new basis, only once every one of them was answered (`Users::lock`). So the first write of a
/// user on another basis shows that no write queued after it refers to the failed one, and the
/// entry goes: at most one per user whose last write failed.
#[derive(Default)]
pub(super) struct Poisoned {
    bases: HashSet<u64>,
    /// The failed basis of each user that has one, by user id (the writer's lock is per id).
    by_user: HashMap<Text, u64>,
}

impl Poisoned {
    /// Whether the write `op` on `basis` builds on a failed write. A write of a user on another
    /// basis than its failed one first clears that one.
    pub(super) fn refuses(&mut self, op: &Op, basis: u64) -> bool {
        if self.bases.is_empty() {
            return false;
        }
        let user = &op.user().user_id;
        if let Some(&failed) = self.by_user.get(user).filter(|&&b| b != basis) {
            self.by_user.remove(user);
            self.forget(failed);
        }
        self.bases.contains(&basis)
    }

    /// Records that the write `op` on `basis` failed.
    pub(super) fn insert(&mut self, op: &Op, basis: u64) {
        let user = op.user().user_id.clone();
        if let Some(old) = self.by_user.insert(user, basis).filter(|&b| b != basis) {
            self.forget(old);
        }
        self.bases.insert(basis);
    }

    /// Drops `basis` unless another user's failed write holds it too (bases are per load in
    /// `Users`, but a caller such as `pfm migrate` passes one for all).
    fn forget(&mut self, basis: u64) {
        if !self.by_user.values().any(|&b| b == basis) {
            self.bases.remove(&basis);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.bases.len().max(self.by_user.len())
    }
}

/// A batch as it is appended: its marker, then its records' frames.
pub(super) fn fill_batch<'a>(buf: &mut Vec<u8>, first_seq: u64, frames: impl Iterator<Item = &'a [u8]>) {
    buf.clear();
    buf.extend_from_slice(&batch_marker(first_seq));
    for f in frames {
        buf.extend_from_slice(f);
    }
}

/// Appends a batch at the segment's position and syncs it. `Err((sync_failed, error))`: whether
/// the write went through and its sync failed.
pub(super) fn write_batch(seg: &Segment, buf: &[u8]) -> Result<(), (bool, std::io::Error)> {
    seg.file.write_all_at(buf, seg.pos).map_err(|e| (false, e))?;
    seg.file.sync_data().map_err(|e| (true, e))
}

/// After a failed append: cuts the partial append off so the file ends on a whole record again
/// (the batch is then known not to be durable). After a failed write (a full disk) the journal
/// goes on, in a segment that grows from here; after a failed sync it stops (see `Halt`), the
/// cut only keeps the refused batch from being replayed.
pub(super) fn fail_batch(shared: &Shared, seg: &mut Segment, sync_failed: bool, err: &std::io::Error) {
    tracing::error!(error = %err, file = %seg.path.display(), sync_failed, "journal append failed; the batch is refused");
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
}

/// Ends a batch: answers its durable operations (`acks`) and stages them. `handled` moves
/// before the answers, so a read that follows one waits until the operations are staged; they
/// are staged after them, so answers do not wait for the staging.
pub(super) fn finish_batch(
    shared: &Shared,
    lanes: &Lanes,
    durable: Vec<Durable>,
    acks: Vec<tokio::sync::oneshot::Sender<Result<(), StoreError>>>,
    last_seq: u64,
    bytes: u64,
) {
    shared.handled.store(last_seq, Ordering::Release);
    for a in acks {
        let _ = a.send(Ok(()));
    }
    lanes.stage(shared, Handled { durable, last_seq, journal_bytes: bytes });
}

/// Where handled batches are staged. The journal thread stages them itself, right after
/// answering them: handing each batch to another thread cost a wake-up and a context switch
/// per batch, which on a small machine was a tenth of a deposit's CPU. A batch with an
/// operation that must list rows in storage (a deletion, which may read many rows, or wait
/// while storage reopens) goes to the applier thread instead, and so does every batch after it
/// until the applier has staged them all: batches are staged in order, and a slow listing never
/// holds up appends.
pub(super) struct Lanes {
    pub(super) applier: Arc<Mutex<Applier>>,
    pub(super) atx: Sender<Handled>,
    /// Batches sent to the applier thread and not yet staged.
    pub(super) queued: Arc<AtomicUsize>,
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
pub(super) fn rotate(shared: &Shared, first_seq: u64, zeroed: Option<JFile>) -> Result<Segment, StoreError> {
    let p = segment_path(&shared.dir, first_seq);
    let (file, cap) = match zeroed {
        Some(f) => {
            let cap = f.len().map_err(|e| io(&p, e))?;
            shared.fs.rename(&shared.dir.join(SPARE_NAME), &p).map_err(|e| io(&p, e))?;
            (f, cap)
        }
        None => (shared.fs.create(&p).map_err(|e| io(&p, e))?, 0),
    };
    if let Err(e) = sync_dir(&*shared.fs, &shared.dir) {
        // No empty segment may sort after the current one, or after a crash that one would no
        // longer be the last and its torn tail would read as damage.
        let _ = shared.fs.remove(&p);
        shared.halt.halt(format!("starting journal segment {}: {e}", p.display()));
        return Err(e);
    }
    shared.segments.lock().push((first_seq, p.clone()));
    Ok(Segment { file, path: p, pos: 0, cap, first_seq })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::tree::Ledger;

    fn delete(user: &str) -> Op {
        let user = UserRecord {
            user_id: user.into(),
            user_no: 1,
            password_hash: None,
            role: "user".into(),
            created_at: 0,
            root: 1,
            ledger: Ledger::default(),
        };
        Op::DeleteUser { user }
    }

    /// A failure refuses every later write on its basis until its user writes on a new one:
    /// failures without end, each followed by a fresh write, keep at most one entry per user.
    #[test]
    fn failed_bases_stay_one_per_user_and_go_once_the_user_computes_afresh() {
        let mut p = Poisoned::default();
        let users: Vec<Op> = (0..50).map(|i| delete(&format!("u{i}"))).collect();
        let outsider = delete("outsider");
        let mut basis = 0u64;
        for _ in 0..200 {
            for op in &users {
                basis += 1;
                assert!(!p.refuses(op, basis), "a fresh basis is never refused");
                p.insert(op, basis);
                assert!(p.refuses(op, basis), "a write built on the failed one");
                assert!(p.refuses(&outsider, basis), "the same basis, whoever sends it");
            }
            assert!(p.len() <= users.len(), "{} entries", p.len());
        }
        // Each user writes once more, on a new basis: nothing is left.
        for op in &users {
            basis += 1;
            assert!(!p.refuses(op, basis));
        }
        assert_eq!(p.len(), 0);
        // One basis shared by two users' failed writes stays until both have moved on.
        p.insert(&users[0], 7);
        p.insert(&users[1], 7);
        assert!(!p.refuses(&users[0], 8));
        assert!(p.refuses(&users[2], 7));
        assert!(!p.refuses(&users[1], 9));
        assert!(!p.refuses(&users[2], 7));
        assert_eq!(p.len(), 0);
    }
}
