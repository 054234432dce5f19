//! The connection's byte stream, with one correction: hyper answers a request it cannot parse
//! (bad bytes: 400, a URI over 64 KiB: 414, headers over its buffer: 431) by itself, with an
//! empty body and no `Content-Type`, before any of our code sees a request. SPEC 3.1 wants every
//! answer to be JSON, so such an answer is recognised on its way out and replaced by the same
//! status with a filter-shaped JSON body. Nothing else passes through differently.
//!
//! Recognising it is safe: hyper's automatic answer is a head only (`content-length: 0`, no
//! `content-type`), while every answer of ours carries `content-type: application/json`, and a
//! JSON body can never contain the CR LF sequences a head is made of.
//!
//! What still gets no JSON answer, because hyper writes nothing at all: a connection whose
//! request head does not complete within the header timeout, and an HTTP/2 preface (this
//! server speaks HTTP/1.1 only); both are simply closed.
//!
//! The header timeout lives here too, rather than in hyper: hyper's arms a fresh timer for
//! every request (an allocation and a timer-wheel insert and removal each time), while this one
//! keeps one timer per connection that wakes a few times per timeout period and looks at a
//! counter the requests bump.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::response::Reply;
use crate::auth::jwt::{Identity, TokenMemo};

/// What one connection's requests and its byte stream share.
#[derive(Default)]
pub struct ConnState {
    /// Requests begun plus requests finished: odd while one is being handled.
    activity: AtomicU64,
    /// What this connection's requests last authenticated as.
    pub auth: Mutex<AuthMemo>,
}

/// A connection's memory of its last token (clients send one token per connection), and of
/// the user limiter's hash of the identity it verified to.
#[derive(Default)]
pub struct AuthMemo {
    pub token: TokenMemo,
    pub limit_key: Option<(Arc<Identity>, u128)>,
}

impl ConnState {
    /// Marks a request as being handled until the guard drops.
    pub fn begin(&self) -> InFlight<'_> {
        self.activity.fetch_add(1, Ordering::Relaxed);
        InFlight(self)
    }
}

/// A request being handled (see [`ConnState::begin`]).
pub struct InFlight<'a>(&'a ConnState);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.activity.fetch_add(1, Ordering::Relaxed);
    }
}

/// Closes a connection that completes no request head for `limit`: one never used, one idle
/// after its last answer, or one sending a head too slowly. It fires between `limit` and
/// `limit` + `limit`/6 after the connection's last activity (a request handled or answer bytes
/// written), never earlier; a head completing inside that last stretch may be dropped with the
/// connection, as one arriving after hyper's own timer would have been.
struct Watchdog {
    state: Arc<ConnState>,
    limit: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    /// `activity` when last looked at, and when it was first seen at that value.
    seen: u64,
    quiet_since: Instant,
    /// Answer bytes went out since the last look, or an answer waits for the client to read:
    /// an answer still being written to a slow reader is activity, not a late head.
    wrote: bool,
    blocked: bool,
    /// Since when answer bytes wait for a client that takes none (see [`Watchdog::stalled`]),
    /// and the timer that looks again.
    stalled_since: Option<Instant>,
    stall_sleep: Option<Pin<Box<Sleep>>>,
}

/// A client that takes none of its answer for this many header timeouts is gone.
const STALL_LIMITS: u32 = 4;

impl Watchdog {
    fn tick(&self) -> Duration {
        self.limit / 6
    }

    /// Whether answer bytes have waited for the client for [`STALL_LIMITS`] header timeouts
    /// without it taking any: such a client is gone, and its connection holds buffers (a
    /// streamed answer's chunks among them) for nothing. A slow reader that takes some is never
    /// cut. Otherwise the timer is armed on `cx`.
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let now = Instant::now();
        let deadline = *self.stalled_since.get_or_insert(now) + self.limit * STALL_LIMITS;
        if now >= deadline {
            return true;
        }
        let sleep = self.stall_sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.deadline() != deadline {
            sleep.as_mut().reset(deadline);
        }
        sleep.as_mut().poll(cx).is_ready()
    }

    /// Whether the connection has been quiet too long; otherwise the timer is armed on `cx`.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.sleep.is_none() {
            let now = Instant::now();
            self.seen = self.state.activity.load(Ordering::Relaxed);
            self.quiet_since = now;
            self.sleep = Some(Box::pin(tokio::time::sleep_until(now + self.tick())));
        }
        let tick = self.tick();
        let Some(sleep) = self.sleep.as_mut() else { return false };
        while sleep.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            let a = self.state.activity.load(Ordering::Relaxed);
            if a != self.seen || a % 2 == 1 || std::mem::take(&mut self.wrote) || self.blocked {
                self.seen = a;
                self.quiet_since = now;
            } else if now.duration_since(self.quiet_since) >= self.limit {
                return true;
            }
            sleep.as_mut().reset(now + tick);
        }
        false
    }
}

/// What a replaced answer carries besides its body.
#[derive(Clone, Default)]
pub struct ErrorAnswers {
    /// `Access-Control-Allow-Origin` value, when CORS is on.
    pub cors_origin: Option<String>,
    /// Renders a finished JSON body in the configured response style.
    pub style: Option<fn(&str) -> String>,
}

pub struct JsonErrors<S> {
    inner: S,
    opts: ErrorAnswers,
    /// Replacement bytes still to be written.
    pending: Vec<u8>,
    written: usize,
    watchdog: Watchdog,
}

