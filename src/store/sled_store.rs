//! The sled engine: one sled tree holds every row, so one request's writes are one atomic
//! `apply_batch`; concurrent committers share flushes (group commit).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::domain::engine::TxRecord;
use crate::domain::tree::{Account, AccountId};

use super::codec::{self, decode};
use super::{BoxFuture, Store, StoreError, UserRecord, Write};

pub struct SledStore {
    db: sled::Db,
    /// Commits applied to sled so far (a ticket per commit).
    applied: AtomicU64,
    /// Highest ticket known to be flushed.
    flushed: AtomicU64,
    /// One flusher at a time; waiters whose ticket a finished flush covered skip their own.
    flush_lock: tokio::sync::Mutex<()>,
}

fn eng(e: sled::Error) -> StoreError {
    StoreError::Engine(e.to_string())
}

impl SledStore {
    pub fn open(dir: &Path) -> Result<SledStore, StoreError> {
        let db = sled::Config::new().path(dir.join("db")).open().map_err(eng)?;
        Ok(SledStore {
            db,
            applied: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            flush_lock: tokio::sync::Mutex::new(()),
        })
    }

    async fn group_flush(&self, ticket: u64) -> Result<(), StoreError> {
        if self.flushed.load(Ordering::Acquire) >= ticket {
            return Ok(());
        }
        let _g = self.flush_lock.lock().await;
        if self.flushed.load(Ordering::Acquire) >= ticket {
            return Ok(());
        }
        // Everything applied before this read is covered by the flush below.
        let covered = self.applied.load(Ordering::Acquire);
        let _timer = crate::metrics::flush_timer();
        self.db.flush_async().await.map_err(eng)?;
        let before = self.flushed.fetch_max(covered, Ordering::AcqRel);
        crate::metrics::flush_commits(covered.saturating_sub(before));
        Ok(())
    }
}

impl Store for SledStore {
    fn get_user(&self, user_id: &str) -> Result<Option<UserRecord>, StoreError> {
        match self.db.get(codec::user_key(user_id)).map_err(eng)? {
            Some(v) => decode(&v).map(Some),
            None => Ok(None),
        }
    }

    fn load_accounts(&self, user_no: u64) -> Result<Vec<Account>, StoreError> {
        self.db
            .scan_prefix(codec::user_prefix(codec::ACCOUNT, user_no))
            .map(|kv| kv.map_err(eng).and_then(|(_, v)| decode(&v)))
            .collect()
    }

    fn read_log(&self, user_no: u64, acc: AccountId, upto: u64) -> Result<Vec<TxRecord>, StoreError> {
        let start = codec::log_key(user_no, acc, 0);
        let end = codec::log_key(user_no, acc, upto);
        self.db.range(start..end).map(|kv| kv.map_err(eng).and_then(|(_, v)| decode(&v))).collect()
    }

    fn read_log_range(
        &self,
        user_no: u64,
        acc: AccountId,
        start: u64,
        end: u64,
    ) -> Result<Vec<TxRecord>, StoreError> {
        let (start, end) = (codec::log_key(user_no, acc, start), codec::log_key(user_no, acc, end));
        self.db.range(start..end).map(|kv| kv.map_err(eng).and_then(|(_, v)| decode(&v))).collect()
    }

    fn main_txid_exists(&self, user_no: u64, id: &str) -> Result<bool, StoreError> {
        self.db.contains_key(codec::txid_key(user_no, id)).map_err(eng)
    }

    fn new_user_no(&self) -> Result<u64, StoreError> {
        // +1 so that 0 is never a user number.
        self.db.generate_id().map(|n| n + 1).map_err(eng)
    }

    fn keys_with_prefix(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.db.scan_prefix(prefix).keys().map(|k| k.map(|k| k.to_vec()).map_err(eng)).collect()
    }

    fn commit(&self, writes: Vec<Write>) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let _timer = crate::metrics::CommitTimer::start(writes.len());
            let mut batch = sled::Batch::default();
            for w in writes {
                match w {
                    Write::Put(k, v) => batch.insert(k, v),
                    Write::Del(k) => batch.remove(k),
                }
            }
            self.db.apply_batch(batch).map_err(eng)?;
            let ticket = self.applied.fetch_add(1, Ordering::AcqRel) + 1;
            self.group_flush(ticket).await
        })
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map(|_| ()).map_err(eng)
    }
}
