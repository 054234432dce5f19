//! Webhooks on several nodes sharing one PostgreSQL database (docs/webhooks.md, "Several
//! nodes"): deposits sent to two nodes at once make one event each, and each event goes out from
//! one node only; a node killed (kill -9) while its sends hang loses none of them: the other node
//! sends them once their lease runs out. Real pfm processes on a fresh database of the server
//! named by `PFM_TEST_DATABASE_URL` (`.ci/postgres.sh` starts one; without it these tests print
//! a note and return). The nodes read one clock, a file the test moves (`PFM_TEST_CLOCK_FILE`,
//! a test build's hook), so a lease runs out without waiting a minute.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::proc::{self, Clock, Proc as Node};
use common::T0;
use serde_json::{json, Value};

/// How long a node that took a delivery keeps other nodes off it (`LEASE_SECS` of
/// src/api/webhooks.rs, docs/webhooks.md "Several nodes").
const LEASE_SECS: i64 = 60;
/// How long one send waits for an answer at most (`webhook::send::ATTEMPT_TIMEOUT`).
const ATTEMPT: Duration = Duration::from_secs(10);

/// The real binary on `db`, reading `clock`, its waker every 20 ms, allowed to send to the
/// test's receiver on 127.0.0.1.
fn node(db: &str, clock: &Clock) -> Node {
    let path = clock.path.to_str().expect("a clock path in UTF-8");
    proc::spawn(
        &std::env::temp_dir(),
        &["--database-url", db, "--token-ttl-seconds", "100000000"],
        &[("PFM_TEST_CLOCK_FILE", path), ("WEBHOOKS_ALLOW_PRIVATE", "true"), ("SCHEDULE_POLL_MS", "20")],
    )
}

// ---------------------------------------------------------------------------------- receiver

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Got {
    /// The event's id (`Pfm-Event-Id`, checked against the body's).
    event: String,
    /// The transaction id of the event's first record.
    tx: String,
    /// Whether it was answered 200; otherwise it was held unanswered until its sender closed the
    /// connection (timed out, or was killed).
    answered: bool,
}

#[derive(Default)]
struct Inbox {
    /// Hold every request unanswered (the receiver hangs); otherwise answer 200 at once.
    hang: bool,
    got: Vec<Got>,
    /// Requests held open now.
    held: usize,
}

/// A tiny HTTP/1.1 server that records each event it gets and answers 200 or hangs.
#[derive(Clone)]
struct Receiver {
    addr: SocketAddr,
    inbox: Arc<Mutex<Inbox>>,
}

