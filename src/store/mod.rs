//! Persistence: the `Store` trait (the embedded journal + sled engine is the default; PostgreSQL,
//! [`pg`], serves several nodes), the one mapping of an operation to the rows both engines store
//! ([`writes`]), the key and value encoding, and the per-user cache that serialises writers and
//! hands readers consistent snapshots.

mod bin;
mod codec;
pub mod cost;
mod idem_keys;
pub mod journal;
pub mod migrate;
pub mod overlay;
pub mod pg;
pub mod sled_store;
pub mod users;
mod v1;
pub mod writes;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::engine::{Change, TxRecord};
use crate::domain::tree::{AccountId, Ledger, Text, Tree};

/// Syncs a file or a directory (a directory: its entries) to stable storage.
pub(crate) fn sync_path(p: &std::path::Path) -> std::io::Result<()> {
    std::fs::File::open(p).and_then(|f| f.sync_all())
}

/// Syncs the directory that holds `p`'s name: a file's own sync does not make its name durable,
/// and a power cut takes a name no directory sync covered (with everything under it).
pub fn sync_parent(p: &std::path::Path) -> std::io::Result<()> {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => sync_path(d),
        _ => sync_path(std::path::Path::new(".")),
    }
}

/// Creates `dir` and any missing parents so that they survive a power cut: each directory
/// created is synced, and so is the parent that holds its name.
pub fn create_dir_durable(dir: &std::path::Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
        missing.push(d);
        at = d.parent();
    }
    std::fs::create_dir_all(dir)?;
    // Deepest first, so that each name is synced after what it names holds its own entries.
    for d in &missing {
        sync_path(d)?;
        sync_parent(d)?;
    }
    Ok(())
}

