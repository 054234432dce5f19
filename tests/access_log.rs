//! The access log of the real binary (docs/api.md): one line per request on stderr, text by default
//! and JSON lines with LOG_FORMAT=json, carrying the request id, method, route, status, latency,
//! user and client, and never a token or password.

mod common;

use std::net::SocketAddr;

use common::proc::{self, Proc};
use serde_json::{json, Value};

const PASSWORD: &str = "correct-horse-battery";

fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let r = proc::send(addr, method, path, None, headers, body).expect("an answer");
    (r.status, r.json)
}

/// Registers and logs in a user, then makes an authenticated request with a known request id
/// and one with a bad token; returns (token, the bad token).
fn traffic(addr: SocketAddr) -> (String, String) {
    let creds = json!({"user_id": "logged", "password": PASSWORD}).to_string();
    assert_eq!(request(addr, "POST", "/register", &[], &creds).0, 200);
    let (st, v) = request(addr, "POST", "/login?api_key=query-secret-1", &[], &creds);
    assert_eq!(st, 200, "{v}");
    let tok = v["token"].as_str().expect("token").to_string();
    let auth = format!("Bearer {tok}");
    let (st, _) =
        request(addr, "GET", "/get_balance", &[("Authorization", &auth), ("X-Request-Id", "trace-42")], "");
    assert_eq!(st, 400);
    let bad = "bad-token-never-logged".to_string();
    let (st, _) = request(addr, "GET", "/get_balance", &[("Authorization", &format!("Bearer {bad}"))], "");
    assert_eq!(st, 401);
    (tok, bad)
}

/// Stops the process (SIGTERM) and returns every line it wrote after it listened.
fn finish(mut p: Proc) -> Vec<String> {
    p.terminate();
    p.lines()
}

fn assert_no_secrets(all: &[String], tok: &str, bad: &str) {
    for l in all {
        for secret in [tok, bad, PASSWORD, "query-secret-1"] {
            assert!(!l.contains(secret), "a secret reached the log: {l}");
        }
    }
}

#[test]
fn json_access_lines_carry_request_fields_and_no_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let p = proc::spawn(dir.path(), &[], &[("LOG_FORMAT", "json")]);
    let addr = p.addr;
    let (tok, bad) = traffic(addr);
    let all = finish(p);
    let lines: Vec<Value> =
        all.iter().map(|l| serde_json::from_str(l).expect("every line is JSON")).collect();
    let access: Vec<&Value> = lines.iter().filter(|v| v["target"] == "access").collect();
    assert_eq!(access.len(), 4, "one line per request: {all:#?}");
    let traced = access.iter().find(|v| v["request_id"] == "trace-42").expect("request id from x-request-id");
    assert_eq!(traced["method"], "GET");
    assert_eq!(traced["route"], "/get_balance");
    assert_eq!(traced["status"], 400);
    assert_eq!(traced["user"], "logged");
    assert_eq!(traced["client"], "127.0.0.1");
    assert!(traced["latency_us"].is_u64(), "{traced}");
    assert!(traced["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{traced}");
    let login = access.iter().find(|v| v["route"] == "/login").expect("login line");
    assert_eq!(login["status"], 200);
    // Generated request ids are logged too (the one the response carried).
    assert!(login["request_id"].as_str().is_some_and(|id| id.len() == 36), "{login}");
    // Unauthenticated: no user.
    assert!(login.get("user").is_none(), "{login}");
    let rejected = access.iter().find(|v| v["status"] == 401).expect("401 line");
    assert!(rejected.get("user").is_none());
    assert_no_secrets(&all, &tok, &bad);
}

#[test]
fn text_access_lines_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let p = proc::spawn(dir.path(), &[], &[]);
    let addr = p.addr;
    let (tok, bad) = traffic(addr);
    let all = finish(p);
    let access: Vec<&String> = all.iter().filter(|l| l.contains(" access: ")).collect();
    assert_eq!(access.len(), 4, "{all:#?}");
    // Strings are quoted and escaped (a user id comes from a token and may hold anything).
    let traced = access
        .iter()
        .find(|l| l.contains(r#"request_id="trace-42""#))
        .unwrap_or_else(|| panic!("no traced line in {access:#?}"));
    let fields = [
        r#"method="GET""#,
        r#"route="/get_balance""#,
        "status=400",
        r#"user="logged""#,
        r#"client="127.0.0.1""#,
        "latency_us=",
    ];
    for field in fields {
        assert!(traced.contains(field), "{field} missing in {traced}");
    }
    assert!(traced.starts_with("20"), "a timestamp first: {traced}");
    assert_no_secrets(&all, &tok, &bad);
}
