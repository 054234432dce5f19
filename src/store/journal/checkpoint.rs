//! Checkpoints: a frozen memtable is written into sled and flushed, the marker records how far
//! sled holds the journal, and covered segments are deleted.

use super::*;

/// Writes each frozen memtable into sled, flushes, records the checkpoint and deletes the
/// journal segments it covers; only then do reads stop looking at the table.
pub(super) fn checkpoint_thread(shared: Arc<Shared>, crx: Receiver<Arc<Memtable>>) {
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
pub(super) fn write_table(shared: &Shared, m: &Memtable, pace: &mut Pace) -> bool {
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
pub(super) struct Pace<'a> {
    pub(super) shared: &'a Shared,
    pub(super) since: Instant,
}

/// Work between a checkpoint's rests (see [`Pace`]).
pub(super) const PACE_WORK: Duration = Duration::from_millis(4);

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
pub(super) fn wait_for_room(shared: &Shared, m: &Memtable, warned: &mut bool) -> bool {
    let need = 2 * m.bytes() as u64 + ROOM_TO_SPARE;
    let mut pause = Duration::from_millis(10);
    loop {
        if shared.stopping.load(Ordering::Acquire) && (*warned || shared.stalled.load(Ordering::Acquire)) {
            return false;
        }
        // An unknown answer counts as room: the write itself then tells.
        match shared.fs.available_space(&shared.data_dir) {
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

pub(super) fn reopen(shared: &Shared) {
    let mut slot = shared.sled.write();
    // The old handle must be gone before sled's file lock can be taken again.
    if let Some(s) = slot.take() {
        s.close();
    }
    let opened = SledStore::open_with_cache(&shared.data_dir, shared.sled_cache).and_then(|s| {
        let (held, marked) = (s.applied_seq()?, read_checkpoint(&*shared.fs, &shared.dir)?);
        if held < marked {
            return Err(crate::store::sled_store::damaged(
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

pub(super) const CHECKPOINT_FILE: &str = "checkpoint";

/// The journal record number the last completed checkpoint flushed into sled (0 if none).
pub(super) fn read_checkpoint(fs: &dyn Fs, jdir: &Path) -> Result<u64, StoreError> {
    let path = jdir.join(CHECKPOINT_FILE);
    match fs.read(&path) {
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
pub(super) fn write_checkpoint(fs: &dyn Fs, jdir: &Path, seq: u64) -> Result<(), StoreError> {
    let tmp = jdir.join("checkpoint.tmp");
    let mut b = seq.to_le_bytes().to_vec();
    b.extend_from_slice(&crc32fast::hash(&seq.to_le_bytes()).to_le_bytes());
    let f = fs.create(&tmp).map_err(|e| io(&tmp, e))?;
    f.write_all_at(&b, 0).and_then(|_| f.sync_all()).map_err(|e| io(&tmp, e))?;
    fs.rename(&tmp, &jdir.join(CHECKPOINT_FILE)).map_err(|e| io(&tmp, e))?;
    sync_dir(fs, jdir)
}

/// Flushes sled, then deletes every closed segment whose records that flush covers.
pub(super) fn checkpoint(shared: &Shared) {
    if shared.append_failing.load(Ordering::Acquire) {
        return;
    }
    // What sled holds, not what the applier has seen: failed records are seen but never applied,
    // and the marker must never claim more than sled has.
    let flushed = match shared.sled.read().as_ref() {
        Some(s) => s.applied_seq().and_then(|covered| s.flush().map(|_| covered)),
        None => Err(StoreError::Reopening),
    };
    let covered = match flushed {
        Ok(c) => c,
        Err(e) if e.is_disk_full() => {
            tracing::error!(error = %e, "sled flush failed; keeping the journal");
            return;
        }
        Err(e) => return shared.halt.halt(format!("flushing storage at a checkpoint failed: {e}")),
    };
    commit_checkpoint(shared, covered);
}

/// Once sled holds (synced) every record up to `covered`: records it in the marker, then
/// deletes every closed segment it covers.
pub(super) fn commit_checkpoint(shared: &Shared, covered: u64) {
    // The marker goes first: a segment is deleted only once the marker says sled holds it.
    if let Err(e) = write_checkpoint(&*shared.fs, &shared.dir, covered) {
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
pub(super) const DROPPING_EXT: &str = "dropping";
/// Step of a covered segment's deletion.
pub(super) const DROP_STEP: u64 = 8 << 20;

/// Deletes covered segments, each cut down `DROP_STEP` at a time first. Measured on this
/// project's disk (ext4 mounted with `discard`): unlinking 4 x 64 MB at once stalled a
/// concurrent append's fdatasync 12-18 ms, cutting them down 8 MiB at a time first 2-3 ms
/// (`scripts/experiments/drop_segment.py`). Each is renamed first (and the rename synced), so a crash
/// midway leaves a file that replay skips and start-up deletes, never a segment cut short,
/// which would read as damage.
pub(super) fn drop_segments(shared: &Shared, segs: &[PathBuf]) {
    let dir = &shared.dir;
    let mut renamed = Vec::with_capacity(segs.len());
    for p in segs {
        let gone = p.with_extension(DROPPING_EXT);
        match shared.fs.rename(p, &gone) {
            Ok(()) => renamed.push(gone),
            Err(e) => {
                tracing::warn!(error = %e, file = %p.display(), "could not delete a covered journal segment")
            }
        }
    }
    if renamed.is_empty() {
        return;
    }
    if let Err(e) = sync_dir(&*shared.fs, dir) {
        // Unsynced renames could come back under the old names: leave the files whole.
        return shared.halt.halt(format!("deleting covered journal segments: {e}"));
    }
    for p in &renamed {
        if let Err(e) = cut_and_remove(&*shared.fs, p) {
            tracing::warn!(error = %e, file = %p.display(), "could not delete a covered journal segment");
        }
    }
}

pub(super) fn cut_and_remove(fs: &dyn Fs, p: &Path) -> std::io::Result<()> {
    let f = fs.open(p)?;
    let mut len = f.len()?;
    while len > 0 {
        len = len.saturating_sub(DROP_STEP);
        f.set_len(len)?;
    }
    drop(f);
    fs.remove(p)
}
