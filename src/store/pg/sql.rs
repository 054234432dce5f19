//! Between PostgreSQL's answers and the store's: errors mapped to their kinds, columns read,
//! numbers and ids converted.

use tokio_postgres::error::SqlState;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::domain::tree::AccountId;
use crate::store::StoreError;

/// An error with its causes ("error connecting to server: Connection refused").
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.ends_with(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// Maps a database error: lock waits, lost connections and a server going away have their own
/// kinds; the rest is kept whole.
pub(super) fn pg_err(e: tokio_postgres::Error) -> StoreError {
    let text = || chain(&e);
    match e.code() {
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => StoreError::LockTimeout,
        Some(c)
            if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || *c == SqlState::TOO_MANY_CONNECTIONS =>
        {
            StoreError::Unavailable(text())
        }
        // The server no longer takes writes (a standby, or a primary fenced during a failover):
        // no primary on this connection; the pool then drops its connections (see `Stale`).
        Some(c) if *c == SqlState::READ_ONLY_SQL_TRANSACTION => {
            StoreError::Unavailable(format!("the database is read-only: {}", text()))
        }
        Some(_) => StoreError::Pg { what: "database", source: e },
        // No SQLSTATE: the connection itself failed (closed, reset, timed out).
        None => StoreError::Unavailable(text()),
    }
}

pub(super) fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_err(e),
        other => StoreError::Unavailable(format!("database connection pool: {other}")),
    }
}

pub(super) fn is_unique(e: &tokio_postgres::Error, constraint: &str) -> bool {
    e.as_db_error()
        .is_some_and(|d| *d.code() == SqlState::UNIQUE_VIOLATION && d.constraint() == Some(constraint))
}

pub(super) fn col<'r, T: tokio_postgres::types::FromSql<'r>>(
    row: &'r Row,
    i: usize,
) -> Result<T, StoreError> {
    row.try_get(i).map_err(|source| StoreError::Pg { what: "database row", source })
}

pub(super) fn uid(id: AccountId) -> Uuid {
    Uuid::from_u128(id)
}

pub(super) fn signed(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Codec(format!("{v} does not fit a bigint")))
}

pub(super) fn unsigned(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative stored number {v}")))
}
