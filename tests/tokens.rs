//! Personal access tokens over real HTTP (docs/tokens.md): each scope, expiry, revocation, the
//! filter's backoff and rate limit, what /tokens shows, and that no log carries a token.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Body, Resp, Srv, SECRET, T0};
use pfm::api::decl::{Access, Verb};
use serde_json::{json, Value};

const READ_ONLY: &str = "This token may only read: use a write token for this request";
const INVALID: &str = "Invalid or expired token";

/// Creates a token with the JWT `jwt`; returns the whole answer.
fn create(s: &Srv, jwt: &str, body: Value) -> Resp {
    s.post(jwt, "/create_token", body)
}

/// A token of `scope` named `name`: (its text, its id).
fn token(s: &Srv, jwt: &str, name: &str, scope: &str) -> (String, i64) {
    let r = create(s, jwt, json!({"name": name, "scope": scope}));
    r.ok();
    (r.s("token"), r.json["id"].as_i64().expect("id"))
}

fn list(s: &Srv, tok: &str) -> Vec<Value> {
    let r = s.get(tok, "/tokens", "");
    r.ok();
    r.json["tokens"].as_array().cloned().expect("tokens")
}

#[test]
fn create_answers_the_text_once_and_list_never_shows_it() {
    let s = Srv::start();
    let (jwt, _) = s.user("alice", "100");
    let r = create(&s, &jwt, json!({"name": "ci", "scope": "write", "expires_in_days": 30}));
    r.ok();
    let text = r.s("token");
    assert_eq!(r.json["id"], json!(1));
    assert_eq!(r.json["name"], json!("ci"));
    assert_eq!(r.json["scopes"], json!(["read", "write"]));
    assert_eq!(r.s("created"), "2025-07-10T08:50:15.000Z");
    assert_eq!(r.s("expires"), "2025-08-09T08:50:15.000Z");
    // The format: prefix, owner, id, then 32 random bytes (43 base64url characters).
    let rest = text.strip_prefix("pfm_pat_").expect("prefix");
    let parts: Vec<&str> = rest.split('.').collect();
    assert_eq!(parts.len(), 3, "{text}");
    assert_eq!(parts[1], "1");
    assert_eq!(parts[2].len(), 43);
    let r2 = create(&s, &jwt, json!({"name": "phone", "scope": "read"}));
    r2.ok();
    assert_eq!(r2.json["scopes"], json!(["read"]));
    assert_eq!(r2.json["expires"], Value::Null);
    assert_ne!(r2.s("token"), text);
    let r = s.get(&jwt, "/tokens", "");
    r.ok();
    for secret in [text.as_str(), parts[2], &r2.s("token")] {
        assert!(!r.text.contains(secret), "a token's text in /tokens: {}", r.text);
    }
    let rows = r.json["tokens"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0],
        json!({"id": 1, "name": "ci", "scopes": ["read", "write"], "created": "2025-07-10T08:50:15.000Z",
            "last_used": null, "expires": "2025-08-09T08:50:15.000Z", "expired": false})
    );
    assert_eq!(rows[1]["name"], json!("phone"));
    // Used once, a minute later: /tokens says when.
    s.clock.advance_micros(60_000_000);
    s.get(&text, "/tokens", "").ok();
    assert_eq!(list(&s, &jwt)[0]["last_used"], json!("2025-07-10T08:51:15.000Z"));
}

#[test]
fn create_refuses_bad_input_and_changes_nothing() {
    let s = Srv::start_with(|c| c.max_requests = 1000);
    let (jwt, _) = s.user("bob", "0");
    let cases: &[(Value, u16, &str)] = &[
        (json!({"scope": "read"}), 400, "name is required"),
        (json!({"name": "x".repeat(101), "scope": "read"}), 400, "name is too long"),
        (json!({"name": "a"}), 400, "scope is required"),
        (json!({"name": "a", "scope": "admin"}), 400, "scope must be read or write"),
        (json!({"name": "a", "scope": "read", "expires": "not a date"}), 400, "Invalid expires format"),
        (
            json!({"name": "a", "scope": "read", "expires": "2025-07-10"}),
            400,
            "expires must be in the future",
        ),
        (
            json!({"name": "a", "scope": "read", "expires": "2026-01-01", "expires_in_days": 3}),
            400,
            "Give expires or expires_in_days, not both",
        ),
        (
            json!({"name": "a", "scope": "read", "expires_in_days": 0}),
            400,
            "expires_in_days must be a whole number from 1 to 3650",
        ),
    ];
    for (body, status, msg) in cases {
        create(&s, &jwt, body.clone()).fails(*status, msg);
    }
    assert!(list(&s, &jwt).is_empty());
    // A name is unique per user; 100 characters is allowed.
    let long = "n".repeat(100);
    token(&s, &jwt, &long, "read");
    create(&s, &jwt, json!({"name": long, "scope": "write"}))
        .fails(409, "An access token with this name already exists");
    // Another user may use the same name.
    let (other, _) = s.user("carol", "0");
    token(&s, &other, &long, "read");
    for i in 1..50 {
        token(&s, &jwt, &format!("t{i}"), "read");
    }
    create(&s, &jwt, json!({"name": "one more", "scope": "read"}))
        .fails(400, "A user keeps at most 50 access tokens");
    assert_eq!(list(&s, &jwt).len(), 50);
    // A date expiry is that day's midnight UTC.
    let (jwt2, _) = s.user("dave", "0");
    let r = create(&s, &jwt2, json!({"name": "d", "scope": "read", "expires": "2025-07-11"}));
    assert_eq!(r.ok().s("expires"), "2025-07-11T00:00:00.000Z");
    // No tree, no tokens.
    let nobody = s.token("nobody", "user");
    create(&s, &nobody, json!({"name": "a", "scope": "read"}))
        .fails(404, "User not found or unauthorized access");
}

