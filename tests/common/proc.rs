//! The real pfm binary as a child process (the tests of process behaviour: start and stop,
//! kill -9, refusing to start, the access log, several nodes): started on 127.0.0.1:0 with a
//! data directory of the test's choosing, its address read from its "pfm listening" log line,
//! and a tiny blocking HTTP/1.1 client.

use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Resp;

/// Longest wait for a start (a replay after kill -9 under load can take a while in debug
/// builds); a start that takes longer is killed and reported.
const START_LIMIT: Duration = Duration::from_secs(120);
/// Longest wait to connect, send or receive one request: a hung server fails the test instead
/// of hanging it.
const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// The environment variables pfm reads its configuration from: removed, so the test's own
/// environment never configures the child; a test sets what it needs through `envs`.
const CONFIG_ENV: [&str; 20] = [
    "WORKER_THREADS",
    "HEADER_TIMEOUT_SECS",
    "JOURNAL_SEGMENT_BYTES",
    "CHECKPOINT_INTERVAL_MS",
    "HOST",
    "PORT",
    "ACCOUNT_BASE_DIR",
    "JWT_SECRET",
    "MAX_REQUESTS",
    "WINDOW_SIZE",
    "TOKEN_TTL_SECONDS",
    "TOKEN_ENDPOINT_ENABLED",
    "TRUST_PROXY",
    "CORS_ALLOW_ORIGIN",
    "MAX_TRACKED_KEYS",
    "BODY_TIMEOUT_SECS",
    "RESPONSE_STYLE",
    "METRICS_ENABLED",
    "LOG_FORMAT",
    "DATABASE_URL",
];

/// A running pfm, killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Proc {
    pub child: Child,
    pub addr: SocketAddr,
    /// The "pfm listening" line itself.
    pub listening: String,
    /// Its output lines after the "pfm listening" one (stderr, where the logs go, and stdout);
    /// in a mutex so that threads may share a `&Proc`.
    lines: Mutex<mpsc::Receiver<String>>,
}

/// A start that ended without listening: how the process ended, and what it wrote.
#[derive(Debug)]
pub struct NoStart {
    pub status: Option<ExitStatus>,
    pub log: String,
}

impl fmt::Display for NoStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.status {
            Some(s) => write!(f, "exited with {s}: {}", self.log),
            None => write!(f, "no exit status: {}", self.log),
        }
    }
}

/// Starts pfm on `dir` with extra flags `args` and environment `envs`, and waits until it
/// listens; panics if it does not.
#[track_caller]
pub fn spawn(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Proc {
    try_spawn(dir, args, envs).unwrap_or_else(|e| panic!("pfm did not start listening: {e}"))
}

/// [`spawn`] for a start that may be refused: `Err` carries the exit status and the output.
pub fn try_spawn(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Result<Proc, NoStart> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pfm"));
    cmd.args(["--host", "127.0.0.1", "--port", "0", "--data-dir"]).arg(dir).args(args);
    for var in CONFIG_ENV {
        cmd.env_remove(var);
    }
    let mut child = cmd
        .env("RUST_LOG", "info")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pfm");
    let (tx, rx) = mpsc::channel();
    // One thread per pipe, so a hung start cannot hang the test, and the child never blocks on a
    // full pipe: they read to the end whether or not anyone still listens. Errors and warnings
    // are shown in the test's output as they come.
    let out = child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>);
    let err = child.stderr.take().map(|e| Box::new(e) as Box<dyn Read + Send>);
    for pipe in [out, err].into_iter().flatten() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if line.contains("ERROR") || line.contains("WARN") {
                    eprintln!("pfm: {line}");
                }
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let deadline = Instant::now() + START_LIMIT;
    let mut log = String::new();
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line.contains("pfm listening") => {
                let addr = listening_addr(&line).unwrap_or_else(|| panic!("no address in {line:?}"));
                return Ok(Proc { child, addr, listening: line, lines: Mutex::new(rx) });
            }
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
            }
            Err(e) => {
                if e == mpsc::RecvTimeoutError::Timeout {
                    let _ = child.kill();
                    log.push_str(&format!("(killed: not listening after {START_LIMIT:?})"));
                }
                return Err(NoStart { status: child.wait().ok(), log });
            }
        }
    }
}

