//! `Idempotency-Key` at the HTTP edge (docs/api.md, idempotency keys). On the endpoints that write a user's
//! data, a request carrying the header is checked against the user's kept keys before it runs:
//! the same key with the same request replays the first answer byte for byte (with
//! `Idempotent-Replayed: true`) and runs nothing; with another request it is a 422; while the
//! first request still runs, a 409, unless its write is made and only waits for durability:
//! then the retry waits for it and answers from it (see `Users::idem_begin`). A handler's answer (2xx or 4xx) is kept: by the mutation's
//! own commit when it writes (so a crash cannot separate the write from its key), else by an
//! operation carrying only the key. 5xx answers and rejections before the handler (filter, 413,
//! 408) are not kept, so a client can retry them. Keys live 24 h, at most 1000 per user.

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};

use super::filter::Pass;
use super::response::{envelope, Reply};
use crate::api::decl::Endpoint;
use crate::api::json::Obj;
use crate::api::{ApiError, IdemReq};
use crate::app::App;
use crate::store::users::{IdemCheck, IdemRun};
use crate::store::IdemRecord;

pub const HEADER: &str = "idempotency-key";
/// [`HEADER`] as a name: a lookup by `&str` parses and checks the text every time.
pub static HEADER_NAME: hyper::header::HeaderName = hyper::header::HeaderName::from_static(HEADER);
pub const REPLAYED: &str = "idempotent-replayed";
/// Longest key accepted.
pub const KEY_MAX: usize = 255;

pub const BAD_KEY: &str = "Idempotency-Key must be 1 to 255 visible ASCII characters";
pub const MISMATCH: &str = "Idempotency-Key was already used with other parameters";
pub const RUNNING: &str = "A request with this Idempotency-Key is still running";

/// "Same parameters": a BLAKE2b-256 hash of the request as sent (method, path, query, content
/// type and body bytes, each length-prefixed). A client retries by resending the same bytes.
pub fn fingerprint(method: &str, path: &str, query: Option<&str>, ct: Option<&str>, body: &[u8]) -> Vec<u8> {
    use blake2::{Blake2b256, Digest};
    let mut h = Blake2b256::new();
    for part in [
        method.as_bytes(),
        path.as_bytes(),
        query.unwrap_or("").as_bytes(),
        ct.unwrap_or("").as_bytes(),
        body,
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.finalize().to_vec()
}

/// What to do with a request before its handler runs.
pub enum Begin {
    /// No key, or an endpoint that ignores it.
    Skip,
    /// Answered already (replay, 409, 422, bad key).
    Answer(Reply),
    /// Run it; `run` marks the key as running until the answer is kept.
    Run { req: IdemReq, run: IdemRun, user_id: String },
}

pub async fn begin(
    app: &App,
    r: &Endpoint,
    pass: &Pass,
    headers: &HeaderMap,
    query: Option<&str>,
    body: &Bytes,
    start_us: i64,
) -> Begin {
    let (Some(value), Pass::User(ident)) = (headers.get(HEADER), pass) else { return Begin::Skip };
    // Honoured where a request writes a user's data. The public /register (no user to scope a
    // key to; a repeat answers its own 4xx) and /login ignore it.
    if !r.writes {
        return Begin::Skip;
    }
    let fail = |e: ApiError| Begin::Answer(envelope(Err(e), r.prefix, start_us, app.clock.now_micros()));
    let key = value.as_bytes();
    if key.is_empty() || key.len() > KEY_MAX || !key.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return fail(ApiError::bad(BAD_KEY));
    }
    let key = String::from_utf8_lossy(key).into_owned();
    let ct = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let fp = fingerprint(r.verb.as_str(), r.path, query, ct, body);
    match app.users.idem_begin(&ident.user_id, &key, &fp, start_us).await {
        Err(e) => fail(e.into()),
        Ok(IdemCheck::Replay(rec)) => Begin::Answer(replayed(Reply::json(rec.status, rec.body))),
        Ok(IdemCheck::Mismatch) => fail(ApiError::new(422, MISMATCH)),
        Ok(IdemCheck::Running) => fail(ApiError::new(409, RUNNING)),
        Ok(IdemCheck::Proceed(run)) => {
            Begin::Run { req: IdemReq { key, fingerprint: fp }, run, user_id: ident.user_id.clone() }
        }
    }
}

/// A kept answer sent again, marked as such.
pub fn replayed(reply: Reply) -> Reply {
    reply.header(HeaderName::from_static(REPLAYED), HeaderValue::from_static("true"))
}

/// Largest answer kept by [`finish`], which keeps the answers of requests that wrote nothing
/// (errors, mostly); a write keeps its own small answer in its commit.
const MAX_KEPT_ANSWER_BYTES: usize = 16 << 10;

/// The answer of a request that ran with a key and wrote nothing (a write keeps its answer in
/// its own commit), kept unless it is a 5xx or a 429.
pub async fn finish(
    app: &App,
    user_id: &str,
    run: IdemRun,
    req: Option<IdemReq>,
    result: Result<Obj, ApiError>,
    prefix: &str,
    start_us: i64,
) -> Reply {
    let Some(req) = req else {
        drop(run);
        return envelope(result, prefix, start_us, app.clock.now_micros());
    };
    let keep = matches!(result, Ok(_) | Err(ApiError::Client(..)) | Err(ApiError::Bare(..)));
    let now = app.clock.now_micros();
    let reply = envelope(result, prefix, start_us, now);
    // An error answer can echo a parameter without a length limit (SPEC 3.4: `uuid`): kept,
    // 1 MiB requests would keep megabytes each for a day. Unkept, it is like a failed keep.
    if keep && reply.status < 500 && reply.headers.is_empty() && reply.body.len() <= MAX_KEPT_ANSWER_BYTES {
        let rec = IdemRecord {
            key: req.key,
            fingerprint: req.fingerprint,
            created_us: now,
            status: reply.status,
            body: reply.body.clone(),
        };
        // A failure here loses only the key of a request that wrote nothing: a retry runs it
        // again and answers the same.
        if let Err(e) = app.users.idem_keep(user_id, rec).await {
            tracing::warn!(error = %e, "idempotency key not kept");
        }
    }
    drop(run);
    reply
}
