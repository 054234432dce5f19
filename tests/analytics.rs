//! SPEC 8: analytics endpoints, date ranges (8.1, 10.14) and the minimal tree (8.12, 10.18).

mod common;

use common::Srv;
use serde_json::json;

const RANGE_ENDPOINTS: [(&str, &str); 5] = [
    ("/spending", "total_spending"),
    ("/total_income", "total_income"),
    ("/allocated_amount", "allocated_amount"),
    ("/income_utilization", "utilization"),
    ("/walking_amount", "walking_amount"),
];

#[test]
fn range_endpoints_errors_and_defaults() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    for (path, _) in RANGE_ENDPOINTS {
        s.get(&tok, path, "").fails(400, "UUID is required");
        s.get(&tok, path, &format!("uuid={main}&from=2025-12-31&to=2025-01-01"))
            .fails(400, "End date cannot be earlier than start date");
    }
    s.get(&tok, "/spending", &format!("uuid={main}&from=not-a-date")).fails(400, "Invalid date format");
    s.get(&tok, "/spending", &format!("uuid={main}&to=2025-02-30")).fails(400, "Invalid date format");
    // A date that its offset carries out of years 0000-9999 in UTC could not be echoed as YYYY-MM-DD.
    s.get(&tok, "/spending", &format!("uuid={main}&to=9999-12-31T23:00-02:00"))
        .fails(400, "Invalid date format");
    s.get(&tok, "/spending", &format!("uuid={main}&from=0000-01-01T00:00%2B01:00"))
        .fails(400, "Invalid date format");
    for (path, _) in &RANGE_ENDPOINTS[1..] {
        let r = s.get(&tok, path, &format!("uuid={main}&from=not-a-date"));
        assert_eq!((r.ok().s("from"), r.s("to")), ("1026-03-10".into(), "2025-07-10".into()), "{path}");
    }
    s.get(&tok, "/spending", "uuid=accx").fails(403, "Account not found");
    s.get(&tok, "/total_income", "uuid=accx").fails(403, "Account not found");
    s.get(&tok, "/allocated_amount", "uuid=accx").fails(404, "Account not found");
    s.get(&tok, "/income_utilization", "uuid=accx").fails(404, "Account not found");
    s.get(&tok, "/walking_amount", "uuid=accx").fails(403, "Account not found");
    let admin = s.token("u1", "admin");
    s.get(&admin, "/spending", "uuid=accx").fails(404, "Account not found");
    s.get(&admin, "/walking_amount", "uuid=accx").fails(403, "Account not found");
    let ghost = s.token("ghost", "user");
    for (path, _) in RANGE_ENDPOINTS {
        s.get(&ghost, path, &format!("uuid={main}")).fails(404, "User not found or unauthorized access");
    }
    let r = s.get(&tok, "/walking_amount", &format!("uuid={main}"));
    assert_eq!(r.ok().s("amt_type"), "amount_due");
}

#[test]
fn ranges_cover_whole_days_and_all_history_by_default() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let dep = |amount: u32, date: &str| {
        s.post(
            &tok,
            "/deposit",
            json!({"uuid": main, "amount": amount, "channel": "c", "transaction_date": date}),
        )
        .ok();
    };
    dep(1, "2001-05-05");
    dep(10, "2025-01-01T00:00:00Z");
    dep(100, "2025-01-01T23:59:59Z");
    dep(1000, "2025-01-02");
    let inc = |q: &str| s.get(&tok, "/total_income", &format!("uuid={main}{q}")).ok().n("total_income");
    assert_eq!(inc(""), "1111");
    assert_eq!(inc("&from=2025-01-01&to=2025-01-01"), "110");
    assert_eq!(inc("&from=2025-01-01T18:00&to=2025-01-01T01:00"), "110");
    assert_eq!(inc("&from=2025-01-02"), "1000");
    assert_eq!(inc("&to=2024-12-31"), "1");
    s.post(
        &tok,
        "/withdraw",
        json!({"uuid": main, "amount": 5, "channel": "c", "transaction_date": "2025-01-02"}),
    )
    .ok();
    s.post(&tok, "/withdraw", json!({"uuid": main, "amount": 7, "channel": "c", "initiated_by": "Bank", "transaction_date": "2025-01-02"})).ok();
    let r = s.get(&tok, "/spending", &format!("uuid={main}&from=2025-01-02&to=2025-01-02"));
    assert_eq!(
        (r.ok().n("total_spending"), r.s("from"), r.s("to")),
        ("5".into(), "2025-01-02".into(), "2025-01-02".into())
    );
}