/// The address of a "pfm listening" line: text `addr=127.0.0.1:N` or JSON
/// `"addr":"127.0.0.1:N"`.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = line.split("addr=").nth(1).or_else(|| line.split("\"addr\":\"").nth(1))?;
    rest.split(|c: char| c.is_whitespace() || c == '"').next()?.parse().ok()
}

impl Proc {
    /// SIGKILL: no shutdown path runs.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        assert!(sent.as_ref().is_ok_and(|s| s.success()), "kill -TERM: {sent:?}");
        self.child.wait().expect("wait")
    }

    /// Every line written after the "pfm listening" one, up to the end of the process (call it
    /// after the process ended).
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lines").iter().collect()
    }

    /// `method path` as `tok`, which must answer 200: its JSON.
    #[track_caller]
    pub fn call(&self, method: &str, path: &str, tok: &str, body: serde_json::Value) -> serde_json::Value {
        let (st, v) = request(self.addr, method, path, Some(tok), body);
        assert_eq!(st, 200, "{method} {path} on {}: {v}", self.addr);
        v
    }

    /// A counter of the node's /metrics (`name` with its labels; 0 while it has none).
    pub fn metric(&self, name: &str) -> u64 {
        let r = send(self.addr, "GET", "/metrics", None, &[], "").expect("GET /metrics");
        r.text
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Whole passes of the node's waker (schedules, webhook deliveries) so far.
    pub fn passes(&self) -> u64 {
        self.metric("pfm_schedule_passes_total")
    }
}

/// Waits until every node has made `k` more passes of its waker than when called: a pass that
/// began after this call has seen whatever was due by then. Fails after `limit`.
#[track_caller]
pub fn more_passes(nodes: &[&Proc], k: u64, limit: Duration) {
    let from: Vec<u64> = nodes.iter().map(|n| n.passes()).collect();
    let end = Instant::now() + limit;
    for (n, f) in nodes.iter().zip(from) {
        while n.passes() < f + k {
            assert!(Instant::now() < end, "{}: no {k} passes of the waker in {limit:?}", n.addr);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request on a connection of its own (`Connection: close`, a JSON content type, and
/// `Authorization: Bearer <token>` with a token); `Err` says why no complete answer came.
pub fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Resp, String> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()));
    let mut s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| format!("not sent: {e}"))?;
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
    s.write_all(req.as_bytes()).map_err(|e| format!("write: {e}"))?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).map_err(|e| format!("read: {e}"))?;
    let (head, body) =
        super::split_answer(&out).ok_or_else(|| format!("cut: {:?}", String::from_utf8_lossy(&out)))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("status line: {head:?}"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let json = serde_json::from_str(&body).unwrap_or(Value::Null);
    Ok(Resp { status, headers, text: body, json })
}

/// A request with a JSON body (`Value::Null`: none) that must be answered: (status, JSON body,
/// `Value::Null` when the body is no JSON).
#[track_caller]
pub fn request(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    let b = if body.is_null() { String::new() } else { body.to_string() };
    let r = send(addr, method, path, token, &[], &b).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    (r.status, r.json)
}

/// Logs a registered user in by password; returns the token.
#[track_caller]
pub fn login(addr: SocketAddr, user_id: &str, password: &str) -> String {
    let (st, v) = request(addr, "POST", "/login", None, json!({"user_id": user_id, "password": password}));
    assert_eq!(st, 200, "{v}");
    v["token"].as_str().expect("token").to_string()
}

/// A clock several real nodes read (test builds' `PFM_TEST_CLOCK_FILE`): a file of Unix seconds,
/// replaced whole so no node reads half.
pub struct Clock {
    pub path: std::path::PathBuf,
}

impl Clock {
    /// At [`super::T0`], in `dir`.
    pub fn new(dir: &Path) -> Clock {
        let c = Clock { path: dir.join("clock") };
        c.set(super::T0);
        c
    }

    pub fn set(&self, secs: i64) {
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, secs.to_string()).expect("write the clock");
        std::fs::rename(&tmp, &self.path).expect("move the clock");
    }
}
