//! The accept loop: a semaphore bounds connections, every request goes filter -> router ->
//! params -> handler -> envelope, and a shutdown signal drains in-flight requests.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, EXPECT};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::assets;
use super::conn_io::{ConnState, ErrorAnswers, JsonErrors};
use super::filter::{self, Pass};
use super::idem;
use super::ops;
use super::response::{envelope, render_success, Body, Reply};
use super::restyle::reference_style;
use super::router::{self, route, Routed};
use crate::api::params::Params;
use crate::api::{self, Answer, ApiError, Envelope, Ep, Op, Rq};
use crate::app::App;
use crate::config::ResponseStyle;
use crate::metrics;

/// Largest accepted body of a request answered without reading it (SPEC 3.2); an endpoint's
/// own limit is its declaration's (`Endpoint::body`).
pub const MAX_BODY_BYTES: usize = crate::api::decl::PARAMS_MAX_BYTES;
/// Connections served at once (14.4); more wait in the accept queue.
pub const MAX_CONNECTIONS: usize = 10_000;
/// How long shutdown waits for in-flight requests (14.4).
pub const DRAIN: Duration = Duration::from_secs(10);

static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

fn request_id(req: &Request<Incoming>) -> HeaderValue {
    if let Some(v) = req.headers().get(&X_REQUEST_ID) {
        let b = v.as_bytes();
        if !b.is_empty() && b.len() <= 64 && b.iter().all(|c| c.is_ascii_alphanumeric() || b"._-".contains(c))
        {
            return v.clone();
        }
    }
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
    HeaderValue::from_str(id).unwrap_or(HeaderValue::from_static("-"))
}

async fn handle(
    app: Arc<App>,
    conn: Arc<ConnState>,
    mut req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let _in_flight = conn.begin();
    let started = std::time::Instant::now();
    let route = router::index(req.uri().path());
    let rid = request_id(&req);
    // The access log's fields cost allocations: gather them only when the line will be written.
    let log_on = tracing::enabled!(target: "access", tracing::Level::INFO);
    let method = req.method().clone();
    let http10 = req.version() == hyper::Version::HTTP_10;
    // HEAD on a token-exempt GET resource (probes, OpenAPI, metrics, the page's files) runs as
    // GET; hyper, which knows the request was HEAD, sends the head only (RFC 9110 9.3.2). SPEC's
    // endpoints keep their one method (3.1), so HEAD stays 405 there.
    if method == Method::HEAD && head_as_get(req.uri().path()) {
        *req.method_mut() = Method::GET;
    }
    let client = if log_on {
        filter::client_ip(&app, req.headers(), &filter::IpText::new(peer.ip())).to_string()
    } else {
        String::new()
    };
    // Unknown paths are logged as sent (bounded); known ones by their route.
    let unknown_path =
        (log_on && route == api::ENDPOINTS.len()).then(|| bounded(req.uri().path(), 128).to_string());
    let mut user = None;
    // One clock reading serves the filter's limits and the envelope's start time.
    let start_us = app.clock.now_micros();
    let checked = match host_problem(&req) {
        Some(msg) => Err(Reply::bare(400, msg)),
        None => {
            match filter::run(&app, &conn, req.method(), req.uri().path(), req.headers(), peer.ip(), start_us)
            {
                Ok(filter::Checked::Done(passed)) => Ok(passed),
                // A personal access token: its owner's settings decide, read before routing. Boxed,
                // as it waits for storage and most requests never build this future.
                Ok(filter::Checked::Token(tc)) => {
                    Box::pin(filter::check_token(&app, tc, req.method(), req.headers(), peer.ip(), start_us))
                        .await
                }
                Err(r) => Err(r),
            }
        }
    };
    let mut reply = match checked {
        Err(r) => drain(&app, req.into_body(), r).await,
        Ok(passed) => {
            if let (true, Pass::User(i)) = (log_on, &passed.who) {
                user = Some(i.user_id.clone());
            }
            // Boxed: this future is moved whole a few times per request (into hyper's slot
            // among them), and dispatch's state is most of its size.
            let mut r = Box::pin(dispatch(&app, req, route, passed.who, start_us, &rid)).await;
            r.headers.extend(filter::ratelimit_headers(&passed.quota));
            r
        }
    };
    // Reference style reshapes API answers only: not the operational endpoints (OpenAPI,
    // metrics, probes) nor the web page's files.
    let api_route = api::ENDPOINTS.get(route).is_some_and(|e| !matches!(e.ep, Ep::Ops(_)));
    if app.cfg.response_style == ResponseStyle::Reference && api_route && !reply.body.is_empty() {
        reply.body = reference_style(&reply.body);
    }
    if let Some(cause) = reply.cause.take() {
        tracing::error!(%cause, request_id = rid.to_str().unwrap_or("-"), "handler failed");
    }
    let elapsed = started.elapsed();
    let labels = router::labels();
    metrics::request_observed(labels, route, reply.status, elapsed);
    // The access log: one line per request. Never the query string, headers or body, so no
    // token, password or secret can reach it.
    tracing::info!(
        target: "access",
        request_id = rid.to_str().unwrap_or("-"),
        method = method.as_str(),
        route = unknown_path.as_deref().unwrap_or(labels.get(route).copied().unwrap_or(metrics::OTHER_ROUTE)),
        status = reply.status,
        latency_us = elapsed.as_micros() as u64,
        user = user.as_deref(),
        client = client.as_str(),
        "request"
    );
    let unauthorized = reply.status == 401;
    // A streamed answer to HTTP/1.0 has no length and no chunks: it ends when the connection
    // closes. hyper echoes a 1.0 client's `keep-alive` unless the answer is itself marked 1.0,
    // and would so promise a connection it then closes.
    let close_http10 = http10 && reply.chunks.is_some();
    let mut resp = reply.into_response();
    if close_http10 {
        *resp.version_mut() = hyper::Version::HTTP_10;
        resp.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    }
    resp.headers_mut().insert(X_REQUEST_ID.clone(), rid);
    if unauthorized {
        // RFC 9110 15.5.2: a 401 names the scheme it wants.
        resp.headers_mut()
            .insert(hyper::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"pfm\""));
    }
    if let Some(origin) = app.cfg.cors_allow_origin.as_deref() {
        if let Ok(v) = HeaderValue::from_str(origin) {
            resp.headers_mut().insert(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
            // Without this a browser hides these headers from the page's script.
            resp.headers_mut().insert(
                hyper::header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(
                    "Idempotent-Replayed, RateLimit, RateLimit-Policy, Retry-After, X-Request-Id",
                ),
            );
        }
    }
    resp
}

