//! SPEC 13.2: durability across restarts, atomic registration, per-user serialisation.

mod common;

use common::{embedded_only, Body, Srv};
use serde_json::json;

#[test]
fn restart_finds_every_acknowledged_write() {
    let mut s = Srv::start();
    let (tok, main) = s.user("u1", "10");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    let rent = s.child(&tok, &needs, "Rent", json!({"allocation": 1, "fixed_amount": 50}));
    s.post(
        &tok,
        "/deposit",
        json!({"uuid": main, "amount": 100, "channel": "c", "transaction_number": "T1"}),
    )
    .ok();
    s.post(&tok, "/withdraw", json!({"uuid": needs, "amount": 5, "channel": "c"})).ok();
    let before_tree = s.get(&tok, "/get_minimal_tree", "").ok().text.clone();
    s.restart();
    let after_tree = s.get(&tok, "/get_minimal_tree", "").ok().text.clone();
    // Same tree, same logs, same aggregates (timing keys differ).
    let strip = |t: &str| t.split(",\"start_time\"").next().unwrap_or("").to_string();
    assert_eq!(strip(&before_tree), strip(&after_tree));
    assert_eq!(s.balance(&tok, &rent), "50");
    // Transaction-number index survived too.
    s.post(&tok, "/deposit", json!({"uuid": main, "amount": 1, "channel": "c", "transaction_number": "T1"}))
        .fails(409, "Deposit failed: This deposit has already been made. Transaction ID:T1");
    // And the deleted user stays deleted.
    let r = s.raw(
        "DELETE",
        &format!("/delete?uuid={main}"),
        &[("Authorization", &format!("Bearer {tok}"))],
        Body::None,
    );
    r.ok();
    s.restart();
    s.get(&tok, "/get_balance", &format!("uuid={main}")).fails(404, "User not found or unauthorized access");
}

#[test]
fn generated_secret_persists_across_restarts() {
    if embedded_only("the secret file of the data directory") {
        return;
    }
    let mut s = Srv::start_with(|c| c.jwt_secret = None);
    let secret = std::fs::read_to_string(s.dir.path().join("jwt_secret")).unwrap();
    assert_eq!(secret.len(), 64);
    assert!(secret.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    let r = s.raw("POST", "/register", &[], Body::Json(json!({"user_id": "p1", "password": "secret123"})));
    r.ok();
    s.restart();
    assert_eq!(std::fs::read_to_string(s.dir.path().join("jwt_secret")).unwrap(), secret);
    let r = s.raw("POST", "/login", &[], Body::Json(json!({"user_id": "p1", "password": "secret123"})));
    let tok = r.ok().s("token");
    s.restart();
    s.get(&tok, "/get_balance", "uuid=accx").fails(403, "Account not found or unauthorized");
}

#[test]
fn concurrent_registrations_yield_one_success() {
    let s = Srv::start();
    let statuses: Vec<u16> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                sc.spawn(|| {
                    let tok = s.token("race", "user");
                    s.post(&tok, "/register", json!({"user_id": "race"})).status
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(statuses.iter().filter(|c| **c == 200).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|c| **c == 409).count(), 7, "{statuses:?}");
}

#[test]
fn concurrent_deposits_of_one_user_are_all_applied() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let a = s.child(&tok, &main, "A", json!({"allocation": 0.5}));
    s.child(&tok, &main, "B", json!({"allocation": 0.5}));
    std::thread::scope(|sc| {
        for _ in 0..4 {
            sc.spawn(|| {
                for _ in 0..10 {
                    s.deposit(&tok, &main, "1.01").ok();
                }
            });
        }
    });
    assert_eq!(
        s.get(&tok, "/compute_total_balance", &format!("uuid={main}")).ok().n("total_balance"),
        "40.4"
    );
    assert_eq!(s.txs(&tok, &main).len(), 80);
    assert_eq!(s.txs(&tok, &a).len(), 40);
}

#[test]
fn deleting_a_sub_account_removes_its_rows_from_storage() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    let rent = s.child(&tok, &needs, "Rent", json!({"allocation": 1}));
    for _ in 0..3 {
        s.deposit(&tok, &main, "10").ok();
    }
    let store = s.run.as_ref().unwrap().app.users.store.clone();
    // Multi-threaded: connections opened here (PostgreSQL) keep being driven between block_ons.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let no = rt.block_on(store.load_user("u1")).unwrap().unwrap().0.user_no;
    // Log rows still stored, whatever the account's current log length says.
    let rows = |uuid: &str| {
        let id = pfm::domain::tree::parse_uuid(uuid).unwrap();
        rt.block_on(store.read_log(no, id, 0, 1_000)).unwrap().len()
    };
    assert_eq!((rows(&needs), rows(&rent)), (6, 3));
    let r = s.raw(
        "DELETE",
        &format!("/delete?uuid={needs}"),
        &[("Authorization", &format!("Bearer {tok}"))],
        Body::None,
    );
    r.ok();
    assert_eq!((rows(&needs), rows(&rent)), (0, 0));
    let (_, tree) = rt.block_on(store.load_user("u1")).unwrap().unwrap();
    assert_eq!(tree.accounts.len(), 1);
    assert_eq!(s.balance(&tok, &main), "30");
}

