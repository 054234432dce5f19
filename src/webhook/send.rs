//! One delivery attempt: resolve, refuse forbidden addresses, connect to a checked address,
//! TLS for `https`, one HTTP/1.1 POST, read at most 64 KB of the answer, all within one
//! deadline. Connections are kept alive and reused for the same scheme, host and port (see
//! [`Pool`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::timeout_at;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

use super::addr::{self, Target};
use super::sign::{signature, SIGNATURE_HEADER};

/// The event's id, so a receiver can drop a delivery it already processed (retries resend it).
pub const EVENT_ID_HEADER: &str = "Pfm-Event-Id";
/// The event's type, so a receiver can route without parsing the body.
pub const EVENT_TYPE_HEADER: &str = "Pfm-Event-Type";
/// Sent as `User-Agent`.
pub const USER_AGENT_VALUE: &str = concat!("pfm-webhooks/", env!("CARGO_PKG_VERSION"));
/// How long one attempt may take in all: connect, TLS, send, and reading the answer.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of the answer's body is read; the rest is never read (the connection is closed).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The outcome of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The answer's status, when one arrived.
    pub status: Option<u16>,
    /// From the start of the attempt to its end (answer read up to the cap, or failure).
    pub latency_ms: u64,
    /// Why the attempt failed, short, for the delivery log: never the secret, the signature or
    /// the URL (whose query may hold a token). `None` on success.
    pub error: Option<String>,
    /// Whether a later attempt may succeed: true on a timeout, a DNS, connection or TLS error,
    /// a 5xx, 408 or 429. False on success and on a permanent failure: another 4xx (the
    /// receiver refuses this event), a 3xx (redirects are not followed: the owner should
    /// register the final URL), a refused address or an unusable URL or header.
    pub retry: bool,
}

impl Attempt {
    /// The receiver answered 2xx.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

struct Failure {
    status: Option<u16>,
    msg: String,
    retry: bool,
    /// A kept-alive connection failed before any answer: try a new one in the same attempt.
    stale: bool,
}

fn permanent(msg: impl Into<String>) -> Failure {
    Failure { status: None, msg: msg.into(), retry: false, stale: false }
}

fn transient(msg: impl Into<String>) -> Failure {
    Failure { status: None, msg: msg.into(), retry: true, stale: false }
}

/// An idle connection is closed after this long unused: receivers close theirs after 5 s (Node)
/// to 75 s (nginx), and one closing first costs a retry on a fresh connection.
pub const IDLE_FOR: Duration = Duration::from_secs(4);
/// Idle connections kept per scheme, host and port; more are closed once answered.
const IDLE_PER_HOST: usize = 256;
/// Hosts with idle connections kept at once; past it a connection is closed once answered.
const IDLE_HOSTS: usize = 1024;

/// Sends webhook deliveries. One per process; cloning is cheap (the TLS configuration and the
/// pool are shared).
#[derive(Clone)]
pub struct Sender {
    allow_private: bool,
    timeout: Duration,
    extra_roots: Vec<CertificateDer<'static>>,
    tls: Arc<ClientConfig>,
    pool: Arc<Pool>,
}

/// Scheme, host and port: a connection is reused only for the same three, so an `https` URL
/// never rides a plain connection and every reused connection went to an address that passed
/// the check when it was made (a name re-pointed since is checked at the next new connection).
type PoolKey = (bool, String, u16);

/// A kept-alive connection between two deliveries.
struct Idle {
    tx: SendRequest<Full<Bytes>>,
    /// Dropping it aborts the connection's task, which closes the socket.
    _conn: AbortOnDrop,
    since: Instant,
}

/// Idle connections, newest last (a delivery takes the newest, so under light load the older
/// ones age out instead of all staying warm). A delivery per deposit to the same receiver would
/// otherwise pay a TCP handshake and teardown on both sides each time.
#[derive(Default)]
struct Pool {
    idle: parking_lot::Mutex<HashMap<PoolKey, Vec<Idle>>>,
}

impl Pool {
    /// The newest idle connection to `key` still open, dropping expired and closed ones.
    fn take(&self, key: &PoolKey) -> Option<Idle> {
        let mut idle = self.idle.lock();
        let list = idle.get_mut(key)?;
        let mut found = None;
        while let Some(c) = list.pop() {
            if c.since.elapsed() < IDLE_FOR && !c.tx.is_closed() {
                found = Some(c);
                break;
            }
        }
        if list.is_empty() {
            idle.remove(key);
        }
        found
    }

    fn put(&self, key: PoolKey, c: Idle) {
        let mut idle = self.idle.lock();
        if !idle.contains_key(&key) && idle.len() >= IDLE_HOSTS {
            idle.retain(|_, l| {
                l.retain(|c| c.since.elapsed() < IDLE_FOR && !c.tx.is_closed());
                !l.is_empty()
            });
            if idle.len() >= IDLE_HOSTS {
                return;
            }
        }
        let list = idle.entry(key).or_default();
        // The oldest goes first: it is the likeliest to be closed by the receiver.
        list.retain(|c| c.since.elapsed() < IDLE_FOR);
        if list.len() < IDLE_PER_HOST {
            list.push(c);
        }
    }

    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.idle.lock().values().map(Vec::len).sum()
    }
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("allow_private", &self.allow_private)
            .field("timeout", &self.timeout)
            .finish()
    }
}

