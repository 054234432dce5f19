//! The per-user cache. Each user has a slot with an async FIFO mutex (13.2 item 4) and two
//! states: the latest durable one, which readers clone without waiting for writers (item 5), and
//! the latest produced one, possibly not durable yet, on which the next writer builds.
//!
//! A writer holds the lock only to compute its change and queue it in storage, then waits for
//! durability without it, so one user's writes share flushes instead of paying one each.
//! Acknowledgements come in queue order; a state is published to readers only once durable and
//! never replaced by an older one. If a commit fails, both states are dropped (the next request
//! reloads from storage) and every queued write built on the lost one fails with it.
//!
//! On a shared engine (several nodes, [`SharedStore`]) other nodes write too, so the cache is
//! only a cache: a reader uses its cached state only if the stored version still equals it (one
//! indexed read), and a writer takes the user's row lock in storage (after this node's write in
//! flight, if any, is answered), and reloads if the version moved.
//!
//! Both engines commit alike: [`Store::commit`] under the lock, with what storage holds for the
//! write (the row lock, on a shared engine), then the wait for durability without the lock.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use crate::domain::engine::{Change, TxRecord};
use crate::domain::tree::{AccountId, Text, Tree};

use super::idem_keys::idem_write;
use super::{
    BoxFuture, IdemRecord, Loaded, Op, SharedStore, Store, StoreError, SyncRow, UserRecord, Version, WriteTxn,
};

/// Per-user lock wait limit (13.2 item 7).
pub const LOCK_WAIT: Duration = Duration::from_secs(30);
const SHARDS: usize = 64;

pub use super::idem_keys::{IdemTable, IDEM_MAX, IDEM_TTL_US};

/// A user's record and tree, as loaded or as produced by a write.
#[derive(Debug, Clone)]
pub struct UserState {
    pub user: UserRecord,
    pub tree: Tree,
    /// The load this state descends from: writes built on a failed write share its basis, so
    /// storage can refuse them (see [`Store::commit`]).
    pub basis: u64,
    /// The stored version this state is (shared engines; 0 on the embedded one).
    pub version: u64,
    /// Delta-sync `server_knowledge`: raised by every committed data write.
    pub knowledge: u64,
    /// Kept idempotency keys, loaded with the user so a check reads no storage.
    pub idem: IdemTable,
    /// What this state costs the cache, estimated ([`super::cost`]).
    pub bytes: usize,
}

/// The outcome of checking an `Idempotency-Key` before running a request.
pub enum IdemCheck {
    /// Answered before with the same parameters: send this answer again.
    Replay(IdemRecord),
    /// Answered before with other parameters.
    Mismatch,
    /// A request with this key is running now.
    Running,
    /// Run the request; the key counts as running while this lives.
    Proceed(IdemRun),
}

/// Marks a key as running for its user until dropped (also on error or cancellation).
pub struct IdemRun {
    slot: Arc<Slot>,
    key: String,
}

impl Drop for IdemRun {
    fn drop(&mut self) {
        self.slot.idem_running.lock().remove(&self.key);
    }
}

/// `None`: not known; `Some(None)`: known to have no tree.
type Known = Option<Option<Arc<UserState>>>;

#[derive(Default)]
struct Slot {
    write: Arc<tokio::sync::Mutex<()>>,
    /// Latest durable state (readers).
    state: RwLock<Known>,
    /// Latest produced state (writers); may be ahead of `state` while commits are in flight.
    pending: Mutex<Known>,
    /// Generation of the write whose state `state` holds; publishes never go backwards.
    published: AtomicU64,
    next_gen: AtomicU64,
    /// Idempotency keys of requests running now.
    idem_running: Mutex<std::collections::HashSet<String>>,
    /// Requests waiting for the write that carries their key to settle; `settled` wakes them
    /// (only rung while there are some: every write settles).
    idem_waiting: AtomicUsize,
    settled: tokio::sync::Notify,
    /// Commits queued and not yet answered; `idle` wakes writers waiting for none.
    in_flight: AtomicUsize,
    idle: tokio::sync::Notify,
    /// Bytes this slot is counted for in its shard's `bytes` (itself and its durable state),
    /// changed only under the `state` lock.
    cost: AtomicUsize,
    /// The shard's count of bytes ([`Shard::bytes`]).
    shard_bytes: Arc<AtomicUsize>,
    /// Looked up since the last sweep of its shard: spared once (second chance).
    used: AtomicBool,
    /// The slot's own bytes: itself, its lock, its key and its place in the shard's map.
    own: usize,
}