/// Why a request's `Host` fields make it malformed, if they do: more than one (RFC 9112 3.2; an
/// intermediary and this server could each read a different target). An HTTP/1.1 request
/// without one, which the RFC also calls malformed, is served: wrk scripts that build their
/// requests with `wrk.format` at load time send none, and load testers are this service's
/// users.
fn host_problem(req: &Request<Incoming>) -> Option<&'static str> {
    let mut hosts = req.headers().get_all(hyper::header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => Some("More than one Host header"),
        _ => None,
    }
}

/// Paths where HEAD is answered as GET (see [`handle`]).
fn head_as_get(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics" | "/openapi.json")
        || assets::find(&Method::GET, path).is_some()
}

/// The first `max` bytes of `s`, cut at a character boundary.
fn bounded(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// How long an answer that needs no body waits for one to arrive (see [`drain`]): a client
/// sends its body with its head, and the answer itself should not wait.
const DRAIN_WAIT: Duration = Duration::from_millis(500);

/// Reads and drops the body of a request answered without it (a 401, a 404, a static file):
/// left unread, hyper closes the connection after the answer, and the kernel, holding unread
/// bytes, resets it, which can lose the answer on its way to the client. At most 1 MiB, for at
/// most [`DRAIN_WAIT`]; past either, the answer closes the connection instead.
async fn drain(app: &App, body: Incoming, reply: Reply) -> Reply {
    let wait = DRAIN_WAIT.min(Duration::from_secs(app.cfg.body_timeout_secs));
    if discard(body, MAX_BODY_BYTES, wait).await {
        reply
    } else {
        reply.header(CONNECTION, HeaderValue::from_static("close"))
    }
}

/// Reads and drops `body`, at most `max` bytes for at most `wait`; true if it all came.
async fn discard(mut body: Incoming, max: usize, wait: Duration) -> bool {
    if hyper::body::Body::is_end_stream(&body) {
        return true;
    }
    let all = async {
        let mut n = 0;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            n += frame.data_ref().map_or(0, Bytes::len);
            if n > max {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(wait, all).await.unwrap_or(false)
}

/// How much of a body over the limit is read and dropped before its 413, and for how long: a
/// client that writes its whole body before reading (Python's http.client) then reads the
/// answer, where closing on unread bytes would reset the connection under it (RFC 9112 9.6).
const LINGER_BYTES: usize = 16 << 20;
const LINGER_WAIT: Duration = Duration::from_secs(2);

/// 413 for a body over the endpoint's limit, after what is left of it has been read and dropped
/// (see [`LINGER_BYTES`]); unless the client waits for `100 Continue` before it sends the body.
/// The connection closes after the answer either way.
async fn too_large(rest: Incoming, awaits_continue: bool) -> Reply {
    if !awaits_continue {
        discard(rest, LINGER_BYTES, LINGER_WAIT).await;
    }
    Reply::bare(413, "Request body too large").header(CONNECTION, HeaderValue::from_static("close"))
}

/// Why a body could not be read.
enum BodyFail {
    /// Over the limit; the rest of the body, unread.
    TooLarge(Incoming),
    Broken(hyper::Error),
}

/// A body of at most `max` bytes, whole. A body in one frame (nearly all) is not copied.
async fn read_body(mut body: Incoming, max: usize) -> Result<Bytes, BodyFail> {
    // The first frame as it came; from a second one on, all of them copied into `joined`.
    let mut first: Option<Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(BodyFail::Broken)?.into_data() else { continue };
        let had = if joined.is_empty() { first.as_ref().map_or(0, Bytes::len) } else { joined.len() };
        if had + data.len() > max {
            return Err(BodyFail::TooLarge(body));
        }
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            Some(f) => {
                joined.extend_from_slice(&f);
                joined.extend_from_slice(&data);
            }
            None => joined.extend_from_slice(&data),
        }
    }
    Ok(if joined.is_empty() { first.unwrap_or_default() } else { Bytes::from(joined) })
}

/// `at`: the route index of the request's path ([`router::index`]).
async fn dispatch(
    app: &Arc<App>,
    req: Request<Incoming>,
    at: usize,
    pass: Pass,
    start_us: i64,
    rid: &HeaderValue,
) -> Reply {
    if let Some(asset) = assets::find(req.method(), req.uri().path()) {
        let reply = assets::reply(asset, req.headers());
        return drain(app, req.into_body(), reply).await;
    }
    let r = match route(at, req.method()) {
        Routed::Found(r) => r,
        Routed::NotFound => {
            return drain(app, req.into_body(), Reply::bare(404, "404 - Resource Not Found")).await
        }
        Routed::WrongMethod(m) => {
            let allow = if head_as_get(req.uri().path()) {
                HeaderValue::from_static("GET, HEAD")
            } else {
                HeaderValue::from_static(m)
            };
            let reply = Reply::bare(405, "405 - Method Not Allowed").header(ALLOW, allow);
            return drain(app, req.into_body(), reply).await;
        }
    };
    let ops = match r.ep {
        Ep::Ping | Ep::Ops(Op::Healthz) => Some(ops::healthz()),
        Ep::Ops(Op::Readyz) => Some(ops::readyz(app).await),
        Ep::Ops(Op::Metrics) => Some(ops::metrics(app)),
        Ep::Ops(Op::OpenApi) => Some(ops::openapi()),
        _ => None,
    };
    if let Some(reply) = ops {
        return drain(app, req.into_body(), reply).await;
    }
    // A coded body (gzip and the like) would be read as if it were plain and refused with a
    // misleading message, or worse taken at face value: say what is wrong (RFC 9110 15.5.16),
    // and which coding is taken (12.5.3).
    if !hyper::body::Body::is_end_stream(req.body()) && coded(req.headers()) {
        let reply = Reply::bare(415, "Content-Encoding is not supported: send the body unencoded")
            .header(hyper::header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        return drain(app, req.into_body(), reply).await;
    }
    let declared =
        req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let max_body = r.body.max_bytes();
    if declared.is_some_and(|n| n > max_body as u64) {
        let awaits_continue = req.headers().contains_key(EXPECT);
        return too_large(req.into_body(), awaits_continue).await;
    }
    let (parts, body) = req.into_parts();
    // A body that never (fully) arrives must not hold the connection: after the deadline the
    // answer is 408 and the connection closes, dropping whatever was left unread.
    // (A request without a body, most GETs, is neither read nor timed.)
    let body = if hyper::body::Body::is_end_stream(&body) {
        Bytes::new()
    } else {
        let deadline = Duration::from_secs(app.cfg.body_timeout_secs);
        let Ok(read) = tokio::time::timeout(deadline, read_body(body, max_body)).await else {
            return Reply::bare(408, "Request body not received in time")
                .header(CONNECTION, HeaderValue::from_static("close"));
        };
        match read {
            Ok(b) => b,
            Err(BodyFail::TooLarge(rest)) => return too_large(rest, false).await,
            Err(BodyFail::Broken(e)) => {
                tracing::debug!(error = %e, "body read failed");
                return Reply::bare(400, "Invalid request body");
            }
        }
    };
    // The idempotency futures are boxed, and only built for a request with a key: inline they
    // would grow every request's state, which is moved whole into its box.
    let begin = if parts.headers.contains_key(&idem::HEADER_NAME) {
        Box::pin(idem::begin(app, r, &pass, &parts.headers, parts.uri.query(), &body, start_us)).await
    } else {
        idem::Begin::Skip
    };
    let (mut idem, keyed) = match begin {
        idem::Begin::Skip => (None, None),
        idem::Begin::Answer(reply) => return reply,
        idem::Begin::Run { req, run, user_id } => (Some(req), Some((run, user_id))),
    };
    // The content type only says how to read a body.
    let ct =
        if body.is_empty() { None } else { parts.headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) };
    // A raw body is the handler's document: parameters come from the query alone.
    let raw = matches!(r.body, api::decl::Body::Raw { .. });
    let parsed = if raw {
        Params::parse(parts.uri.query(), None, b"")
    } else {
        Params::parse(parts.uri.query(), ct, &body)
    };
    let has_auth = parts.headers.contains_key(hyper::header::AUTHORIZATION);
    // The request's head and body are slices of the connection's read buffer: let go of them
    // before the handler waits (for its user's lock, for durability), so the buffer is free.
    // Only a handler that reads its body whole keeps it.
    let document = if raw { body } else { Bytes::new() };
    drop(parts);
    let params = match parsed {
        Ok(params) => params,
        Err(e) => {
            let result = Err(e);
            return match keyed {
                Some((run, user_id)) => {
                    Box::pin(idem::finish(app, &user_id, run, idem, result, r.prefix, start_us)).await
                }
                None => envelope(result, r.prefix, start_us, app.clock.now_micros()),
            };
        }
    };
    let ident = match pass {
        Pass::User(i) => Some(i),
        Pass::Public => None,
    };
    let rq = Rq {
        params,
        ident,
        now_us: start_us,
        has_auth,
        idem: idem.take(),
        envelope: Envelope { render: render_success, prefix: r.prefix, start_us },
        document,
    };
    let answer = api::respond(app, r.ep, &rq, rid.to_str().unwrap_or("-")).await;
    idem = rq.idem;
    let result = match answer {
        Ok(Answer::Fields(obj)) => Ok(obj),
        Err(e) => Err(e),
        Ok(Answer::Streamed { first, rest }) => {
            let mut reply = Reply::json(200, String::new());
            reply.chunks = Some((first, rest));
            return reply;
        }
        // Kept with the write, or answered meanwhile by another request with the same key.
        Ok(Answer::Kept { status, body, replayed }) => {
            drop(keyed);
            let reply = Reply::json(status, body);
            return if replayed { idem::replayed(reply) } else { reply };
        }
        Ok(Answer::KeyMismatch) => {
            drop(keyed);
            let err = ApiError::new(422, idem::MISMATCH);
            return envelope(Err(err), r.prefix, start_us, app.clock.now_micros());
        }
    };
    match keyed {
        Some((run, user_id)) => {
            Box::pin(idem::finish(app, &user_id, run, idem, result, r.prefix, start_us)).await
        }
        None => envelope(result, r.prefix, start_us, app.clock.now_micros()),
    }
}

/// Whether a request's body carries a content coding other than `identity`.
fn coded(headers: &hyper::HeaderMap) -> bool {
    headers.get_all(hyper::header::CONTENT_ENCODING).iter().any(|v| {
        let v = v.as_bytes();
        v.split(|&b| b == b',').any(|c| {
            let c = c.trim_ascii();
            !c.is_empty() && !c.eq_ignore_ascii_case(b"identity")
        })
    })
}

/// Serves until `shutdown` resolves, then drains for up to [`DRAIN`] and flushes storage.
pub async fn serve(app: Arc<App>, listener: TcpListener, shutdown: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let style =
        (app.cfg.response_style == ResponseStyle::Reference).then_some(reference_style as fn(&str) -> String);
    let answers = ErrorAnswers { cors_origin: app.cfg.cors_allow_origin.clone(), style };
    let header_timeout = Duration::from_secs(app.cfg.header_timeout_secs.max(1));
    let poster =
        tokio::spawn(crate::api::run_poster(app.clone(), Duration::from_millis(app.cfg.schedule_poll_ms)));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let state = Arc::new(ConnState::default());
        let io = JsonErrors::new(stream, answers.clone(), state.clone(), header_timeout);
        let svc = service_fn(move |req| {
            let app = app.clone();
            let state = state.clone();
            async move { Ok::<_, Infallible>(handle(app, state, req, peer).await) }
        });
        // No hyper timer: the header timeout is the byte stream's (see conn_io). Half-close:
        // a client that shuts down its sending side after its request still reads the answer
        // (RFC 9112 9.6); without it hyper drops the request on that EOF, the answer with it,
        // even after the write was made.
        let conn = http1::Builder::new().half_close(true).serve_connection(TokioIo::new(io), svc);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with error");
            }
        });
    }
    drop(listener);
    poster.abort();
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("in-flight requests did not finish within the drain limit");
    }
    if let Err(e) = app.users.store.flush() {
        tracing::error!(error = %e, "final flush failed");
    }
}
