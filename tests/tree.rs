//! SPEC 7: tree structure endpoints, listing and finding (10.16, 10.17).

mod common;

use common::Srv;
use serde_json::json;

#[test]
fn add_sub_account_kinds_and_duplicates() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let r =
        s.post(&tok, "/add_sub_account", json!({"parent_uuid": main, "name": "Needs", "allocation": 0.4}));
    r.ok();
    assert_eq!(
        (r.s("child_type"), r.n("allocation"), r.s("message")),
        ("ChildAccount".into(), "0.4".into(), "Needs added under Main".into())
    );
    let needs = r.s("uuid");
    s.post(&tok, "/add_sub_account", json!({"parent_uuid": main, "name": "Needs", "allocation": 0.1}))
        .fails(400, "Account name already exists under this parent");
    s.post(&tok, "/add_sub_account", json!({"parent_uuid": main, "name": "Other", "allocation": 1.2}))
        .fails(400, "Invalid allocation: must be a number between 0 and 1");
    let r = s.post(
        &tok,
        "/add_sub_account",
        json!({"parent_uuid": needs, "name": "Farming", "account_type": "Bill", "allocation": 0.5}),
    );
    assert_eq!(r.ok().s("child_type"), "GrandchildAccount");
    let farming = r.s("uuid");
    let r = s.post(
        &tok,
        "/add_sub_account",
        json!({"parent_uuid": farming, "name": "SubFarming", "allocation": 0.5}),
    );
    assert_eq!(r.ok().s("child_type"), "GrandchildAccount");
    // The same name under a different parent is fine.
    s.child(&tok, &needs, "Needs", json!({"allocation": 0.1}));
}

#[test]
fn add_sub_account_error_rows() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let a = |b| s.post(&tok, "/add_sub_account", b);
    a(json!({"name": "x"})).fails(400, "uuid is required");
    a(json!({"parent_uuid": main})).fails(400, "name is required");
    a(json!({"parent_uuid": main, "name": "x", "allocation": "abc"}))
        .fails(400, "Invalid allocation: must be a number between 0 and 1");
    a(json!({"parent_uuid": main, "name": "x", "allocation": -0.1}))
        .fails(400, "Invalid allocation: must be a number between 0 and 1");
    a(json!({"parent_uuid": main, "name": "x", "allocation": "1.0000001"}))
        .fails(400, "Invalid allocation: must be a number between 0 and 1");
    a(json!({"parent_uuid": main, "name": "x", "priority": -1}))
        .fails(400, "Invalid priority: must be a non-negative integer");
    a(json!({"parent_uuid": main, "name": "x", "priority": "1e10"}))
        .fails(400, "Invalid priority: must be a non-negative integer");
    a(json!({"parent_uuid": main, "name": "x", "fixed_amount": -5}))
        .fails(400, "Invalid fixed amount: must be a non-negative number");
    a(json!({"parent_uuid": main, "name": "x", "fixed_amount": "1.111"}))
        .fails(400, "fixed_amount must have at most 2 decimal places");
    a(json!({"parent_uuid": main, "name": "x", "freq": 7.5}))
        .fails(400, "Invalid frequency: must be a non-negative integer");
    a(json!({"parent_uuid": main, "name": "x", "freq": 36501}))
        .fails(400, "Invalid frequency: must be a non-negative integer");
    a(json!({"parent_uuid": main, "name": "x", "due_date": "2020-13-01"}))
        .fails(400, "Invalid due date: must be a valid date");
    a(json!({"parent_uuid": main, "name": "x".repeat(129)})).fails(400, "name is too long");
    a(json!({"parent_uuid": main, "name": "x", "status": "s".repeat(65)})).fails(400, "status is too long");
    a(json!({"parent_uuid": "accnope", "name": "x"})).fails(404, "Parent account not found");
    let t = s.token("ghost", "user");
    s.post(&t, "/add_sub_account", json!({"parent_uuid": main, "name": "x"}))
        .fails(404, "User not found or unauthorized access");
    a(json!({"parent_uuid": main, "name": "A", "allocation": 0.6})).ok();
    a(json!({"parent_uuid": main, "name": "B", "allocation": 0.5}))
        .fails(400, "Child account not added: Total allocation exceeds 100%. Please adjust the allocations.");
    // Integral forms of freq are accepted.
    a(json!({"parent_uuid": main, "name": "C", "freq": "3e1"})).ok();
}

