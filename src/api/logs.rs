//! Whole-log answers: /get_transactions without `limit` and /get_minimal_tree give every record
//! of a log (SPEC 8.3, 8.12), and a log has no bound. Built whole, one such answer took several
//! times its own size in memory (a few concurrent ones, gigabytes) and held a worker for
//! seconds. So a handler writes a marker where a log's array goes and leaves its snapshot in a
//! [`LogPlan`]; `api::respond` then has the logs filled in page by page: whole when they are short
//! ([`fill`]), else streamed in chunks as they are written ([`stream`]), so memory stays bounded
//! by a page and a few chunks, and the workers serve other requests between pages.
//!
//! A marker is a NUL byte, the log's index in the plan, and a NUL byte: JSON text never holds a
//! raw NUL (strings escape it), so a marker cannot be confused with content.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use std::io::ErrorKind;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::analytics::record_json;
use super::json::Obj;
use super::{ApiError, CatchUnwind};
use crate::app::App;
use crate::domain::tree::AccountId;
use crate::store::users::UserState;

/// Records read and rendered at a time.
const PAGE: u64 = 1000;
/// Bytes gathered before a chunk of a streamed answer is sent (a chunk may pass it by one
/// record).
const CHUNK: usize = 64 << 10;
/// Chunks written ahead of the client.
const CHUNKS_AHEAD: usize = 4;
/// Largest reservation made up front for a filled answer; past it the text grows as needed.
const MAX_RESERVE: usize = 4 << 20;

/// The logs an answer names by marker, with the committed state they are read from. A log is
/// read up to its length in that state, so the answer shows no record of a later write.
pub struct LogPlan {
    st: Arc<UserState>,
    logs: Vec<(AccountId, u64)>,
}

impl LogPlan {
    pub fn new(st: Arc<UserState>) -> LogPlan {
        LogPlan { st, logs: Vec::new() }
    }

    /// The marker to write where the JSON array of `acc`'s log goes.
    pub fn marker(&mut self, acc: AccountId) -> String {
        let len = self.st.tree.get(acc).map_or(0, |a| a.log_len);
        self.logs.push((acc, len));
        format!("\0{}\0", self.logs.len() - 1)
    }

    /// Records in all the logs named.
    pub fn records(&self) -> u64 {
        self.logs.iter().map(|(_, n)| n).sum()
    }
}

/// The chunks of a streamed answer after its first, as its writer sends them.
pub type Chunks = mpsc::Receiver<Result<Bytes, std::io::Error>>;

/// Why logs could not be filled in.
pub enum LogError {
    /// A log came back shorter than its state says: the account (or its user) was deleted
    /// since the snapshot. The request can run again and see the deletion.
    Stale,
    Failed(ApiError),
}

/// The fields of `obj` with every marker replaced by its log, built whole.
pub async fn fill(app: &App, plan: &LogPlan, obj: Obj) -> Result<Obj, LogError> {
    let text = obj.members();
    let reserve = (plan.records() as usize).saturating_mul(256).min(MAX_RESERVE);
    let mut out = String::with_capacity(text.len() + reserve);
    let work = AssertUnwindSafe(Box::pin(produce(app, plan, text, &mut out, None)));
    match CatchUnwind(work).await {
        Ok(Ok(())) => Ok(Obj::from_members(out)),
        Ok(Err(Produce::Stale)) => Err(LogError::Stale),
        Ok(Err(Produce::Gone)) => Err(LogError::Failed(ApiError::Internal("answer abandoned".into()))),
        Ok(Err(Produce::Failed(e))) => Err(LogError::Failed(e)),
        Err(()) => Err(LogError::Failed(ApiError::Internal("filling in logs panicked".into()))),
    }
}

