//! SPEC 6 (deposit, withdraw, distribute, move_balance) and the algorithms of 10.3-10.9.

mod common;

use common::{num, Body, Srv};
use serde_json::json;

#[test]
fn deposit_and_withdraw_on_a_childless_main_account() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "500");
    let r = s.form(&tok, "/deposit", &format!("uuid={main}&amount=1000&channel=ABSA"));
    r.ok();
    assert_eq!(
        (r.s("account_uuid"), r.n("amount"), r.n("balance")),
        (main.clone(), "1000".into(), "1500".into())
    );
    let r = s.form(&tok, "/withdraw", &format!("uuid={main}&amount=200&channel=mpesa"));
    assert_eq!(r.ok().n("balance"), "1300");
    s.form(&tok, "/withdraw", &format!("uuid={main}&amount=999999&channel=mpesa"))
        .fails(400, "Failed: Insufficient balance! Your current balance is:1300");
}

#[test]
fn deposit_error_rows_in_order() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let d = |b: serde_json::Value| s.post(&tok, "/deposit", b);
    d(json!({"amount": 5, "channel": "c"})).fails(400, "uuid is required");
    d(json!({"uuid": main, "channel": "c"})).fails(400, "amount is required");
    d(json!({"uuid": main, "amount": "ten", "channel": "c"})).fails(400, "amount must be numeric");
    d(json!({"uuid": main, "amount": "Inf", "channel": "c"})).fails(400, "amount must be numeric");
    d(json!({"uuid": main, "amount": "NaN", "channel": "c"})).fails(400, "amount must be numeric");
    d(json!({"uuid": main, "amount": true, "channel": "c"})).fails(400, "amount must be numeric");
    d(json!({"uuid": main, "amount": -100, "channel": "c"})).fails(400, "amount must be > 0");
    d(json!({"uuid": main, "amount": 0, "channel": "c"})).fails(400, "amount must be > 0");
    d(json!({"uuid": main, "amount": "10.005", "channel": "c"}))
        .fails(400, "amount must have at most 2 decimal places");
    d(json!({"uuid": main, "amount": "1000000000000.01", "channel": "c"})).fails(400, "amount is too large");
    d(json!({"uuid": main, "amount": 5})).fails(400, "channel is required");
    d(json!({"uuid": main, "amount": 5, "channel": "x".repeat(257)})).fails(400, "channel is too long");
    d(json!({"uuid": main, "amount": 5, "channel": "c", "initiated_by": "x".repeat(65)}))
        .fails(400, "initiated_by is too long");
    d(json!({"uuid": main, "amount": 5, "channel": "c", "transaction_number": "x".repeat(129)}))
        .fails(400, "transaction_number is too long");
    d(json!({"uuid": main, "amount": 5, "channel": "c", "transaction_date": "not-a-date"}))
        .fails(400, "Invalid transaction_date format");
    d(json!({"uuid": "accnope", "amount": 5, "channel": "c"}))
        .fails(403, "Account not found or unauthorized");
    let admin = s.token("u1", "admin");
    s.post(&admin, "/deposit", json!({"uuid": "accnope", "amount": 5, "channel": "c"}))
        .fails(404, "Account not found or unauthorized");
    let stranger = s.token("nobody", "user");
    s.post(&stranger, "/deposit", json!({"uuid": main, "amount": 5, "channel": "c"}))
        .fails(404, "User not found or unauthorized access");
    // Nothing above changed anything.
    assert_eq!(s.balance(&tok, &main), "0");
    assert!(s.txs(&tok, &main).is_empty());
}

#[test]
fn exact_money_texts_are_accepted() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    for a in ["10.50", "10.500", "1.005e2", " 7 "] {
        s.post(&tok, "/deposit", json!({"uuid": main, "amount": a, "channel": "c"})).ok();
    }
    s.raw(
        "POST",
        "/deposit",
        &[("Authorization", &format!("Bearer {tok}"))],
        Body::Raw(
            "application/json",
            format!(r#"{{"uuid":"{main}","amount":0.1,"channel":"c"}}"#).as_bytes(),
        ),
    )
    .ok();
    assert_eq!(s.balance(&tok, &main), "128.6");
}

