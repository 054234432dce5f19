//! The PostgreSQL engine's own behaviour: the row lock and its bounded wait, the unique key of
//! deposit ids, a database lost while running (503, then service resumes by itself), one
//! unreachable at start, and a hung first host of a multi-host URL. Tests needing a server use
//! `PFM_TEST_DATABASE_URL` (`.ci/postgres.sh`) and print a note and return without it.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::proc::NoStart;
use common::{fresh_database, Srv};
use pfm::domain::engine::{Change, TxRecord};
use pfm::store::{Op, StoreError};
use serde_json::json;

fn database(test: &str) -> Option<String> {
    let db = fresh_database();
    if db.is_none() {
        eprintln!("{test}: skipped, PFM_TEST_DATABASE_URL is not set (.ci/postgres.sh sets it)");
    }
    db
}

/// A runtime whose connections keep being driven between `block_on`s.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime")
}

/// A plain SQL session on `db`, for doing what another node would do.
fn sql(rt: &tokio::runtime::Runtime, db: &str) -> tokio_postgres::Client {
    rt.block_on(async {
        let (c, conn) = tokio_postgres::connect(db, tokio_postgres::NoTls).await.expect("connect");
        tokio::spawn(conn);
        c
    })
}

#[test]
fn a_user_row_locked_in_the_database_bounds_the_wait_with_a_500_and_nothing_changes() {
    let Some(db) = database("row lock") else { return };
    let s = Srv::start_with(|c| c.database_url = Some(db.clone()));
    let (tok, main) = s.user("u1", "0");
    s.deposit(&tok, &main, "10").ok();
    s.run.as_ref().expect("running").app.users.set_lock_wait(Duration::from_millis(300));
    // Another node holds the user's row lock.
    let rt = runtime();
    let other = sql(&rt, &db);
    rt.block_on(other.batch_execute("BEGIN; SELECT version FROM users WHERE user_id = 'u1' FOR UPDATE"))
        .expect("lock");
    let t = Instant::now();
    s.deposit(&tok, &main, "5").fails(500, "Deposit failed: internal error");
    assert!(t.elapsed() >= Duration::from_millis(250), "{:?}", t.elapsed());
    // Reads do not wait for the lock.
    assert_eq!(s.balance(&tok, &main), "10");
    rt.block_on(other.batch_execute("ROLLBACK")).expect("unlock");
    s.deposit(&tok, &main, "5").ok();
    assert_eq!(s.balance(&tok, &main), "15");
    assert_eq!(s.txs(&tok, &main).len(), 2);
}

#[test]
fn the_unique_key_refuses_a_second_deposit_id_whatever_the_cache_says() {
    let Some(db) = database("unique deposit ids") else { return };
    let s = Srv::start_with(|c| c.database_url = Some(db.clone()));
    let (tok, main) = s.user("u1", "0");
    let store = s.run.as_ref().expect("running").app.users.store.clone();
    let rt = runtime();
    let (user, tree) = rt.block_on(store.load_user("u1")).expect("load").expect("user");
    let root = tree.root;
    let log_len = tree.get(root).expect("root").log_len;
    // A deposit record as another node would commit it, straight to storage.
    let op = |seq: u64| {
        let rec = TxRecord {
            deposit: true,
            by: "User".into(),
            id: "Z1".into(),
            channel: "c".into(),
            amount_cents: 100,
            balance_cents: 100,
            amount_due_cents: 0,
            overall_balance_cents: 100,
            date_secs: common::T0,
            note: None,
        };
        let change = Change {
            records: vec![(root, seq, rec)],
            main_txids: vec!["Z1".into()],
            ledger: tree.ledger.clone(),
            ..Change::default()
        };
        Op::Commit { user: user.clone(), change, sync: None, idem: None }
    };
    rt.block_on(store.commit(Box::new(op(log_len)), 0, None)).expect("first commit");
    match rt.block_on(store.commit(Box::new(op(log_len + 1)), 0, None)) {
        Err(StoreError::DuplicateTxid(id)) => assert_eq!(id, "Z1"),
        other => panic!("expected a duplicate id, got {other:?}"),
    }
    // Through HTTP the same id is a 409 too.
    s.post(&tok, "/deposit", json!({"uuid": main, "amount": 1, "channel": "c", "transaction_number": "Z1"}))
        .fails(409, "Deposit failed: This deposit has already been made. Transaction ID:Z1");
}

/// A TCP proxy in front of PostgreSQL that can cut every connection and refuse new ones, or
/// cut the connection that sends the next COMMIT, before or after passing it on.
struct Proxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    on_commit: Arc<AtomicU8>,
}