/// `body` with every marker replaced by its log, as chunks written by a task of its own while
/// the client reads them. The first chunk, which holds the first page read, comes back before
/// anything is sent, so a failure to read at all is still an error answer. A failure after it
/// ends the stream with an error, which cuts the answer (no final chunk): the client sees a cut
/// answer, never a well-formed wrong one; `request_id` names the request in that failure's log.
pub async fn stream(
    app: Arc<App>,
    plan: LogPlan,
    body: String,
    request_id: &str,
) -> Result<(Bytes, Chunks), LogError> {
    let (tx, mut rx) = mpsc::channel(CHUNKS_AHEAD);
    let request_id = request_id.to_string();
    tokio::spawn(async move {
        let mut out = String::with_capacity(CHUNK + CHUNK / 2);
        let work = AssertUnwindSafe(Box::pin(produce(&app, &plan, &body, &mut out, Some(&tx))));
        let failure = match CatchUnwind(work).await {
            Ok(Ok(())) => {
                let _ = tx.send(Ok(Bytes::from(out))).await;
                return;
            }
            Ok(Err(Produce::Gone)) => return,
            // NotFound tells a deletion (see `LogError::Stale`) from a failure.
            Ok(Err(Produce::Stale)) => std::io::Error::new(ErrorKind::NotFound, "a log was deleted part-way"),
            Ok(Err(Produce::Failed(e))) => std::io::Error::other(format!("{e:?}")),
            Err(()) => std::io::Error::other("filling in logs panicked"),
        };
        tracing::warn!(cause = %failure, request_id, "a streamed answer failed");
        let _ = tx.send(Err(failure)).await;
    });
    match rx.recv().await {
        Some(Ok(first)) => Ok((first, rx)),
        Some(Err(e)) if e.kind() == ErrorKind::NotFound => Err(LogError::Stale),
        Some(Err(e)) => Err(LogError::Failed(ApiError::Internal(e.to_string()))),
        None => Err(LogError::Failed(ApiError::Internal("streaming ended before its start".into()))),
    }
}

enum Produce {
    /// The client went away: nothing more to write.
    Gone,
    Stale,
    Failed(ApiError),
}

/// Writes `body` into `out` with each marker replaced by its log. With `tx`, sends `out` as a
/// chunk after the first page read (so the status is known) and whenever it holds [`CHUNK`]
/// bytes.
async fn produce(
    app: &App,
    plan: &LogPlan,
    body: &str,
    out: &mut String,
    tx: Option<&mpsc::Sender<Result<Bytes, std::io::Error>>>,
) -> Result<(), Produce> {
    let mut rest = body;
    let mut since_yield = 0;
    let mut sent_any = false;
    while let Some(at) = rest.find('\0') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let end = after.find('\0').ok_or_else(|| bad_marker(rest))?;
        let idx: usize = after[..end].parse().map_err(|_| bad_marker(rest))?;
        let &(acc, len) = plan.logs.get(idx).ok_or_else(|| bad_marker(rest))?;
        rest = &after[end + 1..];
        out.push('[');
        let mut start = 0;
        while start < len {
            let stop = len.min(start + PAGE);
            let recs = app
                .users
                .read_log_range(&plan.st, acc, start, stop)
                .await
                .map_err(|e| Produce::Failed(e.into()))?;
            // Logs only grow while their account exists: fewer records than the state says
            // means a deletion since the snapshot.
            if recs.len() as u64 != stop - start {
                return Err(Produce::Stale);
            }
            for (i, r) in recs.iter().enumerate() {
                if start > 0 || i > 0 {
                    out.push(',');
                }
                out.push_str(&record_json(r));
                if let Some(tx) = tx {
                    if out.len() >= CHUNK || !sent_any {
                        sent_any = true;
                        let chunk =
                            Bytes::from(std::mem::replace(out, String::with_capacity(CHUNK + CHUNK / 2)));
                        tx.send(Ok(chunk)).await.map_err(|_| Produce::Gone)?;
                    }
                }
            }
            start = stop;
            // A page is a millisecond or two of work, and a client reading as fast as it is
            // written never makes the sends wait: other requests get the worker between pages
            // (not between the short logs of a large tree, which cost little each).
            since_yield += recs.len() as u64;
            if since_yield >= PAGE {
                since_yield = 0;
                tokio::task::yield_now().await;
            }
        }
        out.push(']');
    }
    out.push_str(rest);
    Ok(())
}

fn bad_marker(at: &str) -> Produce {
    let shown: String = at.chars().take(32).collect();
    Produce::Failed(ApiError::Internal(format!("bad log marker at {shown:?}")))
}