#[test]
fn allocation_sums_are_exact() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    for (n, a) in [("A", "0.1"), ("B", "0.2"), ("C", "0.7")] {
        s.child(&tok, &main, n, json!({"allocation": a}));
    }
    s.post(&tok, "/add_sub_account", json!({"parent_uuid": main, "name": "D", "allocation": "0.000001"}))
        .fails(400, "Child account not added: Total allocation exceeds 100%. Please adjust the allocations.");
}

#[test]
fn status_defaults_and_zero_allocation() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let st = |u: &str| s.status(&tok, u);
    let a = s.child(&tok, &main, "A", json!({"allocation": 0.1}));
    let b = s.child(&tok, &main, "B", json!({"allocation": 0.1, "status": "CLOSED"}));
    let c = s.child(&tok, &main, "C", json!({"allocation": 0.1, "status": "frozen"}));
    let d = s.child(&tok, &main, "D", json!({"status": "active"}));
    let e = s.child(&tok, &main, "E", json!({"allocation": "0.0000004"}));
    assert_eq!(
        [st(&a), st(&b), st(&c), st(&d), st(&e)],
        ["active", "closed", "frozen", "inactive", "inactive"]
    );
}

#[test]
fn depth_limit() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let mut parent = main;
    for depth in 1..=8 {
        parent = s.child(&tok, &parent, &format!("L{depth}"), json!({"allocation": 1}));
    }
    s.post(&tok, "/add_sub_account", json!({"parent_uuid": parent, "name": "L9"}))
        .fails(400, "Maximum account depth exceeded");
}

#[test]
fn children_per_parent_limit() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    for i in 0..100 {
        s.child(&tok, &main, &format!("C{i}"), json!({}));
    }
    s.post(&tok, "/add_sub_account", json!({"parent_uuid": main, "name": "C100"}))
        .fails(400, "Too many child accounts under this parent");
}

#[test]
fn set_child_allocation_rows_and_effects() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let goals = s.child(&tok, &main, "Goals", json!({"allocation": 0.5}));
    s.child(&tok, &main, "Other", json!({"allocation": 0.3}));
    let p = |b| s.post(&tok, "/set_child_allocation", b);
    p(json!({"child_name": "Goals", "allocation": 0.1})).fails(400, "parent uuid is required");
    p(json!({"parent_uuid": main, "allocation": 0.1})).fails(400, "child_name is required");
    p(json!({"parent_uuid": main, "child_name": "Goals"})).fails(400, "Allocation is required");
    p(json!({"parent_uuid": main, "child_name": "Goals", "allocation": 2}))
        .fails(400, "Allocation must be a number between 0 and 1");
    p(json!({"parent_uuid": "accx", "child_name": "Goals", "allocation": 0.1}))
        .fails(404, "Parent account not found");
    p(json!({"parent_uuid": main, "child_name": "goals", "allocation": 0.1}))
        .fails(404, "Child account not found under parent");
    p(json!({"parent_uuid": main, "child_name": "Goals", "allocation": 0.71}))
        .fails(400, "Allocation not set: Total allocation exceeds 100%. Please adjust the allocations.");
    let r = p(json!({"parent_uuid": main, "child_name": "Goals", "allocation": 0.7}));
    r.ok();
    assert_eq!(
        (r.s("message"), r.n("total_allocation")),
        ("Allocation for Goals updated to 0.7".into(), "1".into())
    );
    p(json!({"parent_uuid": main, "child_name": "Goals", "allocation": 0})).ok();
    assert_eq!(s.status(&tok, &goals), "inactive");
    // A non-zero allocation does not reactivate; a closed account stays closed at 0.
    p(json!({"parent_uuid": main, "child_name": "Goals", "allocation": 0.2})).ok();
    assert_eq!(s.status(&tok, &goals), "inactive");
    s.post(&tok, "/change_account_status", json!({"uuid": goals, "status": "closed"})).ok();
    p(json!({"parent_uuid": main, "child_name": "Goals", "allocation": 0})).ok();
    assert_eq!(s.status(&tok, &goals), "closed");
}