#[test]
fn utilization_epsilon_case_and_zero() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "200");
    assert_eq!(s.get(&tok, "/income_utilization", &format!("uuid={main}")).ok().n("utilization"), "0");
    s.post(&tok, "/withdraw", json!({"uuid": main, "amount": 200, "channel": "c"})).ok();
    assert_eq!(
        s.get(&tok, "/income_utilization", &format!("uuid={main}")).ok().n("utilization"),
        "900719925474099200"
    );
}

#[test]
fn total_balance_and_due_rows() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "10");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    s.child(&tok, &needs, "Rent", json!({"allocation": 1, "fixed_amount": "99.99"}));
    s.deposit(&tok, &main, "20").ok();
    assert_eq!(s.get(&tok, "/compute_total_balance", &format!("uuid={main}")).ok().n("total_balance"), "30");
    assert_eq!(s.get(&tok, "/compute_total_due", &format!("uuid={main}")).ok().n("total_due"), "79.99");
    for p in ["/compute_total_balance", "/compute_total_due"] {
        s.get(&tok, p, "").fails(400, "UUID is required");
        s.get(&tok, p, "uuid=accx").fails(403, "Account not found or unauthorized");
    }
    let d = |q: &str| s.get(&tok, "/compute_total_due_within_days", q);
    d("days=1").fails(400, "UUID is required");
    d(&format!("uuid={main}")).fails(400, "Days parameter is required");
    d(&format!("uuid={main}&days=-1")).fails(400, "Days must be a non-negative number");
    d(&format!("uuid={main}&days=abc")).fails(400, "Days must be a non-negative number");
    d(&format!("uuid={main}&days=1000001")).fails(400, "Days must be a non-negative number");
    d("uuid=accx&days=1").fails(404, "Account not found");
    assert_eq!(d(&format!("uuid={main}&days=0")).ok().n("total_due"), "0");
}

