//! The per-user cache. Each user has a slot with an async FIFO mutex (held by a writer from load
//! to flush, 13.2 item 4) and the latest committed snapshot, which readers clone without waiting
//! for writers (item 5). A snapshot is replaced only after its commit is durable.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use crate::domain::engine::TxRecord;
use crate::domain::tree::{AccountId, Tree};

use super::codec::{self, encode};
use super::{Store, StoreError, UserRecord, Write};

/// Per-user lock wait limit (13.2 item 7).
pub const LOCK_WAIT: Duration = Duration::from_secs(30);
const SHARDS: usize = 64;
/// Cached users per shard before idle ones are dropped (about 130k users in all); a dropped
/// user is simply loaded again from storage on its next request.
const SLOTS_PER_SHARD: usize = 2048;

/// A committed user: the record and the tree.
#[derive(Debug, Clone)]
pub struct UserState {
    pub user: UserRecord,
    pub tree: Tree,
}

#[derive(Default)]
struct Slot {
    write: Arc<tokio::sync::Mutex<()>>,
    /// `None`: not loaded yet; `Some(None)`: known to have no tree.
    state: RwLock<Option<Option<Arc<UserState>>>>,
}

pub struct Users {
    pub store: Arc<dyn Store>,
    shards: Vec<Mutex<HashMap<String, Arc<Slot>>>>,
    slots_per_shard: usize,
    /// Per-user lock wait in milliseconds ([`LOCK_WAIT`] unless a test shortens it).
    lock_wait_ms: AtomicU64,
}

/// Held by a writer: the user's lock and the state it is working from.
pub struct WriteGuard<'a> {
    users: &'a Users,
    slot: Arc<Slot>,
    _lock: tokio::sync::OwnedMutexGuard<()>,
    pub current: Option<Arc<UserState>>,
}

impl Users {
    pub fn new(store: Arc<dyn Store>) -> Users {
        Users::with_slots_per_shard(store, SLOTS_PER_SHARD)
    }

    pub fn with_slots_per_shard(store: Arc<dyn Store>, slots_per_shard: usize) -> Users {
        Users {
            store,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            slots_per_shard,
            lock_wait_ms: AtomicU64::new(LOCK_WAIT.as_millis() as u64),
        }
    }

    /// Changes the per-user lock wait (tests use a short one to provoke the timeout).
    pub fn set_lock_wait(&self, wait: Duration) {
        self.lock_wait_ms.store(wait.as_millis() as u64, Ordering::Relaxed);
    }

    /// Users currently cached.
    pub fn cached(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    fn slot(&self, user_id: &str) -> Arc<Slot> {
        let mut h = DefaultHasher::new();
        user_id.hash(&mut h);
        let shard = &self.shards[(h.finish() as usize) % SHARDS];
        let mut map = shard.lock();
        if let Some(s) = map.get(user_id) {
            return s.clone();
        }
        if map.len() >= self.slots_per_shard {
            // A slot held only by the map has no reader or writer (taking one needs this
            // shard lock), so dropping it loses nothing but the cached state.
            map.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        let s = Arc::new(Slot::default());
        map.insert(user_id.to_string(), s.clone());
        s
    }

    fn load(&self, user_id: &str) -> Result<Option<Arc<UserState>>, StoreError> {
        crate::metrics::user_cache_miss();
        let Some(user) = self.store.get_user(user_id)? else {
            return Ok(None);
        };
        let accounts = self.store.load_accounts(user.user_no)?;
        let tree = Tree {
            root: user.root,
            accounts: accounts.into_iter().map(|a| (a.uuid, Arc::new(a))).collect(),
            ledger: user.ledger.clone(),
        };
        if let Err(e) = crate::domain::tree::check_invariants(&tree) {
            return Err(StoreError::Codec(format!("stored tree of {user_id} fails invariants: {e}")));
        }
        Ok(Some(Arc::new(UserState { user, tree })))
    }

    /// The latest committed state of `user_id` (`None`: no such user).
    pub async fn snapshot(&self, user_id: &str) -> Result<Option<Arc<UserState>>, StoreError> {
        let slot = self.slot(user_id);
        if let Some(s) = slot.state.read().as_ref() {
            crate::metrics::user_cache_hit();
            return Ok(s.clone());
        }
        // First access: load under the writer lock so no commit interleaves with the load.
        let guard = self.lock(user_id).await?;
        Ok(guard.current.clone())
    }

    /// Takes the user's write lock (FIFO), loading the state if needed.
    pub async fn lock(&self, user_id: &str) -> Result<WriteGuard<'_>, StoreError> {
        let slot = self.slot(user_id);
        let wait = Duration::from_millis(self.lock_wait_ms.load(Ordering::Relaxed));
        let lock = tokio::time::timeout(wait, slot.write.clone().lock_owned())
            .await
            .map_err(|_| StoreError::LockTimeout)?;
        let known = slot.state.read().clone();
        let current = match known {
            Some(s) => crate::metrics::user_cache_hit_then(s),
            None => {
                let s = self.load(user_id)?;
                *slot.state.write() = Some(s.clone());
                s
            }
        };
        Ok(WriteGuard { users: self, slot, _lock: lock, current })
    }
}

impl WriteGuard<'_> {
    /// Commits `writes` durably, then publishes `next` as the user's state.
    pub async fn commit(self, writes: Vec<Write>, next: Option<Arc<UserState>>) -> Result<(), StoreError> {
        if let Err(e) = self.users.store.commit(writes).await {
            // The batch may or may not be on disk: forget the cached state so the next request
            // reloads whatever storage holds instead of trusting either version.
            *self.slot.state.write() = None;
            return Err(e);
        }
        *self.slot.state.write() = Some(next);
        Ok(())
    }
}

