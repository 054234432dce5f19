//! Delta sync, GET /changes (docs/api.md, delta sync), over real HTTP: full listings, incremental answers
//! after deposits and deletes, deletion markers, paging, bad input, restarts and format 1 data.

mod common;

use std::path::Path;

use common::Srv;
use serde_json::{json, Value};

fn changes(s: &Srv, tok: &str, q: &str) -> Value {
    let r = s.get(tok, "/changes", q);
    r.ok();
    r.json
}

fn knowledge(s: &Srv, tok: &str) -> u64 {
    changes(s, tok, "since=0&limit=1")["server_knowledge"].as_u64().unwrap()
}

/// Every page of one sync, followed to the null cursor: (server_knowledge, accounts, txs, pages).
fn all_pages(s: &Srv, tok: &str, since: u64, limit: u64) -> (u64, Vec<Value>, Vec<Value>, usize) {
    let (mut accs, mut txs, mut pages) = (Vec::new(), Vec::new(), 0);
    let mut cursor: Option<String> = None;
    let mut k = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("since={since}&limit={limit}&cursor={c}"),
            None => format!("since={since}&limit={limit}"),
        };
        let j = changes(s, tok, &q);
        pages += 1;
        let a = j["accounts"].as_array().unwrap();
        let t = j["transactions"].as_array().unwrap();
        assert!(a.len() + t.len() <= limit as usize, "{j}");
        accs.extend(a.iter().cloned());
        txs.extend(t.iter().cloned());
        let pk = j["server_knowledge"].as_u64().unwrap();
        assert_eq!(*k.get_or_insert(pk), pk, "pages of one sync share their knowledge");
        match j["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return (pk, accs, txs, pages),
        }
    }
}

fn uuids(v: &[Value]) -> Vec<String> {
    let mut u: Vec<String> = v.iter().map(|a| a["uuid"].as_str().unwrap().to_string()).collect();
    u.sort();
    u.dedup();
    u
}

#[test]
fn since_zero_lists_every_account_and_every_transaction() {
    let s = Srv::start();
    let (tok, main) = s.user("ds_full", "100");
    let food = s.child(&tok, &main, "Food", json!({"allocation": 0.5}));
    s.deposit(&tok, &main, "10").ok();
    let j = changes(&s, &tok, "since=0");
    // Registration, the new child, the deposit: three data writes.
    assert_eq!(j["server_knowledge"], 3);
    assert_eq!(j["full_listing"], true);
    assert_eq!(j["next_cursor"], Value::Null);
    let accs = j["accounts"].as_array().unwrap();
    let mut want = vec![main.clone(), food.clone()];
    want.sort();
    assert_eq!(uuids(accs), want);
    // Each account in the shape of /find_account_by_uuid.
    for a in accs {
        let u = a["uuid"].as_str().unwrap();
        let mut one = s.get(&tok, "/find_account_by_uuid", &format!("uuid={u}")).ok().json.clone();
        for k in ["success", "status", "start_time", "end_time", "execution_time"] {
            one.as_object_mut().unwrap().remove(k);
        }
        assert_eq!(a, &one);
    }
    // Every record of every log, in the /get_transactions shape plus account and knowledge.
    let txs = j["transactions"].as_array().unwrap();
    let mut expected = 0;
    for u in [&main, &food] {
        let log = s.txs(&tok, u);
        let mine: Vec<&Value> = txs.iter().filter(|t| t["account_uuid"] == json!(u)).collect();
        assert_eq!(mine.len(), log.len());
        for (t, l) in mine.iter().zip(&log) {
            let mut t = (*t).clone();
            assert_eq!(t["knowledge"], Value::Null, "full listings do not know the write");
            t.as_object_mut().unwrap().retain(|k, _| k != "account_uuid" && k != "knowledge");
            assert_eq!(&t, l);
        }
        expected += log.len();
    }
    assert_eq!(txs.len(), expected);
    assert!(expected >= 3);
    // The same without `since`.
    assert_eq!(changes(&s, &tok, "")["transactions"], j["transactions"]);
}

