//! Calls bounded in time, and transactions that never leave a lock or a half-written change
//! behind when they fail or are cancelled.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Object};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

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

    /// Sends `stmts` and then COMMIT at once (one round trip) and waits for every answer: each
    /// statement's, in order. A statement that fails aborts the transaction, so the ones after
    /// it fail too and COMMIT rolls it back; the connection is then clean again. `Err`: COMMIT
    /// itself failed or was not answered, so the outcome is unknown and the connection is
    /// closed, never reused.
    pub(super) async fn commit_with(mut self, stmts: &[Stmt<'_>]) -> Result<Answers, StoreError> {
        let obj = self.obj.take().ok_or(StoreError::Bug("transaction already finished"))?;
        let mut dirty = Dirty(Some(obj));
        let mut answers = {
            let c = dirty.0.as_deref().ok_or(StoreError::Bug("transaction already finished"))?;
            let mut fs: Vec<BoxFuture<'_, Result<Vec<Row>, tokio_postgres::Error>>> =
                Vec::with_capacity(stmts.len() + 1);
            for s in stmts {
                fs.push(Box::pin(c.query(&s.st, &s.params)));
            }
            fs.push(Box::pin(async move { c.batch_execute("COMMIT").await.map(|()| Vec::new()) }));
            in_order(fs).await
        };
        let committed = answers.pop().ok_or(StoreError::Bug("no answer to COMMIT"))?;
        match committed {
            Ok(_) => drop(dirty.0.take()),
            // A statement's own error says more (a taken id, say); the connection is closed
            // all the same.
            Err(_) if answers.iter().any(|a| a.is_err()) => {}
            Err(e) => return Err(pg_err(e)),
        }
        Ok(answers)
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

/// One statement of a transaction: prepared, with its parameters.
pub(super) struct Stmt<'a> {
    pub(super) st: Statement,
    pub(super) params: Vec<&'a (dyn ToSql + Sync)>,
}

/// Every answer of a pipeline, in the order the statements were sent.
pub(super) type Answers = Vec<Result<Vec<Row>, tokio_postgres::Error>>;

/// Awaits `fs` together, polling them in order: the first poll of a tokio-postgres call with a
/// prepared statement sends it, so statements go out in this order, in one write, and the
/// database runs them in it (`tokio::join!` and the like promise no order).
pub(super) async fn in_order<'a, T>(mut fs: Vec<BoxFuture<'a, T>>) -> Vec<T> {
    let mut out: Vec<Option<T>> = fs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in fs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}
/// The next answer of a pipeline ([`in_order`]).
pub(super) fn next(
    answers: &mut impl Iterator<Item = Result<Vec<Row>, tokio_postgres::Error>>,
) -> Result<Vec<Row>, StoreError> {
    answers.next().ok_or(StoreError::Bug("a pipeline answered short"))?.map_err(pg_err)
}

/// Sends `a` then `b` (polled in this order, so one round trip) and waits for both answers, but
/// at most `wait` for `a`'s: `b` may wait longer on its own (a row lock held by another node),
/// the database's first answer may not (it is not answering at all).
pub(super) async fn first_within<'f, A, B>(
    wait: Duration,
    mut a: BoxFuture<'f, A>,
    mut b: BoxFuture<'f, B>,
) -> Result<(A, B), StoreError> {
    let mut b_out = None;
    let a_out = tokio::time::timeout(
        wait,
        std::future::poll_fn(|cx| {
            let a_poll = a.as_mut().poll(cx);
            if b_out.is_none() {
                if let Poll::Ready(v) = b.as_mut().poll(cx) {
                    b_out = Some(v);
                }
            }
            a_poll
        }),
    )
    .await
    .map_err(|_| {
        StoreError::Unavailable(format!("the database did not answer within {} s", wait.as_secs()))
    })?;
    let b_out = match b_out {
        Some(v) => v,
        None => b.await,
    };
    Ok((a_out, b_out))
}
