//! Idempotency-Key (docs/api.md, idempotency keys) over real HTTP: replays byte for byte, 422 on other
//! parameters, 409 while the first request runs and has not made its write, a retry that waits
//! for a write awaiting durability (also after its client went away) and replays it, 4xx kept,
//! 5xx not, 24 h expiry, the bound per user, and durability across restarts.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::store::HookedServer;
use common::{proc, Body, Srv};
use serde_json::{json, Value};

const BAD_KEY: &str = "Idempotency-Key must be 1 to 255 visible ASCII characters";
const MISMATCH: &str = "Idempotency-Key was already used with other parameters";
const RUNNING: &str = "A request with this Idempotency-Key is still running";

fn keyed(s: &Srv, tok: &str, method: &str, path: &str, key: &str, body: Value) -> common::Resp {
    let auth = format!("Bearer {tok}");
    s.raw(method, path, &[("Authorization", &auth), ("Idempotency-Key", key)], Body::Json(body))
}

fn deposit(s: &Srv, tok: &str, key: &str, uuid: &str, amount: &str) -> common::Resp {
    keyed(s, tok, "POST", "/deposit", key, json!({"uuid": uuid, "amount": amount, "channel": "ABSA"}))
}

fn knowledge(s: &Srv, tok: &str) -> u64 {
    s.get(tok, "/changes", "since=0&limit=1").ok().json["server_knowledge"].as_u64().unwrap()
}

#[test]
fn the_same_key_and_request_replay_the_first_answer_and_write_nothing() {
    let s = Srv::start();
    let (tok, main) = s.user("id_replay", "0");
    let first = deposit(&s, &tok, "k-1", &main, "10");
    first.ok();
    assert_eq!(first.header("idempotent-replayed"), None);
    let k = knowledge(&s, &tok);
    s.clock.advance_micros(1_500_000);
    let again = deposit(&s, &tok, "k-1", &main, "10");
    assert_eq!(again.status, 200);
    assert_eq!(again.text, first.text, "the same bytes, first timing included");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.header("content-type"), Some("application/json"));
    assert_eq!(s.balance(&tok, &main), "10");
    assert_eq!(s.txs(&tok, &main).len(), 1);
    assert_eq!(knowledge(&s, &tok), k, "a replay writes nothing");
    // Another key is another request.
    deposit(&s, &tok, "k-2", &main, "10").ok();
    assert_eq!(s.balance(&tok, &main), "20");
    // A keyed creation replays the same new account instead of making a second one.
    let body = json!({"parent_uuid": main, "name": "Food", "allocation": 0.5});
    let c1 = keyed(&s, &tok, "POST", "/add_sub_account", "k-3", body.clone());
    c1.ok();
    let c2 = keyed(&s, &tok, "POST", "/add_sub_account", "k-3", body);
    assert_eq!((c2.status, c2.text.as_str()), (200, c1.text.as_str()));
    let kids = s.get(&tok, "/list_child_accounts", &format!("uuid={main}")).ok().json["child_count"].clone();
    assert_eq!(kids, json!(1));
    // DELETE with the key in a query string.
    let food = c1.s("uuid");
    let auth = format!("Bearer {tok}");
    let del = |k: &str| {
        s.raw(
            "DELETE",
            &format!("/delete?uuid={food}"),
            &[("Authorization", &auth), ("Idempotency-Key", k)],
            Body::None,
        )
    };
    let d1 = del("k-4");
    d1.ok();
    let d2 = del("k-4");
    assert_eq!(
        (d2.status, d2.text.as_str(), d2.header("idempotent-replayed")),
        (200, d1.text.as_str(), Some("true"))
    );
}