#[test]
fn a_read_token_reads_and_every_other_method_is_403_changing_nothing() {
    let s = Srv::start();
    let (jwt, main) = s.user("reader", "250");
    let (read, _) = token(&s, &jwt, "dash", "read");
    assert_eq!(s.balance(&read, &main), "250");
    assert_eq!(list(&s, &read).len(), 1);
    s.get(&read, "/get_transactions", &format!("uuid={main}")).ok();
    let before = s.get(&jwt, "/get_minimal_tree", "").text;
    let mut writes = 0;
    for e in pfm::api::ENDPOINTS.iter().filter(|e| e.access != Access::Public && e.verb != Verb::Get) {
        let body = json!({"uuid": main, "amount": "10", "channel": "X", "name": "n", "scope": "write",
            "parent_uuid": main, "id": 1, "user_id": "reader"});
        let r =
            s.raw(e.verb.as_str(), e.path, &[("Authorization", &format!("Bearer {read}"))], Body::Json(body));
        assert_eq!((r.status, r.err().as_str()), (403, READ_ONLY), "{} {}", e.verb.as_str(), e.path);
        assert!(r.header("ratelimit").is_some(), "{}", e.path);
        writes += 1;
    }
    assert!(writes >= 20, "every writing endpoint was tried ({writes})");
    // Unknown paths too: the filter decides before routing.
    let r = s.raw("PUT", "/anything", &[("Authorization", &format!("Bearer {read}"))], Body::None);
    assert_eq!((r.status, r.err().as_str()), (403, READ_ONLY));
    assert_eq!(s.get(&jwt, "/get_minimal_tree", "").text, before);
    assert_eq!(list(&s, &jwt).len(), 1, "not revoked, nothing created");
    assert_eq!(s.balance(&jwt, &main), "250");
}

#[test]
fn a_write_token_does_what_the_user_may_but_creates_no_token() {
    let s = Srv::start();
    let (jwt, main) = s.user("writer", "0");
    let (write, id) = token(&s, &jwt, "bot", "write");
    s.deposit(&write, &main, "40").ok();
    let child = s.child(&write, &main, "Savings", json!({"allocation": "0.5"}));
    assert_eq!(s.balance(&jwt, &main), "40");
    assert_eq!(s.balance(&write, &child), "0");
    create(&s, &write, json!({"name": "longer lived", "scope": "write"}))
        .fails(403, "A personal access token cannot create tokens");
    assert_eq!(list(&s, &write).len(), 1);
    // The role is the user's stored one (/register stores `user`), whatever the role of the
    // JWT that created the token: an admin's JWT gets 404 for an unknown account, the token 403.
    let admin = s.token("writer", "admin");
    let (as_admin, _) = token(&s, &admin, "made by an admin jwt", "read");
    let nobody = "uuid=00000000-0000-0000-0000-000000000000";
    s.get(&admin, "/get_balance", nobody).fails(404, "Account not found or unauthorized");
    s.get(&as_admin, "/get_balance", nobody).fails(403, "Account not found or unauthorized");
    assert_eq!(list(&s, &write).len(), 2);
    // It may revoke itself; then it is refused at once.
    s.post(&write, "/revoke_token", json!({"id": id})).ok();
    s.get(&write, "/get_balance", &format!("uuid={main}")).fails(401, INVALID);
    s.post(&jwt, "/revoke_token", json!({"id": id})).fails(404, "Access token not found");
    s.post(&jwt, "/revoke_token", json!({})).fails(400, "id is required");
}

