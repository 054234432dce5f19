//! What API clients expect beyond the SPEC endpoints (issue 8): probes, rate-limit header
//! fields, pagination, metrics and the OpenAPI document, all over real HTTP.

mod common;

use common::{Body, Srv};
use serde_json::json;

#[test]
fn healthz_and_readyz_are_public_json_probes() {
    let s = Srv::start();
    let h = s.raw("GET", "/healthz", &[], Body::None);
    assert_eq!((h.status, h.text.as_str()), (200, r#"{"status":"ok"}"#));
    assert_eq!(h.header("content-type"), Some("application/json"));
    assert!(h.header("x-request-id").is_some());
    let r = s.raw("GET", "/readyz", &[], Body::None);
    assert_eq!((r.status, r.text.as_str()), (200, r#"{"status":"ready"}"#));
    // A bad token does not matter on a public path (the header is not even read).
    let r = s.raw("GET", "/readyz", &[("Authorization", "Bearer nope")], Body::None);
    assert_eq!(r.status, 200);
    // Known path, wrong method: 405 naming GET, like every route.
    let p = s.raw("POST", "/healthz", &[], Body::None);
    assert_eq!(p.status, 405);
    assert_eq!(p.header("allow"), Some("GET"));
}

#[test]
fn readyz_reads_storage_of_a_populated_service() {
    let s = Srv::start();
    let (tok, main) = s.user("probe_user", "100");
    s.deposit(&tok, &main, "5").ok();
    let r = s.raw("GET", "/readyz", &[], Body::None);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json, json!({"status": "ready"}));
}

#[test]
fn ratelimit_fields_on_every_answer_that_went_through_a_limiter() {
    let s = Srv::start_with(|c| {
        c.max_requests = 3;
        c.window_size = 10;
    });
    let tok = s.token("rl_user", "user");
    let policy = r#""default";q=3;w=10"#;
    let r = s.get(&tok, "/get_balance", "uuid=x");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("ratelimit-policy"), Some(policy));
    assert_eq!(r.header("ratelimit"), Some(r#""default";r=2;t=10"#));
    s.clock.advance_micros(2_500_000);
    // A 400 from a handler also went through the limiter.
    let r = s.get(&tok, "/get_balance", "");
    assert_eq!(r.status, 400);
    assert_eq!(r.header("ratelimit"), Some(r#""default";r=1;t=8"#));
    s.clock.advance_micros(500_000);
    assert_eq!(s.get(&tok, "/get_balance", "uuid=x").header("ratelimit"), Some(r#""default";r=0;t=7"#));
    s.clock.advance_micros(1_000_000);
    let r = s.get(&tok, "/get_balance", "uuid=x");
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("6"));
    assert_eq!(r.header("ratelimit-policy"), Some(policy));
    assert_eq!(r.header("ratelimit"), Some(r#""default";r=0;t=6"#));
    // Public paths count per client IP, in their own table.
    let p = s.raw("GET", "/__ping__", &[], Body::None);
    assert_eq!(p.header("ratelimit"), Some(r#""default";r=2;t=10"#));
    assert_eq!(p.header("ratelimit-policy"), Some(policy));
    // Rejected before any limiter: no fields.
    let u = s.raw("GET", "/get_balance", &[], Body::None);
    assert_eq!(u.status, 401);
    assert_eq!(u.header("ratelimit"), None);
    assert_eq!(u.header("ratelimit-policy"), None);
}

#[test]
fn ratelimit_fields_with_default_configuration() {
    let s = Srv::start();
    let (tok, main) = s.user("rl_default", "10");
    let r = s.deposit(&tok, &main, "1");
    r.ok();
    assert_eq!(r.header("ratelimit-policy"), Some(r#""default";q=180000;w=3600"#));
    // register counted 1, the deposit 2.
    assert_eq!(r.header("ratelimit"), Some(r#""default";r=179998;t=3600"#));
}