#[derive(Debug)]
pub enum StoreError {
    Codec(String),
    /// The per-user lock could not be taken within the limit (13.2 item 7).
    LockTimeout,
    /// The data directory was written by a newer, unknown storage format.
    NewerFormat(String),
    /// Stored data fails its checksum or invariants; never silently dropped.
    Corrupt(String),
    /// A write that would break an invariant of SPEC 13.2 item 10 (a bug in the engine): refused
    /// before anything of it is stored.
    Invariant(String),
    /// The operation was refused and is known not to be stored (a failed append cut off the
    /// journal, or a write built on one): the state before it is still exact.
    Refused(String),
    /// The database cannot be reached (the request answers 503; later ones retry).
    Unavailable(String),
    /// A user with this id was created meanwhile (by another node).
    UserExists,
    /// A deposit's transaction id is already in the main account's log (another node's write).
    DuplicateTxid(String),
    /// A file operation failed: what was done, on which file, and the system's answer.
    Io {
        op: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// sled failed: what was asked of it, and its answer (its I/O errors too, whole, so that a
    /// full disk is told apart from a failed sync: [`StoreError::is_disk_full`]).
    Sled {
        op: &'static str,
        source: sled::Error,
    },
    /// sled's directory is locked by another process.
    InUse {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// sled could not lock its file, which another look found free: starting again may work.
    LockFailed {
        file: std::path::PathBuf,
        source: std::io::Error,
    },
    /// PostgreSQL answered an error of no kind above: what failed (a statement, a row's column,
    /// the URL), and its answer.
    Pg {
        what: &'static str,
        source: tokio_postgres::Error,
    },
    /// The PostgreSQL connection pool could not be built.
    PgPool(deadpool_postgres::BuildError),
    /// Setting the database up at start (migrations, shared settings) failed: which database,
    /// and why.
    PgSetup {
        at: String,
        source: Box<StoreError>,
    },
    /// A storage thread (or runtime) could not be started.
    Spawn {
        what: &'static str,
        source: std::io::Error,
    },
    /// The system's random source failed.
    Random(getrandom::Error),
    /// The store was stopped (shutdown): it takes no more writes.
    Closed,
    /// The journal thread is gone: the write was not queued, or its answer was lost with it.
    JournalStopped,
    /// sled is being reopened after a failed checkpoint, for longer than a read waits.
    Reopening,
    /// Staging stayed behind the journal for longer than a read waits.
    CatchUpTimeout,
    /// The process stopped while the write waited for durability: its outcome is unknown.
    Abandoned,
    /// `pfm migrate` into a target that already holds users.
    TargetNotEmpty,
    /// A state the code never reaches: a bug, described.
    Bug(&'static str),
    /// The embedded engine takes no more writes until a restart: the disk failed a sync, so
    /// nothing written since the last good sync can be assumed durable (the kernel may have
    /// dropped the pages, and a later sync would succeed without them). Reads go on; the
    /// restart recovers from what the disk holds.
    Halted(String),
}

impl StoreError {
    /// The disk is full: the write failed before anything of it was synced, and room may come
    /// back, unlike after a failed sync.
    pub fn is_disk_full(&self) -> bool {
        let source = match self {
            StoreError::Io { source, .. } | StoreError::Sled { source: sled::Error::Io(source), .. } => {
                source
            }
            _ => return false,
        };
        source.kind() == std::io::ErrorKind::StorageFull || source.raw_os_error() == Some(libc::ENOSPC)
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Logs only: a client sees "internal error" (or its 503) whatever the text.
        match self {
            StoreError::Codec(e) => write!(f, "codec: {e}"),
            StoreError::LockTimeout => write!(f, "per-user lock wait timed out"),
            StoreError::NewerFormat(e) | StoreError::Corrupt(e) => f.write_str(e),
            StoreError::Invariant(e) => write!(f, "invariant broken: {e}"),
            StoreError::Refused(e) => write!(f, "write refused: {e}"),
            StoreError::Unavailable(e) => write!(f, "database unavailable: {e}"),
            StoreError::UserExists => f.write_str("user already exists"),
            StoreError::DuplicateTxid(id) => write!(f, "duplicate main-account transaction id {id}"),
            StoreError::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
            StoreError::Sled { op, source } => write!(f, "sled {op}: {source}"),
            StoreError::InUse { path, source } => {
                write!(f, "storage engine: {} is in use by another process: {source}", path.display())
            }
            StoreError::LockFailed { file, source } => write!(
                f,
                "storage engine: could not lock {} ({source}); it is free now, so starting again may work",
                file.display()
            ),
            StoreError::Pg { what, source } => write!(f, "storage engine: {what}: {}", pg::chain(source)),
            StoreError::PgPool(e) => write!(f, "storage engine: database pool: {e}"),
            StoreError::PgSetup { at, source } => {
                let why = source.to_string();
                let why = why.strip_prefix("storage engine: ").unwrap_or(&why);
                write!(f, "storage engine: cannot use the database at {at}: {why}")
            }
            StoreError::Spawn { what, source } => write!(f, "storage engine: starting {what}: {source}"),
            StoreError::Random(e) => write!(f, "storage engine: random bytes: {e}"),
            StoreError::Closed => f.write_str("storage engine: storage is closed"),
            StoreError::JournalStopped => f.write_str("storage engine: the journal thread stopped"),
            StoreError::Reopening => f.write_str("storage engine: storage is reopening"),
            StoreError::CatchUpTimeout => {
                f.write_str("storage engine: storage did not catch up with the journal")
            }
            StoreError::Abandoned => f.write_str("storage engine: stopped while waiting for durability"),
            StoreError::TargetNotEmpty => {
                f.write_str("storage engine: the target already holds users; migrate into an empty one")
            }
            StoreError::Bug(what) => write!(f, "storage engine: {what}"),
            StoreError::Halted(why) => write!(f, "storage takes no writes until a restart: {why}"),
        }
    }
}

// No `source()`: each message already ends with its cause's text (which is what logs show),
// and a reporter that walked the chain would print it twice.
impl std::error::Error for StoreError {}

/// The stored user record (SPEC 2.7) plus the tree's root and lifetime ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    /// Text (shared, not copied): every write copies its user's record twice.
    pub user_id: Text,
    /// Internal fixed-width key of this user's rows; never reused.
    pub user_no: u64,
    pub password_hash: Option<Text>,
    pub role: Text,
    pub created_at: i64,
    pub root: AccountId,
    pub ledger: Ledger,
}

/// One committed data write as delta sync (`GET /changes`) lists it: a small row keyed by
/// (user, knowledge), written in the same operation as the write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncRow {
    /// The user's `server_knowledge` after this write (1 is the registration).
    pub knowledge: u64,
    /// Accounts created or changed.
    pub upserted: Vec<AccountId>,
    /// Accounts removed.
    pub removed: Vec<AccountId>,
    /// Records appended: account, first sequence number, count.
    pub appended: Vec<(AccountId, u64, u64)>,
}

impl SyncRow {
    /// The row of `change`, or `None` when it changed no account and appended nothing (then the
    /// knowledge does not move).
    pub fn of(knowledge: u64, change: &Change) -> Option<SyncRow> {
        let mut appended: Vec<(AccountId, u64, u64)> = Vec::new();
        for (acc, seq, _) in &change.records {
            match appended.iter_mut().find(|(a, first, n)| a == acc && first + *n == *seq) {
                Some((_, _, n)) => *n += 1,
                None => appended.push((*acc, *seq, 1)),
            }
        }
        let row = SyncRow {
            knowledge,
            upserted: change.accounts.iter().map(|a| a.uuid).collect(),
            removed: change.removed.iter().map(|(a, _)| *a).collect(),
            appended,
        };
        let empty = row.upserted.is_empty() && row.removed.is_empty() && row.appended.is_empty();
        (!empty).then_some(row)
    }
}

/// A kept answer to a request that carried an `Idempotency-Key` (docs/api.md, idempotency keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdemRecord {
    pub key: String,
    /// Hash of the request (method, path, query, content type, body).
    pub fingerprint: Vec<u8>,
    /// When the first request was answered (clock microseconds); kept 24 h from then.
    pub created_us: i64,
    pub status: u16,
    /// The answer's body, byte for byte.
    pub body: String,
}