fn tls_config(extra: &[CertificateDer<'static>]) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    // Mozilla's roots compiled in: the same trust on every host, whatever its CA store holds.
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for c in extra {
        roots.add(c.clone()).map_err(|e| format!("not a usable root certificate: {e}"))?;
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

impl Sender {
    /// A sender with the 10 s limit. `allow_private` lifts the address check (an operator's
    /// flag for receivers on the same host or network; the tests set it).
    pub fn new(allow_private: bool) -> Sender {
        // The built-in provider supports the default protocol versions and the compiled-in
        // roots are valid, so this depends on nothing at run time.
        let tls = tls_config(&[]).expect("the built-in TLS configuration is valid");
        Sender { allow_private, timeout: ATTEMPT_TIMEOUT, extra_roots: Vec::new(), tls, pool: Arc::default() }
    }

    /// Idle connections kept (tests).
    #[cfg(test)]
    pub(crate) fn idle_connections(&self) -> usize {
        self.pool.idle_count()
    }

    /// The same sender with another limit per attempt (tests use 1 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Sender {
        self.timeout = timeout;
        self
    }

    /// The same sender also trusting `der` (a DER certificate) as a root: for an operator's
    /// private CA, and for tests of the HTTPS path.
    pub fn with_root_certificate(mut self, der: &[u8]) -> Result<Sender, String> {
        self.extra_roots.push(CertificateDer::from(der.to_vec()));
        self.tls = tls_config(&self.extra_roots)?;
        Ok(self)
    }

    /// One attempt: POST `body` (`application/json`) to `url` with `Pfm-Signature` (signed
    /// with `secret` at `now_secs`), `Pfm-Event-Id`, `Pfm-Event-Type`, `User-Agent:
    /// pfm-webhooks/<version>` and `Content-Type`.
    ///
    /// Unless the sender allows private addresses, the host's addresses are resolved, the
    /// forbidden ones dropped (see [`super::check_url`]) and only a checked address is
    /// connected to, so a name re-pointed after registration (DNS rebinding) reaches nothing
    /// internal. Redirects are not followed: a 3xx is a failure without retry. The whole attempt
    /// takes at most the sender's timeout (10 s); at most 64 KB of the answer's body is read.
    /// Once the status has arrived it decides the outcome, even if the body then stalls or
    /// breaks.
    pub async fn send(
        &self,
        url: &str,
        secret: &[u8],
        event_id: &str,
        event_type: &str,
        body: &[u8],
        now_secs: i64,
    ) -> Attempt {
        let start = Instant::now();
        let deadline = tokio::time::Instant::from_std(start + self.timeout);
        let host = addr::parse(url).map(|t| t.host).unwrap_or_default();
        let res = self.attempt(url, secret, event_id, event_type, body, now_secs, deadline).await;
        let latency_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let attempt = match res {
            Ok(s) if (200..300).contains(&s) => {
                Attempt { status: Some(s), latency_ms, error: None, retry: false }
            }
            Ok(s) if (300..400).contains(&s) => Attempt {
                status: Some(s),
                latency_ms,
                error: Some(format!("HTTP {s}: redirects are not followed")),
                retry: false,
            },
            Ok(s) => Attempt {
                status: Some(s),
                latency_ms,
                error: Some(format!("HTTP {s}")),
                retry: s >= 500 || s == 408 || s == 429,
            },
            Err(f) => Attempt { status: f.status, latency_ms, error: Some(f.msg), retry: f.retry },
        };
        // The host only: the path and query may carry the receiver's token.
        tracing::debug!(
            host = %host,
            event_id,
            status = attempt.status,
            latency_ms,
            error = attempt.error.as_deref(),
            retry = attempt.retry,
            "webhook attempt"
        );
        attempt
    }

    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        url: &str,
        secret: &[u8],
        event_id: &str,
        event_type: &str,
        body: &[u8],
        now_secs: i64,
        deadline: tokio::time::Instant,
    ) -> Result<u16, Failure> {
        let t = addr::parse(url).map_err(permanent)?;
        let header = |v: &str, what: &str| {
            HeaderValue::from_str(v)
                .map_err(|_| permanent(format!("the event {what} is not a valid header value")))
        };
        let host = header(&t.authority, "URL's host")?;
        let sig = header(&signature(secret, now_secs, body), "signature")?;
        let id = header(event_id, "id")?;
        let kind = header(event_type, "type")?;
        let body = Bytes::copy_from_slice(body);
        let req = || {
            Request::post(t.path_and_query.as_str())
                .header(HOST, host.clone())
                .header(CONTENT_TYPE, "application/json")
                .header(USER_AGENT, USER_AGENT_VALUE)
                .header(SIGNATURE_HEADER, sig.clone())
                .header(EVENT_ID_HEADER, id.clone())
                .header(EVENT_TYPE_HEADER, kind.clone())
                .body(Full::new(body.clone()))
                .map_err(|_| permanent("the request could not be built"))
        };
        let key: PoolKey = (t.https, t.host.clone(), t.port);
        while let Some(mut c) = self.pool.take(&key) {
            match self.exchange(&mut c.tx, req()?, deadline).await {
                Ok((status, reusable)) => {
                    if reusable {
                        c.since = Instant::now();
                        self.pool.put(key, c);
                    }
                    return Ok(status);
                }
                // Closed by the receiver while idle: the request may not have been read, so
                // it goes again on another connection (a receiver drops repeats by event id).
                Err(f) if f.stale => continue,
                Err(f) => return Err(f),
            }
        }
        let tcp = self.connect(&t, deadline).await?;
        let mut c = if !t.https {
            self.handshake(tcp).await?
        } else {
            let name = ServerName::try_from(t.host.clone())
                .map_err(|_| permanent("the host is not a valid TLS name"))?;
            let tls =
                timeout_at(deadline, tokio_rustls::TlsConnector::from(self.tls.clone()).connect(name, tcp))
                    .await
                    .map_err(|_| self.timed_out())?
                    .map_err(|e| transient(format!("TLS handshake failed: {e}")))?;
            self.handshake(tls).await?
        };
        let (status, reusable) = self.exchange(&mut c.tx, req()?, deadline).await?;
        if reusable {
            c.since = Instant::now();
            self.pool.put(key, c);
        }
        Ok(status)
    }

    /// An HTTP/1.1 connection over `io`, its task running apart.
    async fn handshake<S>(&self, io: S) -> Result<Idle, Failure>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        // The connection's buffer is capped too, so no single read takes in more than 64 KB (a
        // head larger than that is refused as an error).
        let (tx, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(MAX_ANSWER_BYTES)
            .handshake::<_, Full<Bytes>>(TokioIo::new(io))
            .await
            .map_err(|e| transient(format!("HTTP handshake failed: {e}")))?;
        let conn = AbortOnDrop(tokio::spawn(async move {
            let _ = conn.await;
        }));
        Ok(Idle { tx, _conn: conn, since: Instant::now() })
    }

    /// One request; the status, after reading at most [`MAX_ANSWER_BYTES`] of the body, and
    /// whether the connection may carry another (the whole answer was read in time).
    async fn exchange(
        &self,
        tx: &mut SendRequest<Full<Bytes>>,
        req: Request<Full<Bytes>>,
        deadline: tokio::time::Instant,
    ) -> Result<(u16, bool), Failure> {
        let stale = |msg: String| Failure { status: None, msg, retry: true, stale: true };
        timeout_at(deadline, tx.ready())
            .await
            .map_err(|_| self.timed_out())?
            .map_err(|e| stale(format!("no answer: {e}")))?;
        let resp = match timeout_at(deadline, tx.send_request(req)).await {
            Err(_) => return Err(self.timed_out()),
            // Nothing of an answer came: on a reused connection, the receiver closed it.
            Ok(Err(e)) if e.is_canceled() || e.is_incomplete_message() || e.is_closed() => {
                return Err(stale(format!("no answer: {e}")))
            }
            Ok(Err(e)) => return Err(transient(format!("no answer: {e}"))),
            Ok(Ok(r)) => r,
        };
        let status = resp.status().as_u16();
        let mut body = resp.into_body();
        let mut read = 0usize;
        let mut whole = false;
        while read < MAX_ANSWER_BYTES {
            match timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => read += frame.data_ref().map_or(0, |d| d.len()),
                Ok(None) => {
                    whole = true;
                    break;
                }
                // A broken body or the deadline after the head: the status stands.
                Ok(Some(Err(_))) | Err(_) => break,
            }
        }
        Ok((status, whole))
    }

    fn timed_out(&self) -> Failure {
        transient(format!("timed out after {} ms", self.timeout.as_millis()))
    }

    /// Resolves, drops forbidden addresses and connects to the first allowed one that answers.
    async fn connect(&self, t: &Target, deadline: tokio::time::Instant) -> Result<TcpStream, Failure> {
        if !self.allow_private && addr::name_refused(t) {
            return Err(permanent("the host names a local or metadata host, which is refused"));
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let addrs = addr::resolve(t, left).await.map_err(transient)?;
        let allowed: Vec<SocketAddr> = if self.allow_private {
            addrs
        } else {
            let ok: Vec<SocketAddr> =
                addrs.iter().copied().filter(|a| addr::forbidden(a.ip()).is_none()).collect();
            if ok.is_empty() {
                let why = addr::first_forbidden(&addrs).unwrap_or("forbidden");
                return Err(permanent(format!("the host is a {why} address, which is refused")));
            }
            ok
        };
        let mut last = String::new();
        for a in allowed {
            match timeout_at(deadline, TcpStream::connect(a)).await {
                Err(_) => return Err(self.timed_out()),
                Ok(Ok(s)) => {
                    // Small requests: send without waiting for an ack of the head.
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Ok(Err(e)) => last = format!("connection failed: {e}"),
            }
        }
        Err(transient(last))
    }
}

/// Stops the connection's task (and so closes the socket) however the attempt ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
