//! Hostile input at bounded cost (docs/hostile-input.md): bounded key tables, failed auth against the IP
//! budget, empty bearer tokens, a body that never arrives, answers hyper itself would give, JSON
//! number texts, and the reference response style. All over real HTTP or raw TCP.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Body, Srv};

fn bearer(tok: &str) -> String {
    format!("Bearer {tok}")
}

#[test]
fn failed_auth_spends_the_client_ip_budget() {
    let s = Srv::start_with(|c| {
        c.max_requests = 3;
        c.window_size = 10;
    });
    let good = s.token("u", "user");
    for i in 0..3 {
        let r = s.raw("GET", "/get_balance", &[("Authorization", &bearer(&format!("bad{i}")))], Body::None);
        r.fails(401, "Invalid or expired token");
    }
    // A fourth distinct bad token finds the address's budget spent.
    let r = s.raw("GET", "/get_balance", &[("Authorization", "Bearer bad3")], Body::None);
    assert_eq!(r.text, r#"{"success":false,"status":429,"error":"Rate limit exceeded. Try again later."}"#);
    assert_eq!(r.header("retry-after"), Some("10"));
    // Public paths share that budget, and so does a missing token; a valid token is limited by
    // its user, not the address.
    assert_eq!(s.raw("GET", "/__ping__", &[], Body::None).status, 429);
    assert_eq!(s.raw("GET", "/get_balance", &[], Body::None).status, 429);
    s.get(&good, "/get_balance", "uuid=x").fails(404, "User not found or unauthorized access");
    s.clock.advance_micros(10_500_000);
    s.raw("GET", "/get_balance", &[("Authorization", "Bearer bad3")], Body::None)
        .fails(401, "Invalid or expired token");
}

#[test]
fn many_distinct_bad_tokens_leave_the_tables_bounded() {
    let s = Srv::start_with(|c| c.max_tracked_keys = 512);
    let app = s.run.as_ref().unwrap().app.clone();
    let long = "a".repeat(60_000);
    // One keep-alive connection, so the test measures the tables, not connection setup.
    let mut c = TcpStream::connect(s.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; 4096];
    for i in 0..3000 {
        let tok = if i % 100 == 0 { format!("{long}{i}") } else { format!("bad-token-{i}") };
        let req = format!("GET /get_balance HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {tok}\r\n\r\n");
        c.write_all(req.as_bytes()).unwrap();
        let n = c.read(&mut buf).unwrap();
        let head = String::from_utf8_lossy(&buf[..n]);
        assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    }
    let b = app.auth_backoff.table();
    assert!(b.len() <= b.capacity() && b.capacity() <= 512, "{} of {}", b.len(), b.capacity());
    assert!(app.ip_limiter.table().len() <= 1);
}

#[test]
fn empty_bearer_token_fails_verification_and_counts_for_backoff() {
    let s = Srv::start();
    for h in ["Bearer ", "Bearer    "] {
        let mut c = TcpStream::connect(s.addr()).unwrap();
        write!(c, "GET /get_balance HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: {h}\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        let body = out.split_once("\r\n\r\n").unwrap().1;
        if h == "Bearer " {
            assert!(out.starts_with("HTTP/1.1 401"), "{out}");
            assert_eq!(body, r#"{"success":false,"status":401,"error":"Invalid or expired token"}"#);
        } else {
            // The same (empty) token again within its wait: the backoff answers.
            assert!(out.starts_with("HTTP/1.1 429"), "{out}");
            assert!(body.contains("Too many failed attempts. Wait 1 seconds."), "{body}");
        }
    }
    // Without the scheme it is still "missing".
    s.raw("GET", "/get_balance", &[("Authorization", "Bearerx")], Body::None)
        .fails(401, "Missing or invalid token");
}

#[test]
fn a_json_number_for_a_string_parameter_keeps_its_literal_text() {
    let s = Srv::start();
    let (tok, main) = s.user("lit", "0");
    let body = format!(
        r#"{{"uuid":"{main}","amount":1.5E1,"channel":"ABSA","transaction_number":1e3,"initiated_by":[ 2.50E-1 ]}}"#
    );
    let r = s.raw(
        "POST",
        "/deposit",
        &[("Authorization", &bearer(&tok))],
        Body::Raw("application/json", body.as_bytes()),
    );
    r.ok();
    assert_eq!(r.n("amount"), "15");
    let tx = s.txs(&tok, &main);
    assert_eq!(tx.len(), 1, "{tx:?}");
    assert_eq!(tx[0]["TransactionID"], serde_json::json!("1e3"));
    assert_eq!(tx[0]["By"], serde_json::json!("2.50E-1"));
}

/// Reads everything until the server closes, failing after `limit`.
fn read_until_closed(c: &mut TcpStream, limit: Duration) -> String {
    c.set_read_timeout(Some(limit)).unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).expect("the server closes the connection in time");
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_body_that_never_arrives_gets_408_and_the_connection_closes() {
    let s = Srv::start_with(|c| c.body_timeout_secs = 1);
    let tok = s.token("u", "user");
    let mut c = TcpStream::connect(s.addr()).unwrap();
    let started = Instant::now();
    write!(
        c,
        "POST /deposit HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {tok}\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{{\"a\""
    )
    .unwrap();
    let out = read_until_closed(&mut c, Duration::from_secs(10));
    assert!(started.elapsed() >= Duration::from_millis(900), "{:?}", started.elapsed());
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"success": false, "status": 408, "error": "Request body not received in time"})
    );
}

