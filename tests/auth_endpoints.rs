//! SPEC 5: /register (both modes), /login, /generate_access_token.

mod common;

use common::{Body, Srv};
use serde_json::{json, Value};

fn public_post(s: &Srv, path: &str, body: serde_json::Value) -> common::Resp {
    s.raw("POST", path, &[], Body::Json(body))
}

#[test]
fn register_password_mode_and_duplicates() {
    let s = Srv::start();
    let r = public_post(&s, "/register", json!({"user_id": "u1"}));
    assert_eq!(r.text, r#"{"success":false,"status":401,"error":"Missing or invalid token"}"#);
    let r = public_post(&s, "/register", json!({"user_id": "u1", "password": "secret123"}));
    r.ok();
    assert_eq!(r.s("user_id"), "u1");
    assert!(r.s("uuid").starts_with("acc") && r.s("uuid").len() == 39);
    public_post(&s, "/register", json!({"user_id": "u1", "password": "secret123"}))
        .fails(409, "Account creation Failed: User already exists");
}

#[test]
fn register_error_rows() {
    let s = Srv::start();
    let p = |b| public_post(&s, "/register", b);
    p(json!({"password": "secret123"})).fails(400, "user_id is required");
    p(json!({"user_id": "bad id", "password": "secret123"}))
        .fails(400, "Account creation Failed: Invalid user ID format");
    p(json!({"user_id": "x".repeat(129), "password": "secret123"}))
        .fails(400, "Account creation Failed: Invalid user ID format");
    p(json!({"user_id": "u1", "password": "short"}))
        .fails(400, "password must be between 8 and 128 characters");
    p(json!({"user_id": "u1", "password": "x".repeat(129)}))
        .fails(400, "password must be between 8 and 128 characters");
    p(json!({"user_id": "u1", "password": "secret123", "initial_balance": "Inf"}))
        .fails(400, "initial_balance must be a non-negative number");
    p(json!({"user_id": "u1", "password": "secret123", "initial_balance": -1}))
        .fails(400, "initial_balance must be a non-negative number");
    p(json!({"user_id": "u1", "password": "secret123", "initial_balance": "10.005"}))
        .fails(400, "initial_balance must have at most 2 decimal places");
    p(json!({"user_id": "u1", "password": "secret123", "initial_balance": "1e13"}))
        .fails(400, "initial_balance is too large");
}

#[test]
fn register_token_mode() {
    let s = Srv::start();
    let t2 = s.token("u2", "user");
    s.post(&t2, "/register", json!({"user_id": "u3"})).fails(403, "user_id does not match token");
    let r = s.post(&t2, "/register", json!({"user_id": "u2", "initial_balance": "500.25"}));
    r.ok();
    assert_eq!(s.balance(&t2, &r.s("uuid")), "500.25");
    // The opening balance is not logged as a deposit.
    assert!(s.txs(&t2, &r.s("uuid")).is_empty());
    // With a header, a bad token is refused by the filter.
    let r = s.raw(
        "POST",
        "/register",
        &[("Authorization", "Bearer nope")],
        Body::Json(json!({"user_id": "u9", "password": "secret123"})),
    );
    assert_eq!(r.status, 401);
}

#[test]
fn login_issues_hs256_token_with_claims() {
    let s = Srv::start();
    public_post(&s, "/register", json!({"user_id": "alice", "password": "secret123"})).ok();
    let r = public_post(&s, "/login", json!({"user_id": "alice", "password": "secret123"}));
    r.ok();
    assert_eq!(
        (r.s("user_id"), r.s("role"), r.s("token_type"), r.n("expires_in")),
        ("alice".into(), "user".into(), "Bearer".into(), "3600".into())
    );
    let tok = r.s("token");
    // The header as SPEC 4.3 writes it, to the byte.
    assert_eq!(b64url(tok.split('.').next().unwrap()), br#"{"alg":"HS256","typ":"JWT"}"#);
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    v.validate_exp = false;
    let data = jsonwebtoken::decode::<serde_json::Value>(
        &tok,
        &jsonwebtoken::DecodingKey::from_secret(common::SECRET.as_bytes()),
        &v,
    )
    .unwrap();
    let c = data.claims;
    assert_eq!(c["user_id"], json!("alice"));
    assert_eq!(c["role"], json!("user"));
    assert_eq!(c["iat"], json!(common::T0));
    assert_eq!(c["exp"], json!(common::T0 + 3600));
    // The token works.
    s.get(&tok, "/get_balance", "uuid=x").fails(403, "Account not found or unauthorized");
}

#[test]
fn login_errors_and_backoff() {
    let s = Srv::start();
    public_post(&s, "/register", json!({"user_id": "bob", "password": "secret123"})).ok();
    public_post(&s, "/login", json!({"password": "x"})).fails(400, "user_id is required");
    public_post(&s, "/login", json!({"user_id": "bob"})).fails(400, "password is required");
    public_post(&s, "/login", json!({"user_id": "bob", "password": "wrong-pass"}))
        .fails(401, "Invalid user_id or password");
    let r = public_post(&s, "/login", json!({"user_id": "bob", "password": "secret123"}));
    r.fails(429, "Too many failed attempts. Wait 1 seconds.");
    assert_eq!(r.header("retry-after"), Some("1"));
    s.clock.advance_micros(1_000_000);
    public_post(&s, "/login", json!({"user_id": "bob", "password": "secret123"})).ok();
    // Unknown users and token-registered users (no password) get the same 401.
    public_post(&s, "/login", json!({"user_id": "ghost", "password": "secret123"}))
        .fails(401, "Invalid user_id or password");
    let t = s.token("tokonly", "user");
    s.post(&t, "/register", json!({"user_id": "tokonly"})).ok();
    public_post(&s, "/login", json!({"user_id": "tokonly", "password": "secret123"}))
        .fails(401, "Invalid user_id or password");
}

#[test]
fn generate_access_token_is_disabled_by_default() {
    let s = Srv::start();
    public_post(&s, "/generate_access_token", json!({"user_id": "u", "role": "admin", "exp": 2000000000}))
        .fails(403, "Token generation endpoint is disabled");
}

#[test]
fn generate_access_token_when_enabled() {
    let s = Srv::start_with(|c| c.token_endpoint_enabled = true);
    let g = |b| public_post(&s, "/generate_access_token", b);
    g(json!({"role": "user"})).fails(400, "user_id is required");
    g(json!({"user_id": "u"})).fails(400, "role is required");
    g(json!({"user_id": "u", "role": "user", "type": "session"}))
        .fails(400, "session_id is required for session tokens");
    g(json!({"user_id": "u", "role": "user"})).fails(400, "exp is required for expiry tokens");
    g(json!({"user_id": "u", "role": "user", "exp": "soon"})).fails(400, "Invalid NumericDate format");
    let r = g(json!({"user_id": "u", "role": "admin", "exp": "2100-01-01", "jti": "j1", "extra": "ignored"}));
    r.ok();
    assert_eq!(r.s("user_id"), "u");
    assert_eq!(r.s("timestamp"), "2025-07-10T08:50:15.000Z");
    let tok = r.s("token");
    // The minted admin token works: an unknown account is then 404 rather than 403.
    s.post(&tok, "/register", json!({"user_id": "u"})).ok();
    s.get(&tok, "/get_balance", "uuid=accx").fails(404, "Account not found or unauthorized");
    let r = g(json!({"user_id": "u", "role": "user", "type": "session", "session_id": "s1"}));
    r.ok();
    // Days since the epoch (<= 1e6) are accepted too.
    g(json!({"user_id": "u", "role": "user", "exp": 30000})).ok();
    // The claims: days become seconds before the fraction is dropped, a negative number is days
    // too, and a number above 1e6 (or a string of digits) is seconds.
    let claim = |exp: Value, name: &str| {
        let r = g(json!({"user_id": "u", "role": "user", "exp": exp, "nbf": exp}));
        let payload = r.ok().s("token").split('.').nth(1).map(b64url).expect("three segments");
        serde_json::from_slice::<Value>(&payload).expect("JSON claims")[name].clone()
    };
    assert_eq!(claim(json!(1.5), "exp"), json!(129_600));
    assert_eq!(claim(json!(20000.5), "exp"), json!(1_728_043_200));
    assert_eq!(claim(json!(0.5), "nbf"), json!(43_200));
    assert_eq!(claim(json!(-5), "exp"), json!(-432_000));
    assert_eq!(claim(json!(1_000_000), "exp"), json!(86_400_000_000i64));
    assert_eq!(claim(json!(1_000_000.5), "exp"), json!(1_000_000));
    assert_eq!(claim(json!("2000000"), "exp"), json!(2_000_000));
    assert_eq!(claim(json!(1.0e5), "exp"), json!(8_640_000_000i64));
    // A string that is not all digits must be a date.
    g(json!({"user_id": "u", "role": "user", "exp": "-5"})).fails(400, "Invalid NumericDate format");
}

/// base64url without padding, as JWS segments are written.
fn b64url(s: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let vals: Vec<u32> =
        s.bytes().map(|c| A.iter().position(|a| *a == c).expect("base64url") as u32).collect();
    let mut out = Vec::new();
    for chunk in vals.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, v)| n | (v << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}
