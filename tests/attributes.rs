//! SPEC 9: attribute endpoints and the status state machine (10.10).

mod common;

use common::Srv;
use serde_json::json;

/// main -> Needs (child) -> Rent (grandchild).
fn setup(s: &Srv) -> (String, String, String, String) {
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    let rent = s.child(&tok, &needs, "Rent", json!({"allocation": 1}));
    (tok, main, needs, rent)
}

#[test]
fn change_account_status_rows() {
    let s = Srv::start();
    let (tok, main, needs, rent) = setup(&s);
    let c = |b| s.post(&tok, "/change_account_status", b);
    c(json!({"status": "closed"})).fails(400, "UUID is required");
    c(json!({"uuid": rent})).fails(400, "Status is required");
    c(json!({"uuid": rent, "status": "x".repeat(65)})).fails(400, "status is too long");
    c(json!({"uuid": "accx", "status": "closed"})).fails(404, "Account not found");
    c(json!({"uuid": main, "status": "closed"}))
        .fails(403, "This operation is only allowed on child or grandchild accounts");
    s.deposit(&tok, &rent, "100").ok();
    let r = c(json!({"uuid": rent, "status": "closed"}));
    r.fails(400, "Withdraw from this account or move the balance before closure.");
    assert_eq!(r.s("uuid"), rent);
    s.post(&tok, "/withdraw", json!({"uuid": rent, "amount": 100, "channel": "c"})).ok();
    let r = c(json!({"uuid": rent, "status": "CLOSED"}));
    r.ok();
    assert_eq!(
        (r.s("new_status"), r.s("message")),
        ("closed".into(), "Account Rent status updated to closed".into())
    );
    c(json!({"uuid": rent, "status": "closed"})).fails(400, "This account is already closed");
    assert_eq!(c(json!({"uuid": rent, "status": "nonsense"})).ok().s("new_status"), "nonsense");
    // A custom label behaves like inactive for deposits.
    s.deposit(&tok, &rent, "1").fails(400, "Deposit not allowed. Account is not active.");
    // Closing ignores children's balances.
    c(json!({"uuid": needs, "status": "closed"})).ok();
}

#[test]
fn get_account_status_rows() {
    let s = Srv::start();
    let (tok, main, _, rent) = setup(&s);
    s.get(&tok, "/get_account_status", "").fails(400, "UUID is required");
    s.get(&tok, "/get_account_status", "uuid=accx").fails(403, "Account not found");
    s.get(&tok, "/get_account_status", &format!("uuid={main}"))
        .fails(403, "This operation is only allowed on child or grandchild accounts");
    assert_eq!(s.status(&tok, &rent), "active");
    let ghost = s.token("ghost", "user");
    s.get(&ghost, "/get_account_status", &format!("uuid={rent}"))
        .fails(404, "User not found or unauthorized access");
}

#[test]
fn priority_set_and_get() {
    let s = Srv::start();
    let (tok, main, needs, _) = setup(&s);
    let p = |b| s.post(&tok, "/set_priority", b);
    p(json!({"priority": 1})).fails(400, "UUID is required");
    p(json!({"uuid": needs})).fails(400, "Priority is required");
    p(json!({"uuid": needs, "priority": "high"})).fails(400, "Priority must be numeric");
    p(json!({"uuid": needs, "priority": -1})).fails(400, "Priority must be positive");
    p(json!({"uuid": needs, "priority": "1000000000.1"})).fails(400, "Priority is too large");
    p(json!({"uuid": "accx", "priority": 1})).fails(403, "Account not found");
    p(json!({"uuid": main, "priority": 1}))
        .fails(403, "This operation is only allowed on child or grandchild accounts");
    let r = p(json!({"uuid": needs, "priority": 2.5}));
    assert_eq!((r.ok().s("message"), r.n("priority")), ("Priority set to 2.5".into(), "2.5".into()));
    p(json!({"uuid": needs, "priority": 0})).ok();
    assert_eq!(s.get(&tok, "/get_priority", &format!("uuid={needs}")).ok().n("priority"), "0");
    s.get(&tok, "/get_priority", "").fails(400, "UUID is required");
    s.get(&tok, "/get_priority", "uuid=accx").fails(403, "Account not found");
    s.get(&tok, "/get_priority", &format!("uuid={main}"))
        .fails(403, "Priority only available for child or grandchild accounts");
    let ghost = s.token("ghost", "user");
    s.get(&ghost, "/get_priority", &format!("uuid={needs}"))
        .fails(404, "User not found or unauthorized access");
}

