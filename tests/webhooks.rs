//! Webhooks over HTTP (docs/webhooks.md), against a real receiving HTTP server on 127.0.0.1:
//! signed events for every kind, retries until a failing receiver answers, the delivery log,
//! redelivery, disabling after three days of failures, Bill notices once per due date, refused
//! addresses, and no event lost across kill -9.

mod common;

use std::collections::VecDeque;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{proc, Srv, T0};
use serde_json::{json, Value};

const DAY: i64 = 86_400;

/// What a receiver answers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Reply {
    Status(u16),
    /// Reads the request and never answers (until the test ends).
    Hang,
}

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Got {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// What the receiver answered it.
    reply: Reply,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON event")
    }
}

#[derive(Default)]
struct Script {
    /// Replies to give, in order; then `then`.
    next: VecDeque<Reply>,
    then: Option<Reply>,
    got: Vec<Got>,
}

/// A tiny HTTP/1.1 server that records every request and answers as scripted.
#[derive(Clone)]
struct Receiver {
    addr: SocketAddr,
    script: Arc<Mutex<Script>>,
}

impl Receiver {
    fn start() -> Receiver {
        Receiver::on(TcpListener::bind("127.0.0.1:0").expect("bind"))
    }

    fn on(l: TcpListener) -> Receiver {
        let addr = l.local_addr().expect("addr");
        let script = Arc::new(Mutex::new(Script::default()));
        let s = script.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || serve(conn, s));
            }
        });
        Receiver { addr, script }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn replies(&self, next: &[Reply], then: Reply) {
        let mut s = self.script.lock().unwrap();
        s.next = next.iter().copied().collect();
        s.then = Some(then);
    }

    fn got(&self) -> Vec<Got> {
        self.script.lock().unwrap().got.clone()
    }

    fn events(&self) -> Vec<Value> {
        self.got().iter().map(Got::json).collect()
    }

    /// Waits until `f` holds of what arrived, at most 20 s.
    fn until(&self, what: &str, f: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        self.until_within(Duration::from_secs(20), what, f)
    }

    fn until_within(&self, limit: Duration, what: &str, f: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let end = Instant::now() + limit;
        loop {
            let got = self.got();
            if f(&got) {
                return got;
            }
            assert!(Instant::now() < end, "timed out waiting for {what}; got {} requests", got.len());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn serve(mut c: TcpStream, script: Arc<Mutex<Script>>) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
    let Some(common::http_in::Request { headers, body }) = common::http_in::read_request(&mut c) else {
        return;
    };
    let reply = {
        let mut s = script.lock().unwrap();
        let then = s.then.unwrap_or(Reply::Status(200));
        let reply = s.next.pop_front().unwrap_or(then);
        s.got.push(Got { headers, body, reply });
        reply
    };
    match reply {
        Reply::Status(code) => {
            let _ = write!(c, "HTTP/1.1 {code} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
        Reply::Hang => std::thread::sleep(Duration::from_secs(60)),
    }
}

/// Checks a delivery's signature as a receiver in Python would (docs/webhooks.md), with the
/// standard library's `hmac`: an implementation independent of pfm's.
fn python_verifies(secret: &str, got: &Got) -> bool {
    let header = got.header("Pfm-Signature").expect("signature header");
    let script = r#"
import hashlib, hmac, sys
secret, header = sys.argv[1], sys.argv[2]
body = sys.stdin.buffer.read()
parts = dict(p.split("=", 1) for p in header.split(","))
mac = hmac.new(secret.encode(), parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
print("ok" if hmac.compare_digest(mac, parts["v1"]) else "bad")
"#;
    let mut child = std::process::Command::new("python3")
        .args(["-c", script, secret, header])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    child.stdin.take().expect("stdin").write_all(&got.body).expect("write body");
    let out = child.wait_with_output().expect("python3 ran");
    String::from_utf8_lossy(&out.stdout).trim() == "ok"
}

fn srv() -> Srv {
    Srv::start_with(|c| {
        c.schedule_poll_ms = 20;
        c.webhooks_allow_private = true;
    })
}

fn hook(s: &Srv, tok: &str, url: &str, events: &str) -> (i64, String) {
    let r = s.post(tok, "/create_webhook", json!({"url": url, "events": events}));
    r.ok();
    (r.json["webhook"]["id"].as_i64().expect("id"), r.s("secret"))
}

fn deliveries(s: &Srv, tok: &str, id: i64) -> Vec<Value> {
    let r = s.get(tok, "/webhook_deliveries", &format!("id={id}"));
    r.ok();
    r.json["deliveries"].as_array().expect("deliveries").clone()
}

/// Passes of the waker so far.
fn passes(s: &Srv) -> u64 {
    let m = s.raw("GET", "/metrics", &[], common::Body::None);
    m.text
        .lines()
        .find_map(|l| l.strip_prefix("pfm_schedule_passes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two whole passes of the waker after this call, and every send they started, ended.
fn settle(s: &Srv) {
    let from = passes(s);
    until("two passes of the waker", || passes(s) >= from + 2);
    std::thread::sleep(Duration::from_millis(100));
    let from = passes(s);
    until("two more passes", || passes(s) >= from + 2);
}

#[test]
fn every_kind_of_event_arrives_signed() {
    let s = srv();
    let rx = Receiver::start();
    let (tok, main) = s.user("hooked", "0");
    let (id, secret) = hook(&s, &tok, &rx.url(), "all");
    assert!(secret.starts_with("whsec_") && secret.len() >= 40, "{secret}");
    // The secret is shown once: never in the list.
    let list = s.get(&tok, "/webhooks", "");
    list.ok();
    assert!(!list.text.contains(&secret));
    assert_eq!(list.json["webhooks"][0]["events"].as_array().map(Vec::len), Some(6));

    let rent = s.child(&tok, &main, "Rent", json!({"allocation": 1}));
    let got = rx.until("account.created", |g| g.iter().any(|x| x.json()["type"] == "account.created"));
    let created = got.iter().map(Got::json).find(|e| e["type"] == "account.created").unwrap();
    assert_eq!(created["data"]["account"]["uuid"], json!(rent));
    assert_eq!(created["data"]["account"]["name"], json!("Rent"));

    s.deposit(&tok, &main, "125.50").ok();
    let got =
        rx.until("transaction.recorded", |g| g.iter().any(|x| x.json()["type"] == "transaction.recorded"));
    let rec = got.iter().find(|x| x.json()["type"] == "transaction.recorded").unwrap().clone();
    let e = rec.json();
    assert!(e["id"].as_str().unwrap().starts_with("evt_"));
    assert_eq!(rec.header("Pfm-Event-Id"), e["id"].as_str());
    assert_eq!(rec.header("Pfm-Event-Type"), Some("transaction.recorded"));
    assert_eq!(e["created"], json!(T0));
    let records = e["data"]["records"].as_array().unwrap();
    // Into main, then allocated down to Rent: each record of the write, in order.
    assert!(records.len() >= 2, "{e}");
    assert_eq!(records[0]["uuid"], json!(main));
    assert_eq!(records[0]["Amount"].to_string(), "125.5");
    assert!(records.iter().any(|r| r["uuid"] == json!(rent) && r["Type"] == "Deposit"));
    assert_eq!(e["data"]["total"], json!(records.len()));

    for g in rx.got() {
        assert!(python_verifies(&secret, &g), "signature of {}", String::from_utf8_lossy(&g.body));
        assert!(!python_verifies("whsec_wrong", &g));
        let t: i64 = g.header("Pfm-Signature").unwrap().split(',').next().unwrap()[2..].parse().unwrap();
        assert!((t - T0).abs() <= 1, "signed at the service's clock");
    }
    // A changed body no longer verifies.
    let mut forged = rec.clone();
    forged.body = rec.body.iter().map(|b| if *b == b'5' { b'9' } else { *b }).collect();
    assert!(!python_verifies(&secret, &forged));

    // A Bill envelope with a fixed amount: fully funded closes it (envelope.funded).
    let bill =
        s.child(&tok, &rent, "Power", json!({"account_type": "Bill", "fixed_amount": "40", "allocation": 1}));
    let _ = bill;
    s.post(&tok, "/change_account_status", json!({"uuid": rent, "status": "inactive"})).ok();
    rx.until("account.changed", |g| g.iter().any(|x| x.json()["type"] == "account.changed"));
    s.post(&tok, "/change_account_status", json!({"uuid": rent, "status": "active"})).ok();
    s.deposit(&tok, &main, "100").ok();
    let got = rx.until("envelope.funded", |g| g.iter().any(|x| x.json()["type"] == "envelope.funded"));
    let funded = got.iter().map(Got::json).find(|e| e["type"] == "envelope.funded").unwrap();
    assert_eq!(funded["data"]["account"]["name"], json!("Power"));
    assert_eq!(funded["data"]["account"]["amount_due"].to_string(), "0");

    s.raw(
        "DELETE",
        &format!("/delete?uuid={rent}"),
        &[("Authorization", &format!("Bearer {tok}"))],
        common::Body::None,
    )
    .ok();
    let got = rx.until("account.deleted", |g| {
        g.iter().filter(|x| x.json()["type"] == "account.deleted").count() == 2
    });
    // Deliveries are sent concurrently: they arrive in any order.
    let mut names: Vec<String> = got
        .iter()
        .map(Got::json)
        .filter(|e| e["type"] == "account.deleted")
        .map(|e| e["data"]["account"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names, vec!["Power", "Rent"]);

    // The delivery log says what happened, newest first.
    settle(&s);
    let log = deliveries(&s, &tok, id);
    assert_eq!(log.len(), rx.got().len());
    assert!(log.iter().all(|d| d["state"] == "delivered" && d["attempts"][0]["status"] == 200), "{log:?}");
    // Every event once.
    let mut ids: Vec<String> = rx.events().iter().map(|e| e["id"].as_str().unwrap().to_string()).collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n);
}

#[test]
fn a_webhook_gets_only_the_events_it_asked_for() {
    let s = srv();
    let rx = Receiver::start();
    let (tok, main) = s.user("picky", "0");
    hook(&s, &tok, &rx.url(), "account.created");
    s.deposit(&tok, &main, "10").ok();
    s.child(&tok, &main, "Food", json!({"allocation": 1}));
    rx.until("account.created", |g| !g.is_empty());
    settle(&s);
    let kinds: Vec<Value> = rx.events().iter().map(|e| e["type"].clone()).collect();
    assert_eq!(kinds, vec![json!("account.created")]);
}

#[test]
fn a_failing_receiver_gets_the_event_once_it_answers() {
    let s = srv();
    let rx = Receiver::start();
    rx.replies(&[Reply::Status(500), Reply::Status(500), Reply::Status(500)], Reply::Status(200));
    let (tok, main) = s.user("retry", "0");
    let (id, _) = hook(&s, &tok, &rx.url(), "transaction.recorded");
    s.deposit(&tok, &main, "7").ok();
    rx.until("the first attempt", |g| g.len() == 1);
    // Each retry waits its backoff (seconds to hours): the clock moves, the waker sends.
    for n in 2..=4 {
        let mut t = T0;
        until(&format!("attempt {n}"), || {
            t += 3600;
            s.clock.set_secs(t);
            std::thread::sleep(Duration::from_millis(60));
            rx.got().len() >= n
        });
        s.clock.set_secs(T0 + (n as i64) * 6 * 3600);
    }
    settle(&s);
    let got = rx.got();
    assert_eq!(got.len(), 4, "three failures then one success, and no more");
    let bodies: Vec<&Vec<u8>> = got.iter().map(|g| &g.body).collect();
    assert!(bodies.iter().all(|b| *b == bodies[0]), "the same event every time");
    let log = deliveries(&s, &tok, id);
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["state"], "delivered");
    assert_eq!(log[0]["attempts_made"], 4);
    let statuses: Vec<Value> =
        log[0]["attempts"].as_array().unwrap().iter().map(|a| a["status"].clone()).collect();
    assert_eq!(statuses, vec![json!(200), json!(500), json!(500), json!(500)]);
    let w = s.get(&tok, "/webhooks", "");
    assert_eq!(w.json["webhooks"][0]["failing_since"], Value::Null);
    assert_eq!(w.json["webhooks"][0]["enabled"], json!(true));
}

#[test]
fn three_days_of_failures_disable_the_webhook_and_it_says_so() {
    let s = srv();
    let rx = Receiver::start();
    rx.replies(&[], Reply::Status(503));
    let (tok, main) = s.user("dead", "0");
    let (id, _) = hook(&s, &tok, &rx.url(), "transaction.recorded");
    s.deposit(&tok, &main, "1").ok();
    rx.until("the first attempt", |g| !g.is_empty());
    let mut t = T0;
    until("the webhook disabled", || {
        t += 2 * 3600;
        s.clock.set_secs(t);
        std::thread::sleep(Duration::from_millis(40));
        s.get(&tok, "/webhooks", "").json["webhooks"][0]["enabled"] == json!(false)
    });
    assert!(t - T0 >= 3 * DAY && t - T0 <= 4 * DAY, "disabled after three days, not before: {}", t - T0);
    let w = s.get(&tok, "/webhooks", "").json["webhooks"][0].clone();
    assert!(w["disabled_reason"].as_str().unwrap().contains("three days"), "{w}");
    let log = deliveries(&s, &tok, id);
    assert_eq!(log[0]["state"], "failed", "{log:?}");
    let tries = rx.got().len();
    assert!(tries >= 5, "retried with backoff: {tries}");
    // Disabled: no new delivery, no redelivery until it is enabled again.
    s.deposit(&tok, &main, "1").ok();
    settle(&s);
    assert_eq!(deliveries(&s, &tok, id).len(), 1);
    let ev = log[0]["event_id"].as_str().unwrap().to_string();
    s.post(&tok, "/redeliver_webhook", json!({"id": id, "event_id": ev}))
        .fails(400, "The webhook is disabled; enable it first");
    rx.replies(&[], Reply::Status(200));
    s.post(&tok, "/update_webhook", json!({"id": id, "enabled": true})).ok();
    s.post(&tok, "/redeliver_webhook", json!({"id": id, "event_id": ev})).ok();
    rx.until("the redelivery", |g| g.len() == tries + 1);
    settle(&s);
    assert_eq!(deliveries(&s, &tok, id)[0]["state"], "delivered");
}

#[test]
fn a_delivered_event_can_be_sent_again() {
    let s = srv();
    let rx = Receiver::start();
    let (tok, main) = s.user("again", "0");
    let (id, _) = hook(&s, &tok, &rx.url(), "transaction.recorded");
    s.deposit(&tok, &main, "3").ok();
    rx.until("the event", |g| g.len() == 1);
    settle(&s);
    let ev = deliveries(&s, &tok, id)[0]["event_id"].as_str().unwrap().to_string();
    let r = s.post(&tok, "/redeliver_webhook", json!({"id": id, "event_id": ev}));
    r.ok();
    assert_eq!(r.json["delivery"]["state"], "waiting");
    let got = rx.until("the redelivery", |g| g.len() == 2);
    assert_eq!(got[0].body, got[1].body);
    s.post(&tok, "/redeliver_webhook", json!({"id": id, "event_id": "evt_nope"}))
        .fails(404, "Delivery not found");
    s.post(&tok, "/redeliver_webhook", json!({"id": 99, "event_id": ev})).fails(404, "Webhook not found");
}

#[test]
fn a_bill_is_announced_once_per_due_date() {
    let s = srv();
    let rx = Receiver::start();
    let (tok, main) = s.user("bills", "0");
    let house = s.child(&tok, &main, "House", json!({"allocation": 1}));
    let bill = s.child(
        &tok,
        &house,
        "Water",
        json!({"account_type": "Bill", "fixed_amount": "30", "due_date": "2025-07-20", "freq": 30}),
    );
    let r = s.post(&tok, "/create_webhook", json!({"url": rx.url(), "events": "bill.due", "bill_days": 3}));
    r.ok();
    settle(&s);
    assert!(rx.got().is_empty(), "ten days before: nothing yet");
    s.set_time("2025-07-16");
    settle(&s);
    assert!(rx.got().is_empty(), "four days before: nothing yet");
    s.set_time("2025-07-17");
    let got = rx.until("the notice", |g| !g.is_empty());
    let e = got[0].json();
    assert_eq!(e["type"], "bill.due");
    assert_eq!(e["data"]["account"]["uuid"], json!(bill));
    assert_eq!(e["data"]["due_date"], "2025-07-20");
    assert_eq!(e["data"]["amount_due"].to_string(), "30");
    s.set_time("2025-07-19");
    settle(&s);
    assert_eq!(rx.got().len(), 1, "once per due date");
}

#[test]
fn refused_urls_and_events_say_why_and_change_nothing() {
    let s = Srv::start_with(|c| c.schedule_poll_ms = 20);
    let (tok, _) = s.user("careful", "0");
    for url in [
        "http://127.0.0.1:9/h",
        "http://localhost/h",
        "http://10.0.0.8/h",
        "http://192.168.1.1/h",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/h",
        "ftp://example.com/h",
        "not a url",
    ] {
        let r = s.post(&tok, "/create_webhook", json!({"url": url, "events": "all"}));
        assert_eq!(r.status, 400, "{url}: {}", r.text);
    }
    let r =
        s.post(&tok, "/create_webhook", json!({"url": "https://93.184.215.14/h", "events": "money.spent"}));
    r.fails(400, &r.err());
    assert!(r.err().contains("money.spent"), "{}", r.err());
    s.post(&tok, "/create_webhook", json!({"events": "all"})).fails(400, "url is required");
    s.post(&tok, "/create_webhook", json!({"url": "https://93.184.215.14/h"}))
        .fails(400, "events is required");
    let list = s.get(&tok, "/webhooks", "");
    assert_eq!(list.json["webhooks"], json!([]));
    // An operator's allow-list comes first.
    let only = Srv::start_with(|c| {
        c.webhooks_allowed_hosts = Some("127.0.0.1, hooks.example.com".into());
        c.webhooks_allow_private = true;
    });
    let (t2, _) = only.user("listed", "0");
    only.post(&t2, "/create_webhook", json!({"url": "http://127.0.0.1:9/h", "events": "all"})).ok();
    let r = only.post(&t2, "/create_webhook", json!({"url": "http://10.1.1.1/h", "events": "all"}));
    r.fails(400, "the webhook URL's host \"10.1.1.1\" is not one this service may send to");
    s.post(&tok, "/delete_webhook", json!({"id": 1})).fails(404, "Webhook not found");
    s.get(&tok, "/webhook_deliveries", "id=1").fails(404, "Webhook not found");
}

/// The real binary, killed with SIGKILL while every delivery is on its way: after a restart each
/// acknowledged deposit's event arrives, and no event names a transaction that was not made.
#[test]
fn kill_9_with_undelivered_events_loses_none() {
    if common::embedded_only("kill -9 of the embedded engine's process") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let rx = Receiver::on(listener);
    rx.replies(&[], Reply::Hang);
    let env =
        [("JWT_SECRET", common::SECRET), ("WEBHOOKS_ALLOW_PRIVATE", "true"), ("SCHEDULE_POLL_MS", "50")];
    let mut p = proc::spawn(dir.path(), &[], &env);
    let mut claims = serde_json::Map::new();
    claims.insert("user_id".into(), json!("crash"));
    let tok = pfm::auth::jwt::Jwt::new(common::SECRET.as_bytes()).sign(&claims).expect("sign");
    let (st, v) = proc::request(p.addr, "POST", "/register", Some(&tok), json!({"user_id": "crash"}));
    assert_eq!(st, 200, "{v}");
    let main = v["uuid"].as_str().expect("main").to_string();
    let (st, _) = proc::request(
        p.addr,
        "POST",
        "/create_webhook",
        Some(&tok),
        json!({"url": rx.url(), "events": "all"}),
    );
    assert_eq!(st, 200);
    let mut made = Vec::new();
    for i in 0..40 {
        let id = format!("dep-{i}");
        let (st, _v) = proc::request(
            p.addr,
            "POST",
            "/deposit",
            Some(&tok),
            json!({"uuid": main, "amount": "1.25", "channel": "ABSA", "transaction_number": id}),
        );
        assert_eq!(st, 200, "{_v}");
        made.push(id);
    }
    p.kill();
    rx.replies(&[], Reply::Status(200));
    let p = proc::spawn(dir.path(), &[], &env);
    // A send that timed out before the kill waits its first backoff (30 to 60 s) after it.
    let got = rx.until_within(Duration::from_secs(120), "every deposit's event", |g| {
        let ids = recorded_ids(g);
        made.iter().all(|m| ids.contains(m))
    });
    let ids = recorded_ids(&got);
    assert!(ids.iter().all(|i| made.contains(i)), "an event of a transaction never made: {ids:?}");
    let hung = got.iter().filter(|g| g.reply == Reply::Hang).count();
    assert!(hung > 0, "some deliveries were on their way when the process was killed");
    drop(p);
}

/// Transaction ids the `transaction.recorded` events taken (answered 200) name (their first
/// record's).
fn recorded_ids(got: &[Got]) -> Vec<String> {
    got.iter()
        .filter(|g| g.reply == Reply::Status(200))
        .filter_map(|g| serde_json::from_slice::<Value>(&g.body).ok())
        .filter(|e| e["type"] == "transaction.recorded")
        .filter_map(|e| e["data"]["records"][0]["TransactionID"].as_str().map(str::to_string))
        .collect()
}

/// A scheduled posting and an imported statement line are transactions like any other: each
/// makes its `transaction.recorded` event.
#[test]
fn scheduled_postings_and_imports_are_recorded_events() {
    let s = srv();
    let rx = Receiver::start();
    let (tok, main) = s.user("auto", "0");
    hook(&s, &tok, &rx.url(), "transaction.recorded");
    s.post(
        &tok,
        "/create_schedule",
        json!({"name": "Salary", "type": "deposit", "uuid": main, "amount": "2000", "unit": "days"}),
    )
    .ok();
    let got = rx.until("the posting's event", |g| !g.is_empty());
    let rec = &got[0].json()["data"]["records"][0];
    assert!(rec["TransactionID"].as_str().unwrap().starts_with("sch:"), "{rec}");
    assert_eq!(rec["Payee"], "Salary");
    let ofx = "OFXHEADER:100\n\n<OFX><BANKMSGSRSV1><STMTTRNRS><STMTRS><CURDEF>USD<BANKTRANLIST><STMTTRN>\
               <TRNTYPE>DEBIT<DTPOSTED>20250709<TRNAMT>-40.00<FITID>77<NAME>Grocer</STMTTRN></BANKTRANLIST>\
               </STMTRS></STMTTRNRS></BANKMSGSRSV1></OFX>";
    s.raw(
        "POST",
        "/import?commit=true",
        &[("Authorization", &format!("Bearer {tok}"))],
        common::Body::Raw("application/x-ofx", ofx.as_bytes()),
    )
    .ok();
    let got = rx.until("the import's event", |g| g.len() == 2);
    let rec = &got[1].json()["data"]["records"][0];
    assert_eq!((rec["Payee"].as_str(), rec["Type"].as_str()), (Some("Grocer"), Some("Withdrawal")), "{rec}");
}
