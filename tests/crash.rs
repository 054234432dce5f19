//! Crash safety of the real binary (docs/durability.md): several users write concurrently (deposits,
//! withdrawals, transfers, new sub-accounts), the process is killed with SIGKILL at a random
//! moment mid-load, restarted on the same data directory, and checked:
//! - every acknowledged (200) write is present: deposit and withdrawal ids in the right log,
//!   transfers in the source's log, new accounts findable;
//! - money is conserved per user: the main account's total equals the last checked total plus the
//!   acknowledged deposits minus the acknowledged withdrawals, plus or minus exactly those
//!   unacknowledged (in-flight) ones whose record is present, so an operation is all or nothing;
//! - balances agree with their logs, and every read answers 200.
//!
//! `PFM_CRASH_CYCLES` sets the number of kill cycles (default 3; scripts/check/crash_cycles.sh runs 20),
//! `PFM_CRASH_SEED` replays a run (the seed is printed on failure).

mod common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cents;
use common::proc::{self, NoStart, Proc};
use serde_json::{json, Map, Value};

const SECRET: &str = "crash-test-secret-crash-test-secret";
const USERS: usize = 6;
const THREADS_PER_USER: usize = 2;
/// Cents.
const INITIAL: i64 = 100_000;
/// New sub-accounts per thread and cycle, so 20 cycles stay under the per-parent child limit.
const ADDS_PER_CYCLE: usize = 3;

/// Small deterministic generator (xorshift64*), so a failing run can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// pfm on `dir`, with the test's token secret and no rate limit in the way of the load.
/// Checkpoints every 50 ms, and 256 KiB journal segments (zero-filled ahead of use after their
/// first 4 KiB): kills land in the middle of checkpoints, spare fills and rotations too.
const ENV: [(&str, &str); 4] = [
    ("JWT_SECRET", SECRET),
    ("MAX_REQUESTS", "1000000000"),
    ("CHECKPOINT_INTERVAL_MS", "50"),
    ("JOURNAL_SEGMENT_BYTES", "262144"),
];

#[track_caller]
fn spawn(dir: &std::path::Path) -> Proc {
    proc::spawn(dir, &[], &ENV)
}

/// Why a call has no answer (not sent, or no complete answer): its outcome is unknown.
#[derive(Debug)]
struct Lost(String);

fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    tok: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), Lost> {
    let b = body.map(|b| b.to_string()).unwrap_or_default();
    let r = proc::send(addr, method, path, Some(tok), &[], &b).map_err(Lost)?;
    let v = serde_json::from_str(&r.text).map_err(|e| Lost(format!("{e}: {:?}", r.text)))?;
    Ok((r.status, v))
}

/// A read after restart: must answer 200; connection failures are retried for a while.
#[track_caller]
fn read(addr: SocketAddr, tok: &str, path: &str) -> Value {
    let mut tries = 0;
    loop {
        match call(addr, "GET", path, tok, None) {
            Ok((200, v)) => return v,
            Ok((st, v)) => panic!("GET {path} answered {st}: {v}"),
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("GET {path}: {e:?}, retrying");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("GET {path}: {e:?}"),
        }
    }
}

#[track_caller]
fn write_ok(addr: SocketAddr, tok: &str, path: &str, body: Value) -> Value {
    match call(addr, "POST", path, tok, Some(&body)) {
        Ok((200, v)) => v,
        other => panic!("POST {path} {body}: {other:?}"),
    }
}

fn money(c: i64) -> String {
    format!("{}.{:02}", c / 100, c % 100)
}

fn sign(user: &str) -> String {
    let mut c = Map::new();
    c.insert("user_id".into(), json!(user));
    c.insert("role".into(), json!("user"));
    c.insert("iat".into(), json!(1_752_137_415));
    pfm::auth::jwt::Jwt::new(SECRET.as_bytes()).sign(&c).expect("sign")
}

/// One user's tree: main (initial 1000) with children A and B at allocation 0.5 each.
struct User {
    tok: String,
    main: String,
    a: String,
    b: String,
}