impl Receiver {
    fn start(hang: bool) -> Receiver {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let inbox = Arc::new(Mutex::new(Inbox { hang, ..Inbox::default() }));
        let i = inbox.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let i = i.clone();
                std::thread::spawn(move || serve(conn, i));
            }
        });
        Receiver { addr, inbox }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn answer(&self) {
        self.inbox.lock().unwrap().hang = false;
    }

    fn hang(&self) {
        self.inbox.lock().unwrap().hang = true;
    }

    fn got(&self) -> Vec<Got> {
        self.inbox.lock().unwrap().got.clone()
    }

    fn held(&self) -> usize {
        self.inbox.lock().unwrap().held
    }

    /// Waits until every transaction of `txs` has arrived in an event answered 200 (`taken`) or
    /// in any (`!taken`), at most `limit`.
    fn until_all(&self, txs: &BTreeSet<String>, taken: bool, limit: Duration) -> Vec<Got> {
        let end = Instant::now() + limit;
        loop {
            let got = self.got();
            let seen: BTreeSet<&str> =
                got.iter().filter(|g| g.answered || !taken).map(|g| g.tx.as_str()).collect();
            let missing: Vec<&String> = txs.iter().filter(|t| !seen.contains(t.as_str())).collect();
            if missing.is_empty() {
                return got;
            }
            assert!(
                Instant::now() < end,
                "after {limit:?}, {} of {} transactions' events never arrived{}: {:?}",
                missing.len(),
                txs.len(),
                if taken { " answered" } else { "" },
                &missing[..missing.len().min(10)]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn serve(mut c: TcpStream, inbox: Arc<Mutex<Inbox>>) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(120)));
    let Some(r) = common::http_in::read_request(&mut c) else { return };
    let e: Value = serde_json::from_slice(&r.body).expect("a JSON event");
    let event = e["id"].as_str().expect("an event id").to_string();
    assert_eq!(r.header("pfm-event-id"), Some(event.as_str()), "the id header names the body's");
    assert_eq!(e["type"], "transaction.recorded", "{e}");
    let tx = e["data"]["records"][0]["TransactionID"].as_str().expect("a transaction id").to_string();
    let hang = {
        let mut i = inbox.lock().unwrap();
        let hang = i.hang;
        i.got.push(Got { event, tx, answered: !hang });
        i.held += usize::from(hang);
        hang
    };
    if hang {
        // Held until the sender gives up or dies: its side of the connection closes.
        let mut chunk = [0u8; 8192];
        while matches!(c.read(&mut chunk), Ok(n) if n > 0) {}
        inbox.lock().unwrap().held -= 1;
    } else {
        let _ = write!(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    }
}

// ------------------------------------------------------------------------------------- nodes

/// Attempts the node's waker made that the receiver took, and that failed.
fn attempts(n: &Node) -> (u64, u64) {
    (
        n.metric(r#"pfm_webhook_attempts_total{outcome="delivered"}"#),
        n.metric(r#"pfm_webhook_attempts_total{outcome="failed"}"#),
    )
}

/// A user with a webhook to the receiver for `transaction.recorded`.
struct User {
    tok: String,
    main: String,
    hook: i64,
}

/// Registers users `prefix0..` alternating nodes, each logging in and registering its webhook on
/// the other node.
fn users(nodes: [&Node; 2], rx: &Receiver, prefix: &str, k: usize) -> Vec<User> {
    (0..k)
        .map(|i| {
            let (st, v) = proc::request(
                nodes[i % 2].addr,
                "POST",
                "/register",
                None,
                json!({"user_id": format!("{prefix}{i}"), "password": "secret123", "initial_balance": 100}),
            );
            assert_eq!(st, 200, "{v}");
            let main = v["uuid"].as_str().expect("uuid").to_string();
            let other = nodes[(i + 1) % 2];
            let tok = proc::login(other.addr, &format!("{prefix}{i}"), "secret123");
            let v = other.call(
                "POST",
                "/create_webhook",
                &tok,
                json!({"url": rx.url(), "events": "transaction.recorded"}),
            );
            let hook = v["webhook"]["id"].as_i64().expect("webhook id");
            User { tok, main, hook }
        })
        .collect()
}

/// `per_user` deposits for each user, from two threads per user that each alternate between the
/// nodes: every user's row is written by both nodes at the same moments. The transaction ids of
/// the deposits acknowledged (answered 200), and of those that were not.
fn deposits(
    nodes: [&Node; 2],
    users: &[User],
    tag: &str,
    per_user: usize,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let acked = Mutex::new(BTreeSet::new());
    let refused = Mutex::new(BTreeSet::new());
    std::thread::scope(|s| {
        for (u, user) in users.iter().enumerate() {
            for j in 0..2 {
                let (acked, refused) = (&acked, &refused);
                s.spawn(move || {
                    for i in (j..per_user).step_by(2) {
                        let id = format!("u{u}-{tag}{i}");
                        let n = nodes[(i / 2 + j) % 2];
                        let body = json!({"uuid": user.main, "amount": "1.25", "channel": "ABSA",
                                          "transaction_number": id})
                        .to_string();
                        let r = proc::send(n.addr, "POST", "/deposit", Some(&user.tok), &[], &body);
                        match r {
                            Ok(r) if r.status == 200 => acked.lock().unwrap().insert(id),
                            other => {
                                eprintln!("deposit {id} on {} not acknowledged: {other:?}", n.addr);
                                refused.lock().unwrap().insert(id)
                            }
                        };
                    }
                });
            }
        }
    });
    (acked.into_inner().unwrap(), refused.into_inner().unwrap())
}

/// How many times each event id arrived (`answered`: only those answered 200).
fn arrivals(got: &[Got], answered: bool) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for g in got.iter().filter(|g| g.answered || !answered) {
        *m.entry(g.event.clone()).or_insert(0) += 1;
    }
    m
}

/// Every arrival names a deposit that was sent, and one event id never names two transactions.
fn well_formed(got: &[Got], sent: &BTreeSet<String>) {
    let mut tx_of: BTreeMap<&str, &str> = BTreeMap::new();
    for g in got {
        assert!(sent.contains(&g.tx), "an event of a transaction never sent: {g:?}");
        let t = tx_of.entry(&g.event).or_insert(&g.tx);
        assert_eq!(*t, g.tx, "event {} names two transactions", g.event);
    }
}

/// Each user's delivery log, on `n`: every delivery delivered, none waiting; one per
/// acknowledged deposit of the user (the refused ones may have been made, too).
fn logs_delivered(n: &Node, users: &[User], acked: &BTreeSet<String>, refused: &BTreeSet<String>) {
    for (u, user) in users.iter().enumerate() {
        let v = n.call("GET", &format!("/webhook_deliveries?id={}", user.hook), &user.tok, Value::Null);
        let log = v["deliveries"].as_array().expect("deliveries");
        assert!(log.iter().all(|d| d["state"] == "delivered"), "user {u}: {log:?}");
        assert_eq!(v["webhook"]["waiting"], json!(0), "user {u}: {}", v["webhook"]);
        let mine = |s: &BTreeSet<String>| s.iter().filter(|t| t.starts_with(&format!("u{u}-"))).count();
        assert!(
            (mine(acked)..=mine(acked) + mine(refused)).contains(&log.len()),
            "user {u}: {} deliveries for {} deposits",
            log.len(),
            mine(acked)
        );
    }
}

#[test]
fn two_nodes_deliver_each_event_of_concurrent_writes_once() {
    let Some(db) = common::pg_database("two_nodes_deliver_each_event_of_concurrent_writes_once") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Clock::new(dir.path());
    let (a, b) = (node(&db, &clock), node(&db, &clock));
    let rx = Receiver::start(false);
    let users = users([&a, &b], &rx, "twin_hook", 8);
    let (acked, refused) = deposits([&a, &b], &users, "dep", 40);
    assert!(refused.is_empty(), "every deposit is acknowledged: {refused:?}");

    rx.until_all(&acked, true, Duration::from_secs(60));
    // Anything sent twice would be on its way by now: both wakers have passed over every user.
    proc::more_passes(&[&a, &b], 3, Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(200));
    let got = rx.got();
    well_formed(&got, &acked);
    let twice: Vec<(String, usize)> = arrivals(&got, false).into_iter().filter(|(_, n)| *n > 1).collect();
    assert!(twice.is_empty(), "{} events sent more than once, such as {:?}", twice.len(), twice.first());
    assert_eq!(got.len(), acked.len(), "one event per deposit, each sent once");
    for n in [&a, &b] {
        logs_delivered(n, &users, &acked, &refused);
    }

    // Both wakers sent: each took the users its own writes woke it for, and every pass starts
    // at a random user.
    let (da, fa) = attempts(&a);
    let (db_, fb) = attempts(&b);
    eprintln!("node a delivered {da}, node b {db_} of {} events", got.len());
    assert_eq!((fa, fb), (0, 0), "no attempt failed");
    assert_eq!(da + db_, got.len() as u64, "every attempt the nodes count reached the receiver");
    assert!(da > 0 && db_ > 0, "both nodes delivered: a {da}, b {db_}");
}

#[test]
fn a_node_killed_while_its_sends_hang_loses_none_of_them() {
    let Some(db) = common::pg_database("a_node_killed_while_its_sends_hang_loses_none_of_them") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Clock::new(dir.path());
    let mut a = node(&db, &clock);
    let b = node(&db, &clock);
    let rx = Receiver::start(false);
    let users = users([&a, &b], &rx, "killed_hook", 8);
    // First events delivered and their outcomes committed: none of them is sent again.
    let (before, refused) = deposits([&a, &b], &users, "early", 4);
    assert!(refused.is_empty(), "every deposit is acknowledged: {refused:?}");
    rx.until_all(&before, true, Duration::from_secs(60));
    let end = Instant::now() + Duration::from_secs(30);
    while attempts(&a).0 + attempts(&b).0 < before.len() as u64 {
        assert!(
            Instant::now() < end,
            "outcomes not committed in 30 s: {:?} {:?}",
            attempts(&a),
            attempts(&b)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let delivered_by_b = attempts(&b).0;

    // Then the receiver hangs: every new event is taken by one node, which waits for the answer
    // (10 s at most), and held.
    rx.hang();
    let (hung, refused) = deposits([&a, &b], &users, "late", 10);
    assert!(refused.is_empty(), "every deposit is acknowledged: {refused:?}");
    let started = Instant::now();
    rx.until_all(&hung, false, Duration::from_secs(30));
    let in_flight = rx.got().iter().filter(|g| !g.answered).count();
    let held = rx.held();
    a.kill();
    rx.answer();
    eprintln!(
        "killed node a with {in_flight} events sent and unanswered ({held} held open), {:?} after the last deposit",
        started.elapsed()
    );
    let sent_twice = arrivals(&rx.got(), false).into_iter().filter(|(_, n)| *n > 1).count();
    assert_eq!((in_flight, sent_twice), (hung.len(), 0), "each event was taken by one node");

    // Node b's own sends time out and wait their backoff; node a's stay leased to a: with the
    // clock still, nothing is sent again.
    std::thread::sleep(ATTEMPT + Duration::from_secs(2));
    proc::more_passes(&[&b], 3, Duration::from_secs(60));
    assert_eq!(rx.got().len(), before.len() + in_flight, "nothing sent again while the leases hold");
    let (delivered, b_failed) = attempts(&b);
    assert_eq!(delivered, delivered_by_b);
    let a_share = in_flight as u64 - b_failed;
    eprintln!("node a was sending {a_share} events when killed, node b {b_failed}");
    assert!(a_share > 0, "node a had sends in flight when it was killed");

    // The leases (and b's backoffs) run out: b sends every event of the hung ones again, and
    // none of those delivered before.
    clock.set(T0 + LEASE_SECS + 10 * 60);
    let all: BTreeSet<String> = before.union(&hung).cloned().collect();
    rx.until_all(&all, true, Duration::from_secs(60));
    proc::more_passes(&[&b], 3, Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(200));
    let got = rx.got();
    well_formed(&got, &all);
    let taken = arrivals(&got, true);
    assert!(
        taken.values().all(|n| *n == 1),
        "an event answered 200 twice: {:?}",
        taken.iter().find(|x| *x.1 > 1)
    );
    assert_eq!(taken.len(), all.len());
    let counts = arrivals(&got, false);
    let twice: Vec<&Got> = got.iter().filter(|g| counts[&g.event] > 1).collect();
    let twice_events: BTreeSet<&str> = twice.iter().map(|g| g.event.as_str()).collect();
    eprintln!("{} events arrived twice, {in_flight} were in flight at the kill", twice_events.len());
    assert!(
        twice_events.len() <= in_flight,
        "{} events arrived twice; {in_flight} were in flight",
        twice_events.len()
    );
    assert!(twice.iter().all(|g| hung.contains(&g.tx)), "an event delivered before the kill was sent again");
    assert!(twice.len() <= 2 * twice_events.len(), "an event arrived three times");
    assert_eq!(
        attempts(&b),
        (delivered_by_b + hung.len() as u64, b_failed),
        "b delivered each hung event once"
    );
    logs_delivered(&b, &users, &all, &refused);
}