#[test]
fn due_date_set_clear_and_get() {
    let s = Srv::start();
    let (tok, _, needs, rent) = setup(&s);
    let r = s.post(&tok, "/set_due_date", json!({"uuid": rent, "due_date": "2025-11-20"}));
    assert_eq!((r.ok().s("message"), r.s("due_date")), ("Due date set for Rent".into(), "2025-11-20".into()));
    assert_eq!(s.get(&tok, "/get_due_date", &format!("uuid={rent}")).ok().s("due_date"), "2025-11-20");
    let r = s.post(&tok, "/set_due_date", json!({"uuid": rent, "due_date": "2025-08-15T14:30:00+02:00"}));
    assert_eq!(r.ok().s("due_date"), "2025-08-15 12:30:00");
    let r = s.post(&tok, "/set_due_date", json!({"uuid": rent}));
    assert_eq!(r.ok().json["due_date"], json!(null));
    assert_eq!(s.get(&tok, "/get_due_date", &format!("uuid={rent}")).ok().json["due_date"], json!(null));
    s.post(&tok, "/set_due_date", json!({"uuid": rent, "due_date": "12345"}))
        .fails(400, "Invalid due date format");
    s.post(&tok, "/set_due_date", json!({"uuid": rent, "due_date": ""}))
        .fails(400, "Invalid due date format");
    // A value of the wrong shape gets SPEC 3.3's error, as every parameter does.
    for shape in [json!(["2025-01-01", "2025-02-01"]), json!({"d": "2025-01-01"})] {
        s.post(&tok, "/set_due_date", json!({"uuid": rent, "due_date": shape}))
            .fails(400, "Invalid value for parameter 'due_date'");
    }
    // Its one-element array is unwrapped like any other.
    let r = s.post(&tok, "/set_due_date", json!({"uuid": rent, "due_date": ["2025-03-01"]}));
    assert_eq!(r.ok().s("due_date"), "2025-03-01");
    s.post(&tok, "/set_due_date", json!({"due_date": "2025-01-01"})).fails(400, "UUID is required");
    s.post(&tok, "/set_due_date", json!({"uuid": "accx"})).fails(403, "Account not found");
    s.post(&tok, "/set_due_date", json!({"uuid": needs}))
        .fails(403, "Due date only applicable to grandchild accounts");
    s.get(&tok, "/get_due_date", &format!("uuid={needs}"))
        .fails(403, "Due date only applicable to grandchild accounts");
}

#[test]
fn fixed_amount_recomputes_amount_due() {
    let s = Srv::start();
    let (tok, _, needs, rent) = setup(&s);
    s.deposit(&tok, &rent, "50").ok();
    s.post(&tok, "/set_account_periods", json!({"uuid": rent, "periods": 2})).ok();
    let r = s.post(&tok, "/set_fixed_amount", json!({"uuid": rent, "fixed_amount": 0}));
    assert_eq!((r.ok().n("fixed_amount"), r.n("amount_due")), ("0".into(), "-50".into()));
    let r = s.post(&tok, "/set_fixed_amount", json!({"uuid": rent, "fixed_amount": "1500"}));
    assert_eq!((r.ok().n("fixed_amount"), r.n("amount_due")), ("1500".into(), "2950".into()));
    assert_eq!(s.get(&tok, "/get_fixed_amount", &format!("uuid={rent}")).ok().n("fixed_amount"), "1500");
    let f = |b| s.post(&tok, "/set_fixed_amount", b);
    f(json!({"uuid": rent})).fails(400, "Fixed amount is required");
    f(json!({"uuid": rent, "fixed_amount": "x"})).fails(400, "Fixed amount must be a non-negative number");
    f(json!({"uuid": rent, "fixed_amount": -1})).fails(400, "Fixed amount must be a non-negative number");
    f(json!({"uuid": rent, "fixed_amount": "0.001"}))
        .fails(400, "fixed_amount must have at most 2 decimal places");
    f(json!({"uuid": rent, "fixed_amount": "1e15"})).fails(400, "fixed_amount is too large");
    f(json!({"uuid": needs, "fixed_amount": 1}))
        .fails(403, "Fixed amount only applicable to grandchild accounts");
    s.get(&tok, "/get_fixed_amount", &format!("uuid={needs}"))
        .fails(403, "This endpoint is only applicable to grandchild accounts");
    // total_due follows.
    assert_eq!(s.get(&tok, "/compute_total_due", &format!("uuid={needs}")).ok().n("total_due"), "2950");
}

