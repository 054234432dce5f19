//! The poster on several nodes sharing one PostgreSQL database (docs/schedules.md, "Posting
//! exactly once"): every node runs one, and when the time moves across many occurrences both
//! catch up at the same moment, yet every occurrence posts exactly once and none is skipped;
//! a node killed (kill -9) in the middle of its catch-up and restarted changes nothing of that.
//! Real pfm processes on a fresh database of the server named by `PFM_TEST_DATABASE_URL`
//! (`.ci/postgres.sh` starts one; without it these tests print a note and return). The nodes
//! read one clock, a file the test moves (`PFM_TEST_CLOCK_FILE`, a test build's hook).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::proc::{self, Clock, Proc as Node};
use common::{cents, T0};
use pfm::domain::dates::{day_of, fmt_day};
use serde_json::{json, Value};

const DAY: i64 = 86_400;
/// What each user holds in the main account at registration.
const INITIAL_CENTS: i64 = 500_000;
/// The day every schedule starts: the day after T0 (2025-07-11).
const START: &str = "2025-07-11";

/// The real binary on `db`, reading `clock`, its poster every 20 ms; its tokens outlive the
/// months the test moves the clock across.
fn node(db: &str, clock: &Clock) -> Node {
    let path = clock.path.to_str().expect("a clock path in UTF-8");
    proc::spawn(
        &std::env::temp_dir(),
        &["--database-url", db, "--schedule-poll-ms", "20", "--token-ttl-seconds", "100000000"],
        &[("PFM_TEST_CLOCK_FILE", path)],
    )
}

/// Occurrences the node's poster has posted since it started.
fn postings(n: &Node) -> u64 {
    n.metric("pfm_scheduled_postings_total")
}

/// One user of the test: a main account splitting half and half into Pay and Save, and four
/// automatic schedules starting on [`START`].
struct User {
    tok: String,
    main: String,
    pay: String,
    save: String,
    /// The salary, in whole units (so that half of it is whole cents).
    salary: i64,
    coffee: i64,
}

/// The schedules, in the order (and so with the ids 1..=4) each user creates them.
const SALARY: u64 = 1;
const COFFEE: u64 = 2;
const RENT: u64 = 3;
const SWEEP: u64 = 4;
const RENT_CENTS: i64 = 700;
const SWEEP_CENTS: i64 = 1_000;

/// Registers user `i` on one node and builds its tree and schedules, alternating nodes.
fn user(nodes: [&Node; 2], name: &str, i: i64) -> User {
    let n = |k: usize| nodes[k % 2];
    let (st, v) = proc::request(
        n(0).addr,
        "POST",
        "/register",
        None,
        json!({"user_id": name, "password": "secret123", "initial_balance": INITIAL_CENTS / 100}),
    );
    assert_eq!(st, 200, "{v}");
    let main = v["uuid"].as_str().expect("uuid").to_string();
    let tok = proc::login(n(1).addr, name, "secret123");
    let child = |k: usize, name: &str| {
        let v = n(k).call(
            "POST",
            "/add_sub_account",
            &tok,
            json!({"parent_uuid": main, "name": name, "allocation": 0.5}),
        );
        v["uuid"].as_str().expect("uuid").to_string()
    };
    let (pay, save) = (child(0, "Pay"), child(1, "Save"));
    let u = User { tok, main, pay, save, salary: 100 + 2 * i, coffee: 3 + i };
    let schedules = [
        json!({"name": "Salary", "type": "deposit", "uuid": u.main, "amount": u.salary, "unit": "days"}),
        json!({"name": "Coffee", "type": "withdraw", "uuid": u.pay, "amount": u.coffee, "unit": "days"}),
        json!({"name": "Rent", "type": "withdraw", "uuid": u.main, "amount": RENT_CENTS / 100,
               "unit": "days", "every": 3}),
        json!({"name": "Sweep", "type": "move", "from_uuid": u.save, "to_uuid": u.pay,
               "amount": SWEEP_CENTS / 100, "unit": "weeks"}),
    ];
    for (k, mut s) in schedules.into_iter().enumerate() {
        s["start"] = json!(START);
        let v = n(k).call("POST", "/create_schedule", &u.tok, s);
        assert_eq!(v["schedule"]["id"], json!(k + 1), "{v}");
    }
    u
}

