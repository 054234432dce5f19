//! The sender against real receivers on 127.0.0.1 (raw TCP, so each misbehaviour is exact),
//! and the backoff schedule.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

const SECRET: &[u8] = b"whsec_receiver-test";
const BODY: &[u8] =
    br#"{"id":"evt_42","type":"deposit.created","time":"2026-01-02T03:04:05Z","data":{"amount":"10.00"}}"#;
const NOW: i64 = 1_767_323_045;

/// What a test receiver does after reading the request.
#[derive(Clone)]
enum Reply {
    /// Writes these bytes and closes.
    Raw(Vec<u8>),
    /// Never answers (and keeps the connection open).
    Silent,
    /// A 200 head, then `first` bytes of body, then either more at full speed up to `total`
    /// (reporting how many were written before the client closed) or nothing more, held open.
    Stream { first: usize, total: usize, then_stall: bool },
    /// Answers `200 ok` to every request on the connection, keeping it open, until the client
    /// closes it; with `drop_after`, reads that many requests and closes without answering the
    /// last (a receiver closing an idle connection as a request arrives).
    KeepAlive { drop_after: Option<usize> },
}

/// A request as the receiver got it.
#[derive(Debug)]
struct Got {
    head: String,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

struct Receiver {
    addr: SocketAddr,
    conns: Arc<AtomicUsize>,
    got: tokio::sync::mpsc::UnboundedReceiver<Got>,
    /// For `Reply::Stream`: body bytes written before the write failed or ended.
    written: tokio::sync::mpsc::UnboundedReceiver<usize>,
}

async fn read_request<S: AsyncRead + Unpin>(s: &mut S) -> Option<Got> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut got = Got { head, body: Vec::new() };
    let len: usize = got.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    got.body = body;
    Some(got)
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    reply: Reply,
    got: tokio::sync::mpsc::UnboundedSender<Got>,
    written: tokio::sync::mpsc::UnboundedSender<usize>,
) {
    if let Reply::KeepAlive { drop_after } = reply {
        let mut n = 0;
        while let Some(req) = read_request(&mut s).await {
            let _ = got.send(req);
            n += 1;
            if drop_after == Some(n) {
                return;
            }
            if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.is_err() {
                return;
            }
        }
        return;
    }
    let Some(req) = read_request(&mut s).await else { return };
    let _ = got.send(req);
    match reply {
        Reply::KeepAlive { .. } => {}
        Reply::Raw(b) => {
            let _ = s.write_all(&b).await;
            let _ = s.shutdown().await;
        }
        Reply::Silent => tokio::time::sleep(Duration::from_secs(60)).await,
        Reply::Stream { first, total, then_stall } => {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {total}\r\n\r\n");
            if s.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = vec![b'x'; 16 * 1024];
            let mut sent = 0;
            let limit = if then_stall { first } else { total };
            while sent < limit {
                let n = chunk.len().min(limit - sent);
                if s.write_all(&chunk[..n]).await.is_err() {
                    break;
                }
                sent += n;
            }
            let _ = s.flush().await;
            let _ = written.send(sent);
            if then_stall {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        }
    }
}

/// A receiver on 127.0.0.1:0 that answers every connection with `reply`.
async fn receiver(reply: Reply) -> Receiver {
    receiver_with(reply, None).await
}

async fn receiver_with(reply: Reply, tls: Option<tokio_rustls::TlsAcceptor>) -> Receiver {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let (gtx, grx) = tokio::sync::mpsc::unbounded_channel();
    let (wtx, wrx) = tokio::sync::mpsc::unbounded_channel();
    let c = conns.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let (reply, gtx, wtx, tls) = (reply.clone(), gtx.clone(), wtx.clone(), tls.clone());
            tokio::spawn(async move {
                match tls {
                    None => answer(s, reply, gtx, wtx).await,
                    Some(acc) => {
                        if let Ok(s) = acc.accept(s).await {
                            answer(s, reply, gtx, wtx).await
                        }
                    }
                }
            });
        }
    });
    Receiver { addr, conns, got: grx, written: wrx }
}