#[test]
fn since_n_lists_only_later_changes_with_deletion_markers() {
    let s = Srv::start();
    let (tok, main) = s.user("ds_incr", "0");
    let food = s.child(&tok, &main, "Food", json!({"allocation": 1}));
    let k = knowledge(&s, &tok);
    assert_eq!(changes(&s, &tok, &format!("since={k}"))["transactions"], json!([]));
    assert_eq!(changes(&s, &tok, &format!("since={k}"))["accounts"], json!([]));
    s.deposit(&tok, &food, "7").ok();
    let j = changes(&s, &tok, &format!("since={k}"));
    assert_eq!(j["server_knowledge"], k + 1);
    assert_eq!(j["full_listing"], false);
    let txs = j["transactions"].as_array().unwrap();
    assert_eq!(txs.len(), 1, "{j}");
    assert_eq!(txs[0]["account_uuid"], json!(food));
    assert_eq!(txs[0]["knowledge"], k + 1);
    assert_eq!(txs[0]["Amount"], json!(7));
    // The child and, through its totals, the main account changed.
    let accs = j["accounts"].as_array().unwrap();
    let food_now = accs.iter().find(|a| a["uuid"] == json!(food)).unwrap();
    assert_eq!(food_now["balance"], json!(7));
    assert!(accs.iter().any(|a| a["uuid"] == json!(main) && a["total_balance"] == json!(7)));
    // Delete the child: a deletion marker, and the main account's credit of the returned money.
    s.raw(
        "DELETE",
        &format!("/delete?uuid={food}"),
        &[("Authorization", &format!("Bearer {tok}"))],
        common::Body::None,
    )
    .ok();
    let j = changes(&s, &tok, &format!("since={}", k + 1));
    assert_eq!(j["server_knowledge"], k + 2);
    let accs = j["accounts"].as_array().unwrap();
    assert!(accs.contains(&json!({"uuid": food, "deleted": true})), "{j}");
    assert!(accs.iter().any(|a| a["uuid"] == json!(main) && a["balance"] == json!(7)));
    let txs = j["transactions"].as_array().unwrap();
    assert_eq!(txs.len(), 1);
    assert_eq!(txs[0]["account_uuid"], json!(main));
    assert_eq!(txs[0]["Channel"], json!("Returned from deleted account Food"));
    // Seen from before the deposit: the child is deleted now and its records are gone.
    let j = changes(&s, &tok, &format!("since={k}"));
    assert!(j["accounts"].as_array().unwrap().contains(&json!({"uuid": food, "deleted": true})));
    assert!(j["transactions"].as_array().unwrap().iter().all(|t| t["account_uuid"] == json!(main)));
    // A refused write changes nothing and raises nothing.
    s.deposit(&tok, &food, "1").fails(403, "Account not found or unauthorized");
    assert_eq!(knowledge(&s, &tok), k + 2);
}

#[test]
fn pages_follow_to_a_null_cursor_and_later_writes_wait_for_the_next_sync() {
    let s = Srv::start();
    let (tok, main) = s.user("ds_pages", "0");
    let a = s.child(&tok, &main, "A", json!({"allocation": 0.5}));
    s.child(&tok, &main, "B", json!({"allocation": 0.5}));
    for i in 1..=12 {
        s.deposit(&tok, &main, &format!("{i}")).ok();
    }
    s.deposit(&tok, &a, "3").ok();
    for since in [0, 1, 4] {
        let whole = changes(&s, &tok, &format!("since={since}&limit=1000"));
        assert_eq!(whole["next_cursor"], Value::Null);
        for limit in [1, 5, 7] {
            let (k, accs, txs, pages) = all_pages(&s, &tok, since, limit);
            assert_eq!(k, whole["server_knowledge"].as_u64().unwrap());
            assert!(pages > 1);
            assert_eq!(&Value::Array(txs), &whole["transactions"], "since={since} limit={limit}");
            assert_eq!(uuids(&accs), uuids(whole["accounts"].as_array().unwrap()));
        }
    }
    // A write between two pages is not in this sync (no record twice), but in the next one.
    for (since, amount) in [(0, 100), (3, 200)] {
        let before = knowledge(&s, &tok);
        let first = changes(&s, &tok, &format!("since={since}&limit=2"));
        s.deposit(&tok, &main, &amount.to_string()).ok();
        let mut txs: Vec<Value> = first["transactions"].as_array().unwrap().clone();
        let mut cursor = first["next_cursor"].as_str().unwrap().to_string();
        loop {
            let j = changes(&s, &tok, &format!("since={since}&limit=2&cursor={cursor}"));
            assert_eq!(j["server_knowledge"], before);
            txs.extend(j["transactions"].as_array().unwrap().iter().cloned());
            match j["next_cursor"].as_str() {
                Some(c) => cursor = c.to_string(),
                None => break,
            }
        }
        assert!(txs.iter().all(|t| t["Amount"] != json!(amount)), "since={since}");
        let next = changes(&s, &tok, &format!("since={before}"));
        assert_eq!(next["server_knowledge"], before + 1);
        assert!(next["transactions"].as_array().unwrap().iter().any(|t| t["Amount"] == json!(amount)));
        // The new records are exactly those the earlier sync left out.
        let whole = changes(&s, &tok, &format!("since={since}"));
        assert_eq!(
            whole["transactions"].as_array().unwrap().len(),
            txs.len() + next["transactions"].as_array().unwrap().len()
        );
    }
}

