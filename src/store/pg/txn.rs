//! Calls bounded in time, and transactions that never leave a lock or a half-written change
//! behind when they fail or are cancelled.

use std::future::Future;
use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Object};

use super::connect::Stale;
use super::sql::pg_err;
use crate::store::{BoxFuture, StoreError};

/// How long one storage call may wait for the database (its connection included): a database
/// that stops answering without closing connections (a hung server, a network black hole)
/// would otherwise hold a request, and its user's other writes, for as long as it lasts.
pub(super) const QUERY_WAIT: Duration = Duration::from_secs(10);
/// The same for a call whose work grows with a user's history: reading a log range (a whole
/// long log, say) and committing (deleting a user deletes all of its records).
pub(super) const LONG_WAIT: Duration = Duration::from_secs(60);

/// `f`, or 503 once `wait` has passed (a cancelled transaction rolls back or its connection is
/// closed, see [`Txn`]). A call that finds the database unavailable (gone, not answering,
/// read-only) marks the pool's connections stale: whatever server they reach, the next requests
/// look for the primary afresh.
pub(super) fn bounded<'a, T: 'a>(
    stale: &Stale,
    wait: Duration,
    f: impl Future<Output = Result<T, StoreError>> + Send + 'a,
) -> BoxFuture<'a, Result<T, StoreError>> {
    let stale = stale.clone();
    Box::pin(async move {
        let r = match tokio::time::timeout(wait, f).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable(format!(
                "the database did not answer within {} s",
                wait.as_secs()
            ))),
        };
        if let Err(StoreError::Unavailable(m)) = &r {
            if stale.mark() {
                tracing::warn!(error = %m, "database unavailable; pooled connections will be replaced");
            }
        }
        r
    })
}

/// A pooled connection inside a transaction. Dropped without [`Txn::commit`], it rolls back
/// (or, outside a runtime, closes the connection, which rolls back too): a handler that fails
/// or is cancelled never leaves a lock or a half-written change behind.
pub(super) struct Txn {
    pub(super) obj: Option<Object>,
}

impl Txn {
    pub(super) fn c(&self) -> Result<&ClientWrapper, StoreError> {
        self.obj.as_deref().ok_or(StoreError::Bug("transaction already finished"))
    }

    pub(super) async fn commit(mut self) -> Result<(), StoreError> {
        let obj = self.obj.take().ok_or(StoreError::Bug("transaction already finished"))?;
        // Until COMMIT answers, the connection's state is unknown: if it fails, or this wait is
        // cancelled (the database did not answer in time), it is closed, never reused.
        Dirty(Some(obj)).settle("COMMIT").await.map_err(pg_err)
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        let Some(obj) = self.obj.take() else { return };
        let dirty = Dirty(Some(obj));
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                let _ = dirty.settle("ROLLBACK").await;
            });
        }
    }
}

/// A connection that may still be inside a transaction: unless taken back out, it is closed
/// when dropped (never returned to the pool), even if its rollback task never ran.
struct Dirty(Option<Object>);

impl Dirty {
    /// Runs `sql` (COMMIT, ROLLBACK); once it succeeds the connection is clean again and goes
    /// back to the pool. Failed, or cancelled while it waits, the connection is closed.
    async fn settle(mut self, sql: &str) -> Result<(), tokio_postgres::Error> {
        if let Some(c) = self.0.as_deref() {
            c.batch_execute(sql).await?;
        }
        drop(self.0.take());
        Ok(())
    }
}

impl Drop for Dirty {
    fn drop(&mut self) {
        if let Some(obj) = self.0.take() {
            drop(Object::take(obj));
        }
    }
}
