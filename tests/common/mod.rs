//! Test harness: a real server on 127.0.0.1:0 with a temp data directory and a fixed clock, and
//! a tiny blocking HTTP/1.1 client. [`proc`] runs the real binary as a child process instead.
//!
//! With `PFM_TEST_DATABASE_URL` set (a PostgreSQL server, as `.ci/postgres.sh` starts one), every
//! server runs on the PostgreSQL engine instead, each on a fresh database of its own.

#![allow(dead_code)]

pub mod http_in;
pub mod proc;
pub mod store;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use pfm::clock::ManualClock;
use pfm::config::Config;
use serde_json::{json, Map, Value};

pub const SECRET: &str = "test-secret-test-secret-test-secret";
/// 2025-07-10T08:50:15Z, a day inside the SPEC's July 2025 examples.
pub const T0: i64 = 1_752_137_415;

pub struct Srv {
    pub run: Option<pfm::Running>,
    pub clock: Arc<ManualClock>,
    pub dir: tempfile::TempDir,
    pub cfg: Config,
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub text: String,
    pub json: Value,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    /// A string field.
    pub fn s(&self, key: &str) -> String {
        match &self.json[key] {
            Value::String(s) => s.clone(),
            other => panic!("{key} is not a string: {other} in {}", self.text),
        }
    }
    /// A field's JSON text (numbers exactly as sent).
    pub fn n(&self, key: &str) -> String {
        self.json[key].to_string()
    }
    pub fn err(&self) -> String {
        self.s("error")
    }
    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(self.status, 200, "{}", self.text);
        assert_eq!(self.json["success"], json!(true), "{}", self.text);
        self
    }
    #[track_caller]
    pub fn fails(&self, status: u16, msg: &str) -> &Self {
        assert_eq!((self.status, self.err().as_str()), (status, msg), "{}", self.text);
        assert_eq!(self.json["success"], json!(false));
        assert_eq!(self.json["status"].to_string(), status.to_string());
        self
    }
}

pub enum Body<'a> {
    None,
    Form(&'a str),
    Json(Value),
    Raw(&'a str, &'a [u8]),
}

impl Srv {
    pub fn start() -> Srv {
        Srv::start_with(|_| {})
    }

    pub fn start_with(f: impl FnOnce(&mut Config)) -> Srv {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg = Config::for_dir(dir.path());
        cfg.jwt_secret = Some(SECRET.into());
        cfg.database_url = fresh_database();
        // Checkpoints every 25 ms, so every test also reads rows spread over the memtables,
        // sled's single rows and its runs.
        cfg.checkpoint_interval_ms = 25;
        f(&mut cfg);
        let clock = Arc::new(ManualClock::at_secs(T0));
        let run = pfm::start(cfg.clone(), clock.clone()).expect("server starts");
        Srv { run: Some(run), clock, dir, cfg }
    }

    /// Stops the server and starts a new one on the same data directory.
    pub fn restart(&mut self) {
        if let Some(r) = self.run.take() {
            r.stop();
        }
        self.run = Some(pfm::start(self.cfg.clone(), self.clock.clone()).expect("server restarts"));
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.run.as_ref().expect("running").addr
    }

    pub fn token(&self, user_id: &str, role: &str) -> String {
        let mut c = Map::new();
        c.insert("user_id".into(), json!(user_id));
        c.insert("role".into(), json!(role));
        c.insert("iat".into(), json!(T0));
        self.run.as_ref().expect("running").app.jwt.sign(&c).expect("sign")
    }

    pub fn raw(&self, method: &str, target: &str, headers: &[(&str, &str)], body: Body) -> Resp {
        let (ct, bytes): (Option<&str>, Vec<u8>) = match body {
            Body::None => (None, Vec::new()),
            Body::Form(f) => (Some("application/x-www-form-urlencoded"), f.as_bytes().to_vec()),
            Body::Json(v) => (Some("application/json"), v.to_string().into_bytes()),
            Body::Raw(ct, b) => ((!ct.is_empty()).then_some(ct), b.to_vec()),
        };
        let mut req = format!("{method} {target} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(ct) = ct {
            req.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n", bytes.len()));
        let mut s = TcpStream::connect(self.addr()).expect("connect");
        s.write_all(req.as_bytes()).expect("write");
        let _ = s.write_all(&bytes);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let (head, body) =
            split_answer(&out).unwrap_or_else(|| (String::from_utf8_lossy(&out).into_owned(), String::new()));
        let mut lines = head.lines();
        let status: u16 =
            lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|c| c.parse().ok()).expect("status line");
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let json = serde_json::from_str(&body).unwrap_or(Value::Null);
        Resp { status, headers, text: body, json }
    }

    pub fn get(&self, tok: &str, path: &str, query: &str) -> Resp {
        let target = if query.is_empty() { path.to_string() } else { format!("{path}?{query}") };
        self.raw("GET", &target, &[("Authorization", &format!("Bearer {tok}"))], Body::None)
    }

    pub fn post(&self, tok: &str, path: &str, body: Value) -> Resp {
        self.raw("POST", path, &[("Authorization", &format!("Bearer {tok}"))], Body::Json(body))
    }