impl Slot {
    /// Counts the slot with `state`, the value its `state` lock (held) now guards.
    fn charge(&self, state: &Known) {
        let bytes = self.own
            + match state {
                Some(Some(s)) => s.bytes,
                _ => 0,
            };
        let old = self.cost.swap(bytes, Ordering::Relaxed);
        if bytes >= old {
            self.shard_bytes.fetch_add(bytes - old, Ordering::Relaxed);
        } else {
            self.shard_bytes.fetch_sub(old - bytes, Ordering::Relaxed);
        }
    }
}

/// Counts a request among its user's `idem_waiting` until dropped (also on cancellation).
struct IdemWaiting<'a>(&'a Slot);

impl<'a> IdemWaiting<'a> {
    fn new(slot: &'a Slot) -> Self {
        slot.idem_waiting.fetch_add(1, Ordering::Relaxed);
        IdemWaiting(slot)
    }
}

impl Drop for IdemWaiting<'_> {
    fn drop(&mut self) {
        self.0.idem_waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Every read looks its user up here: foldhash's quality variant is several times cheaper than
/// the default SipHash on short ids, and still seeded per process.
type SlotHasher = foldhash::quality::RandomState;

/// One 64th of the cache: its users by id, and the bytes they are counted for.
struct Shard {
    map: Mutex<HashMap<Text, Arc<Slot>, SlotHasher>>,
    bytes: Arc<AtomicUsize>,
}

pub struct Users {
    pub store: Arc<dyn Store>,
    shards: Vec<Shard>,
    /// Picks a user's shard; seeded per process like the maps, so no client can aim its user
    /// ids at one shard.
    shard_of: SlotHasher,
    /// Bytes a shard may hold before idle users are dropped from it (a 64th of the budget).
    shard_budget: usize,
    /// Per-user lock wait in milliseconds ([`LOCK_WAIT`] unless a test shortens it).
    lock_wait_ms: AtomicU64,
    next_basis: AtomicU64,
    /// Poked when a write leaves work for the waker (a new webhook delivery), so it runs now
    /// instead of at its next tick.
    pub wake_hint: tokio::sync::Notify,
}

/// Held by a writer: the user's lock and the state it is working from.
pub struct WriteGuard<'a> {
    users: &'a Users,
    slot: Arc<Slot>,
    _lock: tokio::sync::OwnedMutexGuard<()>,
    pub current: Option<Arc<UserState>>,
    /// What storage holds for this write: the transaction with the user's row lock (shared
    /// engines), handed to [`Store::commit`].
    held: Option<Box<dyn WriteTxn>>,
}

/// Whether a cached state is the stored one (shared engines).
fn fresh(cached: &Known, stored: Option<Version>) -> bool {
    match (cached, stored) {
        (Some(Some(s)), Some((no, v))) => s.user.user_no == no && s.version == v,
        (Some(None), None) => true,
        _ => false,
    }
}

/// An `Arc`'s two counts, as [`super::cost`] counts them.
const ARC_BYTES: usize = 16;

/// Drops idle users from a shard over its budget until it holds `low` bytes at most: users not
/// looked up since the last sweep first, then any idle one. A slot held only by the map has no
/// reader or writer (taking one needs the shard's lock), so dropping it loses nothing but the
/// cached state: the user's next request loads it again from storage. Sweeping down to a
/// fraction of the budget spaces sweeps out, so their cost is spread over many lookups.
fn sweep(map: &mut HashMap<Text, Arc<Slot>, SlotHasher>, bytes: &AtomicUsize, low: usize) {
    for spare_used in [true, false] {
        map.retain(|_, slot| {
            if bytes.load(Ordering::Relaxed) <= low || Arc::strong_count(slot) > 1 {
                return true;
            }
            if spare_used && slot.used.swap(false, Ordering::Relaxed) {
                return true;
            }
            bytes.fetch_sub(slot.cost.load(Ordering::Relaxed), Ordering::Relaxed);
            false
        });
        if bytes.load(Ordering::Relaxed) <= low {
            break;
        }
    }
    if map.capacity() > 4 * map.len() + 64 {
        map.shrink_to_fit();
    }
}

impl Users {
    pub fn new(store: Arc<dyn Store>) -> Users {
        Users::with_budget(store, crate::config::user_cache_bytes(crate::config::DEFAULT_CACHE_MB))
    }

