//! The pfm binary: configuration from flags and environment, then serve until SIGINT/SIGTERM.

use std::sync::Arc;

use clap::Parser;
use pfm::clock::SystemClock;
use pfm::config::{Command, Config};

// sled and the request path allocate a lot, and the journal and applier threads free what the
// async workers allocated; mimalloc handles both far better than the system allocator.
#[global_allocator]
static ALLOC: pfm::alloc::Mimalloc = pfm::alloc::Mimalloc;

fn main() -> std::process::ExitCode {
    let cfg = Config::parse();
    let filter = || tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false);
    if cfg.log_format == "json" {
        // One JSON object per line, the event's fields at the top level.
        logs.json().flatten_event(true).with_current_span(false).with_env_filter(filter()).init();
    } else {
        logs.with_env_filter(filter()).init();
    }
    pfm::alloc::keep_freed_memory();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let workers = pfm::config::worker_threads(cfg.worker_threads, cores);
    match tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build() {
        Ok(rt) => rt.block_on(run(cfg, workers)),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cfg: Config, workers: usize) -> std::process::ExitCode {
    if let Some(Command::Migrate { from, to }) = &cfg.command {
        return migrate(from, to).await;
    }
    let addr = format!("{}:{}", cfg.host, cfg.port);
    let clock = match clock() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the test clock");
            return std::process::ExitCode::FAILURE;
        }
    };
    let app = match pfm::app::App::open(cfg, clock) {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(error = %e, "cannot open storage");
            return std::process::ExitCode::FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, %addr, "cannot listen");
            return std::process::ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(bound) => tracing::info!(addr = %bound, workers, "pfm listening"),
        Err(_) => tracing::info!(%addr, workers, "pfm listening"),
    }
    pfm::http::server::serve(app, listener, shutdown_signal()).await;
    tracing::info!("pfm stopped");
    std::process::ExitCode::SUCCESS
}

/// The system clock; in test builds, `PFM_TEST_CLOCK_FILE` names a file of Unix seconds that
/// the multi-node tests move for every node at once.
fn clock() -> std::io::Result<Arc<dyn pfm::clock::Clock>> {
    #[cfg(feature = "test-hooks")]
    if let Some(path) = std::env::var_os("PFM_TEST_CLOCK_FILE") {
        return Ok(Arc::new(pfm::clock::FileClock::open(path.into())?));
    }
    Ok(Arc::new(SystemClock))
}

/// `pfm migrate`: copies everything, verifies the copy, and says what it did.
async fn migrate(from: &str, to: &str) -> std::process::ExitCode {
    use pfm::store::migrate::{migrate, Side};
    let opened = (|| Ok::<_, pfm::store::StoreError>((Side::open(from)?, Side::open(to)?)))();
    let result = match opened {
        Ok((a, b)) => migrate(&a, &b).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(r) => {
            tracing::info!(users = r.users, records = r.records, "migrated and verified");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "migration failed");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