/// The key rows one commit writes and deletes (expired and evicted keys).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdemWrite {
    pub put: Option<IdemRecord>,
    pub remove: Vec<String>,
}

/// What is loaded with a user besides its tree: the delta-sync position and the kept keys.
#[derive(Debug, Clone, Default)]
pub struct UserMeta {
    /// Knowledge of the user's last change row (0: none yet, e.g. a user of format 1 not
    /// written since).
    pub knowledge: u64,
    pub idem: Vec<IdemRecord>,
}

/// One atomic, durable unit of work for an engine, in domain terms.
// An operation is built once and moved into the journal queue: its size on the stack is of no
// consequence, and boxing its parts would only add allocations.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Op {
    /// Creates or updates a user: the user record (with the ledger after the change),
    /// everything the mutation changed in its tree, its delta-sync row when it changed data,
    /// and the idempotency key rows it stores or drops, all in the same atomic unit.
    Commit { user: UserRecord, change: Change, sync: Option<SyncRow>, idem: Option<IdemWrite> },
    /// Removes a user and every row of its tree (main-account deletion).
    DeleteUser { user: UserRecord },
}

impl Op {
    /// The user the operation writes.
    pub fn user(&self) -> &UserRecord {
        match self {
            Op::Commit { user, .. } | Op::DeleteUser { user } => user,
        }
    }