/// Occurrences of each schedule due by `today` (days since the epoch).
fn counts(today: i64) -> [(u64, i64); 4] {
    let start = pfm::domain::dates::parse_date(START).map(day_of).expect("start");
    let by = |every: i64| if today < start { 0 } else { (today - start) / every + 1 };
    [(SALARY, by(1)), (COFFEE, by(1)), (RENT, by(3)), (SWEEP, by(7))]
}

/// The account's balance and the `sch:` transaction ids of its log, in log order.
fn account(n: &Node, tok: &str, uuid: &str) -> (i64, Vec<String>) {
    let b = n.call("GET", &format!("/get_balance?uuid={uuid}"), tok, Value::Null);
    let t = n.call("GET", &format!("/get_transactions?uuid={uuid}"), tok, Value::Null);
    let ids = t["transactions"]
        .as_array()
        .expect("transactions")
        .iter()
        .filter_map(|x| x["TransactionID"].as_str())
        .filter(|id| id.starts_with("sch:"))
        .map(str::to_string)
        .collect();
    (cents(&b["balance"]), ids)
}

/// What `u` must show on day `today`, as one line per account for a clear message: each
/// balance, and each log's `sch:` ids.
fn expected(u: &User, today: i64) -> Vec<(i64, BTreeSet<String>)> {
    let c = counts(today);
    let n = |s: u64| c.iter().find(|x| x.0 == s).map_or(0, |x| x.1);
    let ids = |s: u64| (0..n(s)).map(move |k| format!("sch:{s}:{k}"));
    let half = u.salary * 100 / 2;
    // A deposit into main flows on whole into Pay and Save (half each), each share logged under
    // the deposit's id; a move's records are the transfer's own.
    vec![
        (INITIAL_CENTS - n(RENT) * RENT_CENTS, ids(SALARY).chain(ids(RENT)).collect()),
        (
            n(SALARY) * half - n(COFFEE) * u.coffee * 100 + n(SWEEP) * SWEEP_CENTS,
            ids(SALARY).chain(ids(COFFEE)).collect(),
        ),
        (n(SALARY) * half - n(SWEEP) * SWEEP_CENTS, ids(SALARY).collect()),
    ]
}

/// What node `n` shows of `u`, in the shape of [`expected`]; panics on an id logged twice.
fn shown(n: &Node, u: &User) -> Vec<(i64, BTreeSet<String>)> {
    [&u.main, &u.pay, &u.save]
        .into_iter()
        .map(|acc| {
            let (bal, ids) = account(n, &u.tok, acc);
            let set: BTreeSet<String> = ids.iter().cloned().collect();
            assert_eq!(set.len(), ids.len(), "an occurrence logged twice in {acc}: {ids:?}");
            (bal, set)
        })
        .collect()
}

/// /upcoming's occurrences up to `today` that are not posted.
fn open_until(n: &Node, u: &User, today: i64) -> Vec<Value> {
    let v = n.call("GET", "/upcoming?days=1", &u.tok, Value::Null);
    assert_eq!(v["today"], fmt_day(today), "the node does not read the test's clock: {v}");
    v["occurrences"]
        .as_array()
        .expect("occurrences")
        .iter()
        .filter(|o| {
            o["date"].as_str().is_some_and(|d| d <= fmt_day(today).as_str()) && o["state"] != "posted"
        })
        .cloned()
        .collect()
}

/// Moves the clock to `secs` and waits, by passes of both posters, until every user shows every
/// occurrence due by then posted; then asserts, after two more passes of each node, that both
/// nodes show each occurrence exactly once and the balances of exactly one posting of each.
fn moved_and_posted(nodes: &[&Node], clock: &Clock, users: &[User], secs: i64) {
    clock.set(secs);
    let today = day_of(secs);
    let end = Instant::now() + Duration::from_secs(180);
    for (i, u) in users.iter().enumerate() {
        let n = nodes[i % nodes.len()];
        while shown(n, u) != expected(u, today) {
            assert!(Instant::now() < end, "user {i}: {:?} after 180 s", open_until(n, u, today));
            proc::more_passes(nodes, 1, Duration::from_secs(120));
        }
    }
    proc::more_passes(nodes, 2, Duration::from_secs(120));
    for (i, u) in users.iter().enumerate() {
        for n in nodes {
            assert_eq!(shown(n, u), expected(u, today), "user {i} on {} on {}", n.addr, fmt_day(today));
            assert_eq!(open_until(n, u, today), Vec::<Value>::new(), "user {i}: open occurrences");
        }
    }
}