impl User {
    fn account(&self, i: u64) -> &str {
        [&self.main, &self.a, &self.b][i as usize % 3]
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// A deposit into main with a unique transaction number.
    Deposit { id: String, amount: i64 },
    /// A withdrawal from one account with a unique transaction number.
    Withdraw { account: String, id: String, amount: i64 },
    /// A transfer; counted by the Internal Transfer withdrawals in the source's log.
    Move { from: String },
    /// A new inactive sub-account (allocation 0, so no money reaches it).
    Add { name: String, uuid: Option<String> },
}

/// What one thread saw: its acknowledged writes, and at most one whose answer never came.
#[derive(Default)]
struct Outcome {
    acked: Vec<Op>,
    unknown: Option<Op>,
    /// Why the unknown one got no answer (the kill, normally).
    why: String,
    errors: Vec<String>,
}

fn worker(
    addr: SocketAddr,
    user: &User,
    tag: &str,
    seed: u64,
    stop: &AtomicBool,
    acks: &AtomicU64,
) -> Outcome {
    let mut rng = Rng(seed | 1);
    let mut out = Outcome::default();
    let mut adds = 0;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let roll = rng.below(100);
        let (path, body, op) = if roll < 40 {
            let (id, amount) = (format!("D{tag}-{n}"), 100 + rng.below(1900) as i64);
            let body = json!({"uuid": user.main, "amount": money(amount), "channel": "crash", "transaction_number": id});
            ("/deposit", body, Op::Deposit { id, amount })
        } else if roll < 65 {
            let (account, id, amount) =
                (user.account(rng.next()).to_string(), format!("W{tag}-{n}"), 1 + rng.below(300) as i64);
            let body = json!({"uuid": account, "amount": money(amount), "channel": "crash", "transaction_number": id});
            ("/withdraw", body, Op::Withdraw { account, id, amount })
        } else if roll < 92 || adds >= ADDS_PER_CYCLE {
            let from = rng.below(3);
            let to = from + 1 + rng.below(2);
            let (from, to) = (user.account(from).to_string(), user.account(to).to_string());
            let body = json!({"from_uuid": from, "to_uuid": to, "amount": money(1 + rng.below(300) as i64)});
            ("/move_balance", body, Op::Move { from })
        } else {
            adds += 1;
            let name = format!("S{tag}-{n}");
            let parent = if rng.below(2) == 0 { &user.a } else { &user.b };
            let body = json!({"parent_uuid": parent, "name": name, "allocation": 0});
            ("/add_sub_account", body, Op::Add { name, uuid: None })
        };
        match call(addr, "POST", path, &user.tok, Some(&body)) {
            Ok((200, v)) => {
                let op = match op {
                    Op::Add { name, .. } => Op::Add { name, uuid: v["uuid"].as_str().map(String::from) },
                    op => op,
                };
                out.acked.push(op);
                acks.fetch_add(1, Ordering::Relaxed);
            }
            // Not enough money in the source: refused, nothing changed.
            Ok((400, v))
                if v["error"].as_str().is_some_and(|e| e.starts_with("Failed: Insufficient balance!")) => {}
            Ok((st, v)) => {
                out.errors.push(format!("POST {path} {body} answered {st}: {v}"));
                break;
            }
            Err(Lost(why)) => {
                out.unknown = Some(op);
                out.why = why;
                break;
            }
        }
    }
    out
}

/// Per-user knowledge carried from one check to the next.
#[derive(Default)]
struct Model {
    total: i64,
    deposits: HashSet<String>,
    withdrawals: HashSet<(String, String)>,
    accounts: HashMap<String, String>,
    /// Accounts whose creation was in flight at a kill and that turned out to exist.
    accounts_unacked: usize,
    /// Internal Transfer withdrawals seen in each account's log.
    moves_out: HashMap<String, usize>,
}

/// Transaction ids of one log by (type, id), and the log itself.
fn log(addr: SocketAddr, tok: &str, uuid: &str) -> Vec<Value> {
    let v = read(addr, tok, &format!("/get_transactions?uuid={uuid}"));
    let txs = v["transactions"].as_array().cloned().unwrap_or_default();
    assert_eq!(v["transaction_count"], json!(txs.len()), "transaction_count of {uuid}");
    txs
}

fn count(txs: &[Value], kind: &str, id: &str) -> usize {
    txs.iter().filter(|t| t["Type"] == kind && t["TransactionID"] == id).count()
}

