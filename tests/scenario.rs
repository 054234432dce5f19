//! SPEC 10.19 end-to-end scenario with every intermediate state, plus examples R1 and the
//! analytics worked example of 10.15, run with a fixed clock.

mod common;

use common::Srv;
use serde_json::json;

struct Ids {
    tok: String,
    main: String,
    needs: String,
    savings: String,
    fun: String,
    rent: String,
    food: String,
}

fn setup(s: &Srv) -> Ids {
    s.set_time("2025-07-10T08:00:00Z");
    let (tok, main) = s.user("alice", "500");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 0.5, "priority": 2}));
    let savings = s.child(&tok, &main, "Savings", json!({"allocation": 0.3, "priority": 1}));
    let fun = s.child(&tok, &main, "Fun", json!({"allocation": 0.2, "priority": 0}));
    let rent = s.child(
        &tok,
        &needs,
        "Rent",
        json!({"allocation": 0.6, "priority": 1, "fixed_amount": 400,
        "account_type": "Bill", "due_date": "2025-08-01", "freq": 30}),
    );
    let food = s.child(
        &tok,
        &needs,
        "Food",
        json!({"allocation": 0.4, "priority": 0, "fixed_amount": 0, "account_type": "Expense"}),
    );
    Ids { tok, main, needs, savings, fun, rent, food }
}

/// Asserts one row of the 10.19 table.
#[track_caller]
fn state(s: &Srv, i: &Ids, row: [&str; 6], rent: (&str, &str, &str, &str), total: &str) {
    let bal = |u: &str| s.balance(&i.tok, u);
    assert_eq!(
        [bal(&i.main), bal(&i.needs), bal(&i.rent), bal(&i.food), bal(&i.savings), bal(&i.fun)],
        row.map(String::from)
    );
    let st = s.status(&i.tok, &i.rent);
    let due = s.get(&i.tok, "/get_due_date", &format!("uuid={}", i.rent)).ok().s("due_date");
    let periods = s.get(&i.tok, "/get_account_periods", &format!("uuid={}", i.rent)).ok().n("periods");
    let amount_due = s.get(&i.tok, "/find_account_by_uuid", &format!("uuid={}", i.rent)).ok().n("amount_due");
    assert_eq!((st.as_str(), due.as_str(), periods.as_str(), amount_due.as_str()), rent);
    assert_eq!(
        s.get(&i.tok, "/compute_total_balance", &format!("uuid={}", i.main)).ok().n("total_balance"),
        total
    );
}

fn deposit_main(s: &Srv, i: &Ids, amount: u32, txn: Option<&str>) {
    let mut b = json!({"uuid": i.main, "amount": amount, "channel": "ABSA"});
    if let Some(t) = txn {
        b["transaction_number"] = json!(t);
    }
    s.post(&i.tok, "/deposit", b).ok();
}

fn range_fig(s: &Srv, i: &Ids, path: &str, uuid: &str, field: &str) -> String {
    s.get(&i.tok, path, &format!("uuid={uuid}")).ok().n(field)
}