#[test]
fn lock_wait_timeout_is_a_500_without_side_effects_and_the_server_keeps_serving() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let app = s.run.as_ref().unwrap().app.clone();
    app.users.set_lock_wait(std::time::Duration::from_millis(200));
    // Multi-threaded: connections opened here (PostgreSQL) keep being driven between block_ons.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let held = rt.block_on(app.users.lock("u1")).unwrap();
    s.deposit(&tok, &main, "10").fails(500, "Deposit failed: internal error");
    s.post(&tok, "/withdraw", json!({"uuid": main, "amount": 1, "channel": "c"}))
        .fails(500, "Failed: internal error");
    // Reads do not wait for writers.
    assert_eq!(s.balance(&tok, &main), "0");
    drop(held);
    // A row lock (PostgreSQL) goes with its connection a moment after the guard: the next write
    // may wait for it as long as any write would.
    app.users.set_lock_wait(pfm::store::users::LOCK_WAIT);
    s.deposit(&tok, &main, "10").ok();
    assert_eq!(s.balance(&tok, &main), "10");
    assert_eq!(s.txs(&tok, &main).len(), 1);
}

#[test]
fn a_failed_append_answers_500_changes_nothing_and_writes_resume() {
    if embedded_only("the journal's failure hook") {
        return;
    }
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    s.deposit(&tok, &main, "10").ok();
    let before = s.get(&tok, "/get_minimal_tree", "").ok().text.clone();
    let app = s.run.as_ref().unwrap().app.clone();
    app.journal.as_ref().expect("embedded engine").fail_next_append();
    drop(app);
    let r = s.deposit(&tok, &main, "5");
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json["success"], json!(false));
    // Reads go on, and nothing of the failed deposit is visible, in memory or in storage.
    let strip = |t: &str| t.split(",\"start_time\"").next().unwrap_or("").to_string();
    assert_eq!(strip(&s.get(&tok, "/get_minimal_tree", "").ok().text), strip(&before));
    assert_eq!(s.balance(&tok, &needs), "10");
    // The next write succeeds on the reloaded state, and everything survives a restart.
    s.deposit(&tok, &main, "7").ok();
    assert_eq!(s.balance(&tok, &needs), "17");
    let mut s = s;
    s.restart();
    assert_eq!(s.balance(&tok, &needs), "17");
    assert_eq!(s.txs(&tok, &main).len(), 4);
}

#[test]
fn a_registration_refused_by_a_failed_append_can_be_sent_again() {
    if embedded_only("the journal's failure hook") {
        return;
    }
    let s = Srv::start();
    let (tok, main) = s.user("again", "10");
    s.raw(
        "DELETE",
        &format!("/delete?uuid={main}"),
        &[("Authorization", &format!("Bearer {tok}"))],
        Body::None,
    )
    .ok();
    let app = s.run.as_ref().unwrap().app.clone();
    app.journal.as_ref().expect("embedded engine").fail_next_append();
    drop(app);
    let r = s.post(&tok, "/register", json!({"user_id": "again", "initial_balance": "20"}));
    assert_eq!(r.status, 500, "{}", r.text);
    // Nothing was registered, so the same registration runs again, and stays after a restart.
    let r = s.post(&tok, "/register", json!({"user_id": "again", "initial_balance": "30"}));
    r.ok();
    let main = r.s("uuid");
    assert_eq!(s.balance(&tok, &main), "30");
    let mut s = s;
    s.restart();
    assert_eq!(s.balance(&tok, &main), "30");
}

