//! Several stateless nodes on one PostgreSQL database: real pfm processes sharing a fresh
//! database of the server named by `PFM_TEST_DATABASE_URL` (`.ci/postgres.sh` starts one; without
//! it these tests print a note and return).

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::proc::{self, Proc as Node};
use serde_json::{json, Value};

/// Starts the real binary on `db` with no token secret of its own: the nodes share the one the
/// first node generated in the database.
fn node(db: &str) -> Node {
    proc::spawn(&std::env::temp_dir(), &["--database-url", db], &[])
}

/// One request; `None` when the node is gone (connection refused or reset).
fn try_req(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Value,
) -> Option<(u16, Value)> {
    let b = if body.is_null() { String::new() } else { body.to_string() };
    proc::send(addr, method, path, token, &[], &b).ok().map(|r| (r.status, r.json))
}

fn req(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    try_req(addr, method, path, token, body).expect("node answers")
}

#[track_caller]
fn ok(r: (u16, Value)) -> Value {
    assert_eq!(r.0, 200, "{}", r.1);
    r.1
}

/// Registers `user` (password mode) on one node and logs in on the other: a token from either
/// node works on both. Returns (token, main uuid).
fn user(reg: &Node, login: &Node, user: &str, initial: u64) -> (String, String) {
    let r = ok(req(
        reg.addr,
        "POST",
        "/register",
        None,
        json!({"user_id": user, "password": "secret123", "initial_balance": initial}),
    ));
    let main = r["uuid"].as_str().expect("uuid").to_string();
    (proc::login(login.addr, user, "secret123"), main)
}

fn get(n: &Node, tok: &str, path: &str) -> Value {
    ok(req(n.addr, "GET", path, Some(tok), Value::Null))
}

fn total(n: &Node, tok: &str, main: &str) -> String {
    get(n, tok, &format!("/compute_total_balance?uuid={main}"))["total_balance"].to_string()
}

fn deposit(n: &Node, tok: &str, main: &str, amount: u64, txn: &str) -> Option<(u16, Value)> {
    try_req(
        n.addr,
        "POST",
        "/deposit",
        Some(tok),
        json!({"uuid": main, "amount": amount, "channel": "c", "transaction_number": txn}),
    )
}

/// `f` on each node, both at once (one thread each); the results in node order.
fn on_both<T: Send>(a: &Node, b: &Node, f: impl Fn(&Node) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = [a, b].map(|n| s.spawn(|| f(n))).into_iter().collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    })
}

/// Drops the timing fields of an answer.
fn strip(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        for k in ["start_time", "end_time", "execution_time"] {
            o.remove(k);
        }
    }
    v
}

/// Everything a user's tree shows: the whole tree with its aggregates, and the logs of `uuids`.
fn whole_tree(n: &Node, tok: &str, main: &str, uuids: &[&str]) -> Vec<Value> {
    let mut out = vec![strip(get(n, tok, &format!("/get_minimal_tree?uuid={main}")))];
    for u in uuids {
        out.push(strip(get(n, tok, &format!("/get_transactions?uuid={u}"))));
    }
    out
}

