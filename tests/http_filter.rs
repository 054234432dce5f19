//! SPEC 3 (HTTP conventions) and 4 (the global request filter), over real HTTP.

mod common;

use common::{Body, Srv, SECRET};
use serde_json::json;

#[test]
fn ping_is_public_and_bare() {
    let s = Srv::start();
    let r = s.raw("GET", "/__ping__", &[], Body::None);
    assert_eq!((r.status, r.text.as_str()), (200, "{\"status\":\"ok\"}"));
    assert_eq!(r.header("content-type"), Some("application/json"));
}

#[test]
fn missing_token_is_401_filter_shaped() {
    let s = Srv::start();
    let r = s.raw("POST", "/deposit", &[], Body::None);
    assert_eq!(r.status, 401);
    assert_eq!(r.text, r#"{"success":false,"status":401,"error":"Missing or invalid token"}"#);
    let r = s.raw("GET", "/get_balance", &[("Authorization", "bearer abc")], Body::None);
    assert_eq!(r.status, 401);
    assert_eq!(r.err(), "Missing or invalid token");
}

#[test]
fn unknown_path_without_credentials_is_401() {
    let s = Srv::start();
    assert_eq!(s.raw("GET", "/nothing", &[], Body::None).status, 401);
}

#[test]
fn bad_token_twice_triggers_backoff_with_retry_after() {
    let s = Srv::start();
    let h = [("Authorization", "Bearer garbage")];
    let r = s.raw("POST", "/deposit", &h, Body::None);
    assert_eq!((r.status, r.err().as_str()), (401, "Invalid or expired token"));
    s.clock.advance_micros(300_000);
    let r = s.raw("POST", "/deposit", &h, Body::None);
    assert_eq!((r.status, r.err().as_str()), (429, "Too many failed attempts. Wait 0.7 seconds."));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.text,
        r#"{"success":false,"status":429,"error":"Too many failed attempts. Wait 0.7 seconds."}"#
    );
    s.clock.advance_micros(1_200_000);
    assert_eq!(s.raw("POST", "/deposit", &h, Body::None).status, 401);
}

/// An HS256 token with `claims`, signed with the servers' secret outside pfm.
fn mint(claims: serde_json::Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

#[test]
fn token_minted_elsewhere_is_accepted() {
    let s = Srv::start();
    let tok = mint(json!({"user_id": "u1", "role": "user", "iat": common::T0}));
    // Authenticated but no tree: 404 from the endpoint, not 401 from the filter.
    s.get(&tok, "/get_balance", "uuid=x").fails(404, "User not found or unauthorized access");
}

#[test]
fn hs512_and_claim_rules_are_refused() {
    let s = Srv::start();
    let key = jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes());
    let mk = |alg, claims: serde_json::Value| {
        jsonwebtoken::encode(&jsonwebtoken::Header::new(alg), &claims, &key).unwrap()
    };
    let cases = [
        mk(jsonwebtoken::Algorithm::HS512, json!({"user_id": "u1"})),
        mk(jsonwebtoken::Algorithm::HS256, json!({"role": "user"})),
        mk(jsonwebtoken::Algorithm::HS256, json!({"user_id": ""})),
        mk(jsonwebtoken::Algorithm::HS256, json!({"user_id": 5})),
        mk(jsonwebtoken::Algorithm::HS256, json!({"user_id": "u1", "exp": common::T0 - 1})),
        mk(jsonwebtoken::Algorithm::HS256, json!({"user_id": "u1", "exp": "never"})),
        mk(jsonwebtoken::Algorithm::HS256, json!({"user_id": "u1", "nbf": common::T0 + 100})),
    ];
    for t in cases {
        let r = s.get(&t, "/get_balance", "uuid=x");
        assert_eq!((r.status, r.err().as_str()), (401, "Invalid or expired token"), "{t}");
    }
    // exp in the future and a fractional exp are fine; a missing role means "user".
    let ok = mk(jsonwebtoken::Algorithm::HS256, json!({"user_id": "u1", "exp": common::T0 as f64 + 10.5}));
    s.get(&ok, "/get_balance", "uuid=x").fails(404, "User not found or unauthorized access");
}