#[test]
fn bad_since_limit_and_cursor_are_400s_in_the_envelope() {
    let s = Srv::start();
    let (tok, main) = s.user("ds_bad", "5");
    s.deposit(&tok, &main, "1").ok();
    let since_msg = "since must be a whole number between 0 and server_knowledge";
    for q in ["since=-1", "since=abc", "since=1.5"] {
        s.get(&tok, "/changes", q).fails(400, since_msg);
    }
    s.get(&tok, "/changes", "since=3").fails(400, &format!("{since_msg} (2)"));
    for q in ["limit=0", "limit=1001", "limit=x"] {
        s.get(&tok, "/changes", q).fails(400, "limit must be an integer between 1 and 1000");
    }
    s.get(&tok, "/changes", "cursor=zzz").fails(400, "Invalid cursor");
    let c0 = changes(&s, &tok, "since=0&limit=1")["next_cursor"].as_str().unwrap().to_string();
    // A cursor of another `since`, or of another user, is refused.
    s.get(&tok, "/changes", &format!("since=1&cursor={c0}")).fails(400, "Invalid cursor");
    // A forged cursor (row 0 of an incremental sync) is refused, not a crash.
    let forged = format!("c{:016x}{:016x}{}{:032x}{:016x}", 1, 2, &c0[33..41], 0, 0);
    s.get(&tok, "/changes", &format!("since=1&cursor={forged}")).fails(400, "Invalid cursor");
    let (tok2, _) = s.user("ds_bad2", "5");
    s.get(&tok2, "/changes", &format!("since=0&cursor={c0}")).fails(400, "Invalid cursor");
    // Without a tree, the usual 404; without a token, the filter's 401.
    let none = s.token("ds_nobody", "user");
    s.get(&none, "/changes", "since=0").fails(404, "User not found or unauthorized access");
    assert_eq!(s.raw("GET", "/changes", &[], common::Body::None).status, 401);
}

#[test]
fn knowledge_and_change_rows_survive_a_restart() {
    let mut s = Srv::start();
    let (tok, main) = s.user("ds_restart", "0");
    s.deposit(&tok, &main, "4").ok();
    let before = changes(&s, &tok, "since=1");
    s.restart();
    assert_eq!(changes(&s, &tok, "since=1")["transactions"], before["transactions"]);
    assert_eq!(knowledge(&s, &tok), 2);
    s.deposit(&tok, &main, "5").ok();
    assert_eq!(knowledge(&s, &tok), 3);
    let j = changes(&s, &tok, "since=2");
    assert_eq!(j["transactions"][0]["knowledge"], 3);
}

#[test]
fn users_of_storage_format_1_get_a_full_answer() {
    if common::embedded_only("a format-1 data directory") {
        return;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1");
    let s = Srv::start_with(|c| common::copy_dir(&fixture.join("data"), &c.data_dir));
    let tok = s.token("alice", "user");
    let j = changes(&s, &tok, "since=0");
    // No change rows for history written before delta sync: knowledge 0, a full listing.
    assert_eq!(j["server_knowledge"], 0);
    let main = s.get(&tok, "/find_account_by_name", "name=Main").ok().json["matches"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let all = s.get(&tok, "/list_all_accounts", &format!("uuid={main}")).ok().n("total_accounts");
    assert_eq!(j["accounts"].as_array().unwrap().len().to_string(), all);
    let (_, _, paged, _) = all_pages(&s, &tok, 0, 3);
    assert_eq!(&Value::Array(paged), &j["transactions"]);
    let total: usize = j["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| s.txs(&tok, a["uuid"].as_str().unwrap()).len())
        .sum();
    assert_eq!(j["transactions"].as_array().unwrap().len(), total);
    assert!(total > 0);
    s.get(&tok, "/changes", "since=1")
        .fails(400, "since must be a whole number between 0 and server_knowledge (0)");
    // The first write after the upgrade is knowledge 1, listed incrementally from 0... as a
    // full listing still (since=0 always is), and alone from 1 on.
    s.deposit(&tok, &main, "1").ok();
    assert_eq!(knowledge(&s, &tok), 1);
    assert_eq!(changes(&s, &tok, "since=1")["transactions"], json!([]));
}
