//! Version reads of requests that arrive together, sent as one statement: a read on a warm
//! cache costs a share of one indexed read instead of one round trip of its own.
//!
//! A read joins the waiting list, then sends the whole list once one of [`SENDERS`] is free (or
//! finds its answer already sent by another). Each statement goes out after every read it
//! carries arrived, so each read still sees every write acknowledged before its request came
//! (docs/operations.md, "Writes"). A read whose batch failed, or whose sender was cancelled,
//! asks again alone, so every error is its own.

use std::collections::HashMap;

use parking_lot::Mutex;
use tokio::sync::{oneshot, Semaphore};

use super::sql::{col, unsigned};
use crate::store::{StoreError, Version};

/// Batches in flight at once. Under light load every read finds one free and goes alone, with
/// no wait; under heavy load the reads that come while these are in flight share the next.
pub(super) const SENDERS: usize = 4;

/// A batch's answer to one read: `Err`: ask again alone.
type Answer = Result<Option<Version>, ()>;

pub(super) struct Versions {
    waiting: Mutex<Vec<(String, oneshot::Sender<Answer>)>>,
    senders: Semaphore,
}

impl Versions {
    pub(super) fn new() -> Versions {
        Versions { waiting: Mutex::new(Vec::new()), senders: Semaphore::new(SENDERS) }
    }

    /// `user_id`'s (user number, version), read with the reads waiting now; `ask` reads a list
    /// of ids (one statement).
    pub(super) async fn read<F, Fut>(&self, user_id: &str, ask: F) -> Result<Option<Version>, StoreError>
    where
        F: Fn(Vec<String>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<tokio_postgres::Row>, StoreError>>,
    {
        let (tx, mut rx) = oneshot::channel();
        self.waiting.lock().push((user_id.to_string(), tx));
        let permit = tokio::select! {
            biased;
            answer = &mut rx => return self.settled(user_id, answer.ok(), &ask).await,
            permit = self.senders.acquire() => permit,
        };
        let batch = std::mem::take(&mut *self.waiting.lock());
        if !batch.is_empty() {
            let (ids, txs): (Vec<String>, Vec<oneshot::Sender<Answer>>) = batch.into_iter().unzip();
            let found = ask(ids.clone()).await.and_then(|rows| {
                rows.iter()
                    .map(|r| Ok((col::<String>(r, 0)?, (unsigned(col(r, 1)?)?, unsigned(col(r, 2)?)?))))
                    .collect::<Result<HashMap<String, Version>, StoreError>>()
            });
            for (id, tx) in ids.iter().zip(txs) {
                let _ = tx.send(found.as_ref().map(|m| m.get(id).copied()).map_err(|_| ()));
            }
        }
        drop(permit);
        let answer = rx.await.ok();
        self.settled(user_id, answer, &ask).await
    }

    /// The answer a batch gave, or the read alone when it gave none.
    async fn settled<F, Fut>(
        &self,
        user_id: &str,
        answer: Option<Answer>,
        ask: &F,
    ) -> Result<Option<Version>, StoreError>
    where
        F: Fn(Vec<String>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<tokio_postgres::Row>, StoreError>>,
    {
        if let Some(Ok(v)) = answer {
            return Ok(v);
        }
        let rows = ask(vec![user_id.to_string()]).await?;
        match rows.first() {
            Some(r) => Ok(Some((unsigned(col(r, 1)?)?, unsigned(col(r, 2)?)?))),
            None => Ok(None),
        }
    }
}

/// The statement: (user id, user number, version) of each id that names a user.
pub(super) const SQL: &str = "SELECT user_id, user_no, version FROM users WHERE user_id = ANY($1)";
