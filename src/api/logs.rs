//! Whole-log answers: /get_transactions without `limit` and /get_minimal_tree give every record
//! of a log (SPEC 8.3, 8.12), and a log has no bound. Built whole, one such answer took several
//! times its own size in memory (a few concurrent ones, gigabytes) and held a worker for
//! seconds. So a handler writes a marker where a log's array goes and leaves its snapshot in a
//! [`LogPlan`]; the answer is then filled in page by page, whole when it is small, or streamed
//! in chunks as it is written, so memory stays bounded by a page and a few chunks, and the
//! workers serve other requests between pages.
//!
//! A marker is a NUL byte, the log's index in the plan, and a NUL byte: JSON text never holds a
//! raw NUL (strings escape it), so a marker cannot be confused with content.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::analytics::record_json;
use crate::app::App;
use crate::domain::tree::AccountId;
use crate::http::response::ApiError;
use crate::store::users::UserState;

/// Records read and rendered at a time.
const PAGE: u64 = 1000;
/// Bytes gathered before a chunk of a streamed answer is sent.
const CHUNK: usize = 64 << 10;
/// Chunks written ahead of the client.
const CHUNKS_AHEAD: usize = 4;

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

/// `body` with every marker replaced by its log, built whole.
pub async fn fill(app: &App, plan: &LogPlan, body: &str) -> Result<String, ApiError> {
    let mut out = String::with_capacity(body.len() + plan.records() as usize * 256);
    produce(app, plan, body, &mut out, None).await?;
    Ok(out)
}

/// `body` with every marker replaced by its log, as chunks written by a task of its own while
/// the client reads them. A storage failure part-way ends the stream with an error: the client
/// sees a cut answer, never a well-formed wrong one.
pub fn stream(app: Arc<App>, plan: LogPlan, body: String) -> mpsc::Receiver<Result<Bytes, std::io::Error>> {
    let (tx, rx) = mpsc::channel(CHUNKS_AHEAD);
    tokio::spawn(async move {
        let mut out = String::with_capacity(CHUNK + CHUNK / 2);
        match produce(&app, &plan, &body, &mut out, Some(&tx)).await {
            Ok(()) => {
                let _ = tx.send(Ok(Bytes::from(out))).await;
            }
            Err(Produce::Gone) => {}
            Err(Produce::Failed(e)) => {
                tracing::error!(error = ?e, "a streamed answer failed part-way");
                let _ = tx.send(Err(std::io::Error::other("log read failed"))).await;
            }
        }
    });
    rx
}

enum Produce {
    /// The client went away: nothing more to write.
    Gone,
    Failed(ApiError),
}

impl From<Produce> for ApiError {
    fn from(p: Produce) -> ApiError {
        match p {
            Produce::Gone => ApiError::Internal("answer abandoned".into()),
            Produce::Failed(e) => e,
        }
    }
}

/// Writes `body` into `out` with each marker replaced by its log; with `tx`, sends `out` as a
/// chunk whenever it holds [`CHUNK`] bytes.
async fn produce(
    app: &App,
    plan: &LogPlan,
    body: &str,
    out: &mut String,
    tx: Option<&mpsc::Sender<Result<Bytes, std::io::Error>>>,
) -> Result<(), Produce> {
    let mut rest = body;
    let mut since_yield = 0;
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
            // The state says how many records there are: fewer read means storage lost some,
            // and an answer must not pretend otherwise.
            if recs.len() as u64 != stop - start {
                return Err(Produce::Failed(ApiError::Internal(format!(
                    "log of account {acc}: {} records read of {start}..{stop}",
                    recs.len()
                ))));
            }
            for (i, r) in recs.iter().enumerate() {
                if start > 0 || i > 0 {
                    out.push(',');
                }
                out.push_str(&record_json(r));
            }
            start = stop;
            if let Some(tx) = tx {
                if out.len() >= CHUNK {
                    let chunk = Bytes::from(std::mem::replace(out, String::with_capacity(CHUNK + CHUNK / 2)));
                    tx.send(Ok(chunk)).await.map_err(|_| Produce::Gone)?;
                }
            }
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