#[test]
fn rate_limit_per_user_and_per_ip() {
    let s = Srv::start_with(|c| {
        c.max_requests = 3;
        c.window_size = 10;
    });
    let tok = s.token("u", "user");
    for _ in 0..3 {
        assert_eq!(s.get(&tok, "/get_balance", "uuid=x").status, 404);
    }
    let r = s.get(&tok, "/get_balance", "uuid=x");
    assert_eq!(r.text, r#"{"success":false,"status":429,"error":"Rate limit exceeded. Try later."}"#);
    assert_eq!(r.header("retry-after"), Some("10"));
    for _ in 0..3 {
        assert_eq!(s.raw("GET", "/__ping__", &[], Body::None).status, 200);
    }
    let r = s.raw("GET", "/__ping__", &[], Body::None);
    assert_eq!((r.status, r.err().as_str()), (429, "Rate limit exceeded. Try again later."));
    assert!(r.header("retry-after").is_some());
    // The window resets only strictly after WINDOW_SIZE seconds.
    s.clock.advance_micros(10_000_000);
    assert_eq!(s.get(&tok, "/get_balance", "uuid=x").status, 429);
    s.clock.advance_micros(500_000);
    assert_eq!(s.get(&tok, "/get_balance", "uuid=x").status, 404);
}

#[test]
fn routing_404_and_405_with_allow() {
    let s = Srv::start();
    let tok = s.token("u", "user");
    let r = s.get(&tok, "/accounts", "");
    assert_eq!(r.text, r#"{"success":false,"status":404,"error":"404 - Resource Not Found"}"#);
    let r = s.raw("POST", "/get_balance", &[("Authorization", &format!("Bearer {tok}"))], Body::None);
    assert_eq!(r.text, r#"{"success":false,"status":405,"error":"405 - Method Not Allowed"}"#);
    assert_eq!(r.header("allow"), Some("GET"));
    let r = s.get(&tok, "/deposit/", "");
    assert_eq!(r.status, 404);
}

#[test]
fn body_over_one_mib_is_413() {
    let s = Srv::start();
    let (tok, main) = s.user("big", "0");
    let big = format!("uuid={main}&pad={}", "x".repeat(1 << 20));
    let r = s.form(&tok, "/get_balance", &big);
    // Wrong method is decided before the body; use a GET with a body instead.
    assert_eq!(r.status, 405);
    let r = s.raw("GET", "/get_balance", &[("Authorization", &format!("Bearer {tok}"))], Body::Form(&big));
    assert_eq!(r.text, r#"{"success":false,"status":413,"error":"Request body too large"}"#);
}

#[test]
fn malformed_json_body_is_400() {
    let s = Srv::start();
    let (tok, _) = s.user("j", "0");
    let auth = format!("Bearer {tok}");
    for body in [&b"{not json"[..], b"[1,2]", b"\"str\""] {
        let r =
            s.raw("GET", "/get_balance", &[("Authorization", &auth)], Body::Raw("application/json", body));
        r.fails(400, "Invalid request body");
        assert!(r.json.get("start_time").is_some());
    }
}

/// A UTF-8 byte order mark before a body (.NET and PowerShell writers add one) is not part of
/// it (RFC 8259 8.1), with a JSON type, without a type, or in a form.
#[test]
fn a_byte_order_mark_before_a_body_is_ignored() {
    let s = Srv::start();
    let (tok, main) = s.user("bom", "7");
    let auth = format!("Bearer {tok}");
    let json = format!("\u{feff}{{\"uuid\":\"{main}\"}}");
    let form = format!("\u{feff}uuid={main}");
    for (ct, body) in [("application/json", &json), ("", &json), ("application/x-www-form-urlencoded", &form)]
    {
        let r = s.raw("GET", "/get_balance", &[("Authorization", &auth)], Body::Raw(ct, body.as_bytes()));
        assert_eq!((r.status, r.n("balance")), (200, "7".to_string()), "{ct:?}: {}", r.text);
    }
}

#[test]
fn request_id_is_echoed_or_generated() {
    let s = Srv::start();
    let r = s.raw("GET", "/__ping__", &[("X-Request-Id", "abc.DEF-1_2")], Body::None);
    assert_eq!(r.header("x-request-id"), Some("abc.DEF-1_2"));
    let r = s.raw("GET", "/__ping__", &[("X-Request-Id", "bad id!")], Body::None);
    let id = r.header("x-request-id").unwrap();
    assert_ne!(id, "bad id!");
    assert_eq!(id.len(), 36);
    // A random (version 4) UUID in its lowercase hyphenated form, new for every request.
    let u = uuid::Uuid::parse_str(id).unwrap();
    assert_eq!(u.get_version_num(), 4);
    assert_eq!(u.hyphenated().to_string(), id);
    let other = s.raw("GET", "/__ping__", &[], Body::None);
    assert_ne!(other.header("x-request-id"), Some(id));
}

#[test]
fn cors_preflight_and_origin_header_when_enabled() {
    let s = Srv::start_with(|c| c.cors_allow_origin = Some("https://app.example".into()));
    let r = s.raw("OPTIONS", "/deposit", &[], Body::None);
    assert_eq!(r.status, 204);
    assert_eq!(r.header("access-control-allow-origin"), Some("https://app.example"));
    assert_eq!(r.header("access-control-allow-methods"), Some("GET, POST, DELETE, OPTIONS"));
    assert_eq!(r.header("access-control-max-age"), Some("600"));
    let r = s.raw("GET", "/__ping__", &[], Body::None);
    assert_eq!(r.header("access-control-allow-origin"), Some("https://app.example"));
}

#[test]
fn cors_off_by_default() {
    let s = Srv::start();
    let r = s.raw("OPTIONS", "/deposit", &[], Body::None);
    assert_eq!(r.status, 401);
    assert!(r.header("access-control-allow-origin").is_none());
}

#[test]
fn trust_proxy_uses_forwarded_for() {
    let s = Srv::start_with(|c| {
        c.max_requests = 1;
        c.trust_proxy = true;
    });
    let a = [("X-Forwarded-For", "10.0.0.1, 10.0.0.2")];
    let b = [("X-Forwarded-For", "10.0.0.9")];
    assert_eq!(s.raw("GET", "/__ping__", &a, Body::None).status, 200);
    assert_eq!(s.raw("GET", "/__ping__", &a, Body::None).status, 429);
    assert_eq!(s.raw("GET", "/__ping__", &b, Body::None).status, 200);
}

/// One kept-alive connection: requests go out one at a time and each answer is read by its
/// `Content-Length`.
struct KeepAlive(std::net::TcpStream);

impl KeepAlive {
    fn open(s: &Srv) -> KeepAlive {
        let c = std::net::TcpStream::connect(s.addr()).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        KeepAlive(c)
    }

    /// Status, the `RateLimit` header and the body of `GET target` with `token`.
    fn get(&mut self, token: &str, target: &str) -> (u16, String, String) {
        self.send("GET", target, Some(token), "")
    }

    /// Status, the `RateLimit` header and the body of a request with a JSON body (none if empty).
    fn send(&mut self, method: &str, target: &str, token: Option<&str>, body: &str) -> (u16, String, String) {
        use std::io::{Read, Write};
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let length = if body.is_empty() {
            String::new()
        } else {
            format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len())
        };
        write!(self.0, "{method} {target} HTTP/1.1\r\nHost: t\r\n{auth}{length}\r\n{body}").unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(self.0.read(&mut byte).unwrap(), 1, "connection closed");
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap();
        let header = |name: &str| {
            head.lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default()
        };
        let mut body = vec![0u8; header("content-length").parse().unwrap()];
        self.0.read_exact(&mut body).unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, header("ratelimit"), String::from_utf8(body).unwrap())
    }
}

/// Answers given without reading the request's body (filter refusals, unknown paths, wrong
/// methods, the operational endpoints) read and drop it first, so the connection goes on: left
/// unread, the connection was closed after the answer, and reset, at times before the answer
/// was read (a client sending `{}` with every GET lost some answers).
#[test]
fn answers_that_ignore_a_body_keep_the_connection() {
    let s = Srv::start();
    let (tok, main) = s.user("u", "10");
    let mut c = KeepAlive::open(&s);
    for round in 0..3 {
        // A bad token of its own each round: a repeated one meets the failed-auth backoff.
        let bad = format!("bad.token.{round}");
        for (method, target, token, want) in [
            ("GET", "/nope", Some(tok.as_str()), 404),
            ("GET", "/deposit", Some(tok.as_str()), 405),
            ("POST", "/deposit", None, 401),
            ("POST", "/deposit", Some(bad.as_str()), 401),
            ("GET", "/__ping__", None, 200),
            ("GET", "/openapi.json", None, 200),
            ("GET", "/healthz", None, 200),
        ] {
            let (st, _, body) = c.send(method, target, token, r#"{"amount": 1}"#);
            assert_eq!(st, want, "round {round}: {method} {target}: {body}");
        }
    }
    // The same connection still serves, and nothing was written.
    let (st, _, body) = c.get(&tok, &format!("/get_balance?uuid={main}"));
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("\"balance\":10"), "{body}");
}

/// A connection remembers its last token and the limiter key of its user: what it remembers
/// must never change who a request is, whether it is allowed, or whose budget it spends.
#[test]
fn a_kept_alive_connection_authenticates_every_request_as_before() {
    let s = Srv::start_with(|c| {
        c.max_requests = 5;
        c.window_size = 100;
    });
    let (tok_u, main_u) = s.user("u", "10");
    let (tok_w, main_w) = s.user("w", "20");
    let spent = 1; // registering spent one request of each budget
    let mut c = KeepAlive::open(&s);
    let bal = |m: &str| format!("/get_balance?uuid={m}");
    let (st, rl, body) = c.get(&tok_u, &bal(&main_u));
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("\"balance\":10"), "{body}");
    assert_eq!(rl, format!("\"default\";r={};t=100", 5 - spent - 1));
    // Another user on the same connection is that user, with that user's budget.
    let (st, rl, body) = c.get(&tok_w, &bal(&main_w));
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("\"balance\":20"), "{body}");
    assert_eq!(rl, format!("\"default\";r={};t=100", 5 - spent - 1));
    // u's own account is not w's: the memory of u's token is gone, and w is not let in as u.
    let (st, _, _) = c.get(&tok_w, &bal(&main_u));
    assert_eq!(st, 403);
    // A second token of u (another iat) on a second connection spends the same budget.
    let tok_u2 = mint(json!({"user_id": "u", "iat": 12345}));
    let mut c2 = KeepAlive::open(&s);
    let (st, rl, _) = c2.get(&tok_u2, &bal(&main_u));
    assert_eq!((st, rl), (200, "\"default\";r=2;t=100".to_string()));
    let (st, rl, _) = c.get(&tok_u, &bal(&main_u));
    assert_eq!((st, rl), (200, "\"default\";r=1;t=100".to_string()));
    let (st, rl, _) = c2.get(&tok_u2, &bal(&main_u));
    assert_eq!((st, rl), (200, "\"default\";r=0;t=100".to_string()));
    let (st, _, body) = c.get(&tok_u, &bal(&main_u));
    assert_eq!(st, 429, "{body}");
    // A token altered in its last byte is refused on a connection that remembers the original.
    let mut forged = tok_w.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let (st, _, body) = c.get(&tok_w, &bal(&main_w));
    assert_eq!(st, 200, "{body}");
    let (st, _, body) = c.get(std::str::from_utf8(&forged).unwrap(), &bal(&main_w));
    assert_eq!(st, 401, "{body}");
}