/// Checks one user after a restart against what its threads saw, then moves the model on.
/// Returns how many of the in-flight operations turned out applied.
fn check(addr: SocketAddr, user: &User, m: &mut Model, seen: &[&Outcome], cycle: usize) -> usize {
    let logs: HashMap<&str, Vec<Value>> =
        [&user.main, &user.a, &user.b].into_iter().map(|u| (u.as_str(), log(addr, &user.tok, u))).collect();
    let main_log = &logs[user.main.as_str()];
    let ctx = format!("cycle {cycle}, user main {}", user.main);
    let mut expected = m.total;
    let mut moves_acked: HashMap<&str, usize> = HashMap::new();
    let mut moves_unknown: HashMap<&str, usize> = HashMap::new();
    let mut adds_unknown = 0;
    let mut applied = 0;
    for o in seen {
        for op in &o.acked {
            match op {
                Op::Deposit { id, amount } => {
                    assert_eq!(count(main_log, "Deposit", id), 1, "acknowledged deposit {id} lost ({ctx})");
                    m.deposits.insert(id.clone());
                    expected += amount;
                }
                Op::Withdraw { account, id, amount } => {
                    let n = count(&logs[account.as_str()], "Withdrawal", id);
                    assert_eq!(n, 1, "acknowledged withdrawal {id} lost ({ctx})");
                    m.withdrawals.insert((account.clone(), id.clone()));
                    expected -= amount;
                }
                Op::Move { from } => *moves_acked.entry(from.as_str()).or_default() += 1,
                Op::Add { name, uuid } => {
                    let uuid = uuid.clone().expect("add_sub_account answered a uuid");
                    m.accounts.insert(uuid, name.clone());
                }
            }
        }
        match &o.unknown {
            Some(Op::Deposit { id, amount }) => match count(main_log, "Deposit", id) {
                0 => {}
                1 => {
                    applied += 1;
                    m.deposits.insert(id.clone());
                    expected += amount;
                }
                n => panic!("deposit {id} recorded {n} times ({ctx})"),
            },
            Some(Op::Withdraw { account, id, amount }) => {
                match count(&logs[account.as_str()], "Withdrawal", id) {
                    0 => {}
                    1 => {
                        m.withdrawals.insert((account.clone(), id.clone()));
                        expected -= amount;
                    }
                    n => panic!("withdrawal {id} recorded {n} times ({ctx})"),
                }
            }
            Some(Op::Move { from }) => *moves_unknown.entry(from.as_str()).or_default() += 1,
            Some(Op::Add { .. }) => adds_unknown += 1,
            None => {}
        }
    }
    // Everything acknowledged in earlier cycles is still there.
    for id in &m.deposits {
        assert_eq!(count(main_log, "Deposit", id), 1, "deposit {id} of an earlier cycle lost ({ctx})");
    }
    for (account, id) in &m.withdrawals {
        let n = count(&logs[account.as_str()], "Withdrawal", id);
        assert_eq!(n, 1, "withdrawal {id} of an earlier cycle lost ({ctx})");
    }
    for (uuid, name) in &m.accounts {
        let v = read(addr, &user.tok, &format!("/find_account_by_uuid?uuid={uuid}"));
        assert_eq!(v["name"].as_str(), Some(name.as_str()), "account {name} ({ctx})");
        assert_eq!(cents(&v["total_balance"]), 0, "inactive account {name} holds money ({ctx})");
    }
    let all = read(addr, &user.tok, &format!("/list_all_accounts?uuid={}", user.main));
    let n = all["total_accounts"].as_u64().expect("total_accounts") as usize;
    let known = 3 + m.accounts.len() + m.accounts_unacked;
    assert!(
        n >= known && n <= known + adds_unknown,
        "{n} accounts, {known} known + {adds_unknown} unknown ({ctx})"
    );
    m.accounts_unacked += n - known;
    applied += n - known;
    // Transfers: each applied one left exactly one Internal Transfer withdrawal in its source.
    for (uuid, txs) in &logs {
        let n =
            txs.iter().filter(|t| t["Type"] == "Withdrawal" && t["Channel"] == "Internal Transfer").count();
        let before = m.moves_out.get(*uuid).copied().unwrap_or(0);
        let acked = moves_acked.get(uuid).copied().unwrap_or(0);
        let unknown = moves_unknown.get(uuid).copied().unwrap_or(0);
        assert!(
            n >= before + acked && n <= before + acked + unknown,
            "transfers out of {uuid}: {n} in the log, {before} before + {acked} acknowledged + {unknown} unknown ({ctx})"
        );
        applied += n - before - acked;
        m.moves_out.insert(uuid.to_string(), n);
    }
    // Money: the total is exactly what the applied operations make it, and the parts add up.
    let total =
        cents(&read(addr, &user.tok, &format!("/compute_total_balance?uuid={}", user.main))["total_balance"]);
    assert_eq!(total, expected, "money not conserved ({ctx})");
    let mut parts = 0;
    for (uuid, txs) in &logs {
        let f = read(addr, &user.tok, &format!("/find_account_by_uuid?uuid={uuid}"));
        let own = cents(&f["balance"]);
        if let Some(last) = txs.last() {
            assert_eq!(cents(&last["Balance"]), own, "balance of {uuid} disagrees with its log ({ctx})");
        }
        parts += if *uuid == user.main { own } else { cents(&f["total_balance"]) };
    }
    assert_eq!(parts, total, "main total is not the sum of its parts ({ctx})");
    m.total = total;
    applied
}