/// The ids in a main account's log.
fn main_ids(n: &Node, tok: &str, main: &str) -> Vec<String> {
    let v = get(n, tok, &format!("/get_transactions?uuid={main}"));
    v["transactions"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["TransactionID"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

#[test]
fn writes_on_one_node_are_read_on_the_other_at_once() {
    let Some(db) = common::pg_database("writes_on_one_node_are_read_on_the_other_at_once") else { return };
    let (a, b) = (node(&db), node(&db));
    let (tok, main) = user(&a, &b, "alice", 100);
    let needs = ok(req(
        b.addr,
        "POST",
        "/add_sub_account",
        Some(&tok),
        json!({"parent_uuid": main, "name": "Needs", "allocation": 0.6}),
    ))["uuid"]
        .as_str()
        .expect("uuid")
        .to_string();
    let fun = ok(req(
        a.addr,
        "POST",
        "/add_sub_account",
        Some(&tok),
        json!({"parent_uuid": main, "name": "Fun", "allocation": 0.4}),
    ))["uuid"]
        .as_str()
        .expect("uuid")
        .to_string();
    let nodes = [&a, &b];
    for i in 0..30u64 {
        // Write on one node, read on the other: the very next read sees the write.
        let (w, r) = (nodes[(i % 2) as usize], nodes[((i + 1) % 2) as usize]);
        ok(deposit(w, &tok, &main, 10, &format!("D{i}")).expect("node answers"));
        // Withdrawals of 1 from Needs happened after deposits 4, 9, 14...
        let withdrawn = i / 5;
        assert_eq!(total(r, &tok, &main), (100 + 10 * (i + 1) - withdrawn).to_string());
        let needs_balance = get(r, &tok, &format!("/get_balance?uuid={needs}"))["balance"].to_string();
        assert_eq!(needs_balance, (6 * (i + 1) - withdrawn).to_string());
        if i % 5 == 4 {
            ok(req(
                r.addr,
                "POST",
                "/withdraw",
                Some(&tok),
                json!({"uuid": needs, "amount": 1, "channel": "c"}),
            ));
            assert!(get(w, &tok, &format!("/get_transactions?uuid={needs}"))["transactions"]
                .as_array()
                .is_some_and(|t| t.len() as u64 == i + 2 + i / 5));
        }
    }
    let all = [main.as_str(), needs.as_str(), fun.as_str()];
    assert_eq!(whole_tree(&a, &tok, &main, &all), whole_tree(&b, &tok, &main, &all));
    // Deleting on one node: the other answers 404 for the user's tree at once.
    let r = req(b.addr, "DELETE", &format!("/delete?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!(r.0, 200, "{}", r.1);
    assert_eq!(req(a.addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null).0, 404);
}

#[test]
fn one_transaction_number_sent_to_both_nodes_at_once_succeeds_once() {
    let Some(db) = common::pg_database("one_transaction_number_sent_to_both_nodes_at_once_succeeds_once")
    else {
        return;
    };
    let (a, b) = (node(&db), node(&db));
    let (tok, main) = user(&a, &b, "bob", 0);
    for k in 0..20 {
        let txn = format!("X{k}");
        let statuses = on_both(&a, &b, |n| deposit(n, &tok, &main, 5, &txn).expect("node answers").0);
        let mut sorted = statuses.clone();
        sorted.sort();
        assert_eq!(sorted, vec![200, 409], "{txn}");
    }
    assert_eq!(total(&a, &tok, &main), "100");
    assert_eq!(main_ids(&b, &tok, &main).len(), 20);
    // Registering one id on both nodes at once: exactly one succeeds.
    for k in 0..10 {
        let id = format!("twin{k}");
        let mut st = on_both(&a, &b, |n| {
            req(n.addr, "POST", "/register", None, json!({"user_id": id, "password": "secret123"})).0
        });
        st.sort();
        assert_eq!(st, vec![200, 409], "{id}");
    }
}

#[test]
fn kill_9_of_one_node_mid_load_loses_no_acknowledged_write() {
    let Some(db) = common::pg_database("kill_9_of_one_node_mid_load_loses_no_acknowledged_write") else {
        return;
    };
    let a = node(&db);
    let b = node(&db);
    let users: Vec<(String, String)> = (0..4).map(|i| user(&a, &b, &format!("load{i}"), 1000)).collect();
    let subs: Vec<String> = users
        .iter()
        .map(|(tok, main)| {
            let r = ok(req(
                a.addr,
                "POST",
                "/add_sub_account",
                Some(tok),
                json!({"parent_uuid": main, "name": "S", "allocation": 1}),
            ));
            r["uuid"].as_str().expect("uuid").to_string()
        })
        .collect();
    let killed = AtomicBool::new(false);
    let a_addr = a.addr;
    let mut a = Some(a);
    // Each writer deposits to its user through both nodes in turn (after the kill, through b
    // only), and withdraws now and then; it records what was acknowledged and what was unknown.
    let results: Vec<(BTreeSet<String>, BTreeSet<String>, i64)> = std::thread::scope(|s| {
        let hs: Vec<_> = users
            .iter()
            .enumerate()
            .map(|(w, (tok, main))| {
                let (killed, b) = (&killed, &b);
                s.spawn(move || {
                    let (mut acked, mut unknown, mut withdrawn) = (BTreeSet::new(), BTreeSet::new(), 0i64);
                    let deadline = Instant::now() + Duration::from_secs(4);
                    let mut i = 0;
                    while Instant::now() < deadline {
                        let id = format!("W{w}-{i}");
                        let via_a = i % 2 == 0 && !killed.load(Ordering::SeqCst);
                        let addr = if via_a { a_addr } else { b.addr };
                        let r = try_req(
                            addr,
                            "POST",
                            "/deposit",
                            Some(tok),
                            json!({"uuid": main, "amount": 2, "channel": "c", "transaction_number": id}),
                        );
                        match r {
                            Some((200, _)) => {
                                acked.insert(id);
                            }
                            Some((st, v)) if via_a => {
                                // Node a dying mid-request: the outcome is unknown.
                                unknown.insert(id);
                                assert!(st >= 500, "{st} {v}");
                            }
                            None if via_a => {
                                unknown.insert(id);
                            }
                            other => panic!("node b failed a deposit: {other:?}"),
                        }
                        if i % 7 == 3 {
                            let r = req(
                                b.addr,
                                "POST",
                                "/withdraw",
                                Some(tok),
                                json!({"uuid": main, "amount": 1, "channel": "c"}),
                            );
                            assert_eq!(r.0, 200, "node b failed a withdrawal: {}", r.1);
                            withdrawn += 1;
                        }
                        i += 1;
                    }
                    (acked, unknown, withdrawn)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1500));
        killed.store(true, Ordering::SeqCst);
        if let Some(mut n) = a.take() {
            n.kill(); // SIGKILL
        }
        hs.into_iter().map(|h| h.join().expect("writer")).collect()
    });
    let c = node(&db);
    for (((tok, main), (acked, unknown, withdrawn)), sub) in users.iter().zip(&results).zip(&subs) {
        assert!(acked.len() > 10, "too little load: {}", acked.len());
        let ids: BTreeSet<String> =
            main_ids(&b, tok, main).into_iter().filter(|i| i.starts_with('W')).collect();
        // Every acknowledged deposit is there; nothing else but deposits of unknown outcome.
        assert!(acked.is_subset(&ids), "lost: {:?}", acked.difference(&ids).collect::<Vec<_>>());
        assert!(ids.difference(acked).all(|i| unknown.contains(i)));
        // Money is conserved: 1000 initial + 2 per deposit in the log - the withdrawals.
        let expected = 1000 + 2 * ids.len() as i64 - withdrawn;
        assert_eq!(total(&b, tok, main), expected.to_string());
        assert_eq!(total(&c, tok, main), expected.to_string());
        let all = [main.as_str(), sub.as_str()];
        assert_eq!(whole_tree(&b, tok, main, &all), whole_tree(&c, tok, main, &all));
    }
}

/// More users writing through both nodes than a node has pooled connections (16): a write that
/// finds its cached user stale reloads it under the row lock, on the lock's own connection.
/// Its meta (idempotency keys, sync knowledge) used to take a second connection, so with every
/// connection held by such writes the node stalled 10 s per request and answered 503.
#[test]
fn more_users_than_pooled_connections_alternating_nodes_all_go_through() {
    let Some(db) = common::pg_database("more_users_than_pooled_connections_alternating_nodes_all_go_through")
    else {
        return;
    };
    let (a, b) = (node(&db), node(&db));
    let users: Vec<(String, String)> = (0..24).map(|u| user(&a, &b, &format!("pool{u}"), 0)).collect();
    let started = Instant::now();
    let failures: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = users
            .iter()
            .enumerate()
            .map(|(u, (tok, main))| {
                let nodes = [&a, &b];
                s.spawn(move || {
                    let mut bad = Vec::new();
                    for i in 0..12 {
                        // Every request on the other node than the one before: each finds its
                        // cached user stale.
                        match deposit(nodes[(u + i) % 2], tok, main, 1, &format!("P{u}-{i}")) {
                            Some((200, _)) => {}
                            other => bad.push(format!("user {u} deposit {i}: {other:?}")),
                        }
                    }
                    bad
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().expect("thread")).collect()
    });
    assert!(failures.is_empty(), "{} failed, e.g. {:?}", failures.len(), &failures[..failures.len().min(3)]);
    for (tok, main) in &users {
        assert_eq!(total(&b, tok, main), "12");
    }
    eprintln!("24 users x 12 alternating deposits in {:?}", started.elapsed());
}

/// One `Idempotency-Key` sent to both nodes at once: one runs, the other waits for the user's row
/// lock and then answers with what the first kept (a replay), never a second deposit.
#[test]
fn one_idempotency_key_sent_to_both_nodes_at_once_writes_once() {
    let Some(db) = common::pg_database("one_idempotency_key_sent_to_both_nodes_at_once_writes_once") else {
        return;
    };
    let (a, b) = (node(&db), node(&db));
    let (tok, main) = user(&a, &b, "carol", 0);
    let body = json!({"uuid": main, "amount": 7, "channel": "c"}).to_string();
    for k in 0..15 {
        let key = format!("key-{k}");
        let answers = on_both(&a, &b, |n| {
            let r = proc::send(n.addr, "POST", "/deposit", Some(&tok), &[("Idempotency-Key", &key)], &body)
                .expect("node answers");
            let replayed = r
                .headers
                .iter()
                .find(|(h, _)| h.eq_ignore_ascii_case("idempotent-replayed"))
                .map(|(_, v)| v.clone());
            (r.status, replayed, r.text)
        });
        // Both 200 with the same body (one a replay), or one 200 and one 409 (still running).
        let ok_ones: Vec<_> = answers.iter().filter(|a| a.0 == 200).collect();
        match ok_ones.len() {
            2 => {
                assert_eq!(ok_ones[0].2, ok_ones[1].2, "{key}: a replay is the first answer byte for byte");
                assert_eq!(
                    answers.iter().filter(|a| a.1.as_deref() == Some("true")).count(),
                    1,
                    "{key}: {answers:?}"
                );
            }
            1 => assert!(answers.iter().any(|a| a.0 == 409), "{key}: {answers:?}"),
            _ => panic!("{key}: {answers:?}"),
        }
        assert_eq!(total(&a, &tok, &main), (7 * (k + 1)).to_string(), "{key}: written once");
    }
}

/// A TCP relay to the database that can stop passing bytes (a hung server or a network black
/// hole: connections stay open, nothing answers).
struct Relay {
    addr: SocketAddr,
    frozen: std::sync::Arc<AtomicBool>,
}

impl Relay {
    fn start(upstream: SocketAddr) -> Relay {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let frozen = std::sync::Arc::new(AtomicBool::new(false));
        let f = frozen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = std::net::TcpStream::connect(upstream) else { continue };
                for (mut from, mut to) in [
                    (client.try_clone().expect("clone"), server.try_clone().expect("clone")),
                    (server, client),
                ] {
                    let f = f.clone();
                    std::thread::spawn(move || {
                        let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
                        let mut buf = [0u8; 16384];
                        loop {
                            if f.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(10));
                                continue;
                            }
                            match from.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    // Bytes read as the relay froze wait for it to thaw, like
                                    // everything after them.
                                    while f.load(Ordering::SeqCst) {
                                        std::thread::sleep(Duration::from_millis(10));
                                    }
                                    if to.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => break,
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Relay { addr, frozen }
    }
}

/// A database that stops answering without closing its connections: requests, a write holding
/// a connection among them, answer 503 within the query bound (10 s) instead of waiting for as
/// long as it lasts, and the node serves again once the database answers, without a restart.
#[test]
fn a_database_that_stops_answering_gets_503_not_a_hang() {
    let Some(db) = common::pg_database("a_database_that_stops_answering_gets_503_not_a_hang") else { return };
    // postgres://user@host:port/name -> the same through the relay.
    let (head, rest) = db.rsplit_once('@').expect("user@host in the URL");
    let (hostport, name) = rest.split_once('/').expect("/db in the URL");
    let upstream: SocketAddr = hostport.replace("localhost", "127.0.0.1").parse().expect("host:port");
    let relay = Relay::start(upstream);
    let url = format!("{head}@{}/{name}", relay.addr);
    let n = node(&url);
    let (tok, main) = user(&n, &n, "hung", 0);
    ok(deposit(&n, &tok, &main, 5, "before").expect("node answers"));
    relay.frozen.store(true, Ordering::SeqCst);
    // Every relay thread past a write it began before the freeze (bytes read after it wait).
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let w = s.spawn(|| deposit(&n, &tok, &main, 7, "during").expect("node answers"));
        let r = s.spawn(|| req(n.addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null));
        vec![w.join().expect("thread"), r.join().expect("thread")]
    });
    let waited = started.elapsed();
    for (st, v) in &answers {
        assert_eq!(*st, 503, "{v}");
        assert_eq!(v["success"], json!(false), "{v}");
    }
    // Bounded by the node (10 s), not by the client's own timeout (60 s).
    assert!(waited < Duration::from_secs(40), "answered after {waited:?}");
    relay.frozen.store(false, Ordering::SeqCst);
    // Answering again: the node serves without a restart; the write that got 503 may or may not
    // have been made (its COMMIT may have reached the database), never half.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match deposit(&n, &tok, &main, 11, "after") {
            Some((200, _)) => break,
            other => assert!(Instant::now() < deadline, "no recovery: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let total: u64 = total(&n, &tok, &main).parse().expect("a number");
    assert!(total == 16 || total == 23, "total {total}");
}
