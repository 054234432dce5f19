//! The real binary: zero-configuration start, SIGTERM shutdown with exit 0, and durability of
//! acknowledged writes across kill -9.

mod common;

use std::process::Command;

use common::proc::{login, request, spawn};
use serde_json::{json, Value};

#[test]
fn starts_without_configuration_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path(), &[], &[]);
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
    let tok = login(p.addr, "proc", "secret123");
    let (st, _) =
        request(p.addr, "POST", "/deposit", Some(&tok), json!({"uuid": main, "amount": 10, "channel": "c"}));
    assert_eq!(st, 200);
    let status = p.terminate();
    assert!(status.success(), "exit status {status:?}");
    // Same data directory, same generated secret: the old token still works.
    let mut p = spawn(dir.path(), &[], &[]);
    let (st, v) = request(p.addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!((st, v["balance"].to_string()), (200, "15".to_string()));
    p.kill();
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path(), &[], &[]);
    let (st, v) =
        request(p.addr, "POST", "/register", None, json!({"user_id": "proc", "password": "secret123"}));
    assert_eq!(st, 200, "{v}");
    let main = v["uuid"].as_str().unwrap().to_string();
    let tok = login(p.addr, "proc", "secret123");
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
    p.kill(); // SIGKILL: no shutdown path runs
    let mut p = spawn(dir.path(), &[], &[]);
    let (st, v) = request(p.addr, "GET", &format!("/get_transactions?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!((st, v["transaction_count"].to_string()), (200, "20".to_string()));
    let (_, v) = request(p.addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!(v["balance"].to_string(), "25");
    p.kill();
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
    let mut p = spawn(dir.path(), &[], &env);
    let (st, v) = request(
        p.addr,
        "POST",
        "/generate_access_token",
        None,
        json!({"user_id": "u", "role": "user", "exp": 4102444800u64}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(request(p.addr, "GET", "/__ping__", None, Value::Null).0, 429);
    p.kill();
    // The flag wins over its variable.
    let mut p = spawn(dir.path(), &["--max-requests", "3"], &env);
    for _ in 0..3 {
        assert_eq!(request(p.addr, "GET", "/__ping__", None, Value::Null).0, 200);
    }
    assert_eq!(request(p.addr, "GET", "/__ping__", None, Value::Null).0, 429);
    p.kill();
}

/// Every core but one (at least one) serves HTTP unless configured, by flag or variable.
#[test]
fn worker_threads_follow_the_cores_unless_configured() {
    let dir = tempfile::tempdir().unwrap();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], usize);
    let cases: [Case; 3] = [
        (&[], &[], pfm::config::worker_threads(0, cores)),
        (&[], &[("WORKER_THREADS", "3")], 3),
        (&["--worker-threads", "1"], &[("WORKER_THREADS", "3")], 1),
    ];
    for (args, env, want) in cases {
        let mut p = spawn(dir.path(), args, env);
        assert!(p.listening.contains(&format!("workers={want}")), "{args:?} {env:?}: {}", p.listening);
        assert_eq!(request(p.addr, "GET", "/__ping__", None, Value::Null).0, 200);
        p.kill();
    }
}