    /// A cache holding users of at most about `budget` bytes in all (see [`super::cost`]);
    /// users in use stay whatever it says.
    pub fn with_budget(store: Arc<dyn Store>, budget: usize) -> Users {
        Users {
            store,
            shards: (0..SHARDS)
                .map(|_| Shard { map: Mutex::new(HashMap::default()), bytes: Arc::default() })
                .collect(),
            shard_of: SlotHasher::default(),
            shard_budget: budget / SHARDS,
            lock_wait_ms: AtomicU64::new(LOCK_WAIT.as_millis() as u64),
            next_basis: AtomicU64::new(1),
            wake_hint: tokio::sync::Notify::new(),
        }
    }

    /// Test hook: changes the per-user lock wait (a short one provokes the timeout).
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn set_lock_wait(&self, wait: Duration) {
        self.lock_wait_ms.store(wait.as_millis() as u64, Ordering::Relaxed);
    }

    /// Users currently cached.
    pub fn cached(&self) -> usize {
        self.shards.iter().map(|s| s.map.lock().len()).sum()
    }

    /// Bytes the cached users are counted for, estimated ([`super::cost`]).
    pub fn cached_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.bytes.load(Ordering::Relaxed)).sum()
    }

    fn slot(&self, user_id: &str) -> Arc<Slot> {
        let shard = &self.shards[(self.shard_of.hash_one(user_id) as usize) % SHARDS];
        let mut map = shard.map.lock();
        let slot = match map.get(user_id) {
            Some(s) => {
                // Read first: a slot looked up again and again stays unwritten.
                if !s.used.load(Ordering::Relaxed) {
                    s.used.store(true, Ordering::Relaxed);
                }
                s.clone()
            }
            None => {
                let key = Text::from(user_id);
                let own = ARC_BYTES * 2
                    + size_of::<Slot>()
                    + size_of::<tokio::sync::Mutex<()>>()
                    + (size_of::<(Text, Arc<Slot>)>() + 1) * 8 / 7
                    + super::cost::text(&key);
                shard.bytes.fetch_add(own, Ordering::Relaxed);
                let s = Arc::new(Slot {
                    own,
                    cost: AtomicUsize::new(own),
                    shard_bytes: shard.bytes.clone(),
                    ..Slot::default()
                });
                map.insert(key, s.clone());
                s
            }
        };
        if shard.bytes.load(Ordering::Relaxed) > self.shard_budget {
            sweep(&mut map, &shard.bytes, self.shard_budget / 8 * 7);
        }
        slot
    }

    async fn load(&self, user_id: &str) -> Result<Option<Arc<UserState>>, StoreError> {
        crate::metrics::user_cache_miss();
        let Some((user, tree)) = self.store.load_user(user_id).await? else {
            return Ok(None);
        };
        self.checked(user_id, Some((user, tree, 0)), None).await
    }

    /// A loaded user as a state, after checking its tree's invariants.
    /// `txn`: the write transaction the user was loaded in, which reads the rest too.
    async fn checked(
        &self,
        user_id: &str,
        loaded: Option<Loaded>,
        txn: Option<&dyn WriteTxn>,
    ) -> Result<Option<Arc<UserState>>, StoreError> {
        let Some((user, mut tree, version)) = loaded else {
            return Ok(None);
        };
        tree.id_key = self.store.id_key(user.user_no);
        let basis = self.next_basis.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = crate::domain::tree::check_invariants(&tree) {
            return Err(StoreError::Codec(format!("stored tree of {user_id} fails invariants: {e}")));
        }
        let meta = match txn {
            Some(t) => t.load_meta(user.user_no).await?,
            None => self.store.load_meta(user.user_no).await?,
        };
        let idem = IdemTable::from_records(meta.idem);
        let mut st = UserState { user, tree, basis, version, knowledge: meta.knowledge, idem, bytes: 0 };
        st.bytes = super::cost::state(&st);
        Ok(Some(Arc::new(st)))
    }

    /// The latest committed state of `user_id` (`None`: no such user).
    pub async fn snapshot(&self, user_id: &str) -> Result<Option<Arc<UserState>>, StoreError> {
        if let Some(sh) = self.store.shared() {
            return self.shared_snapshot(sh, user_id).await;
        }
        let slot = self.slot(user_id);
        if let Some(s) = slot.state.read().as_ref() {
            crate::metrics::user_cache_hit();
            return Ok(s.clone());
        }
        // Not known: load under the writer lock so no commit is queued during the load. Storage
        // answers with every acknowledged write; writes still in flight publish when durable.
        let _lock = self.take_lock(&slot).await?;
        if let Some(s) = slot.state.read().as_ref() {
            return Ok(s.clone());
        }
        let s = self.load(user_id).await?;
        let mut st = slot.state.write();
        if st.is_none() {
            *st = Some(s.clone());
            slot.charge(&st);
        }
        Ok(s)
    }

    /// Waits, until `deadline` at most, for every write of the user in flight to be answered.
    async fn wait_idle(&self, slot: &Slot, deadline: tokio::time::Instant) -> Result<(), StoreError> {
        loop {
            let notified = slot.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if slot.in_flight.load(Ordering::Acquire) == 0 {
                return Ok(());
            }
            tokio::time::timeout_at(deadline, notified).await.map_err(|_| StoreError::LockTimeout)?;
        }
    }

    /// [`Users::snapshot`] on a shared engine: the cached state if the stored version still is
    /// its version, else a fresh load (which any other node's acknowledged write is part of).
    async fn shared_snapshot(
        &self,
        sh: &dyn SharedStore,
        user_id: &str,
    ) -> Result<Option<Arc<UserState>>, StoreError> {
        let slot = self.slot(user_id);
        let cached = slot.state.read().clone();
        let stored = sh.version(user_id).await?;
        if fresh(&cached, stored) {
            crate::metrics::user_cache_hit();
            return Ok(cached.flatten());
        }
        crate::metrics::user_cache_miss();
        let s = match stored {
            Some(_) => self.checked(user_id, sh.load_versioned(user_id).await?, None).await?,
            None => None,
        };
        // Any state of a given version is that version's state; keep the newer of this load and
        // what a writer of this node may have published meanwhile.
        let mut st = slot.state.write();
        let newer = match (&*st, &s) {
            (Some(Some(c)), Some(n)) => (n.user.user_no, n.version) >= (c.user.user_no, c.version),
            _ => true,
        };
        if newer {
            *st = Some(s.clone());
            slot.charge(&st);
        }
        Ok(s)
    }

    fn lock_wait(&self) -> Duration {
        Duration::from_millis(self.lock_wait_ms.load(Ordering::Relaxed))
    }

    async fn take_lock(&self, slot: &Slot) -> Result<tokio::sync::OwnedMutexGuard<()>, StoreError> {
        tokio::time::timeout(self.lock_wait(), slot.write.clone().lock_owned())
            .await
            .map_err(|_| StoreError::LockTimeout)
    }

    /// The whole log of account `acc` in the committed state `st` (the two log endpoints).
    pub async fn read_log(&self, st: &UserState, acc: AccountId) -> Result<Vec<TxRecord>, StoreError> {
        self.read_log_range(st, acc, 0, u64::MAX).await
    }

    /// Records `[start, end)` of account `acc`'s log, within the committed state `st` (a page).
    pub async fn read_log_range(
        &self,
        st: &UserState,
        acc: AccountId,
        start: u64,
        end: u64,
    ) -> Result<Vec<TxRecord>, StoreError> {
        let len = st.tree.get(acc).map_or(0, |a| a.log_len);
        self.store.read_log(st.user.user_no, acc, start.min(len), end.min(len)).await
    }

    /// Change rows `(after, upto]` of the committed state `st`, at most `max` (delta sync).
    pub async fn read_changes(
        &self,
        st: &UserState,
        after: u64,
        upto: u64,
        max: usize,
    ) -> Result<Vec<SyncRow>, StoreError> {
        self.store.read_changes(st.user.user_no, after, upto.min(st.knowledge), max).await
    }

    /// Test hook: whether a request with idempotency key `key` of `user_id` runs now.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn idem_running(&self, user_id: &str, key: &str) -> bool {
        self.slot(user_id).idem_running.lock().contains(key)
    }

    /// Test hook: requests of `user_id` waiting for the write that carries their key.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn idem_waiting(&self, user_id: &str) -> usize {
        self.slot(user_id).idem_waiting.load(Ordering::Relaxed)
    }

    /// Checks `key` (request hash `fingerprint`) of `user_id` before its request runs. Keys
    /// older than [`IDEM_TTL_US`] at `now_us` count as absent.
    ///
    /// A key whose write is made and only waits for durability has its answer decided, whether
    /// or not its request is still there to send it (its client may have gone): this waits for
    /// that write (at most the lock wait) and answers from it, a replay or a 422, or runs the
    /// request if the write failed. "Still running" is left for a first request that has not
    /// made its write yet.
    pub async fn idem_begin(
        &self,
        user_id: &str,
        key: &str,
        fingerprint: &[u8],
        now_us: i64,
    ) -> Result<IdemCheck, StoreError> {
        let slot = self.slot(user_id);
        if let Some(check) = self.idem_look(&slot, user_id, key, fingerprint, now_us).await? {
            return Ok(check);
        }
        let wait = Duration::from_millis(self.lock_wait_ms.load(Ordering::Relaxed));
        let deadline = tokio::time::Instant::now() + wait;
        // Counted before looking again: a write that settles after this look sees the count
        // and wakes it (see `settle`).
        let _waiting = IdemWaiting::new(&slot);
        loop {
            let settled = slot.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            if let Some(check) = self.idem_look(&slot, user_id, key, fingerprint, now_us).await? {
                return Ok(check);
            }
            if tokio::time::timeout_at(deadline, settled).await.is_err() {
                return Ok(IdemCheck::Running);
            }
        }
    }

    /// One look at `key` for [`Users::idem_begin`]; `None` while a write carrying it waits for
    /// durability.
    async fn idem_look(
        &self,
        slot: &Arc<Slot>,
        user_id: &str,
        key: &str,
        fingerprint: &[u8],
        now_us: i64,
    ) -> Result<Option<IdemCheck>, StoreError> {
        // The running mark is taken first: a first request that finishes meanwhile has
        // published its key (durably) before dropping its mark.
        let run = slot
            .idem_running
            .lock()
            .insert(key.to_string())
            .then(|| IdemRun { slot: slot.clone(), key: key.to_string() });
        let kept_in =
            |st: &UserState| st.idem.get(key).filter(|r| now_us - r.created_us < IDEM_TTL_US).cloned();
        let kept = match &run {
            Some(_) => self.snapshot(user_id).await?.and_then(|st| kept_in(&st)),
            // Another request's mark: only the state known now. Loading one waits for the
            // user's lock, which that request may hold for long.
            None => slot.state.read().as_ref().and_then(|k| k.as_deref()).and_then(kept_in),
        };
        match kept {
            Some(r) if r.fingerprint == fingerprint => return Ok(Some(IdemCheck::Replay(r))),
            Some(_) => return Ok(Some(IdemCheck::Mismatch)),
            None => {}
        }
        // The key is in the state the next writer builds on: its write is queued.
        let queued = {
            let pending = slot.pending.lock();
            let st = pending.as_ref().and_then(|k| k.as_ref());
            st.and_then(|st| st.idem.get(key)).is_some_and(|r| now_us - r.created_us < IDEM_TTL_US)
        };
        Ok(match (run, queued) {
            (_, true) => None,
            (Some(run), false) => Some(IdemCheck::Proceed(run)),
            // The first request runs and has not made its write: its answer is not decided.
            (None, false) => Some(IdemCheck::Running),
        })
    }

    /// Keeps the answer `rec` of a request that wrote nothing (a 4xx, or a success that changed
    /// nothing): an operation with only the key rows. Nothing is kept for a user without a tree.
    pub async fn idem_keep(&self, user_id: &str, rec: IdemRecord) -> Result<(), StoreError> {
        let guard = self.lock(user_id).await?;
        let Some(cur) = guard.current.clone() else { return Ok(()) };
        let (w, table) = idem_write(&cur.idem, rec);
        let change = Change { ledger: cur.tree.ledger.clone(), ..Change::default() };
        let bytes = (cur.bytes + super::cost::idem(&table)).saturating_sub(super::cost::idem(&cur.idem));
        let next = UserState { idem: table, bytes, ..(*cur).clone() };
        let op = Op::Commit { user: cur.user.clone(), change, sync: None, idem: Some(w) };
        guard.finish(Box::new(op), cur.basis, Some(Arc::new(next))).await
    }

    /// Takes the user's write lock (FIFO), loading the state if needed.
    pub async fn lock(&self, user_id: &str) -> Result<WriteGuard<'_>, StoreError> {
        let slot = self.slot(user_id);
        let deadline = tokio::time::Instant::now() + self.lock_wait();
        let lock = self.take_lock(&slot).await?;
        if let Some(sh) = self.store.shared() {
            // One limit for every wait: this node's writers, the answer to this node's write in
            // flight (the row lock would make this one wait for it anyway, and its state is then
            // the cached one), then other nodes' writers (the row lock).
            self.wait_idle(&slot, deadline).await?;
            let left =
                deadline.saturating_duration_since(tokio::time::Instant::now()).max(Duration::from_millis(1));
            let txn = sh.begin_write(user_id, left).await?;
            let cached = slot.state.read().clone();
            let hit = fresh(&cached, txn.locked());
            if hit {
                crate::metrics::user_cache_hit();
            } else {
                crate::metrics::user_cache_miss();
            }
            let current = if hit {
                cached.flatten()
            } else if txn.locked().is_none() {
                None
            } else {
                // Another node wrote since this node cached the user: reload under the lock.
                let s = self.checked(user_id, txn.load_user(user_id).await?, Some(&*txn)).await?;
                let mut st = slot.state.write();
                *st = Some(s.clone());
                slot.charge(&st);
                s
            };
            return Ok(WriteGuard { users: self, slot, _lock: lock, current, held: Some(txn) });
        }
        let pending = slot.pending.lock().clone();
        let current = match pending {
            Some(Some(s)) => crate::metrics::user_cache_hit_then(Some(s)),
            // No user, and no write on its way that could prove that wrong.
            Some(None) if slot.in_flight.load(Ordering::Acquire) == 0 => {
                crate::metrics::user_cache_hit_then(None)
            }
            // Not known; or after a refused write, when every earlier write must answer first
            // (then the durable state is exact, and it is rebased so storage refuses nothing
            // built on it); or no user only as far as a removal still on its way says. Whether
            // the user exists is decided on durable state, so a registration behind a removal
            // that fails finds the user there (SPEC 13.2 item 4: it runs after the removal).
            _ => {
                self.wait_idle(&slot, tokio::time::Instant::now() + self.lock_wait()).await?;
                let durable = slot.state.read().clone();
                let s = match durable {
                    Some(Some(st)) => Some(Arc::new(UserState {
                        basis: self.next_basis.fetch_add(1, Ordering::Relaxed),
                        ..(*st).clone()
                    })),
                    Some(None) => None,
                    None => {
                        let s = self.load(user_id).await?;
                        let mut st = slot.state.write();
                        if st.is_none() {
                            *st = Some(s.clone());
                            slot.charge(&st);
                        }
                        s
                    }
                };
                *slot.pending.lock() = Some(s.clone());
                s
            }
        };
        Ok(WriteGuard { users: self, slot, _lock: lock, current, held: None })
    }
}