#[test]
fn acknowledged_writes_survive_kill_9_under_concurrent_load() {
    let cycles: usize = std::env::var("PFM_CRASH_CYCLES").ok().and_then(|c| c.parse().ok()).unwrap_or(3);
    let seed: u64 = std::env::var("PFM_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64)
    });
    eprintln!("PFM_CRASH_SEED={seed} PFM_CRASH_CYCLES={cycles}");
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = spawn(dir.path());
    let users: Vec<User> = (0..USERS)
        .map(|i| {
            let id = format!("crash{i}");
            let tok = sign(&id);
            let v = write_ok(
                p.addr,
                &tok,
                "/register",
                json!({"user_id": id, "initial_balance": money(INITIAL)}),
            );
            let main = v["uuid"].as_str().expect("uuid").to_string();
            let child = |name: &str| {
                let body = json!({"parent_uuid": main, "name": name, "allocation": 0.5});
                write_ok(p.addr, &tok, "/add_sub_account", body)["uuid"].as_str().expect("uuid").to_string()
            };
            let (a, b) = (child("A"), child("B"));
            User { tok, main, a, b }
        })
        .collect();
    let users = Arc::new(users);
    let mut models: Vec<Model> = (0..USERS).map(|_| Model { total: INITIAL, ..Model::default() }).collect();
    for cycle in 0..cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..USERS * THREADS_PER_USER)
            .map(|t| {
                let (users, stop, acks, addr) = (users.clone(), stop.clone(), acks.clone(), p.addr);
                let s = rng.next();
                std::thread::spawn(move || {
                    let u = t / THREADS_PER_USER;
                    worker(addr, &users[u], &format!("{cycle}.{t}"), s, &stop, &acks)
                })
            })
            .collect();
        // Kill at a random moment once the load is under way.
        let started = Instant::now();
        while acks.load(Ordering::Relaxed) < 30 && started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(rng.below(1200)));
        p.kill();
        stop.store(true, Ordering::Relaxed);
        let outcomes: Vec<Outcome> = handles.into_iter().map(|h| h.join().expect("worker")).collect();
        let errors: Vec<&String> = outcomes.iter().flat_map(|o| &o.errors).collect();
        assert!(errors.is_empty(), "cycle {cycle}, seed {seed}: unexpected answers under load: {errors:#?}");
        let acked: usize = outcomes.iter().map(|o| o.acked.len()).sum();
        let unknown = outcomes.iter().filter(|o| o.unknown.is_some()).count();
        let why: HashSet<&str> = outcomes.iter().map(|o| o.why.as_str()).collect();
        p = spawn(dir.path());
        let mut applied = 0;
        for (u, user) in users.iter().enumerate() {
            let seen: Vec<&Outcome> =
                outcomes[u * THREADS_PER_USER..(u + 1) * THREADS_PER_USER].iter().collect();
            applied += check(p.addr, user, &mut models[u], &seen, cycle);
        }
        eprintln!(
            "cycle {cycle}: {acked} acknowledged writes all present, money conserved; {unknown} in flight at \
             kill -9 ({why:?}), {applied} of them applied whole, the others not at all"
        );
    }
}