const PASS: u8 = 0;
/// The database commits, the node never hears back.
const COMMIT_THEN_CUT: u8 = 1;
/// The COMMIT never reaches the database (it rolls back when the connection drops).
const CUT_BEFORE_COMMIT: u8 = 2;
/// The simple-query message `COMMIT`.
const COMMIT_MSG: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";

impl Proxy {
    fn start(target: SocketAddr) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let up = Arc::new(AtomicBool::new(true));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let on_commit = Arc::new(AtomicU8::new(PASS));
        let (up2, open2, oc) = (up.clone(), open.clone(), on_commit.clone());
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                if !up2.load(Ordering::SeqCst) {
                    let _ = c.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(s) = TcpStream::connect(target) else { continue };
                let mut list = open2.lock().expect("lock");
                // Set once this connection's answers must be lost.
                let mute = Arc::new(AtomicBool::new(false));
                for (upstream, (mut from, mut to)) in
                    [(true, (c.try_clone(), s.try_clone())), (false, (s.try_clone(), c.try_clone()))]
                        .into_iter()
                        .filter_map(|(u, (a, b))| Some((u, (a.ok()?, b.ok()?))))
                {
                    let (oc, mute) = (oc.clone(), mute.clone());
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            let commit =
                                upstream && buf[..n].windows(COMMIT_MSG.len()).any(|w| w == COMMIT_MSG);
                            let mode = if commit { oc.swap(PASS, Ordering::SeqCst) } else { PASS };
                            if mode == CUT_BEFORE_COMMIT {
                                break;
                            }
                            // Answers are dropped from the COMMIT on, but the connection stays
                            // up until the database has run it: statements sent with the COMMIT
                            // are answered before it.
                            if !upstream && mute.load(Ordering::SeqCst) {
                                if n == 0 {
                                    break;
                                }
                                continue;
                            }
                            if mode == COMMIT_THEN_CUT {
                                mute.store(true, Ordering::SeqCst);
                            }
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                            if mode == COMMIT_THEN_CUT {
                                // Let the database commit, then lose the answer.
                                std::thread::sleep(Duration::from_millis(300));
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                }
                list.push(c);
                list.push(s);
            }
        });
        Proxy { addr, up, open, on_commit }
    }

    /// The database is gone: every connection is cut, new ones are refused.
    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for s in self.open.lock().expect("lock").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// A node whose database sits behind a proxy: (proxy, server).
fn behind_proxy(db: &str) -> (Proxy, Srv) {
    // postgres://user@127.0.0.1:PORT/name -> the same through the proxy.
    let (head, name) = db.rsplit_once('/').expect("db url");
    let (user_host, port) = head.rsplit_once(':').expect("port");
    let target: SocketAddr = format!("127.0.0.1:{port}").parse().expect("target");
    let proxy = Proxy::start(target);
    let via = format!("{user_host}:{}/{name}", proxy.addr.port());
    let s = Srv::start_with(|c| c.database_url = Some(via));
    (proxy, s)
}

#[test]
fn a_connection_lost_during_commit_answers_5xx_and_later_requests_see_what_the_database_holds() {
    let Some(db) = database("lost commit") else { return };
    let (proxy, s) = behind_proxy(&db);
    let (tok, main) = s.user("u1", "0");
    s.deposit(&tok, &main, "10").ok();
    let dep = |id: &str, amount: u32| {
        s.post(
            &tok,
            "/deposit",
            json!({"uuid": main, "amount": amount, "channel": "c", "transaction_number": id}),
        )
    };
    // Committed, but the answer was lost: the node cannot know, and says so.
    proxy.on_commit.store(COMMIT_THEN_CUT, Ordering::SeqCst);
    let r = dep("C1", 5);
    assert!(r.status == 503 || r.status == 500, "{}", r.text);
    assert_eq!(s.balance(&tok, &main), "15");
    dep("C1", 5).fails(409, "Deposit failed: This deposit has already been made. Transaction ID:C1");
    // Never committed: nothing of it shows, and a resend succeeds.
    proxy.on_commit.store(CUT_BEFORE_COMMIT, Ordering::SeqCst);
    let r = dep("C2", 7);
    assert!(r.status == 503 || r.status == 500, "{}", r.text);
    assert_eq!(proxy.on_commit.load(Ordering::SeqCst), PASS, "the proxy saw the COMMIT");
    assert_eq!(s.balance(&tok, &main), "15");
    dep("C2", 7).ok();
    assert_eq!(s.balance(&tok, &main), "22");
    assert_eq!(s.txs(&tok, &main).len(), 3);
}