#[test]
fn delete_sub_account_refunds_parent_then_main_removes_user() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 0.5}));
    let rent = s.child(&tok, &needs, "Rent", json!({"allocation": 1}));
    s.deposit(&tok, &needs, "120").ok();
    assert_eq!(s.balance(&tok, &rent), "120");
    let r = s.raw(
        "DELETE",
        &format!("/delete?uuid={needs}"),
        &[("Authorization", &format!("Bearer {tok}"))],
        common::Body::None,
    );
    r.ok();
    assert_eq!(r.s("message"), format!("Account with UUID '{needs}' deleted successfully."));
    assert_eq!(s.balance(&tok, &main), "120");
    let last = s.txs(&tok, &main).last().cloned().unwrap();
    assert_eq!(
        (last["Channel"].clone(), last["By"].clone()),
        (json!("Returned from deleted account Needs"), json!("System"))
    );
    s.get(&tok, "/get_balance", &format!("uuid={rent}")).fails(403, "Account not found or unauthorized");
    // Allocation total is current again: a full 1.0 child fits.
    s.child(&tok, &main, "All", json!({"allocation": 1}));
    let del = |u: &str| {
        s.raw(
            "DELETE",
            &format!("/delete?uuid={u}"),
            &[("Authorization", &format!("Bearer {tok}"))],
            common::Body::None,
        )
    };
    del("accnope").fails(404, "Account with uuid accnope not found");
    let r = del(&main);
    r.ok();
    assert_eq!(r.s("message"), "Account for user_id 'u1' deleted successfully.");
    del(&main).fails(404, "Account for user_id 'u1' does not exist.");
    s.get(&tok, "/get_balance", &format!("uuid={main}")).fails(404, "User not found or unauthorized access");
    let r = s.raw("DELETE", "/delete", &[("Authorization", &format!("Bearer {tok}"))], common::Body::None);
    r.fails(400, "Account UUID is required");
    // The id can register again.
    s.user("u1", "5");
}

#[test]
fn listing_and_finding_orders() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 0.5}));
    s.child(&tok, &needs, "Rent", json!({"allocation": 0.5}));
    let food = s.child(&tok, &needs, "Food", json!({"allocation": 0.5}));
    s.child(&tok, &main, "Savings", json!({"allocation": 0.5}));
    let r = s.get(&tok, "/list_all_accounts", &format!("uuid={food}"));
    assert_eq!(r.ok().json["account_names"], json!(["Food", "Needs", "Rent", "Main", "Savings"]));
    assert_eq!(r.n("total_accounts"), "5");
    let r = s.get(&tok, "/list_all_accounts", &format!("uuid={main}"));
    assert_eq!(r.ok().json["account_names"], json!(["Main", "Needs", "Rent", "Food", "Savings"]));
    let r = s.get(&tok, "/list_child_accounts", &format!("uuid={needs}"));
    r.ok();
    assert_eq!(
        (r.s("account_name"), r.json["child_account_names"].clone(), r.n("child_count")),
        ("Needs".into(), json!(["Rent", "Food"]), "2".into())
    );
    let r = s.get(&tok, "/list_child_accounts", &format!("uuid={food}"));
    assert_eq!((r.ok().json["child_account_names"].clone(), r.n("child_count")), (json!([]), "0".into()));
    s.get(&tok, "/list_child_accounts", "").fails(400, "uuid is required");
    s.get(&tok, "/list_child_accounts", "uuid=accx").fails(403, "Parent account not found or unauthorized");
    s.get(&tok, "/list_all_accounts", "uuid=accx").fails(403, "Account not found or unauthorized");
    let r = s.get(&tok, "/find_account_by_name", "name=Rent");
    r.ok();
    assert_eq!(r.n("total_matches"), "1");
    assert_eq!(
        r.json["matches"][0]["path"],
        json!("main_account$child_accounts$`Needs`$child_accounts$`Rent`")
    );
    let r = s.get(&tok, "/find_account_by_name", "name=Nothing");
    assert_eq!((r.ok().json["matches"].clone(), r.n("total_matches")), (json!([]), "0".into()));
    s.get(&tok, "/find_account_by_name", "").fails(400, "name is required");
    let r = s.get(&tok, "/find_account_by_uuid", &format!("uuid={main}"));
    r.ok();
    assert_eq!(
        (
            r.s("type"),
            r.s("path"),
            r.json["parent_uuid"].clone(),
            r.json["allocation"].clone(),
            r.json["amount_due"].clone()
        ),
        ("MainAccount".into(), "main_account".into(), json!(null), json!(null), json!(null))
    );
    let r = s.get(&tok, "/find_account_by_uuid", &format!("uuid={food}"));
    assert_eq!(
        (r.ok().s("parent_uuid"), r.n("allocation"), r.s("type")),
        (needs.clone(), "0.5".into(), "GrandchildAccount".into())
    );
    s.get(&tok, "/find_account_by_uuid", "").fails(400, "UUID is required");
    s.get(&tok, "/find_account_by_uuid", "uuid=accx").fails(403, "Account not found or unauthorized");
}

