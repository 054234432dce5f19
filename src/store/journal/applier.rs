//! Staging: durable operations' rows go into the memtable (on the journal thread, or on the
//! applier thread for batches that list rows), and full or due memtables go to the checkpoint
//! thread.

use super::*;

/// Stages the batches the journal thread hands over (see [`Lanes`]), and freezes the table once
/// it is due by time while no write arrives.
pub(super) fn applier_thread(
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
pub(super) struct Applier {
    pub(super) ctx: Sender<Arc<Memtable>>,
    pub(super) every: Duration,
    pub(super) since_checkpoint: u64,
    pub(super) last_checkpoint: Instant,
}

impl Applier {
    pub(super) fn new(ctx: Sender<Arc<Memtable>>, every: Duration) -> Applier {
        Applier { ctx, every, since_checkpoint: 0, last_checkpoint: Instant::now() }
    }

    /// Stages a handled batch (if any) and freezes the table when due; false once the
    /// checkpoint thread is gone.
    pub(super) fn take(&mut self, shared: &Shared, h: Option<Handled>) -> bool {
        if let Some(h) = h {
            for d in &h.durable {
                stage(shared, d);
            }
            forget_txids(shared, h.durable.iter().map(|d| &*d.op));
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
pub(super) fn stage(shared: &Shared, d: &Durable) {
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
pub(super) struct NoRows;

impl Rows for NoRows {
    fn fetch(&self, _: &[u8]) -> Result<Option<sled::IVec>, StoreError> {
        Err(StoreError::Bug("an operation without listing read storage"))
    }
    fn range_rows(
        &self,
        _: &[u8],
        _: Option<&[u8]>,
        _: bool,
        _: usize,
    ) -> Result<Vec<(sled::IVec, sled::IVec)>, StoreError> {
        Err(StoreError::Bug("an operation without listing read storage"))
    }
}

/// Per user number, the main-account ids still queued and how many times. Hashed with seeded
/// foldhash (every deposit inserts and removes here; SipHash was 3 % of its instructions): a
/// client can only grow its own user's map, and only by writes still in flight.
pub(super) type PendingTxids =
    HashMap<u64, HashMap<Text, u32, foldhash::fast::RandomState>, foldhash::fast::RandomState>;

pub(super) fn forget_txids<'a>(shared: &Shared, ops: impl Iterator<Item = &'a Op>) {
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
