//! One delivery attempt: resolve, refuse forbidden addresses, connect to a checked address,
//! TLS for `https`, one HTTP/1.1 POST on a fresh connection, read at most 64 KB of the answer,
//! all within one deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE, HOST, USER_AGENT};
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
}

fn permanent(msg: impl Into<String>) -> Failure {
    Failure { status: None, msg: msg.into(), retry: false }
}

fn transient(msg: impl Into<String>) -> Failure {
    Failure { status: None, msg: msg.into(), retry: true }
}

/// Sends webhook deliveries. One per process; cloning is cheap (the TLS configuration is
/// shared). Each attempt opens its own connection: deliveries go to many hosts, rarely, so a
/// pool would keep little warm, and a fresh connection is what makes the connect-time address
/// check hold.
#[derive(Clone)]
pub struct Sender {
    allow_private: bool,
    timeout: Duration,
    extra_roots: Vec<CertificateDer<'static>>,
    tls: Arc<ClientConfig>,
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
        Sender { allow_private, timeout: ATTEMPT_TIMEOUT, extra_roots: Vec::new(), tls }
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
        let req = Request::post(t.path_and_query.as_str())
            .header(HOST, header(&t.authority, "URL's host")?)
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, USER_AGENT_VALUE)
            .header(CONNECTION, "close")
            .header(SIGNATURE_HEADER, header(&signature(secret, now_secs, body), "signature")?)
            .header(EVENT_ID_HEADER, header(event_id, "id")?)
            .header(EVENT_TYPE_HEADER, header(event_type, "type")?)
            .body(Full::new(Bytes::copy_from_slice(body)))
            .map_err(|_| permanent("the request could not be built"))?;

        let tcp = self.connect(&t, deadline).await?;
        if !t.https {
            return self.exchange(tcp, req, deadline).await;
        }
        let name = ServerName::try_from(t.host.clone())
            .map_err(|_| permanent("the host is not a valid TLS name"))?;
        let tls = timeout_at(deadline, tokio_rustls::TlsConnector::from(self.tls.clone()).connect(name, tcp))
            .await
            .map_err(|_| self.timed_out())?
            .map_err(|e| transient(format!("TLS handshake failed: {e}")))?;
        self.exchange(tls, req, deadline).await
    }

    /// One request on a fresh HTTP/1.1 connection; the status, after reading at most
    /// [`MAX_ANSWER_BYTES`] of the body.
    async fn exchange<S>(
        &self,
        io: S,
        req: Request<Full<Bytes>>,
        deadline: tokio::time::Instant,
    ) -> Result<u16, Failure>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        // The connection's buffer is capped too, so no single read takes in more than 64 KB (a
        // head larger than that is refused as an error).
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(MAX_ANSWER_BYTES)
            .handshake::<_, Full<Bytes>>(TokioIo::new(io))
            .await
            .map_err(|e| transient(format!("HTTP handshake failed: {e}")))?;
        let _conn = AbortOnDrop(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let resp = timeout_at(deadline, sender.send_request(req))
            .await
            .map_err(|_| self.timed_out())?
            .map_err(|e| transient(format!("no answer: {e}")))?;
        let status = resp.status().as_u16();
        let mut body = resp.into_body();
        let mut read = 0usize;
        while read < MAX_ANSWER_BYTES {
            match timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => read += frame.data_ref().map_or(0, |d| d.len()),
                // The end, a broken body or the deadline after the head: the status stands.
                Ok(None) | Ok(Some(Err(_))) | Err(_) => break,
            }
        }
        Ok(status)
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
