//! Operational endpoints (issue 8): liveness and readiness probes. They answer before any body
//! is read and outside the envelope, like /__ping__.

use super::response::Reply;
use crate::app::App;

/// Liveness: the process accepts and answers requests.
pub fn healthz() -> Reply {
    Reply::json(200, "{\"status\":\"ok\"}".to_string())
}

/// Readiness: storage answers a point read (a user id that can never be registered, so the read
/// touches the index and finds nothing). A failing store makes the probe 503, so a balancer stops
/// sending traffic while the process itself stays alive.
pub fn readyz(app: &App) -> Reply {
    match app.users.store.get_user("") {
        Ok(_) => Reply::json(200, "{\"status\":\"ready\"}".to_string()),
        Err(e) => {
            tracing::error!(error = %e, "readiness probe: storage read failed");
            Reply::bare(503, "Storage unavailable")
        }
    }
}