/// The rows a tree mutation changes: the user record, every dirty account, new log records
/// (and the main account's id index), and the rows of removed accounts.
pub fn mutation_writes(
    state: &UserState,
    dirty: &BTreeSet<AccountId>,
    records: &[(AccountId, TxRecord)],
    removed: &[(AccountId, u64)],
) -> Result<Vec<Write>, StoreError> {
    let no = state.user.user_no;
    let mut w = Vec::with_capacity(dirty.len() + records.len() * 2 + 1);
    w.push(Write::Put(codec::user_key(&state.user.user_id), encode(&state.user)?));
    for id in dirty {
        if let Some(a) = state.tree.get(*id) {
            w.push(Write::Put(codec::account_key(no, *id), encode(a)?));
        }
    }
    // Records were appended in order; the account's final log_len tells each one's sequence.
    let mut next_seq: HashMap<AccountId, u64> = HashMap::new();
    for (acc, _) in records.iter().rev() {
        *next_seq.entry(*acc).or_insert(0) += 1;
    }
    let mut seq: HashMap<AccountId, u64> = HashMap::new();
    for (acc, n) in &next_seq {
        let len = state.tree.get(*acc).map_or(0, |a| a.log_len);
        seq.insert(*acc, len - n);
    }
    for (acc, rec) in records {
        let Some(s) = seq.get_mut(acc) else { continue };
        if state.tree.get(*acc).is_none() {
            continue;
        }
        w.push(Write::Put(codec::log_key(no, *acc, *s), encode(rec)?));
        *s += 1;
        if *acc == state.tree.root {
            w.push(Write::Put(codec::txid_key(no, &rec.id), Vec::new()));
        }
    }
    // Log keys are computed from the log length: deleting never reads the logs.
    for (id, log_len) in removed {
        w.push(Write::Del(codec::account_key(no, *id)));
        for seq in 0..*log_len {
            w.push(Write::Del(codec::log_key(no, *id, seq)));
        }
    }
    Ok(w)
}

/// Every row of a user (main-account deletion).
pub fn user_deletion_writes(store: &dyn Store, user: &UserRecord) -> Result<Vec<Write>, StoreError> {
    let mut w = vec![Write::Del(codec::user_key(&user.user_id))];
    for tag in [codec::ACCOUNT, codec::LOG, codec::MAIN_TXID] {
        for k in store.keys_with_prefix(&codec::user_prefix(tag, user.user_no))? {
            w.push(Write::Del(k));
        }
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sled_store::SledStore;

    #[test]
    fn idle_users_are_dropped_from_the_cache_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        let users = Users::with_slots_per_shard(store, 1);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            for i in 0..500 {
                assert!(users.snapshot(&format!("user{i}")).await.unwrap().is_none());
            }
            // One slot per shard at most stays cached.
            assert!(users.cached() <= SHARDS, "{}", users.cached());
            let held = users.lock("held").await.unwrap();
            for i in 0..500 {
                users.snapshot(&format!("other{i}")).await.unwrap();
            }
            // A slot in use is never dropped: the lock still excludes a second writer.
            let second = tokio::time::timeout(Duration::from_millis(50), users.lock("held")).await;
            assert!(second.is_err());
            drop(held);
        });
    }
}
