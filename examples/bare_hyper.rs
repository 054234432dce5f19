//! The baseline for load figures: a bare hyper 1 endpoint answering a fixed JSON body, on the
//! same runtime settings as pfm. Usage: `bare_hyper <port> [like-pfm]`.
//!
//! With `like-pfm` it answers the very bytes pfm answers to an authenticated GET /get_balance
//! (the same header fields, the same body): a control that tells the cost of pfm's answer to
//! the client from pfm's own work (docs/benchmarks.md, Reads).

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

const PFM_BODY: &[u8] =
    b"{\"success\":true,\"status\":200,\"uuid\":\"acc2931162d-b5a6-47fe-a706-bc774b4ec163\",\
\"balance\":1000,\"start_time\":\"2026-11-26T08:34:17.538Z\",\"end_time\":\"2026-11-26T08:34:17.538Z\",\
\"execution_time\":0.00002}";

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(8001);
    let like_pfm = std::env::args().nth(2).as_deref() == Some("like-pfm");
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let svc = service_fn(move |_req: Request<hyper::body::Incoming>| async move {
                let body: &'static [u8] = if like_pfm { PFM_BODY } else { b"{\"status\":\"ok\"}" };
                let mut r = Response::new(Full::new(Bytes::from_static(body)));
                let h = r.headers_mut();
                h.insert("content-type", HeaderValue::from_static("application/json"));
                if like_pfm {
                    h.insert("ratelimit-policy", HeaderValue::from_static("\"default\";q=1000000000;w=3600"));
                    h.insert("ratelimit", HeaderValue::from_static("\"default\";r=999999997;t=3600"));
                    h.insert(
                        "x-request-id",
                        HeaderValue::from_static("d6d7325e-1c45-41d2-81c6-698295f1a42c"),
                    );
                }
                Ok::<_, Infallible>(r)
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}