fn users(nodes: [&Node; 2], prefix: &str, k: i64) -> Vec<User> {
    (0..k).map(|i| user(nodes, &format!("{prefix}{i}"), i)).collect()
}

#[test]
fn two_nodes_catching_up_at_the_same_moment_post_every_occurrence_exactly_once() {
    let Some(db) =
        common::pg_database("two_nodes_catching_up_at_the_same_moment_post_every_occurrence_exactly_once")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Clock::new(dir.path());
    let (a, b) = (node(&db, &clock), node(&db, &clock));
    let users = users([&a, &b], "twin_post", 6);
    // Nothing is due yet: the schedules start tomorrow.
    proc::more_passes(&[&a, &b], 2, Duration::from_secs(120));
    for u in &users {
        assert_eq!(shown(&a, u), expected(u, day_of(T0)));
        assert_eq!(open_until(&b, u, day_of(T0)), Vec::<Value>::new());
    }
    // The first day, then a week, then two months at once: both nodes see the new day at the
    // same moment and race for every user.
    let mut t = T0;
    for days in [1, 6, 60, 1, 35] {
        t += days * DAY;
        let before = (postings(&a), postings(&b));
        moved_and_posted(&[&a, &b], &clock, &users, t);
        // Between them the two posters posted each newly due occurrence once: the occurrences
        // one poster found posted by the other, it did not count.
        let (da, db) = (postings(&a) - before.0, postings(&b) - before.1);
        let due = |day: i64| counts(day).iter().map(|c| c.1 as u64).sum::<u64>() * users.len() as u64;
        assert_eq!(da + db, due(day_of(t)) - due(day_of(t - days * DAY)), "posted by a: {da}, by b: {db}");
        eprintln!("{days} days on: node a posted {da} occurrences, node b {db}");
    }
}

#[test]
fn a_node_killed_in_the_middle_of_its_catch_up_and_restarted_posts_nothing_twice() {
    let Some(db) =
        common::pg_database("a_node_killed_in_the_middle_of_its_catch_up_and_restarted_posts_nothing_twice")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Clock::new(dir.path());
    let mut nodes = [node(&db, &clock), node(&db, &clock)];
    // Enough users and days that a catch-up takes a while: the kill lands in the middle of it.
    let users = users([&nodes[0], &nodes[1]], "killed_post", 12);
    let mut t = T0;
    for round in 0..3 {
        let before = day_of(t);
        t += 60 * DAY;
        clock.set(t);
        // Killed once some user's catch-up is in: the other users' are then under way or
        // still to come.
        let (victim, other) = (round % 2, (round + 1) % 2);
        let end = Instant::now() + Duration::from_secs(120);
        let main_balance = |u: &User| {
            let b = nodes[other].call("GET", &format!("/get_balance?uuid={}", u.main), &u.tok, Value::Null);
            cents(&b["balance"])
        };
        let mut started;
        loop {
            started = users.iter().filter(|u| main_balance(u) != expected(u, before)[0].0).count();
            if started > 0 {
                break;
            }
            assert!(Instant::now() < end, "round {round}: nothing posted in 120 s");
            std::thread::sleep(Duration::from_millis(2));
        }
        nodes[victim].kill();
        eprintln!("round {round}: killed a node when {started} of 12 users' catch-up had begun");
        // The other node alone finishes; then the killed one comes back on the same database.
        moved_and_posted(&[&nodes[other]], &clock, &users, t);
        nodes[victim] = node(&db, &clock);
        moved_and_posted(&[&nodes[0], &nodes[1]], &clock, &users, t);
        // And one more day, with both running.
        t += DAY;
        moved_and_posted(&[&nodes[0], &nodes[1]], &clock, &users, t);
    }
}
