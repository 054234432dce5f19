//! The raw durable-write baseline for write figures (scripts/bench/durable_bench.sh): a bare hyper 1
//! endpoint, on the same runtime settings as pfm, where every POST appends one ~400-byte record
//! to a single file and is answered only once an fdatasync covers it. One committer thread
//! takes every record queued so far, writes them with one write, syncs once, then answers all of
//! them (group commit), so this is what the disk and the kernel allow, with no store in between.
//! Usage: `raw_append <port> <dir>`.

use std::convert::Infallible;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::oneshot;

/// Bytes appended per request, about the size of one pfm deposit record.
const RECORD: usize = 400;

/// One queued append: the record and where to answer once it is durable.
type Job = (Vec<u8>, oneshot::Sender<std::io::Result<u64>>);

/// Takes every queued record, writes them in one call, fdatasyncs once, answers them all.
fn committer(mut file: File, rx: mpsc::Receiver<Job>) {
    let mut buf = Vec::with_capacity(1 << 20);
    let mut waiting = Vec::new();
    let mut offset = 0u64;
    while let Ok(first) = rx.recv() {
        waiting.push(first);
        while let Ok(more) = rx.try_recv() {
            waiting.push(more);
        }
        buf.clear();
        for (rec, _) in &waiting {
            buf.extend_from_slice(rec);
        }
        let res = file.write_all(&buf).and_then(|()| file.sync_data());
        offset += buf.len() as u64;
        for (_, tx) in waiting.drain(..) {
            let answer = match &res {
                Ok(()) => Ok(offset),
                Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
            };
            let _ = tx.send(answer);
        }
    }
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    queue: mpsc::Sender<Job>,
    seq: &AtomicU64,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let n = seq.fetch_add(1, Ordering::Relaxed);
    // A record of a fixed size: a header line, the start of the body, padding, newline.
    let mut rec = format!("{n:016x} ").into_bytes();
    rec.extend_from_slice(&body[..body.len().min(RECORD / 2)]);
    rec.resize(RECORD - 1, b' ');
    rec.push(b'\n');
    let (tx, rx) = oneshot::channel();
    let answer = if queue.send((rec, tx)).is_ok() { rx.await.ok() } else { None };
    let (status, text) = match answer {
        Some(Ok(off)) => (StatusCode::OK, format!("{{\"success\":true,\"status\":200,\"offset\":{off}}}")),
        Some(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{{\"success\":false,\"status\":500,\"error\":{:?}}}", e.to_string()),
        ),
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "{\"success\":false,\"status\":500,\"error\":\"committer gone\"}".to_string(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = status;
    r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
    Ok(r)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().and_then(|p| p.parse().ok()).unwrap_or(8003);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| ".".into()));
    std::fs::create_dir_all(&dir)?;
    let file = OpenOptions::new().create(true).append(true).open(dir.join("raw_append.log"))?;
    let (queue, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new().name("committer".into()).spawn(move || committer(file, rx))?;
    let seq: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let queue = queue.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(req, queue.clone(), seq));
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}