#[test]
fn the_same_key_with_other_parameters_is_a_422_and_keys_are_per_user() {
    let s = Srv::start();
    let (tok, main) = s.user("id_mismatch", "0");
    deposit(&s, &tok, "k", &main, "10").ok();
    deposit(&s, &tok, "k", &main, "11").fails(422, MISMATCH);
    // Another path, or the same body under another content type, is another request too.
    let w =
        keyed(&s, &tok, "POST", "/withdraw", "k", json!({"uuid": main, "amount": "10", "channel": "ABSA"}));
    w.fails(422, MISMATCH);
    let auth = format!("Bearer {tok}");
    let form = format!("uuid={main}&amount=10&channel=ABSA");
    s.raw("POST", "/deposit", &[("Authorization", &auth), ("Idempotency-Key", "k")], Body::Form(&form))
        .fails(422, MISMATCH);
    assert_eq!(s.balance(&tok, &main), "10");
    // A 422 is not kept: the original request still replays.
    assert_eq!(deposit(&s, &tok, "k", &main, "10").header("idempotent-replayed"), Some("true"));
    // Keys belong to their user.
    let (tok2, main2) = s.user("id_mismatch2", "0");
    deposit(&s, &tok2, "k", &main2, "11").ok();
    assert_eq!(deposit(&s, &tok2, "k", &main2, "11").header("idempotent-replayed"), Some("true"));
    assert_eq!(s.balance(&tok2, &main2), "11");
}

#[test]
fn a_key_whose_first_request_still_runs_is_a_409() {
    let s = Srv::start();
    let (tok, main) = s.user("id_running", "0");
    let app = s.run.as_ref().unwrap().app.clone();
    // Multi-threaded: connections opened here (PostgreSQL) keep being driven between block_ons.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    // Hold the user's write lock: the first request waits for it, holding its key.
    let held = rt.block_on(app.users.lock("id_running")).unwrap();
    let first = std::thread::scope(|scope| {
        let first = scope.spawn(|| deposit(&s, &tok, "slow", &main, "5"));
        // Until the first request has marked its key running (it then waits for the lock).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !app.users.idem_running("id_running", "slow") {
            assert!(std::time::Instant::now() < deadline, "the first request never marked its key");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!first.is_finished());
        deposit(&s, &tok, "slow", &main, "5").fails(409, RUNNING);
        // Even with other parameters: the key is busy.
        deposit(&s, &tok, "slow", &main, "6").fails(409, RUNNING);
        // Other keys are not blocked by the check (they wait for the lock like any write).
        drop(held);
        first.join().unwrap()
    });
    first.ok();
    let again = deposit(&s, &tok, "slow", &main, "5");
    assert_eq!(
        (again.text.as_str(), again.header("idempotent-replayed")),
        (first.text.as_str(), Some("true"))
    );
    assert_eq!(s.balance(&tok, &main), "5");
}

