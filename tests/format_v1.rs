//! A data directory written by the first storage format (tests/fixtures/v1, made by `make.sh`
//! there with the binary of that time) opens with today's binary and answers every read exactly
//! as the old binary did (`expected.json`, captured by `capture.py` from that binary).

mod common;

use std::path::Path;

use common::Srv;
use serde_json::Value;

fn strip_timing(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        for k in ["start_time", "end_time", "execution_time"] {
            o.remove(k);
        }
    }
    v
}

fn check_answers(s: &Srv, expected: &[Value]) {
    for e in expected {
        let user = e["user"].as_str().unwrap();
        let path = e["path"].as_str().unwrap();
        let (p, q) = path.split_once('?').unwrap_or((path, ""));
        let got = strip_timing(s.get(&s.token(user, "user"), p, q).json);
        assert_eq!(got, e["answer"], "{user} {path}");
    }
}

#[test]
fn a_v1_data_directory_opens_and_answers_as_before() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1");
    let expected: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json")).unwrap()).unwrap();
    assert!(expected.len() > 300);
    let mut s = Srv::start_with(|c| {
        common::copy_dir(&fixture.join("data"), &c.data_dir);
    });
    // The capture ran on 2026-11-23; answers with default ranges (get_minimal_tree) use "now".
    s.set_time("2026-11-23 18:12:00");
    check_answers(&s, &expected);
    // Still the same after a restart on the migrated directory.
    s.restart();
    check_answers(&s, &expected);
    // And it takes writes: the old transaction-number index still refuses a duplicate.
    let tok = s.token("alice", "user");
    let main = s.get(&tok, "/find_account_by_name", "name=Main").ok().json["matches"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    s.post(
        &tok,
        "/deposit",
        serde_json::json!({"uuid": main, "amount": 1, "channel": "c", "transaction_number": "T3"}),
    )
    .fails(409, "Deposit failed: This deposit has already been made. Transaction ID:T3");
    s.post(
        &tok,
        "/deposit",
        serde_json::json!({"uuid": main, "amount": 1, "channel": "c", "transaction_number": "NEW"}),
    )
    .ok();
    // Generated ids written before ids were derived keep their index rows; a new one is derived
    // (no row) and refused all the same.
    let dup = |id: &str| {
        s.post(
            &tok,
            "/deposit",
            serde_json::json!({"uuid": main, "amount": 1, "channel": "c", "transaction_number": id}),
        )
        .fails(409, &format!("Deposit failed: This deposit has already been made. Transaction ID:{id}"));
    };
    let generated = |s: &Srv| -> Vec<String> {
        let txs = s.txs(&tok, &main);
        txs.iter()
            .filter_map(|t| t["TransactionID"].as_str())
            .filter(|id| id.starts_with("SYS"))
            .map(String::from)
            .collect()
    };
    let before = generated(&s);
    assert!(!before.is_empty());
    dup(&before[0]);
    s.deposit(&tok, &main, "1").ok();
    let new_ids: Vec<String> = generated(&s).into_iter().filter(|id| !before.contains(id)).collect();
    // The deposit's own id and, as main has children, its split debit's.
    assert_eq!(new_ids.len(), 2, "{new_ids:?}");
    for id in &new_ids {
        dup(id);
    }
}

#[test]
fn a_newer_storage_format_refuses_to_start_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled::open(dir.path().join("db")).unwrap();
        db.insert(b"m:format", &[99u8]).unwrap();
        db.flush().unwrap();
    }
    let mut cfg = pfm::config::Config::for_dir(dir.path());
    cfg.jwt_secret = Some(common::SECRET.into());
    let clock = std::sync::Arc::new(pfm::clock::ManualClock::at_secs(common::T0));
    // sled releases its file lock from a background thread after the handle above is dropped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let err = loop {
        let err = pfm::start(cfg.clone(), clock.clone()).err().expect("refuses to start").to_string();
        if !err.contains("could not acquire lock") || std::time::Instant::now() > deadline {
            break err;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(err.contains("storage format 99") && err.contains("upgrade pfm"), "{err}");
}