#[test]
fn duplicate_transaction_number_on_main_is_409() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let b = json!({"uuid": main, "amount": 5, "channel": "c", "transaction_number": "T1"});
    s.post(&tok, "/deposit", b.clone()).ok();
    s.post(&tok, "/deposit", b)
        .fails(409, "Deposit failed: This deposit has already been made. Transaction ID:T1");
    // Withdrawal ids on main count too.
    s.post(&tok, "/withdraw", json!({"uuid": main, "amount": 1, "channel": "c", "transaction_number": "W1"}))
        .ok();
    s.post(&tok, "/deposit", json!({"uuid": main, "amount": 1, "channel": "c", "transaction_number": "W1"}))
        .fails(409, "Deposit failed: This deposit has already been made. Transaction ID:W1");
    assert_eq!(s.balance(&tok, &main), "4");
}

#[test]
fn deposit_into_inactive_child_is_400_and_changes_nothing() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let c = s.child(&tok, &main, "Zero", json!({"allocation": 0}));
    s.deposit(&tok, &c, "10").fails(400, "Deposit not allowed. Account is not active.");
    assert_eq!(s.balance(&tok, &c), "0");
}

#[test]
fn deposit_record_fields_and_transaction_date() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    s.post(
        &tok,
        "/deposit",
        json!({"uuid": main, "amount": "12.5", "channel": "ABSA", "transaction_number": "TX9",
        "initiated_by": "Payroll", "transaction_date": "2025-01-02T03:04:05Z"}),
    )
    .ok();
    let t = s.txs(&tok, &main);
    assert_eq!(
        t[0],
        json!({"Type":"Deposit","By":"Payroll","TransactionID":"TX9","Channel":"ABSA","Amount":12.5,"Balance":12.5,
               "amount_due":0,"overall_balance":12.5,"Date":"2025-01-02 03:04:05"})
    );
}

#[test]
fn split_largest_remainder_s1() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let x = s.child(&tok, &main, "X", json!({"allocation": 0.5, "priority": 3}));
    let y = s.child(&tok, &main, "Y", json!({"allocation": 0.3, "priority": 2}));
    let z = s.child(&tok, &main, "Z", json!({"allocation": 0.2, "priority": 1}));
    s.deposit(&tok, &main, "1234.57").ok();
    assert_eq!(
        [s.balance(&tok, &x), s.balance(&tok, &y), s.balance(&tok, &z)],
        ["617.29", "370.37", "246.91"]
    );
    assert_eq!(s.balance(&tok, &main), "0");
}

#[test]
fn split_below_ten_cents_goes_to_highest_priority() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let savings = s.child(&tok, &main, "Savings", json!({"allocation": 0.5, "priority": 1}));
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 0.5, "priority": 2}));
    s.deposit(&tok, &main, "0.07").ok();
    assert_eq!((s.balance(&tok, &needs), s.balance(&tok, &savings)), ("0.07".into(), "0".into()));
    let t = s.txs(&tok, &main);
    assert_eq!(t[1]["Channel"], json!("Allocation to Needs"));
    assert_eq!(s.txs(&tok, &needs)[0]["Channel"], json!("Allocation from Main"));
}

#[test]
fn split_skips_inactive_children() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 0.5}));
    let fun = s.child(&tok, &main, "Fun", json!({"allocation": 0.5, "status": "inactive"}));
    s.deposit(&tok, &main, "100").ok();
    assert_eq!((s.balance(&tok, &needs), s.balance(&tok, &fun)), ("100".into(), "0".into()));
}

#[test]
fn split_s6_records_and_response_balance() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "500");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 0.5, "priority": 2}));
    s.child(&tok, &main, "Savings", json!({"allocation": 0.3, "priority": 1}));
    s.child(&tok, &main, "Fun", json!({"allocation": 0.2, "priority": 0}));
    let r = s.post(
        &tok,
        "/deposit",
        json!({"uuid": main, "amount": 1000, "channel": "ABSA", "transaction_number": "T1"}),
    );
    assert_eq!(r.ok().n("balance"), "500");
    let t = s.txs(&tok, &main);
    assert_eq!(
        (num(&t[0]["Balance"]), t[1]["Channel"].clone(), t[1]["By"].clone()),
        ("1500".into(), json!("Allocation to child accounts"), json!("System"))
    );
    assert!(t[1]["TransactionID"].as_str().unwrap().starts_with("SYS"));
    assert_eq!(t[1]["TransactionID"].as_str().unwrap().len(), 13);
    let n = s.txs(&tok, &needs);
    assert_eq!(
        (n[0]["TransactionID"].clone(), n[0]["By"].clone(), num(&n[0]["Amount"])),
        (json!("T1"), json!("System"), "500".into())
    );
}

