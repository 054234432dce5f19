//! The database machine dies: a pfm node on a primary with a synchronous standby, given both as
//! one multi-host URL; the primary is killed (-9, all of its processes) under a load of deposits,
//! the standby promoted, and every acknowledged deposit must be there exactly once.
//!
//! Needs the servers `.ci/failover.sh` starts and the environment it sets:
//! `PFM_TEST_FAILOVER=1`, `PFM_TEST_FAILOVER_URL` (the multi-host URL),
//! `PFM_TEST_FAILOVER_KILL` (a shell command killing the primary), `PFM_TEST_FAILOVER_PROMOTE`
//! (one promoting the standby), `PFM_TEST_FAILOVER_STANDBY_URL` (the standby alone, for SQL)
//! and, optionally, `PFM_TEST_FAILOVER_NAME` (what the kill does, for the figures printed).
//! Without `PFM_TEST_FAILOVER=1` the test prints a note and returns.
//!
//! Then the new primary is fenced (made read-only, as an operator or a failover tool does to a
//! primary it retires) and unfenced: requests answer 503 meanwhile, never 500, and no connection
//! from before the fence is used after it.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::proc::{self, Proc as Node};
use serde_json::{json, Value};

/// Writers, one user each.
const WRITERS: usize = 8;
const INITIAL: u64 = 1000;
/// Load before the kill.
const WARM_UP: Duration = Duration::from_secs(3);
/// Between the kill and the promotion: the time a person or a tool takes to decide. Requests
/// meanwhile have no primary to write to.
const DETECTION: Duration = Duration::from_secs(2);
/// The service must be back this soon after the promotion.
const BACK_WITHIN: Duration = Duration::from_secs(30);
/// Load after the first acknowledged write on the new primary.
const AFTER: Duration = Duration::from_secs(3);
/// Without a warning per 503 answer (hundreds); the engine's own once-a-failure lines stay.
const QUIET: &[(&str, &str)] = &[("RUST_LOG", "info,pfm::http::response=error")];
/// A pause after an answer other than 200, as a client would back off.
const BACKOFF: Duration = Duration::from_millis(20);

struct Setup {
    /// What was killed, for the figures printed.
    name: String,
    url: String,
    kill: String,
    promote: String,
    standby_url: String,
}

fn setup() -> Option<Setup> {
    if std::env::var("PFM_TEST_FAILOVER").ok().as_deref() != Some("1") {
        eprintln!("skipped: PFM_TEST_FAILOVER is not 1 (.ci/failover.sh starts the servers and sets it)");
        return None;
    }
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| panic!("PFM_TEST_FAILOVER=1 needs {name} (see .ci/failover.sh)"))
    };
    Some(Setup {
        name: std::env::var("PFM_TEST_FAILOVER_NAME").unwrap_or_else(|_| "primary killed".into()),
        url: var("PFM_TEST_FAILOVER_URL"),
        kill: var("PFM_TEST_FAILOVER_KILL"),
        promote: var("PFM_TEST_FAILOVER_PROMOTE"),
        standby_url: var("PFM_TEST_FAILOVER_STANDBY_URL"),
    })
}

#[track_caller]
fn sh(what: &str, cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status();
    assert!(st.as_ref().is_ok_and(|s| s.success()), "{what} ({cmd}): {st:?}");
}

/// One deposit as the client saw it.
#[derive(Debug, Clone)]
struct Sent {
    user: usize,
    id: String,
    amount: u64,
    sent: Instant,
    done: Instant,
    /// The status, or why no answer came.
    answer: Result<u16, String>,
    body: String,
}

fn deposit(n: &Node, tok: &str, main: &str, id: &str, amount: u64) -> (Result<u16, String>, String) {
    let body = json!({"uuid": main, "amount": amount, "channel": "c", "transaction_number": id}).to_string();
    match proc::send(n.addr, "POST", "/deposit", Some(tok), &[], &body) {
        Ok(r) => (Ok(r.status), r.text),
        Err(e) => (Err(e), String::new()),
    }
}

fn get(n: &Node, tok: &str, path: &str) -> Value {
    let (st, v) = proc::request(n.addr, "GET", path, Some(tok), Value::Null);
    assert_eq!(st, 200, "{path}: {v}");
    v
}

