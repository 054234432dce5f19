//! Persistence: the `Store` trait (the embedded journal + sled engine is the default; PostgreSQL,
//! [`pg`], serves several nodes), the key and value encoding, and the per-user cache that
//! serialises writers and hands readers consistent snapshots.

mod codec;
pub mod journal;
pub mod migrate;
pub mod pg;
pub mod sled_store;
pub mod users;
mod v1;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::engine::{Change, TxRecord};
use crate::domain::tree::{AccountId, Ledger, Tree};

#[derive(Debug)]
pub enum StoreError {
    Engine(String),
    Codec(String),
    /// The per-user lock could not be taken within the limit (13.2 item 7).
    LockTimeout,
    /// The data directory was written by a newer, unknown storage format.
    NewerFormat(String),
    /// Stored data fails its checksum or invariants; never silently dropped.
    Corrupt(String),
    /// The operation was refused and is known not to be stored (a failed append cut off the
    /// journal, or a write built on one): the state before it is still exact.
    Refused(String),
    /// The database cannot be reached (the request answers 503; later ones retry).
    Unavailable(String),
    /// A user with this id was created meanwhile (by another node).
    UserExists,
    /// A deposit's transaction id is already in the main account's log (another node's write).
    DuplicateTxid(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Engine(e) => write!(f, "storage engine: {e}"),
            StoreError::Codec(e) => write!(f, "codec: {e}"),
            StoreError::LockTimeout => write!(f, "per-user lock wait timed out"),
            StoreError::NewerFormat(e) | StoreError::Corrupt(e) => f.write_str(e),
            StoreError::Refused(e) => write!(f, "write refused: {e}"),
            StoreError::Unavailable(e) => write!(f, "database unavailable: {e}"),
            StoreError::UserExists => f.write_str("user already exists"),
            StoreError::DuplicateTxid(id) => write!(f, "duplicate main-account transaction id {id}"),
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

/// One atomic, durable unit of work for an engine, in domain terms.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Op {
    /// Creates or updates a user: the user record (with the ledger after the change) and
    /// everything the mutation changed in its tree.
    Commit { user: UserRecord, change: Change },
    /// Removes a user and every row of its tree (main-account deletion).
    DeleteUser { user: UserRecord },
}

impl Op {
    /// Rows the operation writes (the commit-size metric).
    pub fn rows(&self) -> usize {
        match self {
            Op::Commit { change: c, .. } => {
                1 + c.accounts.len()
                    + c.records.len()
                    + c.days.len()
                    + c.track.len()
                    + c.main_txids.len()
                    + c.removed.len()
            }
            Op::DeleteUser { .. } => 1,
        }
    }
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A user's row in a shared engine: (user number, version). The version grows by one with every
/// commit of the user; a new user with the same id gets a new number.
pub type Version = (u64, u64);

/// A user's record, tree and version, as loaded from a shared engine.
pub type Loaded = (UserRecord, Tree, u64);

/// What an engine shared by several nodes adds: other nodes write too, so a node's cached state
/// is checked against the stored version, and a write locks the user's row in storage.
pub trait SharedStore: Send + Sync {
    /// The user's current row version (one indexed read), `None` when there is no such user.
    fn version<'a>(&'a self, user_id: &'a str) -> BoxFuture<'a, Result<Option<Version>, StoreError>>;
    /// A user's record, tree and version from one consistent snapshot.
    fn load_versioned<'a>(&'a self, user_id: &'a str) -> BoxFuture<'a, Result<Option<Loaded>, StoreError>>;
    /// Starts a write of `user_id`: a transaction holding the user's row lock, waiting at most
    /// `lock_wait` for it ([`StoreError::LockTimeout`]).
    fn begin_write<'a>(
        &'a self,
        user_id: &'a str,
        lock_wait: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn WriteTxn>, StoreError>>;
}

/// A user's write in a shared engine; dropped without [`WriteTxn::commit`], it rolls back.
pub trait WriteTxn: Send + Sync {
    /// The locked user's row version (`None`: no such user, nothing locked).
    fn locked(&self) -> Option<Version>;
    /// The user as this transaction sees it.
    fn load_user<'a>(&'a self, user_id: &'a str) -> BoxFuture<'a, Result<Option<Loaded>, StoreError>>;
    /// Whether `id` is in the main account's log, as this transaction sees it.
    fn main_txid_exists<'a>(&'a self, user_no: u64, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// A user number never used before, on this transaction's connection.
    fn new_user_no(&self) -> BoxFuture<'_, Result<u64, StoreError>>;
    /// Writes `op` and commits; resolves with the user's new version once durable. On error
    /// the outcome may be unknown (a connection lost during COMMIT).
    fn commit(self: Box<Self>, op: Op) -> BoxFuture<'static, Result<u64, StoreError>>;
}

/// What a storage engine must provide, in domain terms: no handler builds a key or sees the
/// encoding. Reads are async so a network engine fits behind the same boundary.
pub trait Store: Send + Sync + 'static {
    /// A user's record and whole tree (accounts with their day and tracker aggregates).
    fn load_user<'a>(
        &'a self,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<(UserRecord, Tree)>, StoreError>>;
    /// Records `[from, to)` of an account's log, in order.
    fn read_log(
        &self,
        user_no: u64,
        acc: AccountId,
        from: u64,
        to: u64,
    ) -> BoxFuture<'_, Result<Vec<TxRecord>, StoreError>>;
    /// Whether `id` is a transaction id in the main account's log of `user_no`.
    fn main_txid_exists<'a>(&'a self, user_no: u64, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// A user number never used before.
    fn new_user_no(&self) -> BoxFuture<'_, Result<u64, StoreError>>;
    /// Orders `op` after every operation committed before this call returns, and resolves once
    /// it is on stable storage. `basis` names the state the operation was computed from: once
    /// an operation fails, every later operation with the same basis fails too, so nothing built
    /// on a lost write ever becomes durable.
    fn commit(&self, op: Op, basis: u64) -> BoxFuture<'static, Result<(), StoreError>>;
    /// Whether the engine can take writes (readiness).
    fn healthy(&self) -> bool {
        true
    }
    /// Makes everything committed durable in the engine's final form and stops taking writes
    /// (shutdown).
    fn flush(&self) -> Result<(), StoreError>;
    /// The shared-engine side of this store, when other nodes may write to it too.
    fn shared(&self) -> Option<&dyn SharedStore> {
        None
    }
}