#[test]
fn capping_example_c1_returns_surplus_down() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    let rent = s.child(&tok, &needs, "Rent", json!({"allocation": 0.6, "priority": 1, "fixed_amount": 400}));
    let food = s.child(&tok, &needs, "Food", json!({"allocation": 0.4}));
    // Bring Rent to 300 first: 500 into Needs gives Rent 300, Food 200.
    s.deposit(&tok, &needs, "500").ok();
    assert_eq!(s.balance(&tok, &rent), "300");
    s.deposit(&tok, &needs, "250").ok();
    assert_eq!(
        (s.balance(&tok, &rent), s.balance(&tok, &food), s.balance(&tok, &needs)),
        ("400".into(), "300".into(), "50".into())
    );
    let st = s.get(&tok, "/get_account_status", &format!("uuid={rent}"));
    assert_eq!(st.ok().s("account_status"), "inactive");
    let last = s.txs(&tok, &needs).last().cloned().unwrap();
    assert_eq!(
        (last["Channel"].clone(), last["By"].clone(), num(&last["Amount"])),
        (json!("Returned Extra Allocation-down"), json!("System"), "50".into())
    );
    let f = s.get(&tok, "/find_account_by_uuid", &format!("uuid={rent}"));
    assert_eq!(f.ok().n("amount_due"), "0");
}

#[test]
fn capping_example_c2_user_deposit_returns_surplus_up() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    let rent = s.child(&tok, &needs, "Rent", json!({"allocation": 1, "fixed_amount": 400}));
    s.deposit(&tok, &rent, "30").ok();
    s.deposit(&tok, &rent, "500").ok();
    assert_eq!((s.balance(&tok, &rent), s.balance(&tok, &needs)), ("400".into(), "130".into()));
    let last = s.txs(&tok, &needs).last().cloned().unwrap();
    assert_eq!(last["Channel"], json!("Returned Extra Allocation-up"));
    let r = s.txs(&tok, &rent);
    assert_eq!((num(&r[1]["Amount"]), r[1]["By"].clone()), ("370".into(), json!("User")));
}

#[test]
fn capping_example_c3_need_below_zero_credits_nothing() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    let rent = s.child(&tok, &needs, "Rent", json!({"allocation": 1, "fixed_amount": 1000}));
    s.deposit(&tok, &rent, "500").ok();
    let r = s.post(&tok, "/set_fixed_amount", json!({"uuid": rent, "fixed_amount": 400}));
    assert_eq!(r.ok().n("amount_due"), "-100");
    s.deposit(&tok, &needs, "50").ok();
    assert_eq!((s.balance(&tok, &rent), s.balance(&tok, &needs)), ("500".into(), "50".into()));
    assert_eq!(s.txs(&tok, &rent).len(), 1);
    assert_eq!(s.status(&tok, &rent), "inactive");
}

#[test]
fn withdraw_error_rows() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "10");
    let w = |b: serde_json::Value| s.post(&tok, "/withdraw", b);
    w(json!({"amount": 5, "channel": "c"})).fails(400, "uuid is required");
    w(json!({"uuid": main, "channel": "c"})).fails(400, "amount is required");
    w(json!({"uuid": main, "amount": "x", "channel": "c"})).fails(400, "Invalid withdrawal amount");
    w(json!({"uuid": main, "amount": -1, "channel": "c"})).fails(400, "Invalid withdrawal amount");
    w(json!({"uuid": main, "amount": "1.001", "channel": "c"}))
        .fails(400, "amount must have at most 2 decimal places");
    w(json!({"uuid": main, "amount": 1})).fails(400, "channel is required");
    w(json!({"uuid": main, "amount": 1, "channel": "c", "transaction_date": "2020-13-01"}))
        .fails(400, "Invalid transaction_date format");
    w(json!({"uuid": "accx", "amount": 1, "channel": "c"})).fails(403, "Account not found or unauthorized");
    w(json!({"uuid": main, "amount": "10.01", "channel": "c"}))
        .fails(400, "Failed: Insufficient balance! Your current balance is:10");
    let r = w(
        json!({"uuid": main, "amount": "2.5", "channel": "c", "transaction_number": "W9", "transaction_date": "2025-02-01"}),
    );
    assert_eq!(r.ok().n("balance"), "7.5");
    let t = s.txs(&tok, &main);
    assert_eq!(
        (t[0]["Type"].clone(), t[0]["TransactionID"].clone(), t[0]["Date"].clone()),
        (json!("Withdrawal"), json!("W9"), json!("2025-02-01 00:00:00"))
    );
}

