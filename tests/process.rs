//! The real binary: zero-configuration start, SIGTERM shutdown with exit 0, and durability of
//! acknowledged writes across kill -9.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

struct Proc {
    child: Child,
    addr: SocketAddr,
}

fn spawn(dir: &std::path::Path) -> Proc {
    spawn_with(dir, &[], &[])
}

fn spawn_with(dir: &std::path::Path, args: &[&str], envs: &[(&str, &str)]) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pfm"))
        .args(["--host", "127.0.0.1", "--port", "0", "--data-dir"])
        .arg(dir)
        .args(args)
        .envs(envs.iter().copied())
        .env_remove("JWT_SECRET")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn pfm");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("pfm exited before listening").expect("read log");
        if let Some(rest) = line.split("addr=").nth(1) {
            if line.contains("pfm listening") {
                break rest.split_whitespace().next().expect("addr").parse().expect("socket addr");
            }
        }
    };
    // Keep draining the log so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Proc { child, addr }
}

fn request(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    let b = if body.is_null() { String::new() } else { body.to_string() };
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
        b.len()
    );
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let (head, body) = out.split_once("\r\n\r\n").expect("response");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("status");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn login(addr: SocketAddr) -> String {
    let (st, v) = request(addr, "POST", "/login", None, json!({"user_id": "proc", "password": "secret123"}));
    assert_eq!(st, 200, "{v}");
    v["token"].as_str().expect("token").to_string()
}

#[test]
fn starts_without_configuration_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path());
    assert_eq!(request(p.addr, "GET", "/__ping__", None, Value::Null).0, 200);
    assert!(dir.path().join("jwt_secret").exists());
    let (st, v) = request(
        p.addr,
        "POST",
        "/register",
        None,
        json!({"user_id": "proc", "password": "secret123", "initial_balance": 5}),
    );
    assert_eq!(st, 200, "{v}");
    let main = v["uuid"].as_str().unwrap().to_string();
    let tok = login(p.addr);
    let (st, _) =
        request(p.addr, "POST", "/deposit", Some(&tok), json!({"uuid": main, "amount": 10, "channel": "c"}));
    assert_eq!(st, 200);
    let ok = Command::new("kill").args(["-TERM", &p.child.id().to_string()]).status().unwrap();
    assert!(ok.success());
    let status = p.child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    // Same data directory, same generated secret: the old token still works.
    let mut p = spawn(dir.path());
    let (st, v) = request(p.addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!((st, v["balance"].to_string()), (200, "15".to_string()));
    p.child.kill().unwrap();
    let _ = p.child.wait();
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path());
    let (st, v) =
        request(p.addr, "POST", "/register", None, json!({"user_id": "proc", "password": "secret123"}));
    assert_eq!(st, 200, "{v}");
    let main = v["uuid"].as_str().unwrap().to_string();
    let tok = login(p.addr);
    for i in 0..20 {
        let (st, _) = request(
            p.addr,
            "POST",
            "/deposit",
            Some(&tok),
            json!({"uuid": main, "amount": "1.25", "channel": "c", "transaction_number": format!("T{i}")}),
        );
        assert_eq!(st, 200);
    }
    p.child.kill().unwrap(); // SIGKILL: no shutdown path runs
    let _ = p.child.wait();
    let mut p = spawn(dir.path());
    let (st, v) = request(p.addr, "GET", &format!("/get_transactions?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!((st, v["transaction_count"].to_string()), (200, "20".to_string()));
    let (_, v) = request(p.addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!(v["balance"].to_string(), "25");
    p.child.kill().unwrap();
    let _ = p.child.wait();
}

#[test]
fn help_lists_every_flag_with_defaults() {
    let out = Command::new(env!("CARGO_BIN_EXE_pfm")).arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--host",
        "--port",
        "--data-dir",
        "--jwt-secret",
        "--max-requests",
        "--window-size",
        "--token-ttl-seconds",
        "--token-endpoint-enabled",
        "--trust-proxy",
        "--cors-allow-origin",
    ] {
        assert!(text.contains(flag), "{flag} missing from --help");
    }
    for default in ["127.0.0.1", "8000", "user_accounts", "180000", "3600"] {
        assert!(text.contains(default), "default {default} missing from --help");
    }
}

#[test]
fn environment_configures_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("MAX_REQUESTS", "1"),
        ("WINDOW_SIZE", "100"),
        ("TOKEN_ENDPOINT_ENABLED", "true"),
        ("CORS_ALLOW_ORIGIN", "*"),
    ];
    let mut p = spawn_with(dir.path(), &[], &env);
    let (st, v) = request(
        p.addr,
        "POST",
        "/generate_access_token",
        None,
        json!({"user_id": "u", "role": "user", "exp": 4102444800u64}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(request(p.addr, "GET", "/__ping__", None, Value::Null).0, 429);
    p.child.kill().unwrap();
    let _ = p.child.wait();
    // The flag wins over its variable.
    let mut p = spawn_with(dir.path(), &["--max-requests", "3"], &env);
    for _ in 0..3 {
        assert_eq!(request(p.addr, "GET", "/__ping__", None, Value::Null).0, 200);
    }
    assert_eq!(request(p.addr, "GET", "/__ping__", None, Value::Null).0, 429);
    p.child.kill().unwrap();
    let _ = p.child.wait();
}