#[test]
fn revocation_takes_effect_at_once() {
    let s = Srv::start();
    let (jwt, main) = s.user("rev", "5");
    let (a, a_id) = token(&s, &jwt, "a", "read");
    let (b, _) = token(&s, &jwt, "b", "write");
    assert_eq!(s.balance(&a, &main), "5");
    let r = s.post(&jwt, "/revoke_token", json!({"id": a_id}));
    assert_eq!(r.ok().json["revoked"], json!(a_id));
    let r = s.get(&a, "/get_balance", &format!("uuid={main}"));
    assert_eq!((r.status, r.err().as_str()), (401, INVALID));
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"pfm\""));
    // The other token is untouched; the revoked one is gone from the list.
    assert_eq!(s.balance(&b, &main), "5");
    let names: Vec<Value> = list(&s, &jwt).iter().map(|t| t["name"].clone()).collect();
    assert_eq!(names, [json!("b")]);
    // Ids are never reused: a new token does not revive the old text.
    let (c, c_id) = token(&s, &jwt, "a", "read");
    assert!(c_id > a_id);
    assert_eq!(s.balance(&c, &main), "5");
    s.clock.advance_micros(2_000_000);
    assert_eq!(s.get(&a, "/get_balance", &format!("uuid={main}")).status, 401);
}

#[test]
fn an_expired_token_is_401() {
    let s = Srv::start();
    let (jwt, main) = s.user("exp", "1");
    let r = create(&s, &jwt, json!({"name": "day", "scope": "read", "expires_in_days": 1}));
    let tok = r.ok().s("token");
    assert_eq!(s.balance(&tok, &main), "1");
    s.clock.advance_micros(86_399_000_000);
    assert_eq!(s.balance(&tok, &main), "1");
    s.clock.advance_micros(1_000_000);
    s.get(&tok, "/get_balance", &format!("uuid={main}")).fails(401, INVALID);
    let rows = list(&s, &jwt);
    assert_eq!(rows[0]["expired"], json!(true));
}

#[test]
fn a_wrong_secret_is_401_and_meets_the_failed_auth_backoff() {
    let s = Srv::start();
    let (jwt, main) = s.user("guess", "1");
    let (tok, _) = token(&s, &jwt, "t", "read");
    // Same owner and id, another secret.
    let (head, tail) = tok.rsplit_once('.').unwrap();
    let other = if tail.starts_with('A') { "B" } else { "A" };
    let forged = format!("{head}.{other}{}", &tail[1..]);
    let q = format!("uuid={main}");
    let r = s.get(&forged, "/get_balance", &q);
    assert_eq!((r.status, r.err().as_str()), (401, INVALID));
    s.clock.advance_micros(300_000);
    let r = s.get(&forged, "/get_balance", &q);
    assert_eq!((r.status, r.err().as_str()), (429, "Too many failed attempts. Wait 0.7 seconds."));
    assert_eq!(r.header("retry-after"), Some("1"));
    // The real token is not held back by another text's failures.
    assert_eq!(s.balance(&tok, &main), "1");
    s.clock.advance_micros(1_200_000);
    assert_eq!(s.get(&forged, "/get_balance", &q).status, 401);
    // Another user's id in an otherwise real token: refused too.
    let (jwt2, _) = s.user("victim", "1");
    token(&s, &jwt2, "t", "read");
    use base64::Engine as _;
    let victim = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("victim");
    let (_, rest) = tok.strip_prefix("pfm_pat_").unwrap().split_once('.').unwrap();
    assert_eq!(s.get(&format!("pfm_pat_{victim}.{rest}"), "/get_balance", &q).status, 401);
}

/// Sends a request whose Authorization value is `value`, any bytes; the status.
fn with_raw_auth(s: &Srv, value: &[u8]) -> (u16, String) {
    let mut req =
        b"GET /get_balance?uuid=x HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: ".to_vec();
    req.extend_from_slice(value);
    req.extend_from_slice(b"\r\n\r\n");
    let mut c = TcpStream::connect(s.addr()).unwrap();
    c.write_all(&req).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let (head, body) = common::split_answer(&out).expect("an answer");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("status");
    (status, body)
}