fn raw(status_line: &str, extra: &str) -> Reply {
    Reply::Raw(format!("HTTP/1.1 {status_line}\r\ncontent-length: 2\r\n{extra}\r\nok").into_bytes())
}

fn sender() -> Sender {
    Sender::new(true).with_timeout(Duration::from_secs(1))
}

async fn send_to(s: &Sender, url: &str) -> Attempt {
    s.send(url, SECRET, "evt_42", "deposit.created", BODY, NOW).await
}

#[tokio::test]
async fn a_connection_is_kept_alive_and_reused() {
    let mut r = receiver(Reply::KeepAlive { drop_after: None }).await;
    let s = sender();
    let url = format!("http://{}/hook", r.addr);
    for _ in 0..3 {
        let a = send_to(&s, &url).await;
        assert!(a.ok(), "{a:?}");
    }
    assert_eq!(r.conns.load(Ordering::SeqCst), 1);
    assert_eq!(s.idle_connections(), 1);
    for _ in 0..3 {
        let got = r.got.recv().await.unwrap();
        assert!(got.header("connection").is_none_or(|v| !v.eq_ignore_ascii_case("close")), "{got:?}");
        assert_eq!(got.body, BODY);
    }
    // Another host's URL never rides this connection.
    let mut other = receiver(Reply::KeepAlive { drop_after: None }).await;
    let a = send_to(&s, &format!("http://{}/hook", other.addr)).await;
    assert!(a.ok(), "{a:?}");
    assert_eq!(other.conns.load(Ordering::SeqCst), 1);
    assert!(other.got.recv().await.is_some());
    assert_eq!(s.idle_connections(), 2);
}