#[test]
fn end_to_end_scenario_10_19() {
    let s = Srv::start();
    let i = setup(&s);
    state(&s, &i, ["500", "0", "0", "0", "0", "0"], ("active", "2025-08-01", "1", "400"), "500");

    s.set_time("2025-07-15T10:00:00Z");
    deposit_main(&s, &i, 1000, Some("T1"));
    state(&s, &i, ["500", "0", "300", "200", "300", "200"], ("active", "2025-08-01", "1", "100"), "1500");

    deposit_main(&s, &i, 500, Some("T2"));
    state(&s, &i, ["500", "50", "400", "300", "450", "300"], ("inactive", "2025-08-01", "1", "0"), "2000");
    let last = s.txs(&i.tok, &i.needs).last().cloned().unwrap();
    assert_eq!(last["Channel"], json!("Returned Extra Allocation-down"));

    s.set_time("2025-07-20T10:00:00Z");
    deposit_main(&s, &i, 100, None);
    state(&s, &i, ["500", "50", "400", "350", "480", "320"], ("inactive", "2025-08-01", "1", "0"), "2100");

    s.set_time("2025-08-05T09:00:00Z");
    deposit_main(&s, &i, 100, None);
    state(&s, &i, ["500", "50", "430", "370", "510", "340"], ("active", "2025-08-31", "2", "370"), "2200");

    s.set_time("2025-08-06T12:00:00Z");
    s.post(&i.tok, "/withdraw", json!({"uuid": i.rent, "amount": 400, "channel": "mpesa"})).ok();
    state(&s, &i, ["500", "50", "30", "370", "510", "340"], ("active", "2025-08-31", "1", "370"), "1800");

    // Analytics after E (10.15 worked example), all-time range.
    assert_eq!(range_fig(&s, &i, "/total_income", &i.main, "total_income"), "1700");
    assert_eq!(range_fig(&s, &i, "/spending", &i.main, "total_spending"), "400");
    assert_eq!(range_fig(&s, &i, "/allocated_amount", &i.main, "allocated_amount"), "1700");
    assert_eq!(range_fig(&s, &i, "/income_utilization", &i.main, "utilization"), "0.235294");
    assert_eq!(range_fig(&s, &i, "/allocated_amount", &i.needs, "allocated_amount"), "900");
    assert_eq!(range_fig(&s, &i, "/spending", &i.needs, "total_spending"), "400");
    assert_eq!(range_fig(&s, &i, "/income_utilization", &i.needs, "utilization"), "0.444444");
    assert_eq!(range_fig(&s, &i, "/walking_amount", &i.main, "walking_amount"), "370");
    let w = s.get(&i.tok, "/walking_amount", &format!("uuid={}&amt_type=balance", i.main));
    assert_eq!((w.ok().n("walking_amount"), w.s("amt_type")), ("400".into(), "balance".into()));
    // 10.13 example: Rent due 2025-08-31, 24.5 days ahead.
    let due = |d: &str| {
        s.get(&i.tok, "/compute_total_due_within_days", &format!("uuid={}&days={d}", i.main))
            .ok()
            .n("total_due")
    };
    assert_eq!([due("30"), due("7"), due("24.5")], ["370", "0", "370"]);
    assert_eq!(
        s.get(&i.tok, "/compute_total_due_within_days", &format!("uuid={}&days=24.5", i.main))
            .n("within_days"),
        "24.5"
    );

    s.set_time("2025-08-07T10:00:00Z");
    s.post(&i.tok, "/deposit", json!({"uuid": i.rent, "amount": 500, "channel": "ABSA"})).ok();
    state(&s, &i, ["500", "180", "400", "370", "510", "340"], ("inactive", "2025-08-31", "1", "0"), "2300");
    let last = s.txs(&i.tok, &i.needs).last().cloned().unwrap();
    assert_eq!(last["Channel"], json!("Returned Extra Allocation-up"));
    assert_eq!(range_fig(&s, &i, "/total_income", &i.main, "total_income"), "2070");
    assert_eq!(range_fig(&s, &i, "/allocated_amount", &i.main, "allocated_amount"), "2200");
    assert_eq!(range_fig(&s, &i, "/compute_total_due", &i.main, "total_due"), "0");
}

#[test]
fn rollover_example_r1_catches_up_two_periods() {
    let s = Srv::start();
    s.set_time("2025-01-10T00:00:00Z");
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    let rent = s.child(
        &tok,
        &needs,
        "Rent",
        json!({"allocation": 1, "fixed_amount": 500, "account_type": "Bill",
        "freq": 30, "due_date": "2025-01-28T00:00:00Z"}),
    );
    s.deposit(&tok, &rent, "500").ok();
    assert_eq!(s.status(&tok, &rent), "inactive");
    s.set_time("2025-03-10T12:00:00Z");
    s.post(
        &tok,
        "/deposit",
        json!({"uuid": rent, "amount": 300, "channel": "c", "transaction_date": "2025-03-10T12:00:00Z"}),
    )
    .ok();
    assert_eq!(s.get(&tok, "/get_due_date", &format!("uuid={rent}")).ok().s("due_date"), "2025-03-29");
    assert_eq!(s.get(&tok, "/get_account_periods", &format!("uuid={rent}")).ok().n("periods"), "3");
    let f = s.get(&tok, "/find_account_by_uuid", &format!("uuid={rent}"));
    assert_eq!((f.ok().n("balance"), f.n("amount_due")), ("800".into(), "700".into()));
    assert_eq!(s.status(&tok, &rent), "active");
}

#[test]
fn rollover_never_reopens_closed_accounts() {
    let s = Srv::start();
    s.set_time("2025-01-10T00:00:00Z");
    let (tok, main) = s.user("u1", "0");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 1}));
    let bill = s.child(
        &tok,
        &needs,
        "Bill",
        json!({"allocation": 0.5, "fixed_amount": 100, "account_type": "Bill",
        "freq": 10, "due_date": "2025-01-12"}),
    );
    let other = s.child(&tok, &needs, "Other", json!({"allocation": 0.5}));
    s.post(&tok, "/change_account_status", json!({"uuid": bill, "status": "closed"})).ok();
    s.set_time("2025-02-01T00:00:00Z");
    s.deposit(&tok, &needs, "10").ok();
    assert_eq!(s.status(&tok, &bill), "closed");
    // Periods still caught up (20 days past due, freq 10: two periods).
    assert_eq!(s.get(&tok, "/get_account_periods", &format!("uuid={bill}")).ok().n("periods"), "3");
    assert_eq!(s.balance(&tok, &other), "10");
    // Reads never roll over.
    s.set_time("2025-06-01T00:00:00Z");
    assert_eq!(s.get(&tok, "/get_due_date", &format!("uuid={bill}")).ok().s("due_date"), "2025-02-01");
}