#[test]
fn account_type_set_and_get() {
    let s = Srv::start();
    let (tok, _, needs, rent) = setup(&s);
    assert_eq!(s.get(&tok, "/get_account_type", &format!("uuid={rent}")).ok().s("account_type"), "Expense");
    let r = s.post(&tok, "/set_account_type", json!({"uuid": rent, "account_type": "Bill"}));
    assert_eq!(
        (r.ok().s("message"), r.s("account_type")),
        ("Account type updated to Bill".into(), "Bill".into())
    );
    s.post(&tok, "/set_account_type", json!({"uuid": rent})).fails(400, "Account type is required");
    s.post(&tok, "/set_account_type", json!({"uuid": rent, "account_type": "x".repeat(65)}))
        .fails(400, "account_type is too long");
    s.post(&tok, "/set_account_type", json!({"uuid": needs, "account_type": "Bill"}))
        .fails(403, "This endpoint is only applicable to grandchild accounts");
    s.get(&tok, "/get_account_type", &format!("uuid={needs}"))
        .fails(403, "This method is only applicable to grandchild accounts");
}

#[test]
fn freq_set_and_get() {
    let s = Srv::start();
    let (tok, _, needs, rent) = setup(&s);
    assert_eq!(s.get(&tok, "/get_account_freq", &format!("uuid={rent}")).ok().json["freq"], json!(null));
    let r = s.post(&tok, "/set_account_freq", json!({"uuid": rent, "account_freq": "30.0"}));
    assert_eq!((r.ok().s("message"), r.n("freq")), ("Frequency for Rent set to 30".into(), "30".into()));
    assert_eq!(s.get(&tok, "/get_account_freq", &format!("uuid={rent}")).ok().n("freq"), "30");
    for bad in [json!(7.5), json!(0), json!(36501), json!("x")] {
        s.post(&tok, "/set_account_freq", json!({"uuid": rent, "account_freq": bad}))
            .fails(400, "account_freq must be a positive number");
    }
    s.post(&tok, "/set_account_freq", json!({"uuid": rent})).fails(400, "account_freq is required");
    s.post(&tok, "/set_account_freq", json!({"uuid": needs, "account_freq": 3}))
        .fails(403, "This endpoint is only applicable to grandchild accounts");
    s.get(&tok, "/get_account_freq", &format!("uuid={needs}"))
        .fails(403, "This endpoint is only applicable to grandchild accounts");
}

#[test]
fn periods_set_and_get() {
    let s = Srv::start();
    let (tok, _, needs, rent) = setup(&s);
    s.post(&tok, "/set_account_periods", json!({"uuid": rent, "periods": 2.7}))
        .fails(400, "Periods must be a positive integer");
    s.post(&tok, "/set_account_periods", json!({"uuid": rent, "periods": 0}))
        .fails(400, "Periods must be a positive integer");
    s.post(&tok, "/set_account_periods", json!({"uuid": rent, "periods": 1000001}))
        .fails(400, "Periods must be a positive integer");
    s.post(&tok, "/set_account_periods", json!({"uuid": rent})).fails(400, "Periods is required");
    let r = s.post(&tok, "/set_account_periods", json!({"uuid": rent, "periods": "6"}));
    assert_eq!((r.ok().s("message"), r.n("periods")), ("Number of periods set to 6".into(), "6".into()));
    assert_eq!(s.get(&tok, "/get_account_periods", &format!("uuid={rent}")).ok().n("periods"), "6");
    s.post(&tok, "/set_account_periods", json!({"uuid": needs, "periods": 1}))
        .fails(403, "This endpoint is only applicable to grandchild accounts");
    s.get(&tok, "/get_account_periods", &format!("uuid={needs}"))
        .fails(403, "This method is only applicable to grandchild accounts");
    // With a fixed amount, amount_due follows periods (D16).
    s.post(&tok, "/set_fixed_amount", json!({"uuid": rent, "fixed_amount": 100})).ok();
    s.post(&tok, "/set_account_periods", json!({"uuid": rent, "periods": 3})).ok();
    assert_eq!(s.get(&tok, "/find_account_by_uuid", &format!("uuid={rent}")).ok().n("amount_due"), "300");
}
