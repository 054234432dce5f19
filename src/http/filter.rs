//! The global request filter (SPEC 4): CORS preflight, public paths, bearer JWT or personal
//! access token (docs/tokens.md), failed-auth backoff and rate limits. It runs before routing,
//! on every path and method.

use std::net::IpAddr;
use std::sync::Arc;

use hyper::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, RETRY_AFTER};
use hyper::Method;

use super::conn_io::ConnState;
use super::response::Reply;
use crate::app::App;
use crate::auth::jwt::Identity;
use crate::auth::limits::{Failure, Quota, Verdict};
use crate::auth::pat;

/// Who is asking, once the filter let the request through.
pub enum Pass {
    Public,
    User(Arc<Identity>),
}

/// A request the filter let through, with the state of the limiter that counted it.
pub struct Passed {
    pub who: Pass,
    pub quota: Quota,
}

/// What [`run`] decided: a pass, or a personal access token whose check reads its owner's
/// settings, which [`check_token`] finishes (it waits for storage; [`run`] never does).
pub enum Checked {
    Done(Passed),
    Token(TokenCheck),
}

/// A bearer value with the token prefix, still to be checked.
pub struct TokenCheck {
    /// The value as sent, the failed-auth backoff's key (as a bad JWT's is).
    text: String,
    /// Its parts; `None` when it is not of the token format, which then fails as it is.
    parsed: Option<pat::Parsed>,
}

/// The answer to a non-GET request made with a `read` token.
pub const READ_ONLY: &str = "This token may only read: use a write token for this request";

/// Token-exempt paths (SPEC 4.1, and the operational endpoints of docs/api.md). `/metrics` is
/// exempt only while enabled; turned off it is an unknown path like any other.
/// The web page's static files are exempt too (exact GET paths, no data in them).
fn is_public(app: &App, method: &Method, path: &str, headers: &HeaderMap) -> bool {
    matches!(
        path,
        "/__ping__" | "/login" | "/generate_access_token" | "/healthz" | "/readyz" | "/openapi.json"
    ) || (path == "/register" && !headers.contains_key(AUTHORIZATION))
        || (path == "/metrics" && app.cfg.metrics_enabled)
        || super::assets::find(method, path).is_some()
}

/// Name of the one policy both limiters apply (they share `MAX_REQUESTS` and `WINDOW_SIZE`).
const POLICY: &str = "default";

// Statics: `from_static` is checked when evaluated, so in a function it runs per request.
static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// `RateLimit-Policy` and `RateLimit` (IETF httpapi ratelimit-headers draft) for `q`.
pub fn ratelimit_headers(q: &Quota) -> [(HeaderName, HeaderValue); 2] {
    // Every answer carries both: the policy (fixed by configuration) is built once per thread,
    // the state with itoa into one small buffer, without the fmt machinery.
    thread_local! {
        static POLICY_VALUE: std::cell::RefCell<Option<((u64, u64), HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    let policy = POLICY_VALUE.with_borrow_mut(|cached| match cached {
        Some((k, v)) if *k == (q.limit, q.window_secs) => v.clone(),
        _ => {
            let v = header_value(&[b"q=", b"w="], [q.limit, q.window_secs]);
            *cached = Some(((q.limit, q.window_secs), v.clone()));
            v
        }
    });
    [
        (RATELIMIT_POLICY.clone(), policy),
        (RATELIMIT.clone(), header_value(&[b"r=", b"t="], [q.remaining, q.reset_secs])),
    ]
}

/// `"default";<k0><v0>;<k1><v1>`, written on the stack and copied out once.
fn header_value(keys: &[&[u8]; 2], vals: [u64; 2]) -> HeaderValue {
    // Longest: 9 for the name, then twice ';' + a 2-byte key + 20 digits.
    let mut b = [0u8; 64];
    let mut n = 0;
    let mut put = |s: &[u8]| {
        b[n..n + s.len()].copy_from_slice(s);
        n += s.len();
    };
    put(b"\"");
    put(POLICY.as_bytes());
    put(b"\"");
    let mut ib = itoa::Buffer::new();
    for (k, v) in keys.iter().zip(vals) {
        put(b";");
        put(k);
        put(ib.format(v).as_bytes());
    }
    HeaderValue::from_bytes(&b[..n]).unwrap_or(HeaderValue::from_static("\"default\""))
}

/// An IP address as text, written on the stack: `Ipv4Addr`'s `Display` goes through the fmt
/// machinery, a tenth of the instructions of a public request.
pub struct IpText {
    buf: [u8; 48],
    len: usize,
}

impl IpText {
    pub fn new(ip: IpAddr) -> IpText {
        let mut t = IpText { buf: [0; 48], len: 0 };
        match ip {
            IpAddr::V4(v4) => {
                let mut digits = itoa::Buffer::new();
                for (i, o) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        t.push(b".");
                    }
                    t.push(digits.format(o).as_bytes());
                }
            }
            // Rare enough for the general path; the longest form is 45 bytes.
            IpAddr::V6(v6) => {
                let mut w = std::io::Cursor::new(&mut t.buf[..]);
                let _ = std::io::Write::write_fmt(&mut w, format_args!("{v6}"));
                t.len = w.position() as usize;
            }
        }
        t
    }

    fn push(&mut self, b: &[u8]) {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("-")
    }
}