#[test]
fn withdrawal_example_w1_fractional_periods() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    let rent = s.child(&tok, &needs, "Rent", json!({"allocation": 1, "fixed_amount": 750}));
    s.deposit(&tok, &rent, "750").ok();
    s.post(&tok, "/withdraw", json!({"uuid": rent, "amount": 350, "channel": "c"})).ok();
    let r = s.get(&tok, "/get_account_periods", &format!("uuid={rent}"));
    assert_eq!(r.ok().n("periods"), "0.533333");
    let f = s.get(&tok, "/find_account_by_uuid", &format!("uuid={rent}"));
    assert_eq!((f.n("balance"), f.n("amount_due")), ("400".into(), "0".into()));
}

#[test]
fn distribute_example_d1_and_errors() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "1300");
    let c1 = s.child(&tok, &main, "DistributionChild1", json!({"allocation": 0.5, "priority": 1}));
    let c2 = s.child(&tok, &main, "DistributionChild2", json!({"allocation": 0.5, "priority": 2}));
    let r = s.post(&tok, "/distribute", json!({"uuid": main, "amount": 1000}));
    r.ok();
    assert_eq!(
        (r.s("message"), r.n("amount"), r.n("balance")),
        ("Amount successifully distributed to children".into(), "1000".into(), "300".into())
    );
    assert_eq!((s.balance(&tok, &c1), s.balance(&tok, &c2)), ("500".into(), "500".into()));
    s.post(&tok, "/distribute", json!({"uuid": main, "amount": 200, "transaction": "custom-txn"})).ok();
    assert_eq!(s.txs(&tok, &c1).last().unwrap()["TransactionID"], json!("custom-txn"));
    assert_eq!(s.txs(&tok, &c2).last().unwrap()["TransactionID"], json!("custom-txn"));
    s.post(&tok, "/distribute", json!({"uuid": main, "amount": 99999}))
        .fails(400, "Distribution failed: Insufficient balance! Your current balance is:100");
    s.post(&tok, "/distribute", json!({"uuid": c1, "amount": 1}))
        .fails(400, "Distribution failed: No active child accounts available.");
    s.post(&tok, "/distribute", json!({"amount": 1})).fails(400, "uuid is required");
    s.post(&tok, "/distribute", json!({"uuid": main})).fails(400, "amount is required");
    s.post(&tok, "/distribute", json!({"uuid": main, "amount": "abc"})).fails(400, "amount must be numeric");
    s.post(&tok, "/distribute", json!({"uuid": main, "amount": 0})).fails(400, "amount must be > 0");
    s.post(&tok, "/distribute", json!({"uuid": "accx", "amount": 1}))
        .fails(403, "Account not found or unauthorized");
    // initiated_by becomes By of the debit and the direct shares.
    s.post(&tok, "/distribute", json!({"uuid": main, "amount": 10, "initiated_by": "Planner"})).ok();
    assert_eq!(s.txs(&tok, &main).last().unwrap()["By"], json!("Planner"));
    assert_eq!(s.txs(&tok, &c2).last().unwrap()["By"], json!("Planner"));
}

#[test]
fn distribute_with_only_zero_allocations_is_400() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "100");
    let c = s.child(&tok, &main, "A", json!({"allocation": 0}));
    s.post(&tok, "/change_account_status", json!({"uuid": c, "status": "active"})).ok();
    s.post(&tok, "/distribute", json!({"uuid": main, "amount": 50}))
        .fails(400, "Distribution failed: No active child accounts with a positive allocation.");
    // Under ten cents the highest-priority active child takes it regardless of allocation.
    s.post(&tok, "/distribute", json!({"uuid": main, "amount": "0.05"})).ok();
    assert_eq!(s.balance(&tok, &c), "0.05");
}