/// The deposits of the main account's log: id -> (times present, amount as JSON text).
fn main_log(n: &Node, tok: &str, main: &str) -> BTreeMap<String, (usize, String)> {
    let v = get(n, tok, &format!("/get_transactions?uuid={main}"));
    let mut out: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for t in v["transactions"].as_array().into_iter().flatten() {
        let Some(id) = t["TransactionID"].as_str().filter(|i| i.starts_with('F') || i.starts_with('G'))
        else {
            continue;
        };
        let e = out.entry(id.to_string()).or_insert((0, t["Amount"].to_string()));
        e.0 += 1;
    }
    out
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Deposits by one writer per user (ids `{prefix}{user}-{i}`) while `events` runs; what each
/// writer sent. `first_ok_after` gets the end of the first acknowledged deposit sent after the
/// instant it is given (by `events`).
fn under_load(
    node: &Node,
    users: &[(String, String)],
    prefix: &str,
    events: impl FnOnce(&Watch),
) -> Vec<Sent> {
    let watch = Watch { stop: AtomicBool::new(false), since: Mutex::new(None), first_ok: Mutex::new(None) };
    std::thread::scope(|s| {
        let writers: Vec<_> = users
            .iter()
            .enumerate()
            .map(|(u, (tok, main))| {
                let watch = &watch;
                s.spawn(move || {
                    let mut out = Vec::new();
                    let mut i = 0u64;
                    while !watch.stop.load(Ordering::SeqCst) {
                        let id = format!("{prefix}{u}-{i}");
                        let amount = 1 + (i * 7 + u as u64) % 13;
                        let sent = Instant::now();
                        let (answer, body) = deposit(node, tok, main, &id, amount);
                        let done = Instant::now();
                        if answer == Ok(200) {
                            watch.acked(sent, done);
                        } else {
                            std::thread::sleep(BACKOFF);
                        }
                        out.push(Sent { user: u, id, amount, sent, done, answer, body });
                        i += 1;
                    }
                    out
                })
            })
            .collect();
        events(&watch);
        watch.stop.store(true, Ordering::SeqCst);
        writers.into_iter().flat_map(|h| h.join().expect("writer")).collect()
    })
}

struct Watch {
    stop: AtomicBool,
    since: Mutex<Option<Instant>>,
    first_ok: Mutex<Option<Instant>>,
}

impl Watch {
    fn acked(&self, sent: Instant, done: Instant) {
        if self.since.lock().expect("lock").is_some_and(|k| sent > k) {
            let mut f = self.first_ok.lock().expect("lock");
            if f.is_none_or(|t| done < t) {
                *f = Some(done);
            }
        }
    }

    /// From now on, watch for the first acknowledged deposit.
    fn watch_from(&self, t: Instant) {
        *self.first_ok.lock().expect("lock") = None;
        *self.since.lock().expect("lock") = Some(t);
    }

    /// Waits (at most `limit`) for an acknowledged deposit sent after `watch_from`'s instant.
    fn wait_ok(&self, limit: Duration) -> Option<Instant> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(t) = *self.first_ok.lock().expect("lock") {
                return Some(t);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Answers by status ("no answer" for none); panics on any but 200 and the 503 envelope, and on
/// an answer slower than 20 s. Returns the counts and the slowest answer.
fn check_answers(sent: &[Sent]) -> (BTreeMap<String, usize>, Duration) {
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    for x in sent {
        let key = match &x.answer {
            Ok(st) => st.to_string(),
            Err(_) => "no answer".into(),
        };
        *by_status.entry(key).or_default() += 1;
    }
    let bad: Vec<&Sent> = sent.iter().filter(|x| !matches!(x.answer, Ok(200) | Ok(503))).collect();
    assert!(
        bad.is_empty(),
        "answers other than 200 and 503: {by_status:?}, e.g. {:?}",
        &bad[..bad.len().min(3)]
    );
    for x in sent.iter().filter(|x| x.answer == Ok(503)) {
        let v: Value = serde_json::from_str(&x.body).unwrap_or(Value::Null);
        assert_eq!(v["success"], json!(false), "{}", x.body);
    }
    let slowest = sent.iter().map(|x| x.done - x.sent).max().unwrap_or_default();
    assert!(slowest < Duration::from_secs(20), "an answer took {slowest:?}");
    (by_status, slowest)
}

/// The outcome of a deposit answered 503 is unknown (its COMMIT may have reached the database):
/// sent again with the same transaction number it is made (200) or was made (409), once.
/// Returns (made before, made now).
fn settle(node: &Node, users: &[(String, String)], sent: &[Sent]) -> (usize, usize) {
    let (mut before, mut now) = (0, 0);
    for x in sent.iter().filter(|x| x.answer != Ok(200)) {
        let (tok, main) = &users[x.user];
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match deposit(node, tok, main, &x.id, x.amount) {
                (Ok(200), _) => now += 1,
                (Ok(409), _) => before += 1,
                other => {
                    assert!(Instant::now() < deadline, "{} sent again: {other:?}", x.id);
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            }
            break;
        }
    }
    (before, now)
}

/// Every deposit sent is in its user's log exactly once with its amount, nothing else is, and
/// the totals add up, on each of `nodes`. Returns the acknowledged deposits missing (lost) and
/// those found twice.
fn verify(nodes: &[&Node], users: &[(String, String)], sent: &[Sent]) -> (Vec<String>, Vec<String>) {
    let (mut lost, mut twice) = (Vec::new(), Vec::new());
    for (u, (tok, main)) in users.iter().enumerate() {
        let mine: BTreeMap<&str, &Sent> =
            sent.iter().filter(|x| x.user == u).map(|x| (x.id.as_str(), x)).collect();
        let sum: u64 = mine.values().map(|x| x.amount).sum();
        for n in nodes {
            let log = main_log(n, tok, main);
            for (id, x) in &mine {
                match log.get(*id) {
                    None if x.answer == Ok(200) => lost.push(id.to_string()),
                    None => panic!("{id} was made or refused as made, yet is not in the log"),
                    Some((k, _)) if *k > 1 => twice.push(id.to_string()),
                    Some((_, a)) => assert_eq!(*a, x.amount.to_string(), "{id}"),
                }
            }
            let unknown: Vec<&String> = log.keys().filter(|id| !mine.contains_key(id.as_str())).collect();
            assert!(unknown.is_empty(), "deposits nobody sent: {unknown:?}");
            let total =
                get(n, tok, &format!("/compute_total_balance?uuid={main}"))["total_balance"].to_string();
            assert_eq!(total, (INITIAL + sum).to_string(), "user {u}");
        }
    }
    (lost, twice)
}

/// Runs `sql` on the server at `url` (statements one by one); the first column of the last
/// statement's first row, as text.
fn sql(url: &str, statements: &[&str]) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect for SQL");
        let driver = tokio::spawn(conn);
        let mut last = None;
        for st in statements {
            let rows = c.simple_query(st).await.unwrap_or_else(|e| panic!("{st}: {e}"));
            last = rows.iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            });
        }
        drop(c);
        let _ = driver.await;
        last
    })
}

