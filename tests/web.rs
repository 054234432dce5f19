//! The web page's static files (docs/web.md): served at exact GET paths without a token, with a
//! strict Content-Security-Policy; everything else still answers like the API did before.

mod common;

use common::{Body, Srv};

/// Every file the page is made of, with its Content-Type.
const ASSETS: &[(&str, &str)] = &[
    ("/", "text/html; charset=utf-8"),
    ("/app.js", "text/javascript; charset=utf-8"),
    ("/schedules.js", "text/javascript; charset=utf-8"),
    ("/developer.js", "text/javascript; charset=utf-8"),
    ("/app.css", "text/css; charset=utf-8"),
    ("/favicon.svg", "image/svg+xml"),
    ("/vendor/uplot.min.js", "text/javascript; charset=utf-8"),
    ("/vendor/uplot.min.css", "text/css; charset=utf-8"),
    ("/vendor/uplot.LICENSE", "text/plain; charset=utf-8"),
];

fn get_anon(s: &Srv, path: &str) -> common::Resp {
    s.raw("GET", path, &[], Body::None)
}

#[test]
fn the_page_is_html_with_a_strict_content_security_policy() {
    let s = Srv::start();
    let r = get_anon(&s, "/");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(r.text.starts_with("<!doctype html>"));
    assert!(r.text.contains("<script src=\"/app.js\""));
    let csp = r.header("content-security-policy").expect("CSP header");
    let directive = |name: &str| {
        csp.split(';').map(str::trim).find(|d| d.starts_with(name)).unwrap_or_default().to_string()
    };
    assert_eq!(directive("script-src"), "script-src 'self'");
    assert_eq!(directive("style-src"), "style-src 'self'");
    assert_eq!(directive("frame-ancestors"), "frame-ancestors 'none'");
    assert_eq!(directive("default-src"), "default-src 'none'");
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert!(r.header("x-request-id").is_some());
}

#[test]
fn every_asset_is_served_without_a_token_with_its_type() {
    let s = Srv::start();
    for (path, ct) in ASSETS {
        let r = get_anon(&s, path);
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        assert_eq!(r.header("content-type"), Some(*ct), "{path}");
        assert_eq!(r.header("cache-control"), Some("no-cache"), "{path}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{path}");
        assert!(r.header("content-security-policy").is_some(), "{path}");
        assert!(!r.text.is_empty(), "{path}");
        // A token, even a bad one, does not matter for static files.
        let r2 = s.raw("GET", path, &[("Authorization", "Bearer not-a-token")], Body::None);
        assert_eq!((r2.status, r2.text.len()), (200, r.text.len()), "{path}");
    }
    let lic = get_anon(&s, "/vendor/uplot.LICENSE");
    assert!(lic.text.contains("MIT License") && lic.text.contains("Leon Sorokin"), "{}", lic.text);
}

#[test]
fn etag_revalidation_answers_304_without_a_body() {
    let s = Srv::start();
    let r = get_anon(&s, "/app.js");
    let tag = r.header("etag").expect("etag").to_string();
    assert!(tag.starts_with('"') && tag.ends_with('"'), "{tag}");
    assert_ne!(Some(tag.as_str()), get_anon(&s, "/app.css").header("etag"));
    let again = s.raw("GET", "/app.js", &[("If-None-Match", &tag)], Body::None);
    assert_eq!(again.status, 304);
    assert!(again.text.is_empty());
    assert_eq!(again.header("etag"), Some(tag.as_str()));
    let stale = s.raw("GET", "/app.js", &[("If-None-Match", "\"0000\"")], Body::None);
    assert_eq!(stale.status, 200);
}

#[test]
fn other_paths_and_methods_answer_exactly_as_before() {
    let s = Srv::start();
    let tok = s.token("someone", "user");
    let auth = format!("Bearer {tok}");
    // Near misses of static paths, other methods on them, and unknown paths: 401 without a token
    // (the filter runs first), 404 with one, like any unknown path (SPEC 3.1). (HEAD on a static
    // path answers as GET: tests/http_filter.rs.)
    let cases: &[(&str, &str)] = &[
        ("POST", "/"),
        ("DELETE", "/"),
        ("POST", "/app.js"),
        ("HEAD", "/index.html"),
        ("GET", "/index.html"),
        ("GET", "/app.js/"),
        ("GET", "//"),
        ("GET", "/vendor/"),
        ("GET", "/vendor/../app.js"),
        ("GET", "/APP.JS"),
        ("GET", "/accounts"),
        ("GET", "/favicon.ico"),
    ];
    for (method, path) in cases {
        let r = s.raw(method, path, &[], Body::None);
        assert_eq!(r.status, 401, "{method} {path}: {}", r.text);
        if *method != "HEAD" {
            assert_eq!(r.text, r#"{"success":false,"status":401,"error":"Missing or invalid token"}"#);
        }
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert!(r.header("content-security-policy").is_none(), "{method} {path}");
        let r = s.raw(method, path, &[("Authorization", &auth)], Body::None);
        assert_eq!(r.status, 404, "{method} {path}: {}", r.text);
        if *method != "HEAD" {
            assert_eq!(r.text, r#"{"success":false,"status":404,"error":"404 - Resource Not Found"}"#);
        }
    }
    // The API itself is untouched: still JSON, still needs its token.
    let r = s.raw("GET", "/get_balance", &[], Body::None);
    assert_eq!(r.status, 401);
    let r = get_anon(&s, "/__ping__");
    assert_eq!((r.status, r.text.as_str()), (200, r#"{"status":"ok"}"#));
    let r = s.raw("POST", "/get_balance", &[("Authorization", &auth)], Body::None);
    assert_eq!(r.status, 405);
}

#[test]
fn the_page_references_nothing_outside_this_server() {
    let s = Srv::start();
    let html = get_anon(&s, "/").text;
    // Every src/href is a path on this server (not a scheme, not protocol-relative).
    for attr in ["src=\"", "href=\""] {
        for (i, _) in html.match_indices(attr) {
            let v = &html[i + attr.len()..];
            assert!(
                v.starts_with('/') && !v.starts_with("//"),
                "external reference: {}",
                &v[..v.len().min(60)]
            );
        }
    }
    // No inline code or styles (the CSP would block them; the page must not need them).
    let lower = html.to_ascii_lowercase();
    assert_eq!(lower.matches("<script").count(), lower.matches("<script src=\"/").count());
    assert!(!lower.contains(" style="), "inline style attribute");
    assert!(!lower.contains("<style"), "inline style element");
    for ev in [" onclick=", " onload=", " onerror=", " onsubmit=", " onchange=", " oninput="] {
        assert!(!lower.contains(ev), "inline handler {ev}");
    }
    // Across every file: the only absolute URLs are the SVG namespace (an identifier, never
    // fetched) and the chart library's home page in its licence comment.
    let allowed = ["http://www.w3.org/2000/svg", "https://github.com/leeoniya/uPlot"];
    for (path, _) in ASSETS {
        let body = get_anon(&s, path).text;
        for scheme in ["http://", "https://"] {
            for (i, _) in body.match_indices(scheme) {
                let rest = &body[i..];
                assert!(
                    allowed.iter().any(|a| rest.starts_with(a)),
                    "{path} references {}",
                    &rest[..rest.len().min(60)]
                );
            }
        }
        assert!(!body.contains("url(") && !body.contains("@import"), "{path} loads from CSS");
    }
    // The page renders user text only as text.
    for path in ["/app.js", "/schedules.js", "/developer.js"] {
        let js = get_anon(&s, path).text;
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
            assert!(!js.contains(sink), "{path} uses {sink}");
        }
    }
}
