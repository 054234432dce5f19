//! Operational endpoints (docs/api.md): liveness and readiness probes, Prometheus metrics and the
//! OpenAPI document. They answer before any body is read and outside the envelope, like
//! /__ping__.

use hyper::header::{HeaderValue, CONTENT_TYPE};

use super::response::Reply;
use crate::app::App;

/// Liveness: the process accepts and answers requests.
pub fn healthz() -> Reply {
    Reply::json(200, "{\"status\":\"ok\"}".to_string())
}

/// Readiness: storage takes writes and answers a point read (a user id that can never be
/// registered, so the read touches the index and finds nothing) once it has caught up with the
/// journal. A failing store makes the probe 503, so a balancer stops sending traffic while the
/// process itself stays alive.
pub async fn readyz(app: &App) -> Reply {
    if !app.users.store.healthy() {
        tracing::error!("readiness probe: storage is not taking writes");
        return Reply::bare(503, "Storage unavailable");
    }
    match app.users.store.load_user("").await {
        Ok(_) => Reply::json(200, "{\"status\":\"ready\"}".to_string()),
        Err(e) => {
            tracing::error!(error = %e, "readiness probe: storage read failed");
            Reply::bare(503, "Storage unavailable")
        }
    }
}

/// Prometheus text exposition; with `METRICS_ENABLED=false` the path is unknown (404).
pub fn metrics(app: &App) -> Reply {
    if !app.cfg.metrics_enabled {
        return Reply::bare(404, "404 - Resource Not Found");
    }
    Reply::json(200, crate::metrics::render(app.users.cached(), app.users.cached_bytes()))
        .header(CONTENT_TYPE, HeaderValue::from_static(crate::metrics::CONTENT_TYPE))
}

/// The OpenAPI 3.1 document of every route.
pub fn openapi() -> Reply {
    Reply::json(200, super::openapi::text().to_string())
}
