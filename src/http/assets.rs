//! The web page (docs/web.md): a few static files compiled into the binary, served on exact
//! GET paths without a token. Every other path keeps its API answer (401 before auth, 404 after).

use std::sync::OnceLock;

use hyper::header::{HeaderMap, HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use hyper::Method;

use super::response::Reply;

/// One embedded file.
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

/// The page's files. Paths are exact: no directory listing, no file system access.
pub static ASSETS: &[Asset] = &[
    Asset { path: "/", content_type: "text/html; charset=utf-8", body: include_str!("../../web/index.html") },
    Asset {
        path: "/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/app.js"),
    },
    Asset {
        path: "/schedules.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/schedules.js"),
    },
    Asset {
        path: "/developer.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/developer.js"),
    },
    Asset {
        path: "/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../web/app.css"),
    },
    Asset {
        path: "/favicon.svg",
        content_type: "image/svg+xml",
        body: include_str!("../../web/favicon.svg"),
    },
    Asset {
        path: "/vendor/uplot.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/vendor/uplot.min.js"),
    },
    Asset {
        path: "/vendor/uplot.min.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../web/vendor/uplot.min.css"),
    },
    Asset {
        path: "/vendor/uplot.LICENSE",
        content_type: "text/plain; charset=utf-8",
        body: include_str!("../../web/vendor/uplot.LICENSE"),
    },
];

/// Scripts and styles only from this origin, no inline code, no framing, API calls to this origin.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The asset served for `method` and `path`, if any (GET only, exact match).
pub fn find(method: &Method, path: &str) -> Option<&'static Asset> {
    if method != Method::GET {
        return None;
    }
    ASSETS.iter().find(|a| a.path == path)
}

/// Strong validators, computed once: the files never change while the binary runs.
fn etags() -> &'static [HeaderValue] {
    static TAGS: OnceLock<Vec<HeaderValue>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                // FNV-1a: stable across builds and platforms, enough to tell versions apart.
                let h = a.body.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
                });
                HeaderValue::from_str(&format!("\"{h:016x}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
            })
            .collect()
    })
}

fn matches_etag(headers: &HeaderMap, tag: &HeaderValue) -> bool {
    let Some(v) = headers.get(IF_NONE_MATCH).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Ok(tag) = tag.to_str() else { return false };
    v.split(',').map(str::trim).any(|t| t == "*" || t == tag || t.strip_prefix("W/") == Some(tag))
}

/// The answer for an asset: 200 with the file, or 304 when the client already has this version.
pub fn reply(asset: &'static Asset, headers: &HeaderMap) -> Reply {
    let idx = ASSETS.iter().position(|a| a.path == asset.path).unwrap_or(0);
    let tag = etags().get(idx).cloned().unwrap_or(HeaderValue::from_static("\"0\""));
    let fresh = matches_etag(headers, &tag);
    let (status, body) = if fresh { (304, String::new()) } else { (200, asset.body.to_string()) };
    let mut r = Reply::json(status, body);
    // Reply headers are applied after the JSON default, so this Content-Type wins.
    let h: [(HeaderName, HeaderValue); 7] = [
        (CONTENT_TYPE, HeaderValue::from_static(asset.content_type)),
        (ETAG, tag),
        // Paths carry no version, so browsers revalidate every time (a cheap 304).
        (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (hyper::header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)),
        (hyper::header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (hyper::header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        // For browsers without CSP frame-ancestors.
        (hyper::header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
    ];
    r.headers.extend(h);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_get_paths_are_assets() {
        assert!(find(&Method::GET, "/").is_some());
        assert!(find(&Method::GET, "/app.js").is_some());
        assert!(find(&Method::POST, "/").is_none());
        assert!(find(&Method::GET, "/app.js/").is_none());
        assert!(find(&Method::GET, "/vendor/").is_none());
        assert!(find(&Method::GET, "/../Cargo.toml").is_none());
    }

    #[test]
    fn etags_differ_per_file_and_match_if_none_match() {
        let tags = etags();
        assert_eq!(tags.len(), ASSETS.len());
        assert_ne!(tags[0], tags[1]);
        let mut h = HeaderMap::new();
        h.insert(IF_NONE_MATCH, tags[1].clone());
        assert!(matches_etag(&h, &tags[1]));
        assert!(!matches_etag(&h, &tags[0]));
    }
}