#[test]
fn garbage_after_the_prefix_is_401_never_500() {
    let s = Srv::start();
    let (jwt, _) = s.user("g", "1");
    let (tok, _) = token(&s, &jwt, "t", "read");
    let (head, _) = tok.rsplit_once('.').unwrap();
    let mut cases: Vec<Vec<u8>> = vec![
        b"pfm_pat_".to_vec(),
        b"pfm_pat_...".to_vec(),
        b"pfm_pat_Zw.1".to_vec(),
        b"pfm_pat_Zw.0.AAAA".to_vec(),
        b"pfm_pat_Zw.99999999999999999999999.AAAA".to_vec(),
        b"pfm_pat_%%.1.AAAA".to_vec(),
        format!("{head}.").into_bytes(),
        format!("{head}.{}", "A".repeat(44)).into_bytes(),
        format!("{tok}.x").into_bytes(),
        format!("pfm_pat_{}", "A".repeat(6000)).into_bytes(),
    ];
    // Bytes that are not UTF-8 (control bytes never reach the filter: HTTP parsing refuses them).
    let mut bin = b"pfm_pat_".to_vec();
    bin.extend_from_slice(&[0x80, 0xff, b'.', b'1', b'.', 0xc3, 0x28, b'\t', 0xfe]);
    cases.push(bin);
    for c in cases {
        let mut value = b"Bearer ".to_vec();
        value.extend_from_slice(&c);
        let (status, body) = with_raw_auth(&s, &value);
        assert_eq!(status, 401, "{} -> {body}", String::from_utf8_lossy(&c));
        assert!(body.contains(INVALID), "{body}");
    }
}

#[test]
fn the_rate_limit_is_the_users_whatever_the_credential() {
    let s = Srv::start_with(|c| {
        c.max_requests = 6;
        c.window_size = 10;
    });
    let (jwt, main) = s.user("limited", "1"); // 1 request
    let (tok, _) = token(&s, &jwt, "t", "read"); // 2
    let q = format!("uuid={main}");
    s.get(&jwt, "/get_balance", &q).ok(); // 3
    s.get(&tok, "/get_balance", &q).ok(); // 4
    s.get(&jwt, "/get_balance", &q).ok(); // 5
    let r = s.get(&tok, "/get_balance", &q); // 6
    assert_eq!(r.header("ratelimit"), Some("\"default\";r=0;t=10"), "{:?}", r.headers);
    let r = s.get(&tok, "/get_balance", &q);
    assert_eq!(r.text, r#"{"success":false,"status":429,"error":"Rate limit exceeded. Try later."}"#);
    assert_eq!(s.get(&jwt, "/get_balance", &q).status, 429);
    s.clock.advance_micros(10_500_000);
    s.get(&tok, "/get_balance", &q).ok();
}

#[test]
fn deleting_the_user_ends_its_tokens() {
    let s = Srv::start();
    let (jwt, main) = s.user("gone", "1");
    let (tok, _) = token(&s, &jwt, "t", "write");
    let r = s.raw(
        "DELETE",
        &format!("/delete?uuid={main}"),
        &[("Authorization", &format!("Bearer {tok}"))],
        Body::None,
    );
    r.ok();
    s.get(&tok, "/get_balance", &format!("uuid={main}")).fails(401, INVALID);
    // Registered anew under the same id: the old text stands for nothing, even beside a new
    // token with the same id.
    let (_, main2) = s.user("gone", "2");
    let (tok2, _) = token(&s, &jwt, "t", "write");
    assert_eq!(s.balance(&tok2, &main2), "2");
    s.clock.advance_micros(2_000_000);
    s.get(&tok, "/get_balance", &format!("uuid={main2}")).fails(401, INVALID);
}

#[test]
fn a_jwt_minted_with_the_shared_secret_still_works_beside_tokens() {
    let s = Srv::start();
    let (jwt, main) = s.user("mix", "3");
    token(&s, &jwt, "t", "read");
    let minted = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"user_id": "mix", "role": "user", "exp": T0 + 60}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    assert_eq!(s.balance(&minted, &main), "3");
    s.deposit(&minted, &main, "1").ok();
    // A JWT is full scope: it may create tokens.
    token(&s, &minted, "from a minted jwt", "write");
    assert_eq!(list(&s, &minted).len(), 2);
}

#[test]
fn the_last_use_is_written_off_the_request_path_and_survives_a_restart() {
    let mut s = Srv::start();
    let (jwt, main) = s.user("used", "1");
    let (tok, _) = token(&s, &jwt, "t", "read");
    s.balance(&tok, &main);
    // Written by a task of its own: wait for it in storage's committed state.
    let app = s.run.as_ref().unwrap().app.clone();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = rt.block_on(app.users.snapshot("used")).unwrap().expect("user");
        let stored = st.tree.docs.values().find_map(|d| match &**d {
            pfm::domain::docs::Doc::Token(t) => t.last_used,
            _ => None,
        });
        if stored == Some(T0) {
            break;
        }
        assert!(Instant::now() < deadline, "the last use was never written");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(app);
    // A second use within the minute stays in memory only; after a restart the stored one shows.
    s.clock.advance_micros(30_000_000);
    s.balance(&tok, &main);
    assert_eq!(list(&s, &jwt)[0]["last_used"], json!("2025-07-10T08:50:45.000Z"));
    s.restart();
    assert_eq!(list(&s, &jwt)[0]["last_used"], json!("2025-07-10T08:50:15.000Z"));
}

