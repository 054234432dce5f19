//! The one error type handlers return, and the guard that turns a panic into one.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::json::Obj;

/// Polls a future, turning a panic into `Err` so one bad request never takes a worker down.
pub struct CatchUnwind<F>(pub F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, ()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut self.0).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(_) => Poll::Ready(Err(())),
        }
    }
}

/// What a handler answers with when it fails.
#[derive(Debug)]
pub enum ApiError {
    /// A documented error: status and exact message, optional extra fields after `error`.
    Client(u16, String, Option<Obj>),
    /// A body with only success/status/error (filter-shaped).
    Bare(u16, String),
    /// 429 with `Retry-After` seconds (login backoff).
    TooMany(String, u64),
    /// A bug or storage failure: logged, answered as `<prefix>: internal error`.
    Internal(String),
}

impl ApiError {
    /// Status and message of a documented error (tests).
    #[cfg(test)]
    pub fn to_string_for_test(&self) -> (u16, String) {
        match self {
            ApiError::Client(s, m, _) | ApiError::Bare(s, m) => (*s, m.clone()),
            ApiError::TooMany(m, _) => (429, m.clone()),
            ApiError::Internal(m) => (500, m.clone()),
        }
    }
    pub fn new(status: u16, msg: impl Into<String>) -> ApiError {
        ApiError::Client(status, msg.into(), None)
    }
    pub fn bad(msg: impl Into<String>) -> ApiError {
        ApiError::new(400, msg)
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            // The shared database is unreachable: retryable, unlike an internal error.
            crate::store::StoreError::Unavailable(cause) => {
                tracing::warn!(%cause, "database unavailable");
                ApiError::new(503, "Service unavailable: the database cannot be reached")
            }
            // The disk failed a sync: writes stop until an operator restarts the service.
            crate::store::StoreError::Halted(cause) => {
                tracing::debug!(%cause, "write refused: storage is halted");
                ApiError::new(
                    503,
                    "Service unavailable: storage failed to sync to disk; writes are refused until the service restarts",
                )
            }
            e => ApiError::Internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_handler_becomes_an_error_not_a_crash() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let fut = Box::pin(async {
            let v: Vec<u8> = Vec::new();
            v[1] // index out of bounds
        });
        assert_eq!(rt.block_on(CatchUnwind(fut)), Err(()));
        let ok = Box::pin(async { 7 });
        assert_eq!(rt.block_on(CatchUnwind(ok)), Ok(7));
    }
}