impl WriteGuard<'_> {
    /// Commits a mutation of the current tree durably, then publishes `tree` as the user's
    /// state. The user record follows the ledger the domain kept in the change.
    pub async fn commit(self, change: Change, tree: Tree) -> Result<(), StoreError> {
        self.commit_keyed(change, tree, None).await
    }

    /// [`Self::commit`] that also keeps an idempotency key's answer, in the same operation.
    pub async fn commit_keyed(
        self,
        change: Change,
        tree: Tree,
        rec: Option<IdemRecord>,
    ) -> Result<(), StoreError> {
        let cur = self.current.clone().ok_or_else(|| StoreError::Bug("commit without a user"))?;
        let hint = crate::domain::events::new_work(&change.docs);
        let users = self.users;
        let mut user = cur.user.clone();
        user.ledger = change.ledger.clone();
        let sync = SyncRow::of(cur.knowledge + 1, &change);
        let knowledge = sync.as_ref().map_or(cur.knowledge, |r| r.knowledge);
        let mut bytes = super::cost::after(&cur, &change, &tree);
        let (idem, table) = match rec {
            Some(rec) => {
                let (w, t) = idem_write(&cur.idem, rec);
                bytes = (bytes + super::cost::idem(&t)).saturating_sub(super::cost::idem(&cur.idem));
                (Some(w), t)
            }
            None => (None, cur.idem.clone()),
        };
        let next = UserState {
            user: user.clone(),
            tree,
            basis: cur.basis,
            version: 0,
            knowledge,
            idem: table,
            bytes,
        };
        self.finish(Box::new(Op::Commit { user, change, sync, idem }), cur.basis, Some(Arc::new(next)))
            .await?;
        if hint {
            users.wake_hint.notify_one();
        }
        Ok(())
    }

    /// Commits a new user with its first tree (every account new, nothing logged yet).
    pub async fn create(self, user: UserRecord, mut tree: Tree) -> Result<(), StoreError> {
        tree.id_key = self.users.store.id_key(user.user_no);
        let change = Change {
            accounts: tree.accounts.values().cloned().collect(),
            ledger: tree.ledger.clone(),
            ..Change::default()
        };
        // Built on a durable "no such user" (see `Users::lock`): nothing before it can fail.
        let basis = self.users.next_basis.fetch_add(1, Ordering::Relaxed);
        // Registration is the user's first data write: knowledge 1.
        let sync = SyncRow::of(1, &change);
        let knowledge = sync.as_ref().map_or(0, |r| r.knowledge);
        let mut next = UserState {
            user: user.clone(),
            tree,
            basis,
            version: 0,
            knowledge,
            idem: IdemTable::default(),
            bytes: 0,
        };
        next.bytes = super::cost::state(&next);
        self.finish(Box::new(Op::Commit { user, change, sync, idem: None }), basis, Some(Arc::new(next)))
            .await
    }

    /// Removes the current user and every row of its tree.
    pub async fn delete_user(self) -> Result<(), StoreError> {
        let cur = self.current.clone().ok_or_else(|| StoreError::Bug("delete without a user"))?;
        self.finish(Box::new(Op::DeleteUser { user: cur.user.clone() }), cur.basis, None).await
    }

    /// Commits `op` under the lock, makes `next` the state the next writer builds on, releases
    /// the lock, then waits for durability and publishes `next` to readers.
    /// (The operation comes boxed and the state is put in its `Arc` before any wait: both are
    /// large, and a future holds its arguments at every level it passes through.)
    async fn finish(self, op: Box<Op>, basis: u64, next: Option<Arc<UserState>>) -> Result<(), StoreError> {
        if let (Op::Commit { user, .. }, Some(next)) = (&*op, &next) {
            // Refused here, nothing is queued: the lock goes with `self`, a shared engine's
            // transaction rolls back, and the next writer builds on the state before.
            check_commit(user, &next.tree)?;
        }
        let WriteGuard { slot, _lock: lock, users, held, .. } = self;
        // Where storage holds the user for the write (a shared engine), the next writer reads
        // its state from storage under its own hold: none is known here.
        let pending = if held.is_some() { None } else { Some(next.clone()) };
        let gen = slot.next_gen.fetch_add(1, Ordering::Relaxed) + 1;
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        let durable = users.store.commit(op, basis, held);
        *slot.pending.lock() = pending;
        drop(lock);
        let mut wait = Settle { durable: Some(durable), slot, gen, basis, next };
        let res = match wait.durable.as_mut() {
            Some(d) => d.await,
            None => Err(StoreError::Bug("commit already settled")),
        };
        wait.durable = None;
        settle(&wait.slot, gen, basis, wait.next.take(), &res);
        res.map(|_| ())
    }

    /// A user number never used before (for [`WriteGuard::create`]); on a shared engine, taken
    /// on the write's own connection, so a registration never waits for a second one.
    pub async fn new_user_no(&self) -> Result<u64, StoreError> {
        match &self.held {
            Some(txn) => txn.new_user_no().await,
            None => self.users.store.new_user_no().await,
        }
    }

    /// For each of `ids`, whether it is already in the index (the import's duplicate check):
    /// one round trip on a shared engine, local reads on the embedded one.
    pub async fn main_txids_exist(&self, ids: &[&str]) -> Result<Vec<bool>, StoreError> {
        let (Some(cur), Some(txn)) = (&self.current, &self.held) else {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                out.push(self.main_txid_exists(id).await?);
            }
            return Ok(out);
        };
        // A shared engine derives no ids (its `id_key` is `None`): every id is indexed.
        let there = txn.main_txids_existing(cur.user.user_no, ids).await?;
        Ok(ids.iter().map(|id| there.contains(*id)).collect())
    }

    /// Whether `id` is already in the main account's log (the /deposit 409 check).
    pub async fn main_txid_exists(&self, id: &str) -> Result<bool, StoreError> {
        let Some(cur) = &self.current else { return Ok(false) };
        let no = cur.user.user_no;
        let indexed = match &self.held {
            Some(txn) => txn.main_txid_exists(no, id).await?,
            None => self.users.store.main_txid_exists(no, id).await?,
        };
        if indexed {
            return Ok(true);
        }
        // A generated id has no index row: it names the one record it can be (domain::txid).
        // Records still on their way to durability are in the engine's pending ids above; this
        // guard's state holds every write before it, so all others are readable.
        let tree = &cur.tree;
        let Some(seq) = tree.id_key.as_ref().and_then(|k| k.seq(id)) else { return Ok(false) };
        if tree.get(tree.root).is_none_or(|m| seq >= m.log_len) {
            return Ok(false);
        }
        let recs = self.users.store.read_log(no, tree.root, seq, seq + 1).await?;
        Ok(recs.first().is_some_and(|r| r.id == id))
    }
}