#[test]
fn killing_the_primary_under_load_loses_no_acknowledged_write() {
    let Some(env) = setup() else { return };
    let node = proc::spawn(&std::env::temp_dir(), &["--database-url", &env.url], QUIET);
    let users: Vec<(String, String)> = (0..WRITERS)
        .map(|u| {
            let id = format!("failover{u}");
            let (st, v) = proc::request(
                node.addr,
                "POST",
                "/register",
                None,
                json!({"user_id": id, "password": "secret123", "initial_balance": INITIAL}),
            );
            assert_eq!(st, 200, "{v}");
            let main = v["uuid"].as_str().expect("uuid").to_string();
            (proc::login(node.addr, &id, "secret123"), main)
        })
        .collect();

    // The primary dies under load; the standby is promoted.
    let mut times = None;
    let sent = under_load(&node, &users, "F", |w| {
        std::thread::sleep(WARM_UP);
        sh("kill the primary", &env.kill);
        // Once the kill is done: a write sent while the command ran could still be made.
        let killed = Instant::now();
        w.watch_from(killed);
        std::thread::sleep(DETECTION);
        let promote_started = Instant::now();
        sh("promote the standby", &env.promote);
        let promoted = Instant::now();
        let first_ok = w.wait_ok(BACK_WITHIN);
        std::thread::sleep(AFTER);
        times = Some((killed, promote_started, promoted, first_ok));
    });
    let Some((killed, promote_started, promoted, first_ok)) = times else { panic!("no load ran") };
    let (by_status, slowest) = check_answers(&sent);
    let during = sent.iter().filter(|x| x.answer == Ok(503) && x.done > killed && x.sent < promoted).count();
    assert!(during > 0, "no 503 while there was no primary: {by_status:?}");
    let first_ok = first_ok.unwrap_or_else(|| {
        panic!("no write succeeded within {BACK_WITHIN:?} of the promotion: {by_status:?}")
    });
    let back_after_promotion = first_ok.saturating_duration_since(promoted);
    let (made_before, made_now) = settle(&node, &users, &sent);
    // A node started now on the same URL (its first host dead) reads the same.
    let fresh = proc::spawn(&std::env::temp_dir(), &["--database-url", &env.url], QUIET);
    let (lost, twice) = verify(&[&node, &fresh], &users, &sent);
    drop(fresh);
    assert!(lost.is_empty(), "acknowledged deposits lost: {lost:?}");
    assert!(twice.is_empty(), "deposits made twice: {twice:?}");
    assert_eq!(sql(&env.standby_url, &["SELECT pg_is_in_recovery()"]).as_deref(), Some("f"), "not promoted");
    let acked = sent.iter().filter(|x| x.answer == Ok(200)).count();
    let before = sent.iter().filter(|x| x.answer == Ok(200) && x.done <= killed).count();
    eprintln!(
        "failover ({}): kill -> first acknowledged write {} (no primary for {} while deciding, promotion \
         took {}, first write {} after it); answers {by_status:?}, slowest {}; deposits acknowledged \
         {acked} ({before} before the kill, {} after), answered 503 {} (of which the database had \
         made {made_before}, sent again and made {made_now}); lost {}, made twice {}",
        env.name,
        secs(first_ok - killed),
        secs(promote_started - killed),
        secs(promoted - promote_started),
        secs(back_after_promotion),
        secs(slowest),
        acked - before,
        made_before + made_now,
        lost.len(),
        twice.len(),
    );

    // The new primary fenced (read-only) and unfenced under load.
    let mut fenced_at = None;
    let mut back = None;
    let fence_sent = under_load(&node, &users, "G", |w| {
        std::thread::sleep(Duration::from_secs(1));
        fenced_at = sql(
            &env.standby_url,
            &[
                "ALTER SYSTEM SET default_transaction_read_only = on",
                "SELECT pg_reload_conf()",
                "SELECT now()::text",
            ],
        );
        std::thread::sleep(DETECTION);
        let unfenced = Instant::now();
        w.watch_from(unfenced);
        sql(
            &env.standby_url,
            &["ALTER SYSTEM RESET default_transaction_read_only", "SELECT pg_reload_conf()"],
        );
        back = w.wait_ok(BACK_WITHIN).map(|t| t.saturating_duration_since(unfenced));
        std::thread::sleep(Duration::from_secs(1));
    });
    let fenced_at = fenced_at.expect("the server's time at the fence");
    let (fence_status, _) = check_answers(&fence_sent);
    assert!(fence_status.get("503").is_some_and(|n| *n > 0), "no 503 while read-only: {fence_status:?}");
    let back =
        back.unwrap_or_else(|| panic!("no write succeeded after the fence was lifted: {fence_status:?}"));
    // Connections made before the fence were dropped, not reused once writes worked again.
    let old = sql(
        &env.standby_url,
        &[&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pfm' AND backend_start < '{fenced_at}'"
        )],
    );
    assert_eq!(old.as_deref(), Some("0"), "connections from before the fence still in use");
    settle(&node, &users, &fence_sent);
    let all: Vec<Sent> = sent.into_iter().chain(fence_sent).collect();
    let (lost, twice) = verify(&[&node], &users, &all);
    assert!(lost.is_empty() && twice.is_empty(), "after the fence: lost {lost:?}, made twice {twice:?}");
    eprintln!(
        "fence ({}): answers {fence_status:?}; back {} after the fence was lifted",
        env.name,
        secs(back)
    );
}