#[tokio::test]
async fn a_connection_closed_by_the_receiver_is_replaced_within_the_attempt() {
    // Closes the first connection on its second request, unanswered: the attempt goes on over
    // a new connection and succeeds, and the receiver saw the event twice (it drops repeats).
    let mut r = receiver(Reply::KeepAlive { drop_after: Some(2) }).await;
    let s = sender();
    let url = format!("http://{}/hook", r.addr);
    assert!(send_to(&s, &url).await.ok());
    let a = send_to(&s, &url).await;
    assert!(a.ok(), "{a:?}");
    assert_eq!(r.conns.load(Ordering::SeqCst), 2);
    for _ in 0..3 {
        assert_eq!(r.got.recv().await.unwrap().body, BODY);
    }
    // A receiver closing after every answer: each attempt still succeeds at once.
    let mut once = receiver(raw("200 OK", "")).await;
    let url = format!("http://{}/hook", once.addr);
    for _ in 0..3 {
        let a = send_to(&s, &url).await;
        assert!(a.ok(), "{a:?}");
        assert!(once.got.recv().await.is_some());
    }
    assert_eq!(once.conns.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_2xx_is_success_and_the_receiver_can_verify_it() {
    let mut r = receiver(raw("200 OK", "")).await;
    let a = send_to(&sender(), &format!("http://{}/hooks/pfm?token=abc", r.addr)).await;
    assert!(a.ok(), "{a:?}");
    assert_eq!((a.status, a.error.as_deref(), a.retry), (Some(200), None, false));
    let got = r.got.recv().await.unwrap();
    assert!(got.head.starts_with("POST /hooks/pfm?token=abc HTTP/1.1\r\n"), "{}", got.head);
    assert_eq!(got.body, BODY);
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert_eq!(got.header("user-agent"), Some(concat!("pfm-webhooks/", env!("CARGO_PKG_VERSION"))));
    assert_eq!(got.header("pfm-event-id"), Some("evt_42"));
    assert_eq!(got.header("pfm-event-type"), Some("deposit.created"));
    assert_eq!(got.header("host"), Some(r.addr.to_string().as_str()));
    let sig = got.header("pfm-signature").unwrap();
    assert!(sig.starts_with(&format!("t={NOW},v1=")), "{sig}");
    assert!(verify(SECRET, sig, &got.body, NOW + 5, 300));
    assert!(!verify(b"whsec_someone-else", sig, &got.body, NOW + 5, 300));
    assert!(!verify(SECRET, sig, &got.body, NOW + 3600, 300), "a replay an hour later");
    // 204 and other 2xx count too.
    let r = receiver(Reply::Raw(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec())).await;
    assert!(send_to(&sender(), &format!("http://{}/", r.addr)).await.ok());
}

#[tokio::test]
async fn server_errors_and_rate_limits_are_retried_other_answers_are_not() {
    for (line, retry) in [
        ("500 Internal Server Error", true),
        ("502 Bad Gateway", true),
        ("503 Service Unavailable", true),
        ("429 Too Many Requests", true),
        ("408 Request Timeout", true),
        ("400 Bad Request", false),
        ("404 Not Found", false),
        ("410 Gone", false),
    ] {
        let r = receiver(raw(line, "")).await;
        let a = send_to(&sender(), &format!("http://{}/", r.addr)).await;
        let code: u16 = line[..3].parse().unwrap();
        assert!(!a.ok(), "{line}");
        assert_eq!((a.status, a.retry), (Some(code), retry), "{line}: {a:?}");
        assert_eq!(a.error.as_deref(), Some(format!("HTTP {code}").as_str()));
    }
}

#[tokio::test]
async fn a_silent_receiver_times_out_in_the_limit() {
    let mut r = receiver(Reply::Silent).await;
    let t = Instant::now();
    let a = send_to(&sender(), &format!("http://{}/", r.addr)).await;
    let took = t.elapsed();
    assert!(r.got.recv().await.is_some(), "the request was sent");
    assert!(took >= Duration::from_millis(950) && took < Duration::from_secs(3), "{took:?}");
    assert_eq!((a.status, a.retry), (None, true), "{a:?}");
    assert!(a.error.as_deref().unwrap().contains("timed out"), "{a:?}");
    assert!(a.latency_ms >= 950, "{a:?}");
}

#[tokio::test]
async fn the_default_limit_is_ten_seconds() {
    assert_eq!(ATTEMPT_TIMEOUT, Duration::from_secs(10));
    assert_eq!(format!("{:?}", Sender::new(false)), "Sender { allow_private: false, timeout: 10s }");
}

#[tokio::test]
async fn a_refused_connection_is_retried() {
    // Bind then drop: a port on which nothing listens.
    let addr = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let a = send_to(&sender(), &format!("http://{addr}/")).await;
    assert_eq!((a.status, a.retry), (None, true), "{a:?}");
    assert!(a.error.as_deref().unwrap().starts_with("connection failed"), "{a:?}");
}

#[tokio::test]
async fn a_huge_answer_is_read_only_up_to_64_kb() {
    // A limit well above what a quick attempt takes on a loaded machine, so "quick" and "ran
    // to the deadline" cannot be confused.
    let s = Sender::new(true).with_timeout(Duration::from_secs(3));
    // 10 MB at full speed: the attempt ends quickly, and the receiver's writes stop short
    // because the sender closed the connection.
    let mut r = receiver(Reply::Stream { first: 0, total: 10 << 20, then_stall: false }).await;
    let t = Instant::now();
    let a = send_to(&s, &format!("http://{}/", r.addr)).await;
    assert!(a.ok(), "{a:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let written = tokio::time::timeout(Duration::from_secs(5), r.written.recv()).await.unwrap().unwrap();
    assert!(written < 10 << 20, "all 10 MB went through: the sender read on");

    // 70 KB and then nothing, the connection held open: the sender stops at 64 KB and does not
    // wait for the rest (which would take the whole timeout)...
    let r = receiver(Reply::Stream { first: 70 << 10, total: 10 << 20, then_stall: true }).await;
    let t = Instant::now();
    let a = send_to(&s, &format!("http://{}/", r.addr)).await;
    assert!(a.ok(), "{a:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // ... while with 10 KB and nothing more it reads on until the deadline: the 64 KB cap is
    // what ended the read above. The status had arrived, so it still counts.
    let r = receiver(Reply::Stream { first: 10 << 10, total: 10 << 20, then_stall: true }).await;
    let t = Instant::now();
    let a = send_to(&s, &format!("http://{}/", r.addr)).await;
    assert!(t.elapsed() >= Duration::from_millis(2950), "{:?}", t.elapsed());
    assert!(a.ok(), "{a:?}");
    // An answer not read to its end leaves its connection unusable: none is kept.
    assert_eq!(s.idle_connections(), 0);
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let mut target = receiver(raw("200 OK", "")).await;
    let loc = format!("location: http://{}/elsewhere\r\n", target.addr);
    for line in ["301 Moved Permanently", "302 Found", "307 Temporary Redirect", "308 Permanent Redirect"] {
        let r = receiver(raw(line, &loc)).await;
        let a = send_to(&sender(), &format!("http://{}/", r.addr)).await;
        assert!(!a.ok());
        assert_eq!((a.status, a.retry), (Some(line[..3].parse().unwrap()), false), "{a:?}");
        assert!(a.error.as_deref().unwrap().contains("redirects are not followed"), "{a:?}");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(target.conns.load(Ordering::SeqCst), 0);
    assert!(target.got.try_recv().is_err());
}

#[tokio::test]
async fn private_addresses_are_refused_at_send_time_too() {
    let r = receiver(raw("200 OK", "")).await;
    let strict = Sender::new(false).with_timeout(Duration::from_secs(1));
    let port = r.addr.port();
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        // Not IP literals to the URL parser, but the system resolver reads them as 127.0.0.1:
        // the resolved address is what gets checked.
        format!("http://2130706433:{port}/"),
        format!("http://127.1:{port}/"),
    ] {
        let a = send_to(&strict, &url).await;
        assert!(!a.ok(), "{url}");
        assert_eq!((a.status, a.retry), (None, false), "{url}: {a:?}");
        assert!(a.error.as_deref().unwrap_or("").contains("refused"), "{url}: {a:?}");
        assert!(!a.error.as_deref().unwrap().contains(&port.to_string()), "the URL stays out of the error");
    }
    assert_eq!(r.conns.load(Ordering::SeqCst), 0, "nothing connected");
    // The operator's flag lets the same URL through.
    assert!(send_to(&sender(), &format!("http://127.0.0.1:{port}/")).await.ok());
}

#[tokio::test]
async fn bad_urls_and_header_values_fail_without_retry() {
    let s = sender();
    for url in ["ftp://127.0.0.1/", "http://user:pw@127.0.0.1/", "not a url"] {
        let a = send_to(&s, url).await;
        assert_eq!((a.status, a.retry), (None, false), "{url}: {a:?}");
    }
    let r = receiver(raw("200 OK", "")).await;
    let a = s.send(&format!("http://{}/", r.addr), SECRET, "evt\r\nx-injected: 1", "t", BODY, NOW).await;
    assert_eq!((a.status, a.retry), (None, false), "{a:?}");
    assert_eq!(r.conns.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn errors_never_carry_the_secret_or_the_query() {
    let r = receiver(raw("503 Service Unavailable", "")).await;
    let a = send_to(&sender(), &format!("http://{}/x?token=s3cr3t-token", r.addr)).await;
    let e = a.error.unwrap();
    for leak in ["s3cr3t-token", "whsec_", "v1="] {
        assert!(!e.contains(leak), "{e}");
    }
}

#[tokio::test]
async fn a_large_event_body_goes_through_whole() {
    let mut r = receiver(raw("200 OK", "")).await;
    let big = format!(r#"{{"data":"{}"}}"#, "y".repeat(300 << 10));
    let a = sender().send(&format!("http://{}/", r.addr), SECRET, "e", "t", big.as_bytes(), NOW).await;
    assert!(a.ok(), "{a:?}");
    assert_eq!(r.got.recv().await.unwrap().body.len(), big.len());
}

/// A CA and a certificate for 127.0.0.1 signed by it, made with the openssl tool.
fn test_pki(dir: &std::path::Path) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let run = |args: &[&str]| {
        let out =
            std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=pfm test CA", "-days", "2"],
    ]
    .concat());
    run(&[&["req"][..], &ec, &["-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=127.0.0.1"]].concat());
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
    ]);
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    (read("ca.pem"), read("leaf.pem"), read("leaf.key"))
}

#[tokio::test]
async fn https_is_verified_against_trusted_roots() {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let dir = tempfile::tempdir().unwrap();
    let (ca, leaf, key) = test_pki(dir.path());
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let server = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(&leaf).unwrap()],
            PrivateKeyDer::from_pem_slice(&key).unwrap(),
        )
        .unwrap();
    let mut r =
        receiver_with(raw("200 OK", ""), Some(tokio_rustls::TlsAcceptor::from(Arc::new(server)))).await;
    let url = format!("https://{}/secure", r.addr);

    // Not trusted: the handshake fails, and that is retried (a certificate can be fixed).
    let a = send_to(&sender(), &url).await;
    assert_eq!((a.status, a.retry), (None, true), "{a:?}");
    assert!(a.error.as_deref().unwrap().starts_with("TLS handshake failed"), "{a:?}");
    assert!(r.got.try_recv().is_err(), "nothing was sent in the clear");

    let ca_der = CertificateDer::from_pem_slice(&ca).unwrap();
    let trusting = sender().with_root_certificate(&ca_der).unwrap();
    let a = send_to(&trusting, &url).await;
    assert!(a.ok(), "{a:?}");
    let got = r.got.recv().await.unwrap();
    assert_eq!(got.body, BODY);
    assert!(verify(SECRET, got.header("pfm-signature").unwrap(), &got.body, NOW, 300));

    // Plain HTTP to the TLS port is not an answer.
    let a = send_to(&trusting, &format!("http://{}/", r.addr)).await;
    assert!(!a.ok() && a.retry, "{a:?}");
    assert!(sender().with_root_certificate(b"not a certificate").is_err());
}

#[test]
fn backoff_grows_is_capped_and_jittered_within_bounds() {
    // The step before jitter doubles from 30 s up to 8 h; equal jitter keeps each delay in
    // [step/2, step].
    let step = |n: u32| BACKOFF_BASE.saturating_mul(1 << (n - 1).min(20)).min(BACKOFF_CAP);
    for n in 1..=40 {
        for r in [0.0, 0.25, 0.5, 0.999_999] {
            let d = backoff(n, r);
            assert!(d >= step(n) / 2 && d <= step(n), "n={n} r={r}: {d:?}");
        }
        assert_eq!(backoff(n, 0.0), step(n) / 2);
        assert!(backoff(n, 0.0) < backoff(n, 0.9), "jitter moves the delay");
    }
    assert_eq!(backoff(1, 0.0), Duration::from_secs(15));
    assert_eq!(backoff(2, 0.0), Duration::from_secs(30));
    for n in 1..11 {
        assert!(backoff(n + 1, 0.5) > backoff(n, 0.5), "n={n}");
    }
    assert_eq!(backoff(11, 0.5), backoff(12, 0.5), "capped from the 11th on");
    assert_eq!(backoff(12, 0.999_999).as_secs(), 8 * 3600 - 1);
    assert_eq!(backoff(u32::MAX, 0.0), BACKOFF_CAP / 2);
    assert_eq!(backoff(0, 0.0), backoff(1, 0.0));
    for r in [-1.0, 2.0, f64::NAN, f64::INFINITY] {
        let d = backoff(3, r);
        assert!(d >= Duration::from_secs(60) && d <= Duration::from_secs(120), "{r}: {d:?}");
    }
}

#[test]
fn backoff_reaches_three_days_in_few_attempts() {
    for r in [0.0, 0.5, 0.999_999] {
        let mut total = Duration::ZERO;
        let mut n = 0;
        while total.as_secs() < GIVE_UP_AFTER_SECS as u64 {
            n += 1;
            total += backoff(n, r);
        }
        // n delays reach 3 days: at most n attempts fit in the window.
        assert!((17..=27).contains(&n), "r={r}: {n} delays");
    }
    let mut total = Duration::ZERO;
    for n in 1..=27 {
        total += backoff(n, random01());
    }
    assert!(total.as_secs() >= GIVE_UP_AFTER_SECS as u64);
}

#[test]
fn random01_is_in_range_and_varies() {
    let xs: Vec<f64> = (0..1000).map(|_| random01()).collect();
    assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
    assert!(xs.iter().any(|&x| x < 0.1) && xs.iter().any(|&x| x > 0.9));
}