    /// Rows the operation writes (the commit-size metric).
    pub fn rows(&self) -> usize {
        match self {
            Op::Commit { change: c, .. } => {
                1 + c.accounts.len()
                    + c.records.len()
                    + c.days.len()
                    + c.track.len()
                    + c.main_txids.len()
                    + c.notes.len()
                    + c.docs.len()
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
    /// `lock_wait` for it ([`StoreError::LockTimeout`]), to be handed to [`Store::commit`].
    fn begin_write<'a>(
        &'a self,
        user_id: &'a str,
        lock_wait: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn WriteTxn>, StoreError>>;
}

/// A user's write in a shared engine, until [`Store::commit`] takes it; dropped instead, it
/// rolls back. (`Any`: the engine that made it takes its own type back.)
pub trait WriteTxn: std::any::Any + Send + Sync {
    /// The locked user's row version (`None`: no such user, nothing locked).
    fn locked(&self) -> Option<Version>;
    /// The user as this transaction sees it.
    fn load_user<'a>(&'a self, user_id: &'a str) -> BoxFuture<'a, Result<Option<Loaded>, StoreError>>;
    /// Whether `id` is in the main account's log, as this transaction sees it.
    fn main_txid_exists<'a>(&'a self, user_no: u64, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// Which of `ids` are in the index, as this transaction sees it, in one round trip (an
    /// import asks for thousands).
    fn main_txids_existing<'a>(
        &'a self,
        user_no: u64,
        ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<std::collections::HashSet<String>, StoreError>>;
    /// A user number never used before, on this transaction's connection.
    fn new_user_no(&self) -> BoxFuture<'_, Result<u64, StoreError>>;
    /// The user's delta-sync knowledge and kept idempotent answers, on this transaction's
    /// connection: a write that holds one connection never waits for a second (with every
    /// pooled connection held by such writes, none would come).
    fn load_meta(&self, user_no: u64) -> BoxFuture<'_, Result<UserMeta, StoreError>>;
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
    /// The user's delta-sync knowledge and kept idempotency keys (read once, with the user).
    fn load_meta(&self, user_no: u64) -> BoxFuture<'_, Result<UserMeta, StoreError>>;
    /// Change rows of `user_no` with knowledge in `(after, upto]`, in order, at most `max`.
    fn read_changes(
        &self,
        user_no: u64,
        after: u64,
        upto: u64,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<SyncRow>, StoreError>>;
    /// Whether `id` is a transaction id in the main account's log of `user_no`.
    fn main_txid_exists<'a>(&'a self, user_no: u64, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// A user number never used before.
    fn new_user_no(&self) -> BoxFuture<'_, Result<u64, StoreError>>;
    /// Users who need the service (a scheduled occurrence, a webhook delivery, a Bill's notice)
    /// at `upto_secs` or before, at most `max`: the waker's question, on committed state.
    fn wake_users(&self, upto_secs: i64, max: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;
    /// The key the main account's generated ids of `user_no` are derived under, when the engine
    /// finds such ids from the log instead of indexing them (see `domain::txid`).
    fn id_key(&self, _user_no: u64) -> Option<crate::domain::txid::IdKey> {
        None
    }
    /// The one way an operation is committed, whatever the engine. Orders `op` after every
    /// operation committed before this call returns, and resolves once it is on stable storage,
    /// with the user's stored version after it (0 where the engine keeps none). `held`: what
    /// [`SharedStore::begin_write`] gave for this write (the user's row stays locked until the
    /// commit ends); `None` on the embedded engine, whose queue orders writes, and for a write
    /// of its own (`pfm migrate`). `basis` names the state the operation was computed from:
    /// once an operation fails, every later operation with the same basis fails too (until the
    /// user's writer computes afresh, on a new basis), so nothing built on a lost write ever
    /// becomes durable. On error the outcome may be unknown (a connection lost during COMMIT).
    /// (Boxed: an operation is about half a KB, and it passes through several futures and a
    /// queue.)
    fn commit(
        &self,
        op: Box<Op>,
        basis: u64,
        held: Option<Box<dyn WriteTxn>>,
    ) -> BoxFuture<'static, Result<u64, StoreError>>;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::engine::TxRecord;

    fn rec() -> TxRecord {
        TxRecord {
            deposit: true,
            by: "User".into(),
            id: "T".into(),
            channel: "c".into(),
            amount_cents: 1,
            balance_cents: 1,
            amount_due_cents: 0,
            overall_balance_cents: 1,
            date_secs: 0,
            note: None,
        }
    }

    /// A checkpoint retries after a full disk and halts after any other failure: the kind is
    /// told from the system's answer, whether a journal file or sled met it.
    #[test]
    fn a_full_disk_is_told_apart_wherever_it_was_met() {
        let full = || std::io::Error::from_raw_os_error(libc::ENOSPC);
        let eio = || std::io::Error::from_raw_os_error(libc::EIO);
        let file = |source| StoreError::Io { op: "journal", path: "j/1.wal".into(), source };
        let sled = |source| StoreError::Sled { op: "flush", source: sled::Error::Io(source) };
        assert!(file(full()).is_disk_full());
        assert!(sled(full()).is_disk_full());
        assert!(!file(eio()).is_disk_full());
        assert!(!sled(eio()).is_disk_full());
        assert!(
            !StoreError::Sled { op: "get row", source: sled::Error::Unsupported("x".into()) }.is_disk_full()
        );
        assert!(!StoreError::Halted("syncing failed".into()).is_disk_full());
        // Logs say what was asked and what the system answered.
        let text = sled(full()).to_string();
        assert!(text.starts_with("sled flush: ") && text.contains("No space left"), "{text}");
        assert_eq!(file(eio()).to_string(), format!("journal j/1.wal: {}", eio()));
    }

    /// Errors met while setting up the database name it, once.
    #[test]
    fn a_setup_error_names_the_database() {
        let e =
            StoreError::PgSetup { at: "db:5432/pfm".into(), source: Box::new(StoreError::Bug("it broke")) };
        assert_eq!(e.to_string(), "storage engine: cannot use the database at db:5432/pfm: it broke");
    }

    #[test]
    fn a_change_row_lists_consecutive_records_as_ranges() {
        let records = [(7, 3), (7, 4), (9, 0), (7, 5), (9, 1), (9, 3)];
        let change = Change {
            records: records.iter().map(|(a, s)| (*a, *s, rec())).collect(),
            removed: vec![(11, 4)],
            ..Change::default()
        };
        let row = SyncRow::of(5, &change).unwrap();
        assert_eq!(row.knowledge, 5);
        assert_eq!(row.removed, vec![11]);
        assert_eq!(row.appended, vec![(7, 3, 3), (9, 0, 2), (9, 3, 1)]);
        // A mutation that changed nothing raises no knowledge.
        assert!(SyncRow::of(6, &Change::default()).is_none());
    }
}