#[test]
fn minimal_tree_shape_and_errors() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1, "priority": 2}));
    let rent = s.child(
        &tok,
        &needs,
        "Rent",
        json!({"allocation": 1, "fixed_amount": 100, "due_date": "2025-07-20", "freq": 30}),
    );
    s.deposit(&tok, &main, "40").ok();
    let r = s.get(&tok, "/get_minimal_tree", "");
    r.ok();
    assert_eq!(r.s("uuid"), main);
    let t = &r.json["minimal_tree"];
    // Key order is part of the contract (10.18): check it on the wire text.
    let head = format!(
        r#""minimal_tree":{{"name":"Main","account_uuid":"{main}","account_class":"MainAccount","balance":0,"transactions":["#
    );
    assert!(r.text.contains(&head), "{}", r.text);
    assert_eq!(t["child_accounts_list"], json!({"Needs": {"name": "Needs", "uuid": needs}}));
    assert!(t.get("parent_uuid").is_none());
    let n = &t["child_accounts"]["Needs"];
    assert_eq!(
        (n["parent_name"].clone(), n["account_status"].clone(), n["priority"].clone()),
        (json!("Main"), json!("active"), json!(2))
    );
    let g = &n["child_accounts"]["Rent"];
    assert_eq!(g["account_uuid"], json!(rent));
    assert_eq!(
        (
            g["due_date"].clone(),
            g["account_freq"].clone(),
            g["account_periods"].clone(),
            g["account_type"].clone()
        ),
        (json!("2025-07-20"), json!(30), json!(1), json!("Expense"))
    );
    assert_eq!(g["child_accounts"], json!({}));
    assert_eq!(t["compute_total_due_within_n_days"].to_string(), "60");
    assert_eq!(t["total_income"].to_string(), "40");
    assert!(t.get("time_series").is_none());
    s.get(&tok, "/get_minimal_tree", "uuid=").fails(400, "UUID is required");
    s.get(&tok, "/get_minimal_tree", "n=ten").fails(400, "`n` must be a positive number");
    s.get(&tok, "/get_minimal_tree", "n=0").fails(400, "`n` must be a positive number");
    s.get(&tok, "/get_minimal_tree", "n=-0.0000004").fails(400, "`n` must be a positive number");
    s.get(&tok, "/get_minimal_tree", "n=1000000.0000004").fails(400, "`n` must be a positive number");
    // "> 0" is checked on the value as sent (SPEC 3.6a); the window is then 0 days.
    let r = s.get(&tok, "/get_minimal_tree", "n=0.0000004");
    assert_eq!(r.ok().json["minimal_tree"]["compute_total_due_within_n_days"].to_string(), "0");
    s.get(&tok, "/get_minimal_tree", "start_date=2020-13-01").fails(400, "Invalid date format");
    s.get(&tok, "/get_minimal_tree", "start_date=2025-02-01&end_date=2025-01-01")
        .fails(400, "End date cannot be earlier than start date");
    s.get(&tok, "/get_minimal_tree", "ts_data=maybe").fails(400, "ts_data must be a boolean");
    s.get(&tok, "/get_minimal_tree", "ts_data=true").fails(400, "Date range too large for time series");
    s.get(&tok, "/get_minimal_tree", "uuid=accx").fails(403, "Account not found");
    let r = s.get(
        &tok,
        "/get_minimal_tree",
        &format!("uuid={needs}&ts_data=T&start_date=2025-07-09&end_date=2025-07-10&n=5"),
    );
    r.ok();
    let ts = r.json["minimal_tree"]["time_series"].as_array().unwrap().clone();
    assert_eq!(ts.len(), 2);
    assert_eq!(
        ts[1],
        json!({"Date": "2025-07-10", "Income": 0, "Spending": 0, "Allocated": 40, "Overall_Debt": 60})
    );
    // n=5: Rent's due date is 9.6 days ahead.
    assert_eq!(r.json["minimal_tree"]["compute_total_due_within_n_days"].to_string(), "0");
    assert_eq!(r.json["minimal_tree"]["previous_allocated_amount"].to_string(), "0");
    // Not in SPEC: transactions=false leaves every node's log out and nothing else.
    let full = s.get(&tok, "/get_minimal_tree", "").ok().json.clone();
    let bare = s.get(&tok, "/get_minimal_tree", "transactions=false").ok().json.clone();
    fn strip(v: &mut serde_json::Value) -> usize {
        let Some(o) = v.as_object_mut() else { return 0 };
        let mut n = usize::from(o.remove("transactions").is_some());
        if let Some(kids) = o.get_mut("child_accounts").and_then(|k| k.as_object_mut()) {
            n += kids.values_mut().map(strip).sum::<usize>();
        }
        n
    }
    let (mut want, mut got) = (full["minimal_tree"].clone(), bare["minimal_tree"].clone());
    assert!(strip(&mut want) >= 3);
    assert_eq!(strip(&mut got), 0, "{bare}");
    assert_eq!(got, want);
    assert_eq!(
        s.get(&tok, "/get_minimal_tree", "transactions=true").json["minimal_tree"]["transactions"],
        full["minimal_tree"]["transactions"]
    );
    s.get(&tok, "/get_minimal_tree", "transactions=no").fails(400, "transactions must be a boolean");
}
