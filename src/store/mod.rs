//! Persistence: the `Store` trait (sled is the default engine), the key and value encoding, and
//! the per-user cache that serialises writers and hands readers consistent snapshots.

pub mod codec;
pub mod sled_store;
pub mod users;

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

use crate::domain::engine::TxRecord;
use crate::domain::tree::{Account, AccountId, Ledger};

#[derive(Debug)]
pub enum StoreError {
    Engine(String),
    Codec(String),
    /// The per-user lock could not be taken within the limit (13.2 item 7).
    LockTimeout,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Engine(e) => write!(f, "storage engine: {e}"),
            StoreError::Codec(e) => write!(f, "codec: {e}"),
            StoreError::LockTimeout => write!(f, "per-user lock wait timed out"),
        }
    }
}

impl std::error::Error for StoreError {}

/// The stored user record (SPEC 2.7) plus the tree's root and lifetime ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    pub user_id: String,
    /// Internal fixed-width key of this user's rows; never reused.
    pub user_no: u64,
    pub password_hash: Option<String>,
    pub role: String,
    pub created_at: i64,
    pub root: AccountId,
    pub ledger: Ledger,
}

/// One prebuilt write of an atomic commit.
#[derive(Debug, Clone)]
pub enum Write {
    Put(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a storage engine must provide. All writes of one request go through one `commit`,
/// which is atomic and durable when its future resolves.
pub trait Store: Send + Sync + 'static {
    fn get_user(&self, user_id: &str) -> Result<Option<UserRecord>, StoreError>;
    fn load_accounts(&self, user_no: u64) -> Result<Vec<Account>, StoreError>;
    /// The first `upto` records of an account's log, in order.
    fn read_log(&self, user_no: u64, acc: AccountId, upto: u64) -> Result<Vec<TxRecord>, StoreError>;
    /// Records `start..end` of an account's log, in order (one page: cost O(end - start)).
    fn read_log_range(
        &self,
        user_no: u64,
        acc: AccountId,
        start: u64,
        end: u64,
    ) -> Result<Vec<TxRecord>, StoreError>;
    fn main_txid_exists(&self, user_no: u64, id: &str) -> Result<bool, StoreError>;
    fn new_user_no(&self) -> Result<u64, StoreError>;
    /// Keys of every row stored under `prefix` (used to delete logs of deleted accounts).
    fn keys_with_prefix(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, StoreError>;
    /// Applies `writes` atomically and resolves once they are on stable storage.
    fn commit(&self, writes: Vec<Write>) -> BoxFuture<'_, Result<(), StoreError>>;
    /// Flushes everything (shutdown).
    fn flush(&self) -> Result<(), StoreError>;
}
