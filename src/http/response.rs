//! Every answer leaves through here: the envelope of SPEC 3.5, the bare bodies of filter and
//! routing errors.

use std::fmt::Write as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Frame, SizeHint};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Response, StatusCode};

use crate::api::json::{escape_into, Obj};
use crate::api::logs::Chunks;
use crate::api::ApiError;
use crate::domain::dates::push_millis;
use crate::domain::num::push_scaled;

/// A finished response: status, JSON body and extra headers.
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Set instead of `body` for an answer written while it is sent (see `api::logs`): its
    /// first chunk and the rest as they come.
    pub chunks: Option<(Bytes, Chunks)>,
    /// Why an answer is a 500: logged by the server beside the request's id, never sent.
    pub cause: Option<String>,
}

/// An answer's body: whole, with a Content-Length (nearly every answer), or chunks.
pub enum Body {
    Whole(Full<Bytes>),
    Chunked(Option<Bytes>, Chunks),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            Body::Whole(b) => Pin::new(b).poll_frame(cx).map_err(|never| match never {}),
            Body::Chunked(first, rest) => match first.take() {
                Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
                None => rest.poll_recv(cx).map(|c| c.map(|r| r.map(Frame::data))),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Whole(b) => b.is_end_stream(),
            Body::Chunked(..) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Whole(b) => b.size_hint(),
            Body::Chunked(..) => SizeHint::default(),
        }
    }
}

impl Reply {
    pub fn json(status: u16, body: String) -> Reply {
        Reply { status, body, headers: Vec::new(), chunks: None, cause: None }
    }

    /// `{"success":false,"status":N,"error":"..."}`
    pub fn bare(status: u16, msg: &str) -> Reply {
        let mut b = String::with_capacity(64 + msg.len());
        let _ = write!(b, "{{\"success\":false,\"status\":{status},\"error\":");
        escape_into(&mut b, msg);
        b.push('}');
        Reply::json(status, b)
    }

    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Reply {
        self.headers.push((name, value));
        self
    }

    pub fn into_response(self) -> Response<Body> {
        let body = match self.chunks {
            Some((first, rest)) => Body::Chunked(Some(first), rest),
            None => Body::Whole(Full::new(Bytes::from(self.body))),
        };
        let mut r = Response::new(body);
        *r.status_mut() = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // Sized once for the usual set (type, two rate-limit fields, request id, CORS), so the
        // map is not grown and rehashed insert by insert.
        let mut h = hyper::HeaderMap::with_capacity(8);
        h.insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (k, v) in self.headers {
            h.insert(k, v);
        }
        *r.headers_mut() = h;
        r
    }
}

/// The body of a success envelope (for `api::Envelope`: an answer kept with its write, a
/// streamed answer's frame).
pub fn render_success(fields: &Obj, prefix: &'static str, start_us: i64, end_us: i64) -> String {
    envelope(Ok(fields.clone()), prefix, start_us, end_us).body
}

/// Wraps endpoint fields (or an error) in the envelope with timing.
pub fn envelope(result: Result<Obj, ApiError>, prefix: &str, start_us: i64, end_us: i64) -> Reply {
    let mut body = String::with_capacity(256);
    let mut cause = None;
    let (status, fields) = match result {
        Ok(fields) => {
            body.push_str("{\"success\":true,\"status\":200");
            (200, Some(fields))
        }
        Err(ApiError::Bare(status, msg)) => return Reply::bare(status, &msg),
        Err(ApiError::TooMany(msg, secs)) => {
            let mut r = envelope(Err(ApiError::new(429, msg)), prefix, start_us, end_us);
            r.headers.push((hyper::header::RETRY_AFTER, HeaderValue::from(secs)));
            return r;
        }
        Err(ApiError::Client(status, msg, extra)) => {
            let _ = write!(body, "{{\"success\":false,\"status\":{status},\"error\":");
            escape_into(&mut body, &msg);
            (status, extra)
        }
        Err(ApiError::Internal(why)) => {
            cause = Some(format!("{prefix}: {why}"));
            body.push_str("{\"success\":false,\"status\":500,\"error\":");
            escape_into(&mut body, &format!("{prefix}: internal error"));
            (500, None)
        }
    };
    if let Some(f) = fields {
        if !f.members().is_empty() {
            body.push(',');
            body.push_str(f.members());
        }
    }
    let exec_us = (end_us - start_us).max(0);
    body.push_str(",\"start_time\":\"");
    push_millis(&mut body, start_us.div_euclid(1000));
    body.push_str("\",\"end_time\":\"");
    push_millis(&mut body, end_us.div_euclid(1000));
    body.push_str("\",\"execution_time\":");
    push_scaled(&mut body, i128::from(exec_us), 6);
    body.push('}');
    Reply { cause, ..Reply::json(status, body) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_are_500_with_the_endpoint_prefix() {
        let r = envelope(Err(ApiError::Internal("disk on fire".into())), "Deposit failed", 0, 1_500);
        assert_eq!(r.status, 500);
        assert!(r
            .body
            .starts_with(r#"{"success":false,"status":500,"error":"Deposit failed: internal error","#));
        assert!(!r.body.contains("disk on fire"));
        assert_eq!(r.cause.as_deref(), Some("Deposit failed: disk on fire"));
        assert!(r.body.ends_with(r#""execution_time":0.0015}"#));
    }

    #[test]
    fn success_envelope_orders_keys() {
        let r = envelope(Ok(Obj::new().str("uuid", "x").money("balance", 150_050)), "", 0, 0);
        assert_eq!(
            r.body,
            r#"{"success":true,"status":200,"uuid":"x","balance":1500.5,"start_time":"1970-01-01T00:00:00.000Z","end_time":"1970-01-01T00:00:00.000Z","execution_time":0}"#
        );
    }
}
