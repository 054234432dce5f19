//! Personal access tokens on several nodes sharing one PostgreSQL database (docs/tokens.md): a
//! token created on one node works on another, and revoked on the first it is refused by the
//! other within a second. Real pfm processes on a fresh database of the server named by
//! `PFM_TEST_DATABASE_URL` (`.ci/postgres.sh` starts one; without it the test prints a note and
//! returns).

mod common;

use std::time::{Duration, Instant};

use common::proc::{self, Proc as Node};
use serde_json::json;

fn node(db: &str) -> Node {
    proc::spawn(&std::env::temp_dir(), &["--database-url", db], &[])
}

#[test]
fn a_token_revoked_on_one_node_is_refused_by_the_other_within_a_second() {
    let Some(db) = common::pg_database("token_nodes") else { return };
    let a = node(&db);
    let b = node(&db);
    let creds = json!({"user_id": "pat", "password": "secret123", "initial_balance": 7});
    assert_eq!(proc::request(a.addr, "POST", "/register", None, creds).0, 200);
    let jwt = proc::login(a.addr, "pat", "secret123");
    let (st, v) =
        proc::request(a.addr, "POST", "/create_token", Some(&jwt), json!({"name": "n", "scope": "write"}));
    assert_eq!(st, 200, "{v}");
    let tok = v["token"].as_str().unwrap().to_string();
    // Node B never saw the token created: it reads it from the database.
    let (st, v) = proc::request(b.addr, "GET", "/tokens", Some(&tok), serde_json::Value::Null);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tokens"][0]["name"], "n");
    let (st, v) =
        proc::request(b.addr, "GET", "/find_account_by_name?name=Main", Some(&tok), serde_json::Value::Null);
    assert_eq!(st, 200, "{v}");
    let (st, v) = proc::request(a.addr, "POST", "/revoke_token", Some(&jwt), json!({"id": 1}));
    assert_eq!(st, 200, "{v}");
    let revoked = Instant::now();
    loop {
        let (st, _) = proc::request(b.addr, "GET", "/tokens", Some(&tok), serde_json::Value::Null);
        if st == 401 {
            break;
        }
        assert_eq!(st, 200);
        assert!(revoked.elapsed() < Duration::from_secs(1), "node B still takes the token after 1 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // And stays refused, on both nodes (past the failed-auth wait of the first refusal).
    std::thread::sleep(Duration::from_millis(1100));
    for n in [&a, &b] {
        let (st, _) = proc::request(n.addr, "GET", "/tokens", Some(&tok), serde_json::Value::Null);
        assert_eq!(st, 401);
    }
}