/// The invariants of SPEC 13.2 item 10 a commit must keep, checked before it is queued. In every
/// build, money conservation in O(1): the user record carries the tree's ledger (a load takes
/// the tree's ledger from the record), and the tree's total is what that ledger counts. A write
/// that broke it would be stored for good and refuse to load ever after. In debug and test
/// builds, every invariant too, recomputed over the whole tree (a walk of every account, too
/// slow for every write of a large tree in production).
fn check_commit(user: &UserRecord, tree: &Tree) -> Result<(), StoreError> {
    if user.ledger != tree.ledger {
        return Err(StoreError::Invariant(format!(
            "the user record's ledger {:?} is not the tree's {:?}",
            user.ledger, tree.ledger
        )));
    }
    crate::domain::tree::check_ledger(tree, &user.ledger).map_err(StoreError::Invariant)?;
    if cfg!(debug_assertions) {
        crate::domain::tree::check_invariants(tree).map_err(StoreError::Invariant)?;
    }
    Ok(())
}

/// A write waiting for durability, its user's lock released. The request's own task waits and publishes; if that
/// future is dropped first (the client went away), the wait moves to a task of its own, so a
/// write that becomes durable is still published and still counted out of `in_flight`. (Every
/// write spawned that task before: a task and a wake-up more per write.)
struct Settle {
    durable: Option<BoxFuture<'static, Result<u64, StoreError>>>,
    slot: Arc<Slot>,
    gen: u64,
    basis: u64,
    next: Option<Arc<UserState>>,
}