/// A size-limited tmpfs, unmounted when dropped (mounting needs root, as in CI).
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    /// `None` (with a note) where tmpfs cannot be mounted: a machine without root. CI runs as
    /// root, where the test runs for real.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("tempdir");
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status();
        if !st.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("skipped: cannot mount a tmpfs here (this test needs root): {st:?}");
            return None;
        }
        Some(Tmpfs(dir))
    }
    fn resize(&self, size: &str) {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.0.path())
            .status()
            .expect("run mount");
        assert!(st.success(), "remount: {st:?}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// a full disk during a write answers that write with a JSON 5xx, leaves nothing
/// partial, and reads go on; once space is back, a restart shows every acknowledged write and
/// none of the failed ones.
#[test]
fn full_disk_fails_the_write_whole_and_reads_go_on() {
    let Some(fs) = Tmpfs::mount("3m") else { return };
    let data = fs.0.path().join("data");
    let p = spawn(&data);
    let tok = sign("full");
    let v =
        write_ok(p.addr, &tok, "/register", json!({"user_id": "full", "initial_balance": money(INITIAL)}));
    let main = v["uuid"].as_str().expect("uuid").to_string();
    for name in ["A", "B"] {
        write_ok(
            p.addr,
            &tok,
            "/add_sub_account",
            json!({"parent_uuid": main, "name": name, "allocation": 0.5}),
        );
    }
    let channel = "c".repeat(256);
    let deposit = |addr, id: &str| {
        let body = json!({"uuid": main, "amount": "1.01", "channel": channel, "transaction_number": id});
        call(addr, "POST", "/deposit", &tok, Some(&body)).expect("an answer")
    };
    let mut acked = 0i64;
    let (status, err) = loop {
        let (st, v) = deposit(p.addr, &format!("F{acked}"));
        if st != 200 {
            break (st, v);
        }
        acked += 1;
        assert!(acked < 1_000_000, "the disk never filled");
    };
    assert!((500..600).contains(&status) && err["success"] == json!(false), "{status} {err}");
    assert_eq!(err["status"], json!(status), "{err}");
    let total =
        |addr| cents(&read(addr, &tok, &format!("/compute_total_balance?uuid={main}"))["total_balance"]);
    let expected = INITIAL + 101 * acked;
    // Reads go on, and show nothing of the failed write.
    assert_eq!(total(p.addr), expected, "after {acked} deposits and a full disk");
    let ids = |addr| -> HashSet<String> {
        log(addr, &tok, &main).iter().filter_map(|t| t["TransactionID"].as_str().map(String::from)).collect()
    };
    assert!(!ids(p.addr).contains(&format!("F{acked}")), "the failed deposit is visible");
    // A second write fails too, unless the disk found room meanwhile (a spare segment that
    // could not be finished is removed): then it counts as acknowledged like any other.
    let (st, v) = deposit(p.addr, "G");
    let g_acked = st == 200;
    assert!(g_acked || (500..600).contains(&st), "a second write on a full disk: {st} {v}");
    let expected = expected + if g_acked { 101 } else { 0 };
    // Space comes back; a restart keeps every acknowledged write and none of the failed ones.
    fs.resize("64m");
    drop(p);
    let p = spawn(&data);
    assert_eq!(total(p.addr), expected, "after a restart");
    let seen = ids(p.addr);
    assert!((0..acked).all(|i| seen.contains(&format!("F{i}"))), "an acknowledged deposit is lost");
    assert!(!seen.contains(&format!("F{acked}")), "a failed deposit was applied");
    assert_eq!(seen.contains("G"), g_acked, "the second deposit's answer and storage disagree");
    assert_eq!(deposit(p.addr, "H").0, 200, "writes work again");
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dest = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).expect("copy");
        }
    }
}

fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let e = e.expect("entry");
        if e.file_type().expect("type").is_dir() {
            files(&e.path(), out);
        } else {
            out.push(e.path());
        }
    }
}