#[test]
fn move_balance_example_t1_and_errors() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let a = s.child(&tok, &main, "DistributionChild1", json!({"allocation": 0.5}));
    let b = s.child(&tok, &main, "DistributionChild2", json!({"allocation": 0.5}));
    s.deposit(&tok, &a, "1500").ok();
    s.deposit(&tok, &b, "500").ok();
    let r = s.post(&tok, "/move_balance", json!({"from_uuid": a, "to_uuid": b, "amount": 200}));
    r.ok();
    assert_eq!(r.s("message"), "Moved 200 from DistributionChild1 to DistributionChild2");
    assert_eq!((r.s("from_uuid"), r.s("to_uuid"), r.n("amount")), (a.clone(), b.clone(), "200".into()));
    assert_eq!((s.balance(&tok, &a), s.balance(&tok, &b)), ("1300".into(), "700".into()));
    let last = s.txs(&tok, &b).last().cloned().unwrap();
    assert_eq!((last["Channel"].clone(), last["By"].clone()), (json!("Internal Transfer"), json!("System")));
    let m = |v: serde_json::Value| s.post(&tok, "/move_balance", v);
    m(json!({"to_uuid": b, "amount": 1})).fails(400, "Source account (from_uuid) is required");
    m(json!({"from_uuid": a, "amount": 1})).fails(400, "Destination account (to_uuid) is required");
    m(json!({"from_uuid": a, "to_uuid": b})).fails(400, "Amount is required");
    m(json!({"from_uuid": a, "to_uuid": b, "amount": -3})).fails(400, "Amount must be a positive number");
    m(json!({"from_uuid": a, "to_uuid": b, "amount": "1.234"}))
        .fails(400, "amount must have at most 2 decimal places");
    m(json!({"from_uuid": "accx", "to_uuid": b, "amount": 1})).fails(404, "Source account not found");
    m(json!({"from_uuid": a, "to_uuid": "accx", "amount": 1})).fails(404, "Target account not found");
    m(json!({"from_uuid": a, "to_uuid": a, "amount": 1}))
        .fails(400, "Failed: Source and destination accounts must differ");
    m(json!({"from_uuid": a, "to_uuid": b, "amount": 100000}))
        .fails(400, "Failed: Insufficient balance! Your current balance is:1300");
    s.post(&tok, "/change_account_status", json!({"uuid": b, "status": "inactive"})).ok();
    m(json!({"from_uuid": a, "to_uuid": b, "amount": 1}))
        .fails(400, "Failed: Deposit not allowed. Account is not active.");
    assert_eq!((s.balance(&tok, &a), s.balance(&tok, &b)), ("1300".into(), "700".into()));
    // A transfer into main is split among its active children (only a remains active).
    let r = m(json!({"from_uuid": b, "to_uuid": main, "amount": 100000}));
    r.fails(400, "Failed: Insufficient balance! Your current balance is:700");
    m(json!({"from_uuid": b, "to_uuid": main, "amount": 100})).ok();
    assert_eq!((s.balance(&tok, &a), s.balance(&tok, &main)), ("1400".into(), "0".into()));
}

#[test]
fn values_beyond_64_bit_cents_are_refused() {
    let s = Srv::start();
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    let g = s.child(&tok, &needs, "Big", json!({"allocation": 1, "fixed_amount": "1000000000000"}));
    // 1e6 periods of 1e12 units is 1e20 cents: beyond i64, refused, nothing changed.
    s.post(&tok, "/set_account_periods", json!({"uuid": g, "periods": 1000000}))
        .fails(400, "amount is too large");
    assert_eq!(s.get(&tok, "/get_account_periods", &format!("uuid={g}")).ok().n("periods"), "1");
}

#[test]
fn split_examples_s2_s3_s4() {
    let s = Srv::start();
    // S2: allocations below 100% are normalised; the extra cent goes to the larger remainder.
    let (tok, main) = s.user("s2", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 0.4, "priority": 1}));
    let goals = s.child(&tok, &main, "Goals", json!({"allocation": 0.2, "priority": 0}));
    s.deposit(&tok, &main, "100").ok();
    assert_eq!((s.balance(&tok, &needs), s.balance(&tok, &goals)), ("66.67".into(), "33.33".into()));
    // S3: equal remainders go to the first child in priority/insertion order.
    let (tok, main) = s.user("s3", "100");
    let ties: Vec<String> =
        (0..3).map(|i| s.child(&tok, &main, &format!("T{i}"), json!({"allocation": 0.333333}))).collect();
    s.post(&tok, "/distribute", json!({"uuid": main, "amount": 100})).ok();
    let got: Vec<String> = ties.iter().map(|t| s.balance(&tok, t)).collect();
    assert_eq!(got, ["33.34", "33.33", "33.33"]);
    // S4: sixteen cents over ten equal children: never more than was debited.
    let (tok, main) = s.user("s4", "0.16");
    let ten: Vec<String> =
        (0..10).map(|i| s.child(&tok, &main, &format!("K{i}"), json!({"allocation": 0.1}))).collect();
    s.post(&tok, "/distribute", json!({"uuid": main, "amount": "0.16"})).ok();
    let got: Vec<String> = ten.iter().map(|t| s.balance(&tok, t)).collect();
    assert_eq!(got, ["0.02", "0.02", "0.02", "0.02", "0.02", "0.02", "0.01", "0.01", "0.01", "0.01"]);
    assert_eq!(
        s.get(&tok, "/compute_total_balance", &format!("uuid={main}")).ok().n("total_balance"),
        "0.16"
    );
}