impl Drop for Settle {
    fn drop(&mut self) {
        let Some(durable) = self.durable.take() else { return };
        let (slot, gen, basis, next) = (self.slot.clone(), self.gen, self.basis, self.next.take());
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    let res = durable.await;
                    settle(&slot, gen, basis, next, &res);
                });
            }
            // No runtime left to wait on (the process is stopping): the outcome is unknown, so
            // the user's state is forgotten and reloaded from storage by whoever comes next.
            Err(_) => settle(&slot, gen, basis, next, &Err(StoreError::Abandoned)),
        }
    }
}

/// Publishes a durable write (`res`: the user's stored version after it), or drops the states a
/// failed one built on (see the module comment), then counts it out of `in_flight`.
fn settle(slot: &Slot, gen: u64, basis: u64, next: Option<Arc<UserState>>, res: &Result<u64, StoreError>) {
    let wake = {
        let mut st = slot.state.write();
        let mut pending = slot.pending.lock();
        let same_basis = |k: &Known| match k {
            Some(Some(s)) => s.basis == basis,
            _ => true,
        };
        match res {
            Ok(version) => {
                if gen > slot.published.load(Ordering::Relaxed) {
                    slot.published.store(gen, Ordering::Relaxed);
                    *st = Some(next.map(|mut s| {
                        // Only a shared engine keeps versions, and there nothing else holds the
                        // state yet: no copy (the embedded engine's stays 0, untouched).
                        if s.version != *version {
                            Arc::make_mut(&mut s).version = *version;
                        }
                        s
                    }));
                }
            }
            // Known not stored: the durable state stays exact; writers rebase on it.
            Err(StoreError::Refused(_)) => {
                if same_basis(&pending) {
                    *pending = None;
                }
            }
            // The outcome is unknown: forget both states (unless a newer load already
            // replaced them) so the next request reloads whatever storage holds.
            Err(_) => {
                if same_basis(&pending) {
                    *pending = None;
                    *st = None;
                }
            }
        }
        slot.charge(&st);
        // Read under the state's locks: a request counted before its look either saw this
        // write's outcome or is counted here.
        slot.idem_waiting.load(Ordering::Relaxed) > 0
    };
    if wake {
        slot.settled.notify_waiters();
    }
    if slot.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
        slot.idle.notify_waiters();
    }
}

#[cfg(test)]
#[path = "users_tests.rs"]
mod tests;
