//! pfm: a personal finance manager service. Each user owns a tree of envelope accounts; money
//! deposited flows down the tree by allocation, priority and fixed amounts (SPEC.md).
//!
//! A map of the crate, in the order one request travels:
//! - [`http`]: the server (accept loop, connection bound, graceful shutdown), the global filter
//!   (request id, CORS, bearer JWT, rate limits, backoff), the router, the response envelope and
//!   the reference response style; also the operational endpoints (health probes, metrics with
//!   their route labels, the OpenAPI document), the access log and the `Idempotency-Key` check
//!   and replay. Nothing below it sees hyper types.
//! - [`api`]: every endpoint declared once (`api::endpoints`, `api::decl`: method, path, each
//!   parameter's type, limits and messages, the answer's fields, the error table), beside one
//!   handler per endpoint, all of one shape: read parameters through their declarations in the
//!   order of the endpoint's error table, then read a snapshot or run a mutation under the
//!   user's lock, and return an `Answer`. It imports nothing from `http`.
//! - [`domain`]: pure money and tree logic: exact decimals and dates, the account tree with its
//!   precomputed aggregates, and the money engine (deposit, split, capping, rollover...).
//! - [`store`]: the `Store` trait and its engines (embedded: journal + sled; shared by several
//!   nodes: PostgreSQL), key/value encoding, group commit, `pfm migrate`, and the per-user cache
//!   that serialises writers and gives readers consistent snapshots; with each write it stores
//!   the delta-sync change row and any idempotency key, atomically.
//! - [`auth`]: JWT verify/issue, Argon2id passwords off the async workers, rate limits, backoff.
//! - [`app`], [`config`], [`clock`]: the shared state, configuration (env + flags), and the one
//!   injectable clock.
//! - [`metrics`]: the Prometheus metrics every layer records into, through one-line calls.
//! - [`webhook`]: outgoing webhooks' sending half: signatures, the URL and address checks, one
//!   bounded delivery attempt, and the retry schedule.

pub mod alloc;
pub mod api;
pub mod app;
pub mod auth;
pub mod clock;
pub mod config;
pub mod domain;
pub mod http;
pub mod import;
pub mod metrics;
pub mod store;
pub mod webhook;

use std::net::SocketAddr;
use std::sync::Arc;

/// A server running on its own thread and runtime (tests, benchmarks).
pub struct Running {
    pub addr: SocketAddr,
    pub app: Arc<app::App>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, drains and flushes; returns when the server thread ended.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts a server for `cfg` with `clock` on a background thread.
pub fn start(
    cfg: config::Config,
    clock: Arc<dyn clock::Clock>,
) -> Result<Running, Box<dyn std::error::Error + Send + Sync>> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let addr: SocketAddr = format!("{}:{}", cfg.host, cfg.port).parse()?;
    let app = app::App::open(cfg, clock)?;
    let listener = rt.block_on(tokio::net::TcpListener::bind(addr))?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app2 = app.clone();
    let thread = std::thread::spawn(move || {
        rt.block_on(http::server::serve(app2, listener, async {
            let _ = rx.await;
        }));
    });
    Ok(Running { addr, app, stop: Some(tx), thread: Some(thread) })
}
