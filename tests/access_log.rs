//! The access log of the real binary (issue 8): one line per request on stderr, text by default
//! and JSON lines with LOG_FORMAT=json, carrying the request id, method, route, status, latency,
//! user and client, and never a token or password.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const PASSWORD: &str = "correct-horse-battery";

struct Proc {
    child: Child,
    addr: SocketAddr,
    lines: mpsc::Receiver<String>,
}

/// Starts the binary on a free port; its stderr lines arrive on `lines`.
fn spawn(dir: &std::path::Path, envs: &[(&str, &str)]) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pfm"))
        .args(["--host", "127.0.0.1", "--port", "0", "--data-dir"])
        .arg(dir)
        .env_remove("JWT_SECRET")
        .env_remove("LOG_FORMAT")
        .envs(envs.iter().copied())
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn pfm");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr = loop {
        let line = rx.recv_timeout(deadline - Instant::now()).expect("pfm exited before listening");
        if !line.contains("pfm listening") {
            continue;
        }
        // Text: `addr=127.0.0.1:N`; JSON: `"addr":"127.0.0.1:N"`.
        let rest = line.split("addr=").nth(1).or_else(|| line.split("\"addr\":\"").nth(1)).expect("addr");
        break rest
            .split(|c: char| c.is_whitespace() || c == '"')
            .next()
            .unwrap()
            .parse()
            .expect("socket addr");
    };
    Proc { child, addr, lines: rx }
}

fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()));
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let (head, body) = out.split_once("\r\n\r\n").expect("response");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("status");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
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

/// Stops the process (SIGTERM) and returns every line it wrote.
fn finish(mut p: Proc) -> Vec<String> {
    let _ = Command::new("kill").args(["-TERM", &p.child.id().to_string()]).status();
    let _ = p.child.wait();
    p.lines.iter().collect()
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
    let p = spawn(dir.path(), &[("LOG_FORMAT", "json")]);
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
    let p = spawn(dir.path(), &[]);
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
