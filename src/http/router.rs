//! Method + path -> endpoint (SPEC 1.1). Paths match exactly; each endpoint has one method. The
//! routes are the endpoints `api` declares.

use hyper::Method;

use crate::api::decl::Endpoint;
use crate::api::ENDPOINTS;

/// Outcome of routing.
pub enum Routed {
    Found(&'static Endpoint),
    NotFound,
    /// Known path, wrong method: the one allowed method.
    WrongMethod(&'static str),
}

/// The route at `at` (its path's [`index`], found once per request) for `method`.
pub fn route(at: usize, method: &Method) -> Routed {
    match ENDPOINTS.get(at) {
        None => Routed::NotFound,
        Some(e) if e.verb.as_str() == method.as_str() => Routed::Found(e),
        Some(e) => Routed::WrongMethod(e.verb.as_str()),
    }
}

/// The route's index in [`ENDPOINTS`], or `ENDPOINTS.len()` for a path that is not routed: the
/// metrics' label index (see [`labels`]).
pub fn index(path: &str) -> usize {
    ENDPOINTS.iter().position(|e| e.path == path).unwrap_or(ENDPOINTS.len())
}

/// Metrics labels by route index: each route's path, then `other` for every unrouted path
/// (which bounds the label set).
pub fn labels() -> &'static [&'static str] {
    static LABELS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        ENDPOINTS.iter().map(|e| e.path).chain([crate::metrics::OTHER_ROUTE]).collect()
    });
    &LABELS
}