impl<S> JsonErrors<S> {
    /// `header_timeout`: see [`Watchdog`]; `state` is shared with the connection's requests.
    pub fn new(
        inner: S,
        opts: ErrorAnswers,
        state: Arc<ConnState>,
        header_timeout: Duration,
    ) -> JsonErrors<S> {
        let watchdog = Watchdog {
            state,
            limit: header_timeout,
            sleep: None,
            seen: 0,
            quiet_since: Instant::now(),
            wrote: false,
            blocked: false,
            stalled_since: None,
            stall_sleep: None,
        };
        JsonErrors { inner, opts, pending: Vec::new(), written: 0, watchdog }
    }
}

/// The error text for a status hyper answers by itself, in the routing errors' wording.
fn message(status: &[u8]) -> Option<(u16, &'static str)> {
    match status {
        b"400" => Some((400, "400 - Bad Request")),
        b"414" => Some((414, "414 - URI Too Long")),
        b"431" => Some((431, "431 - Request Header Fields Too Large")),
        _ => None,
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle))
}

/// A JSON replacement for `buf` when `buf` is hyper's own bodiless error answer.
fn replacement(buf: &[u8], opts: &ErrorAnswers) -> Option<Vec<u8>> {
    let rest = buf.strip_prefix(b"HTTP/1.1 ")?;
    let (status, msg) = message(rest.get(..3)?)?;
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = &buf[..end + 2];
    if end + 4 != buf.len()
        || contains(head, b"\r\ncontent-type:")
        || !contains(head, b"\r\ncontent-length: 0\r\n")
    {
        return None;
    }
    let mut body = Reply::bare(status, msg).body;
    if let Some(style) = opts.style {
        body = style(&body);
    }
    let mut out = Vec::with_capacity(head.len() + body.len() + 160);
    // Keep hyper's status line and its other headers (connection: close, date).
    for line in head.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        if line.len() >= 15 && line[..15].eq_ignore_ascii_case(b"content-length:") {
            continue;
        }
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.extend_from_slice(b"content-type: application/json\r\n");
    out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    out.extend_from_slice(format!("x-request-id: {}\r\n", uuid::Uuid::new_v4()).as_bytes());
    if let Some(o) = &opts.cors_origin {
        if !o.bytes().any(|b| b == b'\r' || b == b'\n') {
            out.extend_from_slice(format!("access-control-allow-origin: {o}\r\n").as_bytes());
        }
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body.as_bytes());
    Some(out)
}

/// `buf` with hyper's automatic answer at its end replaced, if there is one. Usually the answer
/// is the whole buffer; after a partial write the unsent end of the previous answer (a JSON body,
/// or nothing after a head for 204) can precede it.
fn rewrite(buf: &[u8], opts: &ErrorAnswers) -> Option<Vec<u8>> {
    if !buf.ends_with(b"\r\n\r\n") {
        return None;
    }
    let p = buf.windows(9).rposition(|w| w == b"HTTP/1.1 ")?;
    let before = &buf[..p];
    if !(before.is_empty() || before.ends_with(b"}") || before.ends_with(b"\r\n\r\n")) {
        return None;
    }
    let mut out = before.to_vec();
    out.extend(replacement(&buf[p..], opts)?);
    Some(out)
}

impl<S: AsyncWrite + Unpin> JsonErrors<S> {
    /// hyper's bytes on their way out, its bodiless error answers replaced (see `rewrite`).
    fn write_answer(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.drain(cx))?;
        if let Some(bytes) = rewrite(buf, &self.opts) {
            self.pending = bytes;
            self.written = 0;
            // hyper's bytes count as written; ours go out now or on the next flush/shutdown.
            if let Poll::Ready(Err(e)) = self.drain(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    /// Writes out replacement bytes; ready once none are left.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        // Only a read that waits can be waiting too long.
        if r.is_pending() && this.watchdog.expired(cx) {
            tracing::debug!("no request head within the header timeout; closing");
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "request head timed out")));
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonErrors<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = self.write_answer(cx, buf);
        let w = &mut self.watchdog;
        match &r {
            Poll::Pending => {
                w.blocked = true;
                if w.stalled(cx) {
                    tracing::debug!("the client took none of its answer for too long; closing");
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "answer not taken")));
                }
            }
            Poll::Ready(Ok(n)) if *n > 0 => {
                w.blocked = false;
                w.wrote = true;
                w.stalled_since = None;
            }
            Poll::Ready(_) => {}
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Not vectored: hyper then hands each answer over as one buffer, head first, which is what
    // recognising its automatic answers relies on.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_answers_are_replaced() {
        let o = ErrorAnswers::default();
        let hyper414 =
            b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: X\r\n\r\n";
        let out = String::from_utf8(replacement(hyper414, &o).unwrap()).unwrap();
        assert!(out.starts_with("HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ndate: X\r\n"), "{out}");
        assert!(out.contains("content-type: application/json\r\n"));
        assert!(out.ends_with(r#"{"success":false,"status":414,"error":"414 - URI Too Long"}"#));
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n";
        assert!(replacement(ours, &o).is_none());
        let with_body = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}";
        assert!(replacement(with_body, &o).is_none());
        assert!(replacement(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", &o).is_none());
        // After a partial write, the rest of the previous answer goes out unchanged first.
        let mut tail = b"\"x\"}".to_vec();
        tail.extend_from_slice(hyper414);
        let out = String::from_utf8(rewrite(&tail, &o).unwrap()).unwrap();
        assert!(out.starts_with("\"x\"}HTTP/1.1 414 URI Too Long\r\n"), "{out}");
        assert!(rewrite(b"{\"a\":\"HTTP/1.1 400 x\r\ncontent-length: 0\r\n\r\n", &o).is_none());
    }
}