/// The pipelined commit of the embedded engine: a request whose write is made and waits for
/// durability has its answer decided, also once its client has gone. A retry then waits for that
/// write and replays its answer (a 422 with other parameters) rather than answering "still
/// running"; after it, retries replay at once, and the deposit is there once. (Only the embedded
/// engine pipelines: a shared engine commits before the request lets go of the user.)
#[test]
fn a_retry_while_the_keyed_write_awaits_durability_after_its_client_went_away_replays_it() {
    // Acknowledgements held back while `open` is false: the journal writes as usual, but the
    // writer keeps waiting for durability for as long as the test wants. `held`: writes now held.
    let open = Arc::new(tokio::sync::watch::channel(true).0);
    let held = Arc::new(AtomicUsize::new(0));
    let (gate, count) = (open.clone(), held.clone());
    let srv = HookedServer::start(
        "id_gone",
        |_| {},
        |store| {
            store.commit = Box::new(move |durable| {
                let mut open = gate.subscribe();
                let hold = !*open.borrow();
                let held = count.clone();
                Box::pin(async move {
                    let res = durable.await;
                    if hold {
                        // Counted once the writer waits: it has queued the write and made its
                        // state (the key included) the one the next writer builds on.
                        held.fetch_add(1, Ordering::SeqCst);
                        let _ = open.wait_for(|o| *o).await;
                        held.fetch_sub(1, Ordering::SeqCst);
                    }
                    res
                })
            })
        },
    );
    let (addr, tok) = (srv.addr, srv.token.clone());
    let call = |key: Option<&str>, path: &str, body: &str| {
        let key: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
        proc::send(addr, "POST", path, Some(&tok), &key, body).unwrap_or_else(|e| panic!("POST {path}: {e}"))
    };
    let reg = call(None, "/register", r#"{"user_id":"id_gone","initial_balance":0}"#);
    assert_eq!(reg.status, 200, "{}", reg.text);
    let main = reg.json["uuid"].as_str().unwrap().to_string();
    let body = |amount: &str| format!(r#"{{"uuid":"{main}","amount":"{amount}","channel":"ABSA"}}"#);
    // The first request: its write is queued, then its client goes away before the answer.
    open.send_replace(false);
    let first = body("5");
    let mut s = TcpStream::connect(addr).unwrap();
    let req = format!(
        "POST /deposit HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {tok}\r\nIdempotency-Key: gone\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{first}",
        first.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while held.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the write never reached its wait for durability");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(s);
    // A retry waits for it at most the lock wait, then is told the request still runs.
    srv.app.users.set_lock_wait(Duration::from_millis(100));
    call(Some("gone"), "/deposit", &first).fails(409, RUNNING);
    srv.app.users.set_lock_wait(pfm::store::users::LOCK_WAIT);
    // Retries while the write waits for durability, with the same parameters and with others.
    let (same, other) = std::thread::scope(|sc| {
        let same = sc.spawn(|| call(Some("gone"), "/deposit", &first));
        let other = sc.spawn(|| call(Some("gone"), "/deposit", &body("6")));
        // The write becomes durable once both wait for it (or have answered without waiting).
        let deadline = Instant::now() + Duration::from_secs(20);
        while srv.app.users.idem_waiting("id_gone") < 2 && !(same.is_finished() && other.is_finished()) {
            assert!(Instant::now() < deadline, "the retries neither answered nor waited");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(held.load(Ordering::SeqCst), 1, "still waiting for durability");
        open.send_replace(true);
        (same.join().unwrap(), other.join().unwrap())
    });
    same.ok();
    assert_eq!(same.header("idempotent-replayed"), Some("true"), "{}", same.text);
    assert_eq!((same.n("amount"), same.n("balance")), ("5".to_string(), "5".to_string()));
    other.fails(422, MISMATCH);
    // After it: the same answer, byte for byte, at once.
    let again = call(Some("gone"), "/deposit", &first);
    assert_eq!((again.status, again.text.as_str()), (200, same.text.as_str()));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    call(Some("gone"), "/deposit", &body("6")).fails(422, MISMATCH);
    let bal = proc::send(addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), &[], "").unwrap();
    assert_eq!(bal.ok().n("balance"), "5");
    let txs =
        proc::send(addr, "GET", &format!("/get_transactions?uuid={main}"), Some(&tok), &[], "").unwrap();
    assert_eq!(txs.ok().json["transaction_count"], json!(1));
    drop(srv);
}

#[test]
fn handler_4xx_answers_are_kept_and_replayed() {
    let s = Srv::start();
    let (tok, main) = s.user("id_4xx", "0");
    let k = knowledge(&s, &tok);
    // Insufficient funds: a 400 from the handler, under the lock.
    let w = |key: &str| {
        keyed(&s, &tok, "POST", "/withdraw", key, json!({"uuid": main, "amount": "5", "channel": "c"}))
    };
    let first = w("w-1");
    assert_eq!(first.status, 400, "{}", first.text);
    // Money arrives; the same key still answers what the first request got.
    s.deposit(&tok, &main, "50").ok();
    s.clock.advance_micros(3_000_000);
    let again = w("w-1");
    assert_eq!((again.status, again.text.as_str()), (400, first.text.as_str()));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(s.balance(&tok, &main), "50");
    // A parameter error before any lock, and an unknown account, are kept too.
    let p = deposit(&s, &tok, "d-1", &main, "abc");
    p.fails(400, "amount must be numeric");
    assert_eq!(deposit(&s, &tok, "d-1", &main, "abc").text, p.text);
    let nf = deposit(&s, &tok, "d-2", "nope", "1");
    assert_eq!(nf.status, 403);
    assert_eq!(deposit(&s, &tok, "d-2", "nope", "1").header("idempotent-replayed"), Some("true"));
    // Keeping an answer is no data write: the knowledge moved only for the plain deposit.
    assert_eq!(knowledge(&s, &tok), k + 1);
    // A new key runs the request again, now with the money there.
    w("w-2").ok();
}

/// An error answer can echo a parameter without a length limit (SPEC 3.4: `uuid`), so a 1 MiB
/// request could keep a 6 MiB answer for a day, a thousand times per user. Such answers are not
/// kept: they changed nothing, so a retry runs again and gets the same answer.
#[test]
fn large_error_answers_are_not_kept() {
    let s = Srv::start();
    let (tok, _) = s.user("id_big", "0");
    let del = |key: &str, uuid: &str| keyed(&s, &tok, "DELETE", "/delete", key, json!({"uuid": uuid}));
    let huge = format!("acc{}", "\u{1}".repeat(40_000));
    let first = del("big-1", &huge);
    assert_eq!(first.status, 404, "{}", &first.text[..200]);
    assert!(first.text.len() > 200_000, "the answer echoes the uuid: {}", first.text.len());
    let again = del("big-1", &huge);
    assert_eq!((again.status, again.text.len()), (404, first.text.len()));
    assert_eq!(again.header("idempotent-replayed"), None);
    // A small answer of the same kind is kept.
    assert_eq!(del("small-1", "acc-nope").status, 404);
    assert_eq!(del("small-1", "acc-nope").header("idempotent-replayed"), Some("true"));
}

#[test]
fn server_errors_are_not_kept_so_a_retry_runs() {
    let s = Srv::start();
    let (tok, main) = s.user("id_5xx", "0");
    let app = s.run.as_ref().unwrap().app.clone();
    // A failed append (the embedded engine's fault hook; PostgreSQL runs skip this half).
    if let Some(journal) = app.journal.as_ref() {
        journal.fail_next_append();
        let r = deposit(&s, &tok, "retry-me", &main, "8");
        assert_eq!(r.status, 500, "{}", r.text);
        let retry = deposit(&s, &tok, "retry-me", &main, "8");
        retry.ok();
        assert_eq!(retry.header("idempotent-replayed"), None);
        assert_eq!(s.balance(&tok, &main), "8");
    } else {
        eprintln!("append-failure half skipped: not the embedded engine");
        deposit(&s, &tok, "retry-me", &main, "8").ok();
    }
    // A lock timeout (500) is not kept either.
    app.users.set_lock_wait(std::time::Duration::from_millis(100));
    // Multi-threaded: connections opened here (PostgreSQL) keep being driven between block_ons.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let held = rt.block_on(app.users.lock("id_5xx")).unwrap();
    deposit(&s, &tok, "locked", &main, "1").fails(500, "Deposit failed: internal error");
    drop(held);
    // A row lock (PostgreSQL) goes with its connection a moment after the guard.
    app.users.set_lock_wait(pfm::store::users::LOCK_WAIT);
    deposit(&s, &tok, "locked", &main, "1").ok();
    assert_eq!(s.balance(&tok, &main), "9");
    // Now kept.
    assert_eq!(deposit(&s, &tok, "locked", &main, "1").header("idempotent-replayed"), Some("true"));
}

#[test]
fn keys_expire_after_24_hours() {
    let s = Srv::start();
    let (tok, main) = s.user("id_expiry", "0");
    let first = deposit(&s, &tok, "day", &main, "1");
    first.ok();
    s.clock.advance_micros(24 * 3600 * 1_000_000 - 1_000_000);
    assert_eq!(deposit(&s, &tok, "day", &main, "1").text, first.text);
    s.clock.advance_micros(1_000_000);
    // 24 h after the first answer the key is forgotten: other parameters are no 422...
    let later = deposit(&s, &tok, "day", &main, "2");
    later.ok();
    assert_eq!(later.header("idempotent-replayed"), None);
    assert_eq!(s.balance(&tok, &main), "3");
    // ...and the key now names the new request.
    assert_eq!(deposit(&s, &tok, "day", &main, "2").text, later.text);
}

#[test]
fn keys_are_bounded_per_user_oldest_first() {
    let mut s = Srv::start();
    let (tok, main) = s.user("id_bound", "0");
    // 1001 kept answers (cheap 400s), one microsecond apart.
    for i in 0..=1000 {
        s.clock.advance_micros(1);
        let r = keyed(&s, &tok, "POST", "/deposit", &format!("b-{i}"), json!({"uuid": main}));
        assert_eq!(r.status, 400, "{}", r.text);
    }
    // The oldest was dropped: other parameters run instead of a 422. The next oldest is kept.
    deposit(&s, &tok, "b-1", &main, "1").fails(422, MISMATCH);
    deposit(&s, &tok, "b-0", &main, "1").ok();
    // The same after a restart: the bound holds in storage too.
    s.restart();
    deposit(&s, &tok, "b-2", &main, "1").fails(422, MISMATCH);
    assert_eq!(deposit(&s, &tok, "b-0", &main, "1").header("idempotent-replayed"), Some("true"));
    // Keeping b-0 again dropped the oldest left, b-1.
    deposit(&s, &tok, "b-1", &main, "2").ok();
}

#[test]
fn kept_answers_survive_a_restart() {
    let mut s = Srv::start();
    let (tok, main) = s.user("id_restart", "0");
    let first = deposit(&s, &tok, "durable", &main, "4");
    first.ok();
    let bad = deposit(&s, &tok, "durable-4xx", &main, "-1");
    assert_eq!(bad.status, 400);
    s.restart();
    let again = deposit(&s, &tok, "durable", &main, "4");
    assert_eq!(
        (again.text.as_str(), again.header("idempotent-replayed")),
        (first.text.as_str(), Some("true"))
    );
    assert_eq!(deposit(&s, &tok, "durable-4xx", &main, "-1").text, bad.text);
    deposit(&s, &tok, "durable", &main, "5").fails(422, MISMATCH);
    assert_eq!(s.balance(&tok, &main), "4");
}

#[test]
fn bad_keys_are_400s_and_reads_and_register_ignore_the_header() {
    let s = Srv::start();
    let (tok, main) = s.user("id_bad", "0");
    for key in ["has space", &"x".repeat(256), "caf\u{e9}"] {
        deposit(&s, &tok, key, &main, "1").fails(400, BAD_KEY);
    }
    assert_eq!(s.balance(&tok, &main), "0");
    let ok = "x".repeat(255);
    deposit(&s, &tok, &ok, &main, "1").ok();
    // Reads ignore the header.
    let auth = format!("Bearer {tok}");
    let hs = [("Authorization", auth.as_str()), ("Idempotency-Key", "read")];
    let a = s.raw("GET", &format!("/get_balance?uuid={main}"), &hs, Body::None);
    a.ok();
    assert_eq!(a.header("idempotent-replayed"), None);
    // /register is not scoped to a user yet: the header is ignored, a repeat answers its own 4xx.
    let reg = |u: &str| {
        s.raw(
            "POST",
            "/register",
            &[("Idempotency-Key", "reg")],
            Body::Json(json!({"user_id": u, "password": "password123"})),
        )
    };
    reg("id_bad_reg").ok();
    let r = reg("id_bad_reg");
    assert_ne!(r.status, 200);
    assert_eq!(r.header("idempotent-replayed"), None);
}

/// The real binary, killed with SIGKILL right after a keyed write was acknowledged: the write
/// and its key are one journal operation, so after the restart the key replays and the deposit
/// is there exactly once.
#[test]
fn a_keyed_write_acknowledged_before_kill_9_replays_after_restart() {
    const SECRET: &str = "idem-kill-secret-idem-kill-secret-idem";
    let dir = tempfile::tempdir().unwrap();
    let spawn = || proc::spawn(dir.path(), &[], &[("JWT_SECRET", SECRET)]);
    let mut c = serde_json::Map::new();
    c.insert("user_id".into(), json!("killed"));
    c.insert("role".into(), json!("user"));
    let tok = pfm::auth::jwt::Jwt::new(SECRET.as_bytes()).sign(&c).unwrap();
    let send = |addr, path: &str, body: &str, key: Option<&str>| {
        let key: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
        proc::send(addr, "POST", path, Some(&tok), &key, body).unwrap()
    };
    let mut p = spawn();
    let reg = send(p.addr, "/register", r#"{"user_id":"killed"}"#, None);
    let main = reg.json["uuid"].as_str().unwrap().to_string();
    let body = format!(r#"{{"uuid":"{main}","amount":"12.5","channel":"c"}}"#);
    let first = send(p.addr, "/deposit", &body, Some("before-kill"));
    assert_eq!(first.status, 200, "{}", first.text);
    p.kill();
    let p = spawn();
    let again = send(p.addr, "/deposit", &body, Some("before-kill"));
    assert_eq!(again.header("idempotent-replayed"), Some("true"), "{again:?}");
    assert_eq!(again.text, first.text);
    let log =
        proc::send(p.addr, "GET", &format!("/get_transactions?uuid={main}"), Some(&tok), &[], "").unwrap();
    assert_eq!(log.json["transaction_count"], 1, "{}", log.text);
}

#[test]
fn the_openapi_document_describes_the_header_on_write_operations() {
    let s = Srv::start();
    let doc = s.raw("GET", "/openapi.json", &[], Body::None).json;
    let has_key = |path: &str, method: &str| {
        let op = &doc["paths"][path][method];
        let keyed = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == json!("Idempotency-Key") && p["in"] == json!("header"));
        (keyed, op["responses"]["409"].is_object(), op["responses"]["422"].is_object())
    };
    assert_eq!(has_key("/deposit", "post"), (true, true, true));
    assert_eq!(has_key("/delete", "delete"), (true, true, true));
    assert_eq!(has_key("/set_account_periods", "post"), (true, true, true));
    assert!(!has_key("/get_balance", "get").0);
    assert!(!has_key("/register", "post").0);
    let r422 = doc["paths"]["/deposit"]["post"]["responses"]["422"]["description"].as_str().unwrap();
    assert!(r422.contains(MISMATCH));
    assert!(
        doc["paths"]["/deposit"]["post"]["responses"]["200"]["headers"]["Idempotent-Replayed"].is_object()
    );
}

#[test]
fn browsers_may_send_the_key_and_read_the_replay_header() {
    let s = Srv::start_with(|c| c.cors_allow_origin = Some("https://app.example".into()));
    let pre = s.raw(
        "OPTIONS",
        "/deposit",
        &[
            ("Origin", "https://app.example"),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "authorization, content-type, idempotency-key"),
        ],
        Body::None,
    );
    assert!(pre.status < 300, "{}", pre.status);
    let allowed = pre.header("access-control-allow-headers").unwrap_or("").to_ascii_lowercase();
    assert!(allowed.contains("idempotency-key"), "{allowed}");
    let (tok, main) = s.user("id_cors", "0");
    let r = deposit(&s, &tok, "cors", &main, "1");
    r.ok();
    assert!(r.header("access-control-expose-headers").unwrap_or("").contains("Idempotent-Replayed"));
}

#[test]
fn replays_are_identical_in_the_reference_response_style_too() {
    let s = Srv::start_with(|c| c.response_style = pfm::config::ResponseStyle::Reference);
    let tok = s.token("id_style", "user");
    let r = s.post(&tok, "/register", json!({"user_id": "id_style", "initial_balance": 0}));
    let main = r.json["uuid"][0].as_str().unwrap().to_string();
    let first = deposit(&s, &tok, "style", &main, "2.50");
    assert_eq!(first.status, 200, "{}", first.text);
    s.clock.advance_micros(2_000_000);
    let again = deposit(&s, &tok, "style", &main, "2.50");
    assert_eq!(
        (again.text.as_str(), again.header("idempotent-replayed")),
        (first.text.as_str(), Some("true"))
    );
}