    pub fn form(&self, tok: &str, path: &str, form: &str) -> Resp {
        self.raw("POST", path, &[("Authorization", &format!("Bearer {tok}"))], Body::Form(form))
    }

    /// Registers `user` in token mode; returns (token, main uuid).
    pub fn user(&self, user: &str, initial: &str) -> (String, String) {
        let tok = self.token(user, "user");
        let r = self.post(&tok, "/register", json!({"user_id": user, "initial_balance": initial}));
        r.ok();
        (tok, r.s("uuid"))
    }

    pub fn child(&self, tok: &str, parent: &str, name: &str, extra: Value) -> String {
        let mut body = json!({"parent_uuid": parent, "name": name});
        if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
            b.extend(e);
        }
        let r = self.post(tok, "/add_sub_account", body);
        r.ok();
        r.s("uuid")
    }

    pub fn balance(&self, tok: &str, uuid: &str) -> String {
        let r = self.get(tok, "/get_balance", &format!("uuid={uuid}"));
        r.ok();
        r.n("balance")
    }

    /// `account_status` of an account.
    pub fn status(&self, tok: &str, uuid: &str) -> String {
        self.get(tok, "/get_account_status", &format!("uuid={uuid}")).ok().s("account_status")
    }

    pub fn deposit(&self, tok: &str, uuid: &str, amount: &str) -> Resp {
        self.post(tok, "/deposit", json!({"uuid": uuid, "amount": amount, "channel": "ABSA"}))
    }

    pub fn txs(&self, tok: &str, uuid: &str) -> Vec<Value> {
        let r = self.get(tok, "/get_transactions", &format!("uuid={uuid}"));
        r.ok();
        r.json["transactions"].as_array().cloned().unwrap_or_default()
    }

    pub fn set_time(&self, iso: &str) {
        let t = pfm::domain::dates::parse_date(iso).expect("valid test date");
        self.clock.set_secs(t);
    }
}

/// The PostgreSQL server the tests run against (`PFM_TEST_DATABASE_URL`), if any.
pub fn pg_admin_url() -> Option<String> {
    std::env::var("PFM_TEST_DATABASE_URL").ok().filter(|s| !s.is_empty())
}

/// A new, empty database on the test PostgreSQL server (its URL), or `None` without one.
pub fn fresh_database() -> Option<String> {
    let admin = pg_admin_url()?;
    let name = format!("pfm_t_{}", uuid::Uuid::new_v4().simple());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let (c, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
            .await
            .expect("connect to the test PostgreSQL");
        let driver = tokio::spawn(conn);
        c.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create a test database");
        drop(c);
        let _ = driver.await;
    });
    let (base, _) = admin.rsplit_once('/').expect("PFM_TEST_DATABASE_URL names a database");
    Some(format!("{base}/{name}"))
}

/// True (with a note) when the tests run on PostgreSQL and `what` only exists on the embedded
/// engine.
pub fn embedded_only(what: &str) -> bool {
    if pg_admin_url().is_some() {
        eprintln!("skipped on the PostgreSQL engine: {what}");
        return true;
    }
    false
}

/// A copy of the directory tree `from` at `to` (a fixture data directory, say).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// JSON number text of a value.
/// Exact cents of a JSON money number (plain decimal text, at most 2 decimals).
pub fn cents(v: &Value) -> i64 {
    let t = v.to_string();
    let (neg, t) = t.strip_prefix('-').map_or((false, t.as_str()), |r| (true, r));
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    assert!(frac.len() <= 2 && !int.is_empty(), "not money: {v}");
    let c = int.parse::<i64>().expect("money") * 100 + format!("{frac:0<2}").parse::<i64>().expect("money");
    if neg {
        -c
    } else {
        c
    }
}

pub fn num(v: &Value) -> String {
    v.to_string()
}

/// An answer's head and body, the body put together from its chunks when it came chunked
/// (long logs do); `None` when the answer was cut.
pub fn split_answer(out: &[u8]) -> Option<(String, String)> {
    let end = out.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&out[..end]).into_owned();
    let mut rest = &out[end + 4..];
    let chunked = head.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    if !chunked {
        return Some((head, String::from_utf8_lossy(rest).into_owned()));
    }
    let mut body = Vec::new();
    loop {
        let line = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&rest[..line]).ok()?.split(';').next()?.trim();
        let size = usize::from_str_radix(size, 16).ok()?;
        rest = &rest[line + 2..];
        if size == 0 {
            return Some((head, String::from_utf8_lossy(&body).into_owned()));
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// `s` percent-encoded for a query string (every byte but unreserved characters).
pub fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A fresh PostgreSQL database for a multi-node test, or `None` (the test then says it is
/// skipped) when `PFM_TEST_DATABASE_URL` is not set.
pub fn pg_database(test: &str) -> Option<String> {
    let db = fresh_database();
    if db.is_none() {
        eprintln!("{test}: skipped, PFM_TEST_DATABASE_URL is not set (.ci/postgres.sh sets it)");
    }
    db
}