/// one flipped byte anywhere in the data directory either leaves every
/// acknowledged write intact (it hit unused space, or the engine repairs it from a second copy)
/// or makes pfm refuse to start with a message naming the file (its path inside the data
/// directory; the offset is not checked here, as only the engine knows its records); it never
/// drops acknowledged writes silently. Bytes are picked among the non-zero ones, where the records
/// are.
#[test]
fn a_flipped_byte_refuses_to_start_or_loses_nothing() {
    let seed: u64 = std::env::var("PFM_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64)
    });
    eprintln!("PFM_CRASH_SEED={seed}");
    let mut rng = Rng(seed | 1);
    let root = tempfile::tempdir().expect("tempdir");
    let pristine = root.path().join("pristine");
    let p = spawn(&pristine);
    let tok = sign("flip");
    let v =
        write_ok(p.addr, &tok, "/register", json!({"user_id": "flip", "initial_balance": money(INITIAL)}));
    let main = v["uuid"].as_str().expect("uuid").to_string();
    for name in ["A", "B"] {
        write_ok(
            p.addr,
            &tok,
            "/add_sub_account",
            json!({"parent_uuid": main, "name": name, "allocation": 0.5}),
        );
    }
    let n = 300;
    for i in 0..n {
        let body =
            json!({"uuid": main, "amount": "1.01", "channel": "flip", "transaction_number": format!("F{i}")});
        write_ok(p.addr, &tok, "/deposit", body);
    }
    drop(p); // kill -9: whatever was acknowledged is all there is
    for trial in 0..8 {
        let dir = root.path().join(format!("t{trial}"));
        copy_dir(&pristine, &dir);
        let mut candidates = Vec::new();
        files(&dir, &mut candidates);
        candidates.sort();
        let (file, offset) = loop {
            let f = &candidates[rng.below(candidates.len() as u64) as usize];
            let bytes = std::fs::read(f).expect("read");
            let nonzero: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] != 0).collect();
            if !nonzero.is_empty() {
                break (f.clone(), nonzero[rng.below(nonzero.len() as u64) as usize]);
            }
        };
        let mut bytes = std::fs::read(&file).expect("read");
        bytes[offset] ^= 1 << rng.below(8);
        std::fs::write(&file, &bytes).expect("write");
        let what = format!("trial {trial}: byte {offset} of {} flipped (seed {seed})", file.display());
        match proc::try_spawn(&dir, &[], &ENV) {
            Err(NoStart { status, log: text }) => {
                assert!(status.is_some_and(|s| !s.success()), "{what}: {status:?}");
                // The file's path inside the data directory (an absolute path contains it too).
                let name = file.strip_prefix(&dir).expect("inside").to_str().expect("utf-8 path");
                assert!(text.contains(name), "{what}: refused without naming {name}:\n{text}");
                eprintln!("{what}: refused to start");
            }
            Ok(p) => {
                let seen: HashSet<String> = log(p.addr, &tok, &main)
                    .iter()
                    .filter_map(|t| t["TransactionID"].as_str().map(String::from))
                    .collect();
                let lost: Vec<String> =
                    (0..n).map(|i| format!("F{i}")).filter(|id| !seen.contains(id)).collect();
                assert!(
                    lost.is_empty(),
                    "{what}: started, but {} acknowledged deposits are gone",
                    lost.len()
                );
                let total = cents(
                    &read(p.addr, &tok, &format!("/compute_total_balance?uuid={main}"))["total_balance"],
                );
                assert_eq!(total, INITIAL + 101 * n as i64, "{what}: started, money changed");
                eprintln!("{what}: started, everything intact");
            }
        }
    }
}

/// A second server on a data directory in use refuses to start and says why, rather than
/// calling the storage damaged; the first one goes on serving.
#[test]
fn a_second_server_on_the_same_data_directory_says_it_is_in_use() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("d");
    let p = spawn(&dir);
    let tok = sign("busy");
    let v =
        write_ok(p.addr, &tok, "/register", json!({"user_id": "busy", "initial_balance": money(INITIAL)}));
    let main = v["uuid"].as_str().expect("uuid").to_string();
    match proc::try_spawn(&dir, &[], &ENV) {
        Err(NoStart { status, log: text }) => {
            assert!(status.is_some_and(|s| !s.success()), "{status:?}");
            assert!(text.contains("in use by another process"), "refused without saying why:\n{text}");
            assert!(!text.contains("damaged"), "an in-use directory called damaged:\n{text}");
        }
        Ok(_) => panic!("a second server started on a data directory in use"),
    }
    let v = read(p.addr, &tok, &format!("/compute_total_balance?uuid={main}"));
    assert_eq!(cents(&v["total_balance"]), INITIAL, "the first server's answer changed: {v}");
}

/// A file that cannot be read at start refuses to start, naming it (here a journal segment
/// that is a directory, whose read fails as a disk's EIO would).
#[test]
fn an_unreadable_journal_file_refuses_to_start_naming_it() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("d");
    let p = spawn(&dir);
    let tok = sign("eio");
    write_ok(p.addr, &tok, "/register", json!({"user_id": "eio", "initial_balance": money(INITIAL)}));
    drop(p); // kill -9
    let bad = dir.join("journal").join(format!("{:020}.wal", u64::MAX / 2));
    std::fs::create_dir(&bad).expect("mkdir");
    match proc::try_spawn(&dir, &[], &ENV) {
        Err(NoStart { status, log: text }) => {
            assert!(status.is_some_and(|s| !s.success()), "{status:?}");
            let name = bad.strip_prefix(&dir).expect("inside").to_str().expect("utf-8 path");
            assert!(text.contains(name), "refused without naming {name}:\n{text}");
        }
        Ok(_) => panic!("started over a journal file it cannot read"),
    }
}