#[test]
fn the_openapi_document_declares_the_endpoints_and_the_scheme() {
    let s = Srv::start();
    let r = s.raw("GET", "/openapi.json", &[], Body::None);
    let doc = &r.json;
    assert!(doc["paths"]["/create_token"]["post"].is_object());
    assert!(doc["paths"]["/tokens"]["get"].is_object());
    assert!(doc["paths"]["/revoke_token"]["post"].is_object());
    assert!(doc["components"]["schemas"]["AccessToken"].is_object());
    let scheme = doc["components"]["securitySchemes"]["bearerAuth"]["description"].as_str().unwrap();
    assert!(scheme.contains("pfm_pat_"), "{scheme}");
    let d = doc["paths"]["/deposit"]["post"]["responses"]["403"]["description"].as_str().unwrap();
    assert!(d.contains(READ_ONLY), "{d}");
    // /create_token keeps no answer (it holds the token): no Idempotency-Key parameter.
    let params = doc["paths"]["/create_token"]["post"]["parameters"].as_array().unwrap();
    assert!(params.iter().all(|p| p["name"] != "Idempotency-Key"));
}

#[test]
fn an_idempotency_key_on_create_keeps_no_token_text() {
    let s = Srv::start();
    let (jwt, _) = s.user("idem", "1");
    let h = [("Authorization", format!("Bearer {jwt}")), ("Idempotency-Key", "k1".to_string())];
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = s.raw("POST", "/create_token", &h, Body::Json(json!({"name": "a", "scope": "read"})));
    a.ok();
    let b = s.raw("POST", "/create_token", &h, Body::Json(json!({"name": "a", "scope": "read"})));
    // Not replayed: the first answer was never kept.
    assert_eq!(b.header("idempotent-replayed"), None);
    b.fails(409, "An access token with this name already exists");
}

#[test]
fn no_token_text_reaches_the_log_or_an_answer() {
    use common::proc;
    let dir = tempfile::tempdir().unwrap();
    // Debug level: every tracing event of the service, not only the access log.
    let p = proc::spawn(dir.path(), &[], &[("LOG_FORMAT", "json"), ("RUST_LOG", "debug,hyper=info")]);
    let a = p.addr;
    let creds = json!({"user_id": "logme", "password": "secret123", "initial_balance": 5});
    assert_eq!(proc::request(a, "POST", "/register", None, creds.clone()).0, 200);
    let jwt = proc::login(a, "logme", "secret123");
    let (st, v) =
        proc::request(a, "POST", "/create_token", Some(&jwt), json!({"name": "t", "scope": "read"}));
    assert_eq!(st, 200, "{v}");
    let tok = v["token"].as_str().unwrap().to_string();
    let secret = tok.rsplit('.').next().unwrap().to_string();
    let forged = format!("{}{}", &tok[..tok.len() - 2], if tok.ends_with("AA") { "BB" } else { "AA" });
    let garbage = format!("{tok}.{secret}");
    let mut answers = Vec::new();
    for (method, path, t, want) in [
        ("GET", "/tokens", &tok, 200),
        ("POST", "/deposit", &tok, 403),
        ("GET", "/tokens", &forged, 401),
        ("GET", "/tokens", &garbage, 401),
    ] {
        let r = proc::send(a, method, path, Some(t), &[], "").expect("an answer");
        assert_eq!(r.status, want, "{method} {path}: {}", r.text);
        answers.push(r.text);
    }
    let (st, _) = proc::request(a, "POST", "/revoke_token", Some(&jwt), json!({"id": 1}));
    assert_eq!(st, 200);
    let r = proc::send(a, "GET", "/tokens", Some(&tok), &[], "").unwrap();
    assert_eq!(r.status, 401);
    answers.push(r.text);
    let mut p = p;
    p.terminate();
    let lines = p.lines();
    assert!(lines.iter().any(|l| l.contains("\"access\"") && l.contains("/create_token")), "{lines:#?}");
    for text in lines.iter().chain(&answers) {
        for s in [&tok, &secret, &forged, &garbage] {
            assert!(!text.contains(s.as_str()), "a token's text in {text}");
        }
    }
}