#[test]
fn connections_that_complete_no_request_head_in_time_are_closed() {
    let s = Srv::start_with(|c| c.header_timeout_secs = 1);
    let tok = s.token("u", "user");
    // Never a byte; a head trickled in too slowly; idle after an answer on a kept-alive
    // connection. Each is closed within the timeout plus its check interval (1/6 of it).
    // Taken before the first connection: the server's clock for each starts at its accept.
    let started = Instant::now();
    let silent = TcpStream::connect(s.addr()).unwrap();
    let mut slow = TcpStream::connect(s.addr()).unwrap();
    let mut idle = TcpStream::connect(s.addr()).unwrap();
    write!(idle, "GET /__ping__ HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut first = [0u8; 512];
    let n = idle.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    let trickle = std::thread::spawn(move || {
        for b in b"GET /__ping__ HTTP/1.1\r\nHost: t\r\nX-Slow: 1234567890" {
            if slow.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        read_until_closed(&mut slow, Duration::from_secs(10))
    });
    for (name, mut c) in [("silent", silent), ("idle", idle)] {
        let out = read_until_closed(&mut c, Duration::from_secs(10));
        assert!(out.is_empty(), "{name}: {out}");
        let t = started.elapsed();
        assert!(t >= Duration::from_secs(1) && t < Duration::from_secs(4), "{name}: {t:?}");
    }
    assert_eq!(trickle.join().unwrap(), "");
    assert!(started.elapsed() < Duration::from_secs(5));
    // A connection that keeps sending requests is never cut, however long it lives.
    let mut busy = TcpStream::connect(s.addr()).unwrap();
    busy.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Eight requests 300 ms apart: 2.4 s at least, over twice the timeout.
    for answered in 0..8 {
        write!(busy, "GET /get_balance?uuid=x HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {tok}\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 2048];
        let n = busy.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {answered} answers");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A TCP connection to `addr` (IPv4) whose receive buffer is 4 KiB from its first packet.
fn connect_with_small_receive_buffer(addr: std::net::SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let std::net::SocketAddr::V4(v4) = addr else { panic!("IPv4 expected") };
    // SAFETY: plain socket calls on a descriptor this function owns until it hands it to
    // TcpStream; every pointer refers to a live value of the size given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let small: libc::c_int = 4096;
        let rc = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&small as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(rc, 0);
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() },
            sin_zero: [0; 8],
        };
        let rc = libc::connect(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0);
        TcpStream::from_raw_fd(fd)
    }
}

/// A client that reads its answer slowly, pausing longer than the header timeout, still gets
/// all of it: the timeout never cuts an answer short (an answer hyper is still writing counts
/// as activity; one the kernel holds is delivered before the connection's close).
#[test]
fn an_answer_to_a_slow_reader_outlives_the_header_timeout() {
    let s = Srv::start_with(|c| c.header_timeout_secs = 1);
    // A small receive buffer, set before connecting so the window is small from the start: the
    // 240 KB document cannot be taken at once.
    let mut c = connect_with_small_receive_buffer(s.addr());
    write!(c, "GET /openapi.json HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    // Past the header timeout (1 s and its 1/6 tick), well short of the stall limit (4 s).
    std::thread::sleep(Duration::from_millis(1800));
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut byte).unwrap(), 1, "closed in the head");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap();
    assert!(len > 100_000, "{len}");
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).expect("the whole answer arrives");
    assert!(serde_json::from_slice::<serde_json::Value>(&body).is_ok());
    // Once it is sent and the connection is idle, the timeout applies again.
    let started = Instant::now();
    let out = read_until_closed(&mut c, Duration::from_secs(10));
    assert!(out.is_empty());
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

/// A client that takes none of its answer for four header timeouts is gone: its connection is
/// closed, and what was held for it (a streamed answer's chunks, hyper's buffers) let go. A slow
/// reader that makes progress is not (the test above).
#[test]
fn a_client_that_stops_reading_its_answer_is_dropped() {
    let s = Srv::start_with(|c| c.header_timeout_secs = 1);
    let mut c = connect_with_small_receive_buffer(s.addr());
    // 100 pipelined requests for a 240 KB document: 24 MB of answers, far more than the kernel
    // holds for a connection, so the server's writes wait on this client.
    for _ in 0..100 {
        write!(c, "GET /openapi.json HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    }
    // Nothing read for six seconds, past the four-second limit.
    std::thread::sleep(Duration::from_millis(6000));
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the connection was not closed ({} bytes read): {e}", got.len()),
        }
    }
    let answers = got.windows(15).filter(|w| w == b"HTTP/1.1 200 OK").count();
    assert!(answers < 100, "{answers} answers: the client was never dropped");
    // The server goes on serving.
    assert_eq!(s.raw("GET", "/healthz", &[], Body::None).status, 200);
}

/// Sends raw bytes (ignoring a reset once the server answered early) and returns the head and
/// the parsed JSON body of the answer.
fn raw_exchange(s: &Srv, bytes: &[u8]) -> (String, serde_json::Value) {
    let mut c = TcpStream::connect(s.addr()).unwrap();
    for chunk in bytes.chunks(64 * 1024) {
        if c.write_all(chunk).is_err() {
            break;
        }
    }
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no answer: {text:?}"));
    let v = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    (head.to_string(), v)
}

#[track_caller]
fn assert_json_answer(head: &str, v: &serde_json::Value, status: u16, msg: &str) {
    assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
    let h = head.to_ascii_lowercase();
    assert!(h.contains("\r\ncontent-type: application/json\r\n"), "{head}");
    assert!(h.contains("\r\nx-request-id: "), "{head}");
    assert_eq!(*v, serde_json::json!({"success": false, "status": status, "error": msg}));
}

#[test]
fn answers_hyper_gives_itself_are_json_envelopes() {
    let s = Srv::start();
    let (h, v) = raw_exchange(&s, b"GET /__ping__ HTTP/1.1\r\nHost: t\r\nX-Bad: a\x01b\r\n\r\n");
    assert_json_answer(&h, &v, 400, "400 - Bad Request");
    let (h, v) = raw_exchange(&s, b"POST /login HTTP/1.1\r\nHost: t\r\nContent-Length: ten\r\n\r\n");
    assert_json_answer(&h, &v, 400, "400 - Bad Request");
    let (h, v) = raw_exchange(&s, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all");
    assert_json_answer(&h, &v, 400, "400 - Bad Request");
    let long = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(70_000));
    let (h, v) = raw_exchange(&s, long.as_bytes());
    assert_json_answer(&h, &v, 414, "414 - URI Too Long");
    let big = format!("GET /__ping__ HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n", "b".repeat(1 << 20));
    let (h, v) = raw_exchange(&s, big.as_bytes());
    assert_json_answer(&h, &v, 431, "431 - Request Header Fields Too Large");
}

#[test]
fn a_bad_request_after_good_ones_on_one_connection_still_gets_json() {
    let s = Srv::start();
    let mut c = TcpStream::connect(s.addr()).unwrap();
    c.write_all(b"GET /__ping__ HTTP/1.1\r\nHost: t\r\n\r\nGET /__ping__ HTTP/1.1\r\nHost: t\r\n\r\nGET /x HTTP/1.1\r\nBad: \x01\r\n\r\n")
        .unwrap();
    let out = read_until_closed(&mut c, Duration::from_secs(10));
    assert_eq!(out.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{out}");
    assert_eq!(out.matches("content-type: application/json\r\n").count(), 3, "{out}");
    assert!(out.ends_with(r#"{"success":false,"status":400,"error":"400 - Bad Request"}"#), "{out}");
}

#[test]
fn reference_style_renders_as_the_reference_serializer_does() {
    let s = Srv::start_with(|c| c.response_style = pfm::config::ResponseStyle::Reference);
    let tok = s.token("refu", "user");
    let r = s.post(&tok, "/register", serde_json::json!({"user_id": "refu", "initial_balance": 1000}));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["success"], serde_json::json!([true]));
    assert_eq!(r.json["status"], serde_json::json!([200]));
    assert_eq!(r.json["user_id"], serde_json::json!(["refu"]));
    let main = r.json["uuid"][0].as_str().unwrap().to_string();
    assert!(r.json["execution_time"].is_array() && r.json["start_time"].is_array(), "{}", r.text);
    // The reference's own client sends the boxed uuid back as it got it.
    let r = s.post(
        &tok,
        "/add_sub_account",
        serde_json::json!({"parent_uuid": [main], "name": "Needs", "allocation": 0.333333}),
    );
    assert_eq!(r.json["child_type"], serde_json::json!(["ChildAccount"]), "{}", r.text);
    assert_eq!(r.json["allocation"], serde_json::json!([0.3333]), "{}", r.text);
    let needs = r.json["uuid"][0].as_str().unwrap().to_string();
    let r = s.post(&tok, "/deposit", serde_json::json!({"uuid": main, "amount": 10.5, "channel": "ABSA"}));
    assert_eq!(r.json["amount"], serde_json::json!([10.5]), "{}", r.text);
    assert!(r.json["balance"][0].is_number(), "{}", r.text);
    // get_transactions: a data frame, rows of plain values.
    let r = s.get(&tok, "/get_transactions", &format!("uuid={needs}"));
    assert_eq!(r.json["transaction_count"], serde_json::json!([1]), "{}", r.text);
    let row = &r.json["transactions"][0];
    assert_eq!(row["Type"], serde_json::json!("Deposit"), "{}", r.text);
    assert!(row["Amount"].is_number() && row["Date"].is_string(), "{}", r.text);
    // A character vector stays a plain array; a list of lists is an array of boxed objects.
    let r = s.get(&tok, "/list_child_accounts", &format!("uuid={main}"));
    assert_eq!(r.json["child_account_names"], serde_json::json!(["Needs"]), "{}", r.text);
    let r = s.get(&tok, "/find_account_by_name", "name=Needs");
    assert_eq!(r.json["matches"][0]["uuid"], serde_json::json!([needs]), "{}", r.text);
    assert_eq!(r.json["total_matches"], serde_json::json!([1]));
    // NULL is {}.
    let r = s.get(&tok, "/find_account_by_uuid", &format!("uuid={main}"));
    assert_eq!(
        (r.json["parent_uuid"].clone(), r.json["allocation"].clone()),
        (serde_json::json!({}), serde_json::json!({})),
        "{}",
        r.text
    );
    // Minimal tree: named lists are objects, empty ones [].
    let r = s.get(&tok, "/get_minimal_tree", "");
    let node = &r.json["minimal_tree"];
    assert_eq!(node["child_accounts_list"]["Needs"]["uuid"], serde_json::json!([needs]), "{}", r.text);
    assert_eq!(node["child_accounts"]["Needs"]["child_accounts"], serde_json::json!([]), "{}", r.text);
    // Errors, filter answers, ping and hyper's own answers too.
    s.post(&tok, "/deposit", serde_json::json!({"uuid": main})).json["error"]
        .as_array()
        .map(|a| assert_eq!(a[0], "amount is required"))
        .expect("boxed error");
    let r = s.raw("GET", "/get_balance", &[], Body::None);
    assert_eq!(r.text, r#"{"success":[false],"status":[401],"error":["Missing or invalid token"]}"#);
    assert_eq!(s.raw("GET", "/__ping__", &[], Body::None).text, r#"{"status":["ok"]}"#);
    let (h, v) = raw_exchange(&s, b"GET /__ping__ HTTP/1.1\r\nBad: \x01\r\n\r\n");
    assert!(h.starts_with("HTTP/1.1 400"), "{h}");
    assert_eq!(v, serde_json::json!({"success": [false], "status": [400], "error": ["400 - Bad Request"]}));
}

#[test]
fn plain_style_is_the_default() {
    let s = Srv::start();
    assert_eq!(s.cfg.response_style, pfm::config::ResponseStyle::Plain);
    let (tok, main) = s.user("plain", "5");
    let r = s.get(&tok, "/find_account_by_uuid", &format!("uuid={main}"));
    assert_eq!(
        (r.json["success"].clone(), r.json["parent_uuid"].clone()),
        (serde_json::json!(true), serde_json::Value::Null)
    );
}

/// Whole-log answers (SPEC 8.3 and 8.12 give every record) are streamed once they hold more
/// records than `stream_min_records`, so one answer's memory is a page and a few chunks however
/// long the log. The streamed text is exactly what the pages and the short form give.
#[test]
fn long_logs_are_streamed_in_chunks_with_the_same_content() {
    let s = Srv::start_with(|c| c.stream_min_records = 100);
    let (tok, main) = s.user("streamer", "0");
    let kid = s.child(&tok, &main, "Kid", serde_json::json!({"allocation": 1}));
    // 501 deposits: the main log (a deposit and a split each) passes a page of 1000 records
    // and several chunks of 64 KiB.
    std::thread::scope(|sc| {
        for t in 0..3 {
            let (s, tok, main) = (&s, &tok, &main);
            sc.spawn(move || {
                for i in (t..501).step_by(3) {
                    s.deposit(tok, main, &format!("{}.{:02}", 1 + i / 100, i % 100)).ok();
                }
            });
        }
    });
    let whole = s.get(&tok, "/get_transactions", &format!("uuid={main}"));
    whole.ok();
    assert_eq!(whole.header("transfer-encoding"), Some("chunked"));
    assert_eq!(whole.header("content-length"), None);
    let txs = whole.json["transactions"].as_array().unwrap().clone();
    assert_eq!(whole.json["transaction_count"], serde_json::json!(1002));
    // The same records, in the same order, as the pages give them.
    let mut paged = Vec::new();
    let mut q = format!("uuid={main}&limit=1000");
    loop {
        let p = s.get(&tok, "/get_transactions", &q);
        paged.extend(p.json["transactions"].as_array().unwrap().iter().cloned());
        match p.json["next_cursor"].as_str() {
            Some(c) => q = format!("uuid={main}&limit=1000&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(txs, paged);
    // The child's log (501 records) streams too.
    let short = s.get(&tok, "/get_transactions", &format!("uuid={kid}"));
    assert_eq!(short.json["transaction_count"], serde_json::json!(501));
    assert_eq!(short.header("transfer-encoding"), Some("chunked"));
    // The tree: every account's log in place, the rest as before.
    let tree = s.get(&tok, "/get_minimal_tree", "");
    tree.ok();
    assert_eq!(tree.header("transfer-encoding"), Some("chunked"));
    let root = &tree.json["minimal_tree"];
    assert_eq!(root["transactions"].as_array().unwrap(), &txs);
    assert_eq!(root["child_accounts"]["Kid"]["transactions"], short.json["transactions"]);
    assert_eq!(
        root["total_balance"],
        s.get(&tok, "/compute_total_balance", &format!("uuid={main}")).json["total_balance"]
    );
    // A client that stops reading part-way costs the server nothing more: it goes on serving.
    let mut c = TcpStream::connect(s.addr()).unwrap();
    write!(c, "GET /get_minimal_tree HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {tok}\r\n\r\n").unwrap();
    let mut first = [0u8; 1024];
    assert!(c.read(&mut first).unwrap() > 0);
    drop(c);
    s.get(&tok, "/get_balance", &format!("uuid={main}")).ok();
}

/// Under the threshold, or in the reference style (which reshapes a finished body), a log is
/// sent whole with its Content-Length, as before.
#[test]
fn short_logs_and_the_reference_style_are_sent_whole() {
    for style in [pfm::config::ResponseStyle::Plain, pfm::config::ResponseStyle::Reference] {
        let s = Srv::start_with(|c| {
            c.stream_min_records = 3;
            c.response_style = style;
        });
        let tok = s.token("whole", "user");
        let auth = bearer(&tok);
        let post = |path: &str, body: serde_json::Value| {
            let r = s.raw("POST", path, &[("Authorization", &auth)], Body::Json(body));
            assert_eq!(r.status, 200, "{}", r.text);
            r
        };
        let reg = post("/register", serde_json::json!({"user_id": "whole"}));
        let uuid = &reg.json["uuid"];
        let main = uuid.as_str().or(uuid[0].as_str()).unwrap().to_string();
        let deposit = || post("/deposit", serde_json::json!({"uuid": main, "amount": "1", "channel": "c"}));
        for n in 1..=3 {
            deposit();
            let r = s.get(&tok, "/get_transactions", &format!("uuid={main}"));
            assert_eq!(r.status, 200);
            let chunked = r.header("transfer-encoding") == Some("chunked");
            assert!(!chunked, "{style:?}, {n} records");
            assert_eq!(r.header("content-length"), Some(r.text.len().to_string().as_str()));
        }
        deposit();
        let r = s.get(&tok, "/get_transactions", &format!("uuid={main}"));
        let chunked = r.header("transfer-encoding") == Some("chunked");
        assert_eq!(chunked, style == pfm::config::ResponseStyle::Plain, "{style:?}, 4 records");
        let n = if chunked {
            r.json["transaction_count"].clone()
        } else {
            r.json["transaction_count"][0].clone()
        };
        assert_eq!(n, serde_json::json!(4), "{}", r.text);
    }
}

/// A streamed answer to an HTTP/1.0 client ends when the connection closes (1.0 has no chunks):
/// the answer says `Connection: close`, never the client's `keep-alive`, and the whole log
/// arrives before the close. A short answer keeps the connection as before.
#[test]
fn a_streamed_answer_to_http_1_0_says_it_closes() {
    let s = Srv::start_with(|c| c.stream_min_records = 2);
    let (tok, main) = s.user("old-client", "0");
    for _ in 0..3 {
        s.deposit(&tok, &main, "1").ok();
    }
    let ask = |path: &str| {
        let mut c = TcpStream::connect(s.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(c, "GET {path} HTTP/1.0\r\nAuthorization: Bearer {tok}\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        // Read until the server closes, or, once an answer with a length is whole, until a
        // short wait tells that the connection is kept.
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        let closed = loop {
            if answer_is_whole(&out) {
                c.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
            }
            match c.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(_) => break false,
            }
        };
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.to_ascii_lowercase(), body.to_string(), closed)
    };
    let (head, body, closed) = ask(&format!("/get_transactions?uuid={main}"));
    assert!(head.starts_with("http/1.0 200"), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(!head.contains("keep-alive"), "{head}");
    assert!(!head.contains("transfer-encoding") && !head.contains("content-length"), "{head}");
    assert!(closed);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["transaction_count"], serde_json::json!(3));
    // A short answer: its length, and the connection kept as the client asked.
    let (head, _, closed) = ask(&format!("/get_balance?uuid={main}"));
    assert!(head.contains("connection: keep-alive") && head.contains("content-length"), "{head}");
    assert!(!closed);
}

/// Whether `out` holds a whole answer head and as many body bytes as its Content-Length says.
fn answer_is_whole(out: &[u8]) -> bool {
    let Some((head, body)) = common::split_answer(out) else { return false };
    let len = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok()).flatten()
    });
    len.is_some_and(|n| body.len() >= n)
}

#[test]
fn two_host_fields_get_400_and_none_is_served() {
    let s = Srv::start();
    // RFC 9112 3.2: more than one Host field makes a request malformed.
    let (h, v) =
        raw_exchange(&s, b"GET /__ping__ HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n");
    assert_json_answer(&h, &v, 400, "More than one Host header");
    // Checked before the token: a malformed request is malformed whoever sends it.
    let tok = s.token("host-user", "user");
    let req = format!(
        "GET /get_balance?uuid=x HTTP/1.1\r\nHost: a\r\nHost: a\r\nAuthorization: Bearer {tok}\r\nConnection: close\r\n\r\n"
    );
    let (h, v) = raw_exchange(&s, req.as_bytes());
    assert_json_answer(&h, &v, 400, "More than one Host header");
    // None at all is served, in HTTP/1.1 too: requests that wrk scripts build at load time with
    // `wrk.format` carry no Host.
    let (tok, main) = s.user("no-host", "3");
    for version in ["1.1", "1.0"] {
        let req = format!(
            "GET /get_balance?uuid={main} HTTP/{version}\r\nAuthorization: Bearer {tok}\r\nConnection: close\r\n\r\n"
        );
        let (h, v) = raw_exchange(&s, req.as_bytes());
        assert!(h.contains(" 200 OK"), "{h}");
        assert_eq!(common::num(&v["balance"]), "3", "{v}");
    }
}

#[test]
fn a_body_with_a_content_coding_gets_415_and_changes_nothing() {
    let s = Srv::start();
    let (tok, main) = s.user("coded", "10");
    let body = format!("uuid={main}&amount=5&channel=c");
    let auth = bearer(&tok);
    for coding in ["gzip", "br", "identity, gzip", "GZIP"] {
        let r = s.raw(
            "POST",
            "/deposit",
            &[("Authorization", &auth), ("Content-Encoding", coding)],
            Body::Form(&body),
        );
        r.fails(415, "Content-Encoding is not supported: send the body unencoded");
        assert_eq!(r.header("accept-encoding"), Some("identity"), "{coding}");
    }
    assert_eq!(s.balance(&tok, &main), "10");
    // `identity` is no coding at all, and a coding on an empty body codes nothing.
    let r = s.raw(
        "POST",
        "/deposit",
        &[("Authorization", &auth), ("Content-Encoding", "identity")],
        Body::Form(&body),
    );
    r.ok();
    let r = s.raw(
        "GET",
        &format!("/get_balance?uuid={main}"),
        &[("Authorization", &auth), ("Content-Encoding", "gzip")],
        Body::None,
    );
    r.ok();
    assert_eq!(s.balance(&tok, &main), "15");
    // Documented for the endpoints that read a body, with the header it carries.
    let api = s.raw("GET", "/openapi.json", &[], Body::None);
    let doc = &api.json["paths"]["/deposit"]["post"]["responses"]["415"];
    assert!(doc["headers"]["Accept-Encoding"].is_object(), "{doc}");
}