#[test]
fn params_query_wins_over_body_and_first_repeat_wins() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "7");
    let (_, other) = s.user("u2", "9");
    let auth = format!("Bearer {tok}");
    let r = s.raw(
        "GET",
        &format!("/get_balance?uuid={main}"),
        &[("Authorization", &auth)],
        common::Body::Json(json!({"uuid": other})),
    );
    assert_eq!(r.ok().n("balance"), "7");
    let r = s.raw(
        "GET",
        &format!("/get_balance?uuid={main}&uuid=accx"),
        &[("Authorization", &auth)],
        common::Body::None,
    );
    assert_eq!(r.ok().n("balance"), "7");
    // JSON body on GET, one-element arrays unwrapped, invalid arrays refused.
    let r = s.raw(
        "GET",
        "/get_balance",
        &[("Authorization", &auth)],
        common::Body::Json(json!({"uuid": [main]})),
    );
    assert_eq!(r.ok().n("balance"), "7");
    let r = s.raw(
        "GET",
        "/get_balance",
        &[("Authorization", &auth)],
        common::Body::Json(json!({"uuid": [main, main]})),
    );
    r.fails(400, "Invalid value for parameter 'uuid'");
    // An empty query value is absent even when the body has one.
    let r = s.raw(
        "GET",
        "/get_balance?uuid=",
        &[("Authorization", &auth)],
        common::Body::Json(json!({"uuid": main})),
    );
    r.fails(400, "uuid is required");
    // Body without a content type: JSON when it starts with '{', else form.
    let r = s.raw(
        "GET",
        "/get_balance",
        &[("Authorization", &auth)],
        common::Body::Raw("", format!("uuid={main}").as_bytes()),
    );
    assert_eq!(r.ok().n("balance"), "7");
}

#[test]
fn accounts_per_tree_limit() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let mut count = 1;
    'outer: for c in 0..10 {
        let child = s.child(&tok, &main, &format!("C{c}"), json!({}));
        count += 1;
        for g in 0..99 {
            if count == 1000 {
                break 'outer;
            }
            s.child(&tok, &child, &format!("G{g}"), json!({}));
            count += 1;
        }
    }
    s.post(&tok, "/add_sub_account", json!({"parent_uuid": main, "name": "One more"}))
        .fails(400, "Too many accounts in this tree");
    let r = s.get(&tok, "/list_all_accounts", &format!("uuid={main}"));
    assert_eq!(r.ok().n("total_accounts"), "1000");
}