/// A remembered token still expires: the time is checked on every request.
#[test]
fn a_remembered_token_expires_on_its_connection() {
    let s = Srv::start();
    let (_, main) = s.user("u", "10");
    let now = common::T0;
    let tok = mint(json!({"user_id": "u", "exp": now + 60}));
    let mut c = KeepAlive::open(&s);
    let target = format!("/get_balance?uuid={main}");
    assert_eq!(c.get(&tok, &target).0, 200);
    s.clock.advance_micros(59_000_000);
    assert_eq!(c.get(&tok, &target).0, 200);
    s.clock.advance_micros(2_000_000);
    let (st, _, body) = c.get(&tok, &target);
    assert_eq!(
        (st, body.as_str()),
        (401, r#"{"success":false,"status":401,"error":"Invalid or expired token"}"#)
    );
}

/// A client may shut down its sending side once its request is out (`nc -N`, `socat`, Node's
/// `socket.end(req)`) and still read the answer (RFC 9112 9.6). Each such request is answered,
/// and each write it made is one the client heard about.
#[test]
fn a_half_closed_client_still_gets_its_answer() {
    use std::io::{Read, Write};
    let s = Srv::start();
    let (tok, main) = s.user("u", "0");
    for i in 0..10 {
        let form = format!("uuid={main}&amount=1&channel=C");
        let mut c = std::net::TcpStream::connect(s.addr()).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        write!(
            c,
            "POST /deposit HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {tok}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        )
        .unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 "), "deposit {i}: {answer:?}");
        assert!(answer.contains(&format!("\"balance\":{}", i + 1)), "deposit {i}: {answer}");
    }
    // The same for a request without a body.
    let mut c = std::net::TcpStream::connect(s.addr()).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer:?}");
    assert_eq!(s.balance(&tok, &main), "10");
}

/// HEAD on the token-exempt GET resources (probes, OpenAPI, the web page's files) answers as GET
/// without the body (RFC 9110 9.3.2): `wget --spider`, `curl -I` and uptime monitors use it. The
/// SPEC endpoints keep their one method (SPEC 3.1).
#[test]
fn head_works_on_probes_and_files_and_stays_405_on_endpoints() {
    use std::io::{Read, Write};
    let s = Srv::start();
    let tok = s.token("u", "user");
    let head = |path: &str, auth: bool| {
        let mut c = std::net::TcpStream::connect(s.addr()).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        let a = if auth { format!("Authorization: Bearer {tok}\r\n") } else { String::new() };
        write!(c, "HEAD {path} HTTP/1.1\r\nHost: t\r\n{a}Connection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    };
    for path in ["/healthz", "/readyz", "/openapi.json", "/", "/app.js"] {
        let get = s.raw("GET", path, &[], Body::None);
        assert_eq!(get.status, 200, "GET {path}");
        let out = head(path, false);
        assert!(out.starts_with("HTTP/1.1 200 "), "HEAD {path}: {out}");
        assert!(out.ends_with("\r\n\r\n"), "HEAD {path} has no body: {out}");
        let len = format!("content-length: {}\r\n", get.text.len());
        assert!(out.to_ascii_lowercase().contains(&len), "HEAD {path}: {out}");
    }
    for (path, auth) in [("/__ping__", false), ("/get_balance", true)] {
        let out = head(path, auth);
        assert!(out.starts_with("HTTP/1.1 405 "), "HEAD {path}: {out}");
        assert!(out.to_ascii_lowercase().contains("allow: get\r\n"), "HEAD {path}: {out}");
    }
}

/// Every 401 names the scheme it wants (RFC 9110 15.5.2, RFC 6750 3); wget, for one, shows
/// nothing of a 401 without it.
#[test]
fn every_401_carries_www_authenticate() {
    let s = Srv::start();
    let missing = s.raw("POST", "/deposit", &[], Body::None);
    let invalid = s.raw("GET", "/get_balance", &[("Authorization", "Bearer not.a.token")], Body::None);
    let register = s.raw("POST", "/register", &[], Body::Json(json!({"user_id": "w"})));
    let login =
        s.raw("POST", "/login", &[], Body::Json(json!({"user_id": "w", "password": "wrong-password"})));
    for (what, r) in
        [("missing", &missing), ("invalid", &invalid), ("register", &register), ("login", &login)]
    {
        assert_eq!(r.status, 401, "{what}: {}", r.text);
        assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"pfm\""), "{what}");
    }
    assert_eq!(s.raw("GET", "/__ping__", &[], Body::None).header("www-authenticate"), None);
}

/// A client that writes its whole body before reading (Python's http.client, urllib) reads the
/// 413 of a body over 1 MiB: the server reads and drops what comes (within bounds) before it
/// closes, instead of closing on unread bytes, which resets the connection under the client.
/// The answer says the connection closes. The same for a chunked body that grows past 1 MiB.
#[test]
fn a_client_that_sends_its_whole_large_body_first_reads_the_413() {
    use std::io::{Read, Write};
    let s = Srv::start();
    let tok = s.token("u", "user");
    let body = vec![b'x'; 5 << 20];
    for chunked in [false, true] {
        let mut c = std::net::TcpStream::connect(s.addr()).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        let framing = if chunked {
            "Transfer-Encoding: chunked\r\n".to_string()
        } else {
            format!("Content-Length: {}\r\n", body.len())
        };
        write!(c, "POST /deposit HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {tok}\r\n{framing}\r\n")
            .unwrap();
        let sent = if chunked {
            body.chunks(64 << 10).try_for_each(|part| {
                write!(c, "{:x}\r\n", part.len())?;
                c.write_all(part)?;
                c.write_all(b"\r\n")
            })
        } else {
            c.write_all(&body)
        };
        sent.unwrap_or_else(|e| panic!("chunked {chunked}: the body could not be sent: {e}"));
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap_or_else(|e| panic!("chunked {chunked}: {e}"));
        assert!(out.starts_with("HTTP/1.1 413 "), "chunked {chunked}: {out}");
        assert!(out.to_ascii_lowercase().contains("connection: close\r\n"), "chunked {chunked}: {out}");
        assert!(out.ends_with(r#"{"success":false,"status":413,"error":"Request body too large"}"#));
    }
}

/// A body that arrives in pieces (chunked, with pauses) is put together whole.
#[test]
fn a_body_in_several_pieces_is_read_whole() {
    use std::io::{Read, Write};
    let s = Srv::start();
    let (tok, main) = s.user("pieces", "0");
    let body = format!(r#"{{"uuid":"{main}","amount":"12.5","channel":"ABSA"}}"#);
    let (a, rest) = body.split_at(10);
    let (b, c) = rest.split_at(20);
    let mut conn = std::net::TcpStream::connect(s.addr()).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    write!(
        conn,
        "POST /deposit HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {tok}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    for piece in [a, b, c] {
        write!(conn, "{:x}\r\n{piece}\r\n", piece.len()).unwrap();
        conn.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    conn.write_all(b"0\r\n\r\n").unwrap();
    let mut out = String::new();
    conn.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    assert_eq!(s.balance(&tok, &main), "12.5");
}