/// The client's address: the first `X-Forwarded-For` entry behind a trusted proxy, else the
/// peer's, `text`.
pub fn client_ip<'a>(app: &App, headers: &'a HeaderMap, text: &'a IpText) -> &'a str {
    if app.cfg.trust_proxy {
        if let Some(first) = headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            return first;
        }
    }
    text.as_str()
}

fn too_many(msg: &str, retry_after: u64) -> Reply {
    Reply::bare(429, msg).header(RETRY_AFTER, HeaderValue::from(retry_after))
}

/// A limiter's verdict as the filter's outcome: the quota travels with a pass, and a denial
/// carries the header fields itself.
fn limited(verdict: Verdict, quota: Quota, who: Pass, msg: &str) -> Result<Passed, Reply> {
    match verdict {
        Verdict::Allow => Ok(Passed { who, quota }),
        Verdict::Deny(s) => {
            crate::metrics::rate_limited(if matches!(who, Pass::Public) { "ip" } else { "user" });
            let mut r = too_many(msg, s);
            r.headers.extend(ratelimit_headers(&quota));
            Err(r)
        }
    }
}

/// A failed authentication of `token`: it spends the client's IP budget (the one public paths
/// use), so unauthenticated traffic from one address is bounded however many tokens it tries,
/// then counts in the failed-auth backoff of that token.
fn auth_failed(app: &App, headers: &HeaderMap, peer: IpAddr, token: &str, t: f64) -> Reply {
    if let Verdict::Deny(s) = app.ip_limiter.check(client_ip(app, headers, &IpText::new(peer)), t) {
        return too_many("Rate limit exceeded. Try again later.", s);
    }
    match app.auth_backoff.fail(token, t) {
        Failure::Reject => {
            crate::metrics::auth_failed("token", "401");
            Reply::bare(401, "Invalid or expired token")
        }
        Failure::Wait(msg, s) => {
            crate::metrics::auth_failed("token", "429");
            too_many(&msg, s)
        }
    }
}

/// Finishes the check of a personal access token: its owner's settings say whether it stands
/// for anyone; then the same per-user rate limit as a JWT, and a `read` token passes GET (and
/// HEAD) only.
pub async fn check_token(
    app: &Arc<App>,
    tc: TokenCheck,
    method: &Method,
    headers: &HeaderMap,
    peer: IpAddr,
    now_us: i64,
) -> Result<Passed, Reply> {
    let t = now_us as f64 / 1e6;
    let found = match &tc.parsed {
        Some(p) => crate::api::tokens::verify(app, p, now_us).await,
        None => Ok(None),
    };
    let ident = match found {
        Ok(Some(ident)) => ident,
        Ok(None) => return Err(auth_failed(app, headers, peer, &tc.text, t)),
        // Storage failed: not the client's fault, so no backoff; the cause goes to the log,
        // never the token.
        Err(e) => {
            let (status, msg) = match e {
                crate::api::ApiError::Client(status, msg, _) => (status, msg),
                other => {
                    tracing::error!(cause = ?other, "checking an access token failed");
                    (500, "Internal error while checking the token".to_string())
                }
            };
            return Err(Reply::bare(status, &msg));
        }
    };
    let write = ident.scope.may_write();
    let (verdict, quota) = app.user_limiter.check_quota(&ident.user_id, t);
    let passed = limited(verdict, quota, Pass::User(ident), "Rate limit exceeded. Try later.")?;
    if !write && !matches!(*method, Method::GET | Method::HEAD) {
        let mut r = Reply::bare(403, READ_ONLY);
        r.headers.extend(ratelimit_headers(&passed.quota));
        return Err(r);
    }
    Ok(passed)
}

