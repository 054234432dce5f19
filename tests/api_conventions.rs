//! What API clients expect beyond the SPEC endpoints (docs/api.md): probes, rate-limit header
//! fields, pagination, metrics and the OpenAPI document, all over real HTTP.

mod common;

use common::{Body, Srv};
use serde_json::json;

#[test]
fn healthz_and_readyz_are_public_json_probes() {
    let s = Srv::start();
    let h = s.raw("GET", "/healthz", &[], Body::None);
    assert_eq!((h.status, h.text.as_str()), (200, r#"{"status":"ok"}"#));
    assert_eq!(h.header("content-type"), Some("application/json"));
    assert!(h.header("x-request-id").is_some());
    let r = s.raw("GET", "/readyz", &[], Body::None);
    assert_eq!((r.status, r.text.as_str()), (200, r#"{"status":"ready"}"#));
    // A bad token does not matter on a public path (the header is not even read).
    let r = s.raw("GET", "/readyz", &[("Authorization", "Bearer nope")], Body::None);
    assert_eq!(r.status, 200);
    // Known path, wrong method: 405 naming GET, and HEAD, which probes answer too.
    let p = s.raw("POST", "/healthz", &[], Body::None);
    assert_eq!(p.status, 405);
    assert_eq!(p.header("allow"), Some("GET, HEAD"));
}

#[test]
fn readyz_reads_storage_of_a_populated_service() {
    let s = Srv::start();
    let (tok, main) = s.user("probe_user", "100");
    s.deposit(&tok, &main, "5").ok();
    let r = s.raw("GET", "/readyz", &[], Body::None);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json, json!({"status": "ready"}));
}

#[test]
fn ratelimit_fields_on_every_answer_that_went_through_a_limiter() {
    let s = Srv::start_with(|c| {
        c.max_requests = 3;
        c.window_size = 10;
    });
    let tok = s.token("rl_user", "user");
    let policy = r#""default";q=3;w=10"#;
    let r = s.get(&tok, "/get_balance", "uuid=x");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("ratelimit-policy"), Some(policy));
    assert_eq!(r.header("ratelimit"), Some(r#""default";r=2;t=10"#));
    s.clock.advance_micros(2_500_000);
    // A 400 from a handler also went through the limiter.
    let r = s.get(&tok, "/get_balance", "");
    assert_eq!(r.status, 400);
    assert_eq!(r.header("ratelimit"), Some(r#""default";r=1;t=8"#));
    s.clock.advance_micros(500_000);
    assert_eq!(s.get(&tok, "/get_balance", "uuid=x").header("ratelimit"), Some(r#""default";r=0;t=7"#));
    s.clock.advance_micros(1_000_000);
    let r = s.get(&tok, "/get_balance", "uuid=x");
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("6"));
    assert_eq!(r.header("ratelimit-policy"), Some(policy));
    assert_eq!(r.header("ratelimit"), Some(r#""default";r=0;t=6"#));
    // Public paths count per client IP, in their own table.
    let p = s.raw("GET", "/__ping__", &[], Body::None);
    assert_eq!(p.header("ratelimit"), Some(r#""default";r=2;t=10"#));
    assert_eq!(p.header("ratelimit-policy"), Some(policy));
    // Rejected before any limiter: no fields.
    let u = s.raw("GET", "/get_balance", &[], Body::None);
    assert_eq!(u.status, 401);
    assert_eq!(u.header("ratelimit"), None);
    assert_eq!(u.header("ratelimit-policy"), None);
}

#[test]
fn ratelimit_fields_with_default_configuration() {
    let s = Srv::start();
    let (tok, main) = s.user("rl_default", "10");
    let r = s.deposit(&tok, &main, "1");
    r.ok();
    assert_eq!(r.header("ratelimit-policy"), Some(r#""default";q=180000;w=3600"#));
    // register counted 1, the deposit 2.
    assert_eq!(r.header("ratelimit"), Some(r#""default";r=179998;t=3600"#));
}

/// `/get_transactions` pages of `limit`, following `next_cursor` until it is null.
fn all_pages(s: &Srv, tok: &str, uuid: &str, limit: u32) -> (Vec<serde_json::Value>, usize) {
    let (mut out, mut pages, mut cursor) = (Vec::new(), 0, None::<String>);
    loop {
        let q = match &cursor {
            None => format!("uuid={uuid}&limit={limit}"),
            Some(c) => format!("uuid={uuid}&limit={limit}&cursor={c}"),
        };
        let r = s.get(tok, "/get_transactions", &q);
        r.ok();
        let txs = r.json["transactions"].as_array().cloned().unwrap_or_default();
        assert!(txs.len() <= limit as usize);
        assert_eq!(r.json["transaction_count"], json!(txs.len()));
        out.extend(txs);
        pages += 1;
        match &r.json["next_cursor"] {
            serde_json::Value::Null => return (out, pages),
            serde_json::Value::String(c) => cursor = Some(c.clone()),
            other => panic!("next_cursor {other}"),
        }
    }
}

#[test]
fn transactions_page_in_recording_order_until_a_null_cursor() {
    let s = Srv::start();
    let (tok, main) = s.user("pager", "0");
    for i in 1..=25 {
        s.deposit(&tok, &main, &i.to_string()).ok();
    }
    let full = s.txs(&tok, &main);
    assert_eq!(full.len(), 25);
    let (paged, pages) = all_pages(&s, &tok, &main, 10);
    assert_eq!(pages, 3);
    assert_eq!(paged, full);
    let (paged, pages) = all_pages(&s, &tok, &main, 1000);
    assert_eq!((pages, &paged), (1, &full));
    let (paged, pages) = all_pages(&s, &tok, &main, 25);
    assert_eq!((pages, &paged), (1, &full));
    // A page read, then more writes: following the cursor continues with the new records.
    let first = s.get(&tok, "/get_transactions", &format!("uuid={main}&limit=20"));
    let cursor = first.s("next_cursor");
    s.deposit(&tok, &main, "99").ok();
    let rest = s.get(&tok, "/get_transactions", &format!("uuid={main}&limit=20&cursor={cursor}"));
    rest.ok();
    let amounts: Vec<String> =
        rest.json["transactions"].as_array().unwrap().iter().map(|t| t["Amount"].to_string()).collect();
    assert_eq!(amounts, ["21", "22", "23", "24", "25", "99"]);
    assert_eq!(rest.json["next_cursor"], serde_json::Value::Null);
    // limit and cursor from a JSON body or a form body work as from the query.
    let j = s.raw(
        "GET",
        "/get_transactions",
        &[("Authorization", &format!("Bearer {tok}"))],
        Body::Json(json!({"uuid": main, "limit": 5, "cursor": cursor})),
    );
    j.ok();
    assert_eq!(j.json["transactions"][0]["Amount"], json!(21));
    let auth = format!("Bearer {tok}");
    let form = format!("uuid={main}&limit=2");
    let f = s.raw("GET", "/get_transactions", &[("Authorization", &auth)], Body::Form(&form));
    f.ok();
    assert_eq!(f.json["transaction_count"], json!(2));
    // An empty log: one empty page.
    let kid = s.child(&tok, &main, "Kid", json!({"allocation": 0.5}));
    let e = s.get(&tok, "/get_transactions", &format!("uuid={kid}&limit=3"));
    e.ok();
    assert_eq!((&e.json["transactions"], &e.json["next_cursor"]), (&json!([]), &serde_json::Value::Null));
}

#[test]
fn transactions_without_limit_are_exactly_as_before() {
    let s = Srv::start();
    let (tok, main) = s.user("nolimit", "0");
    s.deposit(&tok, &main, "7").ok();
    let r = s.get(&tok, "/get_transactions", &format!("uuid={main}&cursor=whatever"));
    r.ok();
    let keys: Vec<&String> = r.json.as_object().unwrap().keys().collect();
    // serde_json without preserve_order sorts keys; check the exact text instead.
    assert_eq!(keys.len(), 8, "{}", r.text);
    let prefix = format!(
        r#"{{"success":true,"status":200,"uuid":"{main}","transaction_count":1,"transactions":[{{"Type":"Deposit""#
    );
    assert!(r.text.starts_with(&prefix), "{}", r.text);
    assert!(!r.text.contains("next_cursor"));
    assert!(r.text.contains(r#"}],"start_time":""#), "{}", r.text);
}

#[test]
fn bad_limit_or_cursor_is_a_400_in_the_envelope() {
    let s = Srv::start();
    let (tok, main) = s.user("badpager", "0");
    for i in 1..=3 {
        s.deposit(&tok, &main, &i.to_string()).ok();
    }
    let msg = "limit must be an integer between 1 and 1000";
    for bad in ["0", "1001", "2.5", "-1", "abc", "1e9"] {
        s.get(&tok, "/get_transactions", &format!("uuid={main}&limit={bad}")).fails(400, msg);
    }
    // `uuid` is still checked first, and numeric text forms of an integer are fine.
    s.get(&tok, "/get_transactions", "limit=0").fails(400, "uuid is required");
    s.get(&tok, "/get_transactions", &format!("uuid={main}&limit=2.0")).ok();
    let auth = format!("Bearer {tok}");
    s.raw(
        "GET",
        "/get_transactions",
        &[("Authorization", &auth)],
        Body::Json(json!({"uuid": main, "limit": true})),
    )
    .fails(400, msg);
    for bad in ["zz", "", "0000000000000000", "00000000000000zz00000000"] {
        let r = s.get(&tok, "/get_transactions", &format!("uuid={main}&limit=1&cursor={bad}"));
        if bad.is_empty() {
            // An empty value is absent (SPEC 3.3): the first page.
            r.ok();
        } else {
            r.fails(400, "Invalid cursor");
        }
    }
    let c = s.get(&tok, "/get_transactions", &format!("uuid={main}&limit=1")).s("next_cursor");
    // A cursor of another account, or past the end of the log, was never issued.
    let kid = s.child(&tok, &main, "Kid", json!({"allocation": 0.5}));
    s.get(&tok, "/get_transactions", &format!("uuid={kid}&limit=1&cursor={c}")).fails(400, "Invalid cursor");
    let past = format!("{:016x}{}", 99, &c[16..]);
    s.get(&tok, "/get_transactions", &format!("uuid={main}&limit=1&cursor={past}"))
        .fails(400, "Invalid cursor");
    // Tree and account errors keep their SPEC statuses.
    let other = s.token("nobody", "user");
    s.get(&other, "/get_transactions", &format!("uuid={main}&limit=1"))
        .fails(404, "User not found or unauthorized access");
    s.get(&tok, "/get_transactions", "uuid=accnope&limit=1").fails(403, "Account not found or unauthorized");
}

/// The value of the sample `series` (name with labels, as exposed) in a metrics text.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
}

#[test]
fn metrics_count_requests_storage_cache_limits_and_auth_failures() {
    let s = Srv::start_with(|c| c.max_requests = 8);
    let (tok, main) = s.user("metered", "10");
    s.deposit(&tok, &main, "5").ok();
    s.get(&tok, "/get_balance", &format!("uuid={main}")).ok();
    s.get(&tok, "/get_balance", "").fails(400, "uuid is required");
    // The ninth request of the user in the window is refused by the limiter.
    for _ in 0..4 {
        s.get(&tok, "/get_balance", &format!("uuid={main}")).ok();
    }
    assert_eq!(s.get(&tok, "/get_balance", &format!("uuid={main}")).status, 429);
    assert_eq!(s.get("bad.token", "/get_balance", "uuid=x").status, 401);
    assert_eq!(s.get("bad.token", "/get_balance", "uuid=x").status, 429);
    let m = s.raw("GET", "/metrics", &[], Body::None);
    assert_eq!(m.status, 200, "{}", m.text);
    assert_eq!(m.header("content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    let t = &m.text;
    assert!(sample(t, r#"pfm_http_requests_total{route="/register",status="200"}"#) >= 1.0);
    assert!(sample(t, r#"pfm_http_requests_total{route="/deposit",status="200"}"#) >= 1.0);
    assert!(sample(t, r#"pfm_http_requests_total{route="/get_balance",status="400"}"#) >= 1.0);
    assert!(sample(t, r#"pfm_http_requests_total{route="/get_balance",status="429"}"#) >= 2.0);
    assert!(sample(t, r#"pfm_http_request_duration_seconds_count{route="/deposit"}"#) >= 1.0);
    assert!(sample(t, r#"pfm_http_request_duration_seconds_bucket{route="/deposit",le="+Inf"}"#) >= 1.0);
    // register and deposit each committed once, with at least the user row.
    assert!(sample(t, "pfm_store_commit_duration_seconds_count") >= 2.0);
    assert!(sample(t, r#"pfm_store_commit_rows_bucket{le="1"}"#) >= 0.0);
    assert!(sample(t, "pfm_store_commit_rows_sum") >= 2.0);
    assert!(sample(t, "pfm_store_flush_duration_seconds_count") >= 1.0);
    assert!(sample(t, "pfm_store_flush_commits_sum") >= 2.0);
    assert!(sample(t, "pfm_user_cache_misses_total") >= 1.0);
    assert!(sample(t, "pfm_user_cache_hits_total") >= 1.0);
    assert!(sample(t, "pfm_user_cache_resident_users") >= 1.0);
    assert!(sample(t, r#"pfm_rate_limit_rejections_total{limiter="user"}"#) >= 1.0);
    assert!(sample(t, r#"pfm_auth_failures_total{answer="401",kind="token"}"#) >= 1.0);
    assert!(sample(t, r#"pfm_auth_failures_total{answer="429",kind="token"}"#) >= 1.0);
    // Failed logins are counted apart from bad tokens.
    let creds = json!({"user_id": "metered", "password": "wrong-password"});
    assert_eq!(s.raw("POST", "/login", &[], Body::Json(creds.clone())).status, 401);
    assert_eq!(s.raw("POST", "/login", &[], Body::Json(creds)).status, 429);
    let t = &s.raw("GET", "/metrics", &[], Body::None).text;
    assert!(sample(t, r#"pfm_auth_failures_total{answer="401",kind="login"}"#) >= 1.0);
    assert!(sample(t, r#"pfm_auth_failures_total{answer="429",kind="login"}"#) >= 1.0);
    // Unknown paths share one label, so clients cannot grow the series set.
    assert_eq!(s.get(&s.token("other", "user"), "/no/such/path", "").status, 404);
    let t = s.raw("GET", "/metrics", &[], Body::None).text;
    assert!(sample(&t, r#"pfm_http_requests_total{route="other",status="404"}"#) >= 1.0);
    assert!(!t.contains("/no/such/path"));
}

#[test]
fn metrics_can_be_turned_off_and_then_is_an_unknown_path() {
    let s = Srv::start_with(|c| c.metrics_enabled = false);
    let r = s.raw("GET", "/metrics", &[], Body::None);
    assert_eq!(r.text, r#"{"success":false,"status":401,"error":"Missing or invalid token"}"#);
    let r = s.get(&s.token("u", "user"), "/metrics", "");
    assert_eq!(r.text, r#"{"success":false,"status":404,"error":"404 - Resource Not Found"}"#);
}

#[test]
fn openapi_document_is_public_and_describes_every_route() {
    let s = Srv::start();
    let r = s.raw("GET", "/openapi.json", &[], Body::None);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let doc = &r.json;
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().expect("paths");
    assert_eq!(paths.len(), pfm::api::ENDPOINTS.len());
    for route in pfm::api::ENDPOINTS {
        let m = route.verb.as_str().to_ascii_lowercase();
        let op = &doc["paths"][route.path][&m];
        assert!(op.is_object(), "{} {} undocumented", route.verb.as_str(), route.path);
        let ok = &op["responses"]["200"];
        assert!(ok["content"].is_object(), "{}", route.path);
        // Every operation states its failures too (at least the rate limiter's 429).
        assert!(op["responses"]["429"]["headers"]["Retry-After"].is_object(), "{}", route.path);
    }
    // Token-exempt operations say so; the rest inherit the bearer requirement.
    assert_eq!(doc["security"], json!([{"bearerAuth": []}]));
    for public in
        ["/__ping__", "/login", "/generate_access_token", "/healthz", "/readyz", "/metrics", "/openapi.json"]
    {
        let op = doc["paths"][public].as_object().unwrap().values().next().unwrap();
        assert_eq!(op["security"], json!([]), "{public}");
    }
    assert_eq!(doc["paths"]["/register"]["post"]["security"], json!([{}, {"bearerAuth": []}]));
    assert!(doc["paths"]["/deposit"]["post"].get("security").is_none());
    // Parameters: query, JSON and form, for example /deposit's amount.
    let dep = &doc["paths"]["/deposit"]["post"];
    assert!(dep["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "amount" && p["in"] == "query"));
    let content = &dep["requestBody"]["content"];
    assert!(content["application/json"]["schema"]["properties"]["amount"].is_object());
    assert!(content["application/x-www-form-urlencoded"]["schema"]["properties"]["amount"].is_object());
    // The envelope: success fields and the error schema.
    let ok = &dep["responses"]["200"]["content"]["application/json"]["schema"];
    for k in
        ["success", "status", "account_uuid", "amount", "balance", "start_time", "end_time", "execution_time"]
    {
        assert!(ok["required"].as_array().unwrap().contains(&json!(k)), "{k}");
    }
    assert_eq!(
        dep["responses"]["409"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Error"
    );
    // Pagination is documented where it exists.
    let gt = &doc["paths"]["/get_transactions"]["get"];
    assert!(gt["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "limit"));
    assert!(gt["responses"]["200"]["content"]["application/json"]["schema"]["properties"]["next_cursor"]
        .is_object());
}

/// The documented success fields of an operation are exactly the keys a real answer has.
#[test]
fn documented_success_fields_match_real_answers() {
    let s = Srv::start();
    let (tok, main) = s.user("doc_user", "100");
    let doc = s.raw("GET", "/openapi.json", &[], Body::None).json;
    let keys = |path: &str, method: &str| -> Vec<String> {
        let sch = &doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"];
        let mut k: Vec<String> =
            sch["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
        k.sort();
        k
    };
    let real = |r: &common::Resp| -> Vec<String> {
        let mut k: Vec<String> = r.json.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let d = s.deposit(&tok, &main, "5");
    assert_eq!(real(d.ok()), keys("/deposit", "post"));
    let f = s.get(&tok, "/find_account_by_uuid", &format!("uuid={main}"));
    assert_eq!(real(f.ok()), keys("/find_account_by_uuid", "get"));
    let t = s.get(&tok, "/get_transactions", &format!("uuid={main}"));
    assert_eq!(real(t.ok()), keys("/get_transactions", "get"));
}

#[test]
fn cors_exposes_the_ratelimit_and_request_id_headers_to_browsers() {
    let s = Srv::start_with(|c| c.cors_allow_origin = Some("https://app.example".into()));
    let r = s.raw("GET", "/healthz", &[], Body::None);
    assert_eq!(r.header("access-control-allow-origin"), Some("https://app.example"));
    assert_eq!(
        r.header("access-control-expose-headers"),
        Some("Idempotent-Replayed, RateLimit, RateLimit-Policy, Retry-After, X-Request-Id")
    );
    assert!(Srv::start()
        .raw("GET", "/healthz", &[], Body::None)
        .header("access-control-expose-headers")
        .is_none());
}
