//! The receiver of scripts/bench/webhook_bench.sh: answers every POST 200 at once with an empty
//! body and counts the events it got, by `Pfm-Event-Id` (a repeat, which at-least-once delivery
//! allows, is counted apart). `GET /count` answers `<distinct events> <requests>`.
//! Usage: `hook_receiver <port>`.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;

#[derive(Default)]
struct Seen {
    ids: Mutex<HashSet<Vec<u8>>>,
    requests: AtomicU64,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(8002);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let seen = Arc::new(Seen::default());
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let seen = seen.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                let seen = seen.clone();
                async move {
                    // The answer goes before the body is read: pfm reads the status only.
                    let body = if req.method() == Method::GET {
                        let n = seen.ids.lock().map(|s| s.len()).unwrap_or(0);
                        Bytes::from(format!("{} {}\n", n, seen.requests.load(Ordering::Relaxed)))
                    } else {
                        seen.requests.fetch_add(1, Ordering::Relaxed);
                        if let Some(id) = req.headers().get("pfm-event-id") {
                            if let Ok(mut s) = seen.ids.lock() {
                                s.insert(id.as_bytes().to_vec());
                            }
                        }
                        Bytes::new()
                    };
                    Ok::<_, Infallible>(Response::new(Full::new(body)))
                }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}
