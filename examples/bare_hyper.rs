//! The baseline for load figures: a bare hyper 1 endpoint answering a fixed JSON body, on the
//! same runtime settings as pfm. Usage: `bare_hyper <port>`.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(8001);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let svc = service_fn(|_req: Request<hyper::body::Incoming>| async {
                let mut r = Response::new(Full::new(Bytes::from_static(b"{\"status\":\"ok\"}")));
                r.headers_mut()
                    .insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
                Ok::<_, Infallible>(r)
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}