#[test]
fn one_users_concurrent_writes_all_land_in_order_of_acknowledgement() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    std::thread::scope(|sc| {
        for t in 0..8 {
            let (s, tok, main) = (&s, &tok, &main);
            sc.spawn(move || {
                for i in 0..25 {
                    let r = s.post(
                        tok,
                        "/deposit",
                        json!({"uuid": main, "amount": 1, "channel": "c", "transaction_number": format!("T{t}-{i}")}),
                    );
                    r.ok();
                }
            });
        }
    });
    let r = s.get(&tok, "/compute_total_balance", &format!("uuid={main}")).ok().n("total_balance");
    assert_eq!(r, "200");
    // Every id is in the main log once, and a resend is refused.
    assert_eq!(s.txs(&tok, &main).len(), 400);
    s.post(
        &tok,
        "/deposit",
        json!({"uuid": main, "amount": 1, "channel": "c", "transaction_number": "T3-7"}),
    )
    .fails(409, "Deposit failed: This deposit has already been made. Transaction ID:T3-7");
}

#[test]
fn generated_ids_on_main_are_duplicates_before_and_after_restart_and_others_are_not() {
    let mut s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    // Main gets a deposit and a split debit with generated ids, then a withdrawal without a
    // number; Needs gets a deposit of its own with a generated id (not in main's log).
    s.deposit(&tok, &main, "100").ok();
    s.deposit(&tok, &needs, "10").ok();
    s.post(&tok, "/withdraw", json!({"uuid": needs, "amount": 1, "channel": "c"})).ok();
    s.deposit(&tok, &main, "50").ok();
    let ids = |uuid: &str| -> Vec<String> {
        s.txs(&tok, uuid).iter().map(|t| t["TransactionID"].as_str().unwrap().to_string()).collect()
    };
    let on_main = ids(&main);
    assert_eq!(on_main.len(), 4);
    assert!(on_main.iter().all(|id| id.starts_with("SYS") && id.len() == 13), "{on_main:?}");
    let uniq: std::collections::HashSet<_> = on_main.iter().collect();
    assert_eq!(uniq.len(), 4, "{on_main:?}");
    let only_needs: Vec<String> = ids(&needs).into_iter().filter(|id| !on_main.contains(id)).collect();
    assert!(!only_needs.is_empty());
    let dep = |s: &Srv, id: &str| {
        s.post(&tok, "/deposit", json!({"uuid": main, "amount": 1, "channel": "c", "transaction_number": id}))
    };
    for round in 0..2 {
        for id in &on_main {
            dep(&s, id).fails(
                409,
                &format!("Deposit failed: This deposit has already been made. Transaction ID:{id}"),
            );
        }
        if round == 0 {
            s.restart();
        }
    }
    // An id of another account's log, or of the generated shape but unused, is new to main.
    dep(&s, &only_needs[0]).ok();
    dep(&s, "SYS0000000000").ok();
    dep(&s, "SYS0000000000")
        .fails(409, "Deposit failed: This deposit has already been made. Transaction ID:SYS0000000000");
    dep(&s, &only_needs[0]).fails(
        409,
        &format!("Deposit failed: This deposit has already been made. Transaction ID:{}", only_needs[0]),
    );
}

/// A failed sync (EIO from fdatasync) is not a full disk: the kernel may have dropped the
/// unsynced pages, so no later sync proves anything. The write is not acknowledged, every
/// later write answers 503 until a restart, reads go on, readiness fails; the restart keeps
/// every acknowledged write and nothing of the failed one, and takes writes again.
#[test]
fn a_failed_sync_stops_writes_until_a_restart_and_loses_nothing_acknowledged() {
    if embedded_only("the journal's failure hook") {
        return;
    }
    let mut s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    s.deposit(&tok, &main, "10").ok();
    let app = s.run.as_ref().unwrap().app.clone();
    app.journal.as_ref().expect("embedded engine").fail_next_sync();
    drop(app);
    let stopped =
        "Service unavailable: storage failed to sync to disk; writes are refused until the service restarts";
    let r = s.deposit(&tok, &main, "5");
    assert_eq!(r.status, 503, "{}", r.text);
    for _ in 0..2 {
        s.deposit(&tok, &main, "7").fails(503, stopped);
        s.post(&tok, "/withdraw", json!({"uuid": needs, "amount": 1, "channel": "c"})).fails(503, stopped);
    }
    assert_eq!(s.balance(&tok, &needs), "10");
    assert_eq!(s.txs(&tok, &main).len(), 2);
    let ready = s.raw("GET", "/readyz", &[], Body::None);
    assert_eq!(ready.status, 503, "{}", ready.text);
    s.restart();
    assert_eq!(s.balance(&tok, &needs), "10");
    assert_eq!(s.txs(&tok, &main).len(), 2);
    s.deposit(&tok, &main, "7").ok();
    assert_eq!(s.balance(&tok, &needs), "17");
    assert_eq!(s.raw("GET", "/readyz", &[], Body::None).status, 200);
}