pub fn run(
    app: &App,
    conn: &ConnState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    peer: IpAddr,
    now_us: i64,
) -> Result<Checked, Reply> {
    if app.cfg.cors_allow_origin.is_some() && method == Method::OPTIONS {
        let mut r = Reply::json(204, String::new());
        r.headers.push((
            hyper::header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
        ));
        r.headers.push((
            hyper::header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("Authorization, Content-Type, Idempotency-Key, X-Request-Id"),
        ));
        r.headers.push((hyper::header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600")));
        return Err(r);
    }
    let t = now_us as f64 / 1e6;
    if is_public(app, method, path, headers) {
        let text = IpText::new(peer);
        let (verdict, quota) = app.ip_limiter.check_quota(client_ip(app, headers, &text), t);
        return limited(verdict, quota, Pass::Public, "Rate limit exceeded. Try again later.")
            .map(Checked::Done);
    }
    let header = headers.get(AUTHORIZATION).map(HeaderValue::as_bytes).unwrap_or_default();
    // HTTP drops a header value's trailing whitespace, so `Bearer ` arrives as `Bearer`: that is
    // the scheme with an empty token, which fails verification (SPEC 4.2 step 2).
    let rest = if header == b"Bearer" { Some(&b""[..]) } else { header.strip_prefix(b"Bearer ") };
    let Some(rest) = rest else {
        // Spends the IP budget as a failed authentication does (see [`auth_failed`]).
        if let Verdict::Deny(s) = app.ip_limiter.check(client_ip(app, headers, &IpText::new(peer)), t) {
            return Err(too_many("Rate limit exceeded. Try again later.", s));
        }
        return Err(Reply::bare(401, "Missing or invalid token"));
    };
    let token = rest.trim_ascii();
    if pat::is_pat(token) {
        // Tokens are ASCII: the lossy copy only for broken bytes, which fail to parse anyway.
        let text = String::from_utf8_lossy(token).into_owned();
        return Ok(Checked::Token(TokenCheck { parsed: pat::parse(token), text }));
    }
    let mut memo = conn.auth.lock();
    let Some(ident) = app.jwt.verify_memo(token, t, &mut memo.token) else {
        drop(memo);
        // Tokens are ASCII: the lossy copy only for broken bytes.
        return Err(auth_failed(app, headers, peer, &String::from_utf8_lossy(token), t));
    };
    // The same identity object as last time (the memo hands out one per token) has the same key.
    let key = match &memo.limit_key {
        Some((id, k)) if Arc::ptr_eq(id, &ident) => *k,
        _ => {
            let k = app.user_limiter.table().hash_of(&ident.user_id);
            memo.limit_key = Some((ident.clone(), k));
            k
        }
    };
    drop(memo);
    let (verdict, quota) = app.user_limiter.check_quota_hashed(key, t);
    limited(verdict, quota, Pass::User(ident), "Rate limit exceeded. Try later.").map(Checked::Done)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ip_text_reads_as_display_does() {
        for ip in [
            "0.0.0.0",
            "127.0.0.1",
            "255.255.255.255",
            "10.200.3.45",
            "::1",
            "::",
            "2001:db8::ff00:42:8329",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "::ffff:192.168.100.200",
            "1:2:3:4:5:6:7:8",
        ] {
            let ip: super::IpAddr = ip.parse().unwrap();
            assert_eq!(super::IpText::new(ip).as_str(), ip.to_string());
        }
    }
}