#[test]
fn a_lost_database_answers_503_in_the_envelope_and_service_resumes_by_itself() {
    let Some(db) = database("lost database") else { return };
    let (proxy, s) = behind_proxy(&db);
    let (tok, main) = s.user("u1", "0");
    s.deposit(&tok, &main, "10").ok();
    proxy.cut();
    let msg = "Service unavailable: the database cannot be reached";
    s.deposit(&tok, &main, "5").fails(503, msg);
    let r = s.get(&tok, "/get_balance", &format!("uuid={main}"));
    r.fails(503, msg);
    assert!(r.json["execution_time"].is_number(), "{}", r.text);
    s.post(&s.token("u2", "user"), "/register", json!({"user_id": "u2"})).fails(503, msg);
    // Back: the very next requests are served, with nothing of the failed writes.
    proxy.restore();
    assert_eq!(s.balance(&tok, &main), "10");
    s.deposit(&tok, &main, "5").ok();
    assert_eq!(s.balance(&tok, &main), "15");
    assert_eq!(s.txs(&tok, &main).len(), 2);
    // Cut while writes are running: every answer is a 200 or a 5xx, and after the database
    // returns, every acknowledged deposit is there.
    let acked = std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            let mut acked = Vec::new();
            let end = Instant::now() + Duration::from_millis(1500);
            let mut i = 0;
            while Instant::now() < end {
                let id = format!("L{i}");
                let r = s.post(
                    &tok,
                    "/deposit",
                    json!({"uuid": main, "amount": 1, "channel": "c", "transaction_number": id}),
                );
                match r.status {
                    200 => acked.push(id),
                    500 | 503 => {}
                    other => panic!("{other}: {}", r.text),
                }
                i += 1;
            }
            acked
        });
        std::thread::sleep(Duration::from_millis(500));
        proxy.cut();
        std::thread::sleep(Duration::from_millis(300));
        proxy.restore();
        h.join().expect("writer")
    });
    let ids: Vec<String> =
        s.txs(&tok, &main).iter().filter_map(|t| t["TransactionID"].as_str().map(str::to_string)).collect();
    for id in &acked {
        assert!(ids.contains(id), "acknowledged deposit {id} lost");
    }
    let n = ids.iter().filter(|i| i.starts_with('L')).count();
    assert_eq!(s.balance(&tok, &main), (15 + n).to_string());
}

#[test]
fn an_unreachable_database_at_start_exits_non_zero_with_a_clear_message() {
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let url = format!("postgres://pfm@127.0.0.1:{port}/pfm");
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let refused = common::proc::try_spawn(dir.path(), &["--database-url", &url], &[]);
    let NoStart { status, log: err } = refused.expect_err("pfm listens without its database");
    assert!(started.elapsed() < Duration::from_secs(20), "pfm kept running without its database");
    assert!(status.is_some_and(|s| !s.success()), "{status:?}");
    assert!(err.contains(&format!("cannot reach the database at 127.0.0.1:{port}/pfm")), "{err}");
    assert!(!err.contains("pfm listening"), "{err}");
}

/// A multi-host URL whose first host accepts connections and never answers (a hung server, as a
/// failed primary can be): each host has its own connect timeout, so the node starts on the next
/// host, and its later connections go to the host that answered, not to the hung one first.
#[test]
fn a_hung_first_host_of_a_multi_host_url_is_passed_over() {
    let Some(db) = database("hung first host") else { return };
    let hung = TcpListener::bind("127.0.0.1:0").expect("bind");
    let hung_addr = hung.local_addr().expect("addr");
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for c in hung.incoming().flatten() {
            keep.lock().expect("held").push(c);
        }
    });
    // postgres://user@host:port/name -> postgres://user@hung,host:port/name
    let (head, rest) = db.rsplit_once('@').expect("user@host in the URL");
    let url = format!("{head}@{hung_addr},{rest}");
    let started = Instant::now();
    let s = Srv::start_with(|c| c.database_url = Some(url.clone()));
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(4), "the hung host answered? {took:?}");
    assert!(took < Duration::from_secs(30), "start took {took:?}");
    let tried = held.lock().expect("held").len();
    assert!(tried >= 1, "the first host was not tried");
    // New pooled connections go to the host that answered, not to the hung one first.
    let (tok, main) = s.user("u1", "0");
    let reqs = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                sc.spawn(|| {
                    for _ in 0..5 {
                        s.deposit(&tok, &main, "1").ok();
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("writer")).count()
    });
    assert_eq!(s.balance(&tok, &main), (reqs * 5).to_string());
    assert_eq!(held.lock().expect("held").len(), tried, "later connections tried the hung host");
}
