//! `pfm migrate`: a data directory moved into PostgreSQL and back answers exactly as before,
//! every user, tree and log. Needs `PFM_TEST_DATABASE_URL` (`.ci/postgres.sh`); without it the
//! test prints a note and returns.

mod common;

use std::path::Path;
use std::process::Command;

use common::{fresh_database, Srv};
use serde_json::{json, Value};

/// A server on the embedded engine in `dir`, or on the database `db`.
fn server(dir: &Path, db: Option<&str>) -> Srv {
    Srv::start_with(|c| {
        c.data_dir = dir.to_path_buf();
        c.database_url = db.map(str::to_string);
    })
}

fn strip(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        for k in ["start_time", "end_time", "execution_time"] {
            o.remove(k);
        }
    }
    v
}

/// One user as the API shows it: accounts with aggregates, every log, day-range figures.
fn user_view(s: &Srv, user: &str, uuids: &[String]) -> Vec<Value> {
    let tok = s.token(user, "user");
    let main = &uuids[0];
    let mut out = vec![strip(s.get(&tok, "/get_minimal_tree", &format!("uuid={main}")).ok().json.clone())];
    for u in uuids {
        for (path, q) in [
            ("/get_transactions", format!("uuid={u}")),
            ("/find_account_by_uuid", format!("uuid={u}")),
            ("/compute_total_balance", format!("uuid={u}")),
            ("/compute_total_due", format!("uuid={u}")),
            ("/total_income", format!("uuid={u}&from=2025-01-01&to=2025-12-31")),
            ("/spending", format!("uuid={u}&from=2025-01-01&to=2025-12-31")),
        ] {
            out.push(strip(s.get(&tok, path, &q).ok().json.clone()));
        }
    }
    out
}

fn migrate(from: &str, to: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pfm"))
        .args(["migrate", "--from", from, "--to", to])
        .env_remove("DATABASE_URL")
        .output()
        .expect("run pfm migrate")
}

#[test]
fn a_data_directory_moves_to_postgresql_and_back_unchanged() {
    let Some(db) = fresh_database() else {
        eprintln!("skipped: PFM_TEST_DATABASE_URL is not set (.ci/postgres.sh sets it)");
        return;
    };
    let root = tempfile::tempdir().expect("tempdir");
    let (dir, back) = (root.path().join("a"), root.path().join("b"));
    // A few users with sub-accounts, bills (tracker rows), back-dated records (day rows),
    // withdrawals, transfers and a deleted account.
    let mut users: Vec<(String, Vec<String>)> = Vec::new();
    {
        let s = server(&dir, None);
        for n in 0..3 {
            let user = format!("m{n}");
            s.set_time("2025-07-10T08:00:00Z");
            let (tok, main) = s.user(&user, "500");
            let needs = s.child(&tok, &main, "Needs", json!({"allocation": 0.5, "priority": 2}));
            let fun = s.child(&tok, &main, "Fun", json!({"allocation": 0.5}));
            let rent = s.child(
                &tok,
                &needs,
                "Rent",
                json!({"allocation": 1, "fixed_amount": 400, "account_type": "Bill", "due_date": "2025-08-01", "freq": 30}),
            );
            let gone = s.child(&tok, &main, "Gone", json!({"allocation": 0}));
            for (i, day) in ["2025-07-11", "2025-07-20", "2025-08-03"].iter().enumerate() {
                s.set_time(&format!("{day}T10:00:00Z"));
                s.post(
                    &tok,
                    "/deposit",
                    json!({"uuid": main, "amount": 300 + 100 * n + i, "channel": "ABSA", "transaction_number": format!("T{i}")}),
                )
                .ok();
            }
            s.post(
                &tok,
                "/deposit",
                json!({"uuid": fun, "amount": 5, "channel": "c", "transaction_date": "2025-03-01"}),
            )
            .ok();
            s.post(&tok, "/withdraw", json!({"uuid": fun, "amount": 12.5, "channel": "card"})).ok();
            s.post(&tok, "/move_balance", json!({"from_uuid": fun, "to_uuid": needs, "amount": 1})).ok();
            let r = s.raw(
                "DELETE",
                &format!("/delete?uuid={gone}"),
                &[("Authorization", &format!("Bearer {tok}"))],
                common::Body::None,
            );
            r.ok();
            users.push((user, vec![main, needs, fun, rent]));
        }
        // A password user (the record's hash moves too).
        s.raw(
            "POST",
            "/register",
            &[],
            common::Body::Json(json!({"user_id": "pw", "password": "secret123"})),
        )
        .ok();
    }
    let before: Vec<Vec<Value>> = {
        let s = server(&dir, None);
        users.iter().map(|(u, ids)| user_view(&s, u, ids)).collect()
    };
    let out = migrate(dir.to_str().expect("path"), &db);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Into a target that already holds users: refused.
    let again = migrate(dir.to_str().expect("path"), &db);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds users"));
    let fresh_main = {
        let s = server(&root.path().join("unused"), Some(&db));
        let on_pg: Vec<Vec<Value>> = users.iter().map(|(u, ids)| user_view(&s, u, ids)).collect();
        assert_eq!(on_pg, before);
        let r = s.raw(
            "POST",
            "/login",
            &[],
            common::Body::Json(json!({"user_id": "pw", "password": "secret123"})),
        );
        r.ok();
        // New users get numbers of their own: existing trees are untouched.
        let (tok, main) = s.user("fresh", "7");
        assert_eq!(s.balance(&tok, &main), "7");
        assert_eq!(user_view(&s, &users[0].0, &users[0].1), before[0]);
        main
    };
    let out = migrate(&db, back.to_str().expect("path"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = server(&back, None);
    let after: Vec<Vec<Value>> = users.iter().map(|(u, ids)| user_view(&s, u, ids)).collect();
    assert_eq!(after, before);
    // The user registered on PostgreSQL came back too; new users still get numbers of their own.
    assert_eq!(s.balance(&s.token("fresh", "user"), &fresh_main), "7");
    let (tok, main) = s.user("newer", "3");
    assert_eq!(s.balance(&tok, &main), "3");
    assert_eq!(user_view(&s, &users[2].0, &users[2].1), before[2]);
    assert_eq!(s.balance(&s.token("fresh", "user"), &fresh_main), "7");
}
