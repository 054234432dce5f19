//! Scheduled transactions over HTTP (docs/schedules.md): the service posts due occurrences by
//! itself, on their days, once each, across restarts and catch-up; what is coming; approval,
//! skipping, failures; and rules refused.

mod common;

use std::time::{Duration, Instant};

use common::{Srv, T0};
use serde_json::{json, Value};

const DAY: i64 = 86_400;

fn srv() -> Srv {
    Srv::start_with(|c| c.schedule_poll_ms = 20)
}

/// Waits until `f` holds (the poster runs every 20 ms), at most 10 s.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Passes of the poster so far (a metric).
fn passes(s: &Srv) -> u64 {
    let m = s.raw("GET", "/metrics", &[], common::Body::None);
    m.text
        .lines()
        .find_map(|l| l.strip_prefix("pfm_schedule_passes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits for two whole passes of the poster after this call: whatever was due by now has been
/// posted (or refused) when it returns. For checks that something did not happen.
fn two_passes(s: &Srv) {
    let from = passes(s);
    until("two passes of the poster", || passes(s) >= from + 2);
}

fn upcoming(s: &Srv, tok: &str, days: i64) -> Vec<Value> {
    let r = s.get(tok, "/upcoming", &format!("days={days}"));
    r.ok();
    r.json["occurrences"].as_array().expect("occurrences").clone()
}

fn states(v: &[Value]) -> Vec<(String, String)> {
    v.iter()
        .map(|o| (o["date"].as_str().unwrap().to_string(), o["state"].as_str().unwrap().to_string()))
        .collect()
}

fn ids(s: &Srv, tok: &str, uuid: &str) -> Vec<String> {
    let t = s.get(tok, "/get_transactions", &format!("uuid={uuid}"));
    t.json["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["TransactionID"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_monthly_salary_posts_itself_on_its_day_once_and_catches_up_after_downtime() {
    let mut s = srv();
    let (tok, main) = s.user("sch_salary", "0");
    let rent = s.child(&tok, &main, "Rent", json!({"allocation": 1}));
    // Today is 2025-07-10; the salary comes on the 25th of every month.
    let c = s.post(
        &tok,
        "/create_schedule",
        json!({"name": "Salary", "type": "deposit", "uuid": main,
        "amount": 2000, "unit": "months", "month_day": "25", "start": "2025-07-01"}),
    );
    c.ok();
    let id = c.json["schedule"]["id"].as_i64().unwrap();
    assert_eq!(c.json["schedule"]["next"]["date"], "2025-07-25");
    assert_eq!(c.json["schedule"]["next"]["state"], "scheduled");
    let up = upcoming(&s, &tok, 60);
    assert_eq!(
        states(&up),
        [("2025-07-25".into(), "scheduled".into()), ("2025-08-25".into(), "scheduled".into())]
    );
    // Nothing before its day.
    s.clock.set_secs(T0 + 14 * DAY);
    two_passes(&s);
    assert_eq!(s.balance(&tok, &main), "0");
    // On the 25th it posts, dated that day, and flows down the tree like any deposit.
    let known = s.get(&tok, "/changes", "since=0").json["server_knowledge"].as_u64().unwrap();
    s.clock.set_secs(T0 + 15 * DAY);
    until("the July salary", || s.balance(&tok, &rent) == "2000");
    // Delta sync sees the posting like any other transaction.
    let d = s.get(&tok, "/changes", &format!("since={known}"));
    d.ok();
    let synced: Vec<&str> = d.json["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["TransactionID"].as_str())
        .collect();
    assert!(synced.contains(&format!("sch:{id}:0").as_str()), "{}", d.text);
    assert!(d.json["server_knowledge"].as_u64().unwrap() > known);
    let t = s.get(&tok, "/get_transactions", &format!("uuid={main}"));
    let first = &t.json["transactions"][0];
    assert_eq!(first["TransactionID"], format!("sch:{id}:0"));
    assert_eq!(first["Date"], "2025-07-25 00:00:00");
    assert_eq!(first["Payee"], "Salary");
    assert_eq!(first["By"], "User");
    // A restart posts nothing twice.
    s.restart();
    two_passes(&s);
    assert_eq!(s.balance(&tok, &rent), "2000");
    // Down for three months: every missed occurrence posts, each on its own day.
    s.clock.set_secs(T0 + 110 * DAY);
    until("the catch-up", || s.balance(&tok, &rent) == "8000");
    let want: Vec<String> = (0..4).map(|n| format!("sch:{id}:{n}")).collect();
    let got: Vec<String> = ids(&s, &tok, &main).into_iter().filter(|i| i.starts_with("sch:")).collect();
    assert_eq!(got, want);
    let up = upcoming(&s, &tok, 30);
    assert_eq!(states(&up), [("2025-11-25".into(), "scheduled".into())]);
    // A clock that steps back posts nothing again.
    s.clock.set_secs(T0 + 20 * DAY);
    two_passes(&s);
    assert_eq!(s.balance(&tok, &rent), "8000");
}

#[test]
fn a_payment_the_envelope_cannot_cover_fails_visibly_without_blocking_others_and_posts_once_funded() {
    let s = srv();
    let (tok, main) = s.user("sch_fail", "0");
    let phone = s.child(&tok, &main, "Phone", json!({"allocation": 1}));
    s.post(
        &tok,
        "/create_schedule",
        json!({"name": "Phone bill", "type": "withdraw", "uuid": phone,
        "amount": 30, "unit": "days", "every": 30, "start": "2025-07-11"}),
    )
    .ok();
    s.post(
        &tok,
        "/create_schedule",
        json!({"name": "Pocket money", "type": "deposit", "uuid": main,
        "amount": 10, "unit": "weeks", "start": "2025-07-11"}),
    )
    .ok();
    s.clock.set_secs(T0 + DAY);
    until("the weekly deposit", || s.balance(&tok, &phone) == "10");
    let up = upcoming(&s, &tok, 1);
    let bill = up.iter().find(|o| o["name"] == "Phone bill").expect("the bill");
    assert_eq!(bill["state"], "failed", "{up:?}");
    assert_eq!(bill["reason"], "not enough money in the account");
    assert_eq!(bill["amount"], json!(-30));
    // Money arrives; the next day's pass posts the bill, dated on its own day.
    s.post(&tok, "/deposit", json!({"uuid": main, "amount": 25, "channel": "cash"})).ok();
    s.clock.set_secs(T0 + 2 * DAY);
    until("the bill's retry", || s.balance(&tok, &phone) == "5");
    let t = s.get(&tok, "/get_transactions", &format!("uuid={phone}"));
    let paid = t.json["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["Type"] == "Withdrawal")
        .cloned()
        .unwrap();
    assert_eq!(paid["Date"], "2025-07-11 00:00:00");
    assert!(paid["TransactionID"].as_str().unwrap().starts_with("sch:"));
    assert_eq!(states(&upcoming(&s, &tok, 1)).len(), 0);
}

#[test]
fn a_schedule_awaiting_approval_waits_and_posts_or_skips_when_told() {
    let s = srv();
    let (tok, main) = s.user("sch_approve", "500");
    let c = s.post(
        &tok,
        "/create_schedule",
        json!({"name": "Gym", "type": "withdraw", "uuid": main,
        "amount": 40, "unit": "months", "month_day": "last", "start": "2025-07-01", "auto": false}),
    );
    c.ok();
    let id = c.json["schedule"]["id"].as_i64().unwrap();
    assert_eq!(c.json["schedule"]["next"]["date"], "2025-07-31");
    s.clock.set_secs(T0 + 25 * DAY); // 2025-08-04
    two_passes(&s);
    assert_eq!(s.balance(&tok, &main), "500");
    let up = upcoming(&s, &tok, 30);
    assert_eq!(states(&up), [("2025-07-31".into(), "due".into()), ("2025-08-31".into(), "scheduled".into())]);
    // Approved: posted, dated on its day.
    let p = s.post(&tok, "/post_schedule", json!({"id": id}));
    p.ok();
    assert_eq!(p.json["posted"]["date"], "2025-07-31");
    assert_eq!(s.balance(&tok, &main), "460");
    // The next one is skipped; the one after that is next.
    let k = s.post(&tok, "/skip_schedule", json!({"id": id}));
    k.ok();
    assert_eq!(k.json["skipped"]["date"], "2025-08-31");
    assert_eq!(k.json["schedule"]["next"]["date"], "2025-09-30");
    let up = upcoming(&s, &tok, 60);
    assert_eq!(
        states(&up),
        [("2025-08-31".into(), "skipped".into()), ("2025-09-30".into(), "scheduled".into())]
    );
    // Paid ahead: dated today.
    let p = s.post(&tok, "/post_schedule", json!({"id": id}));
    assert_eq!(p.json["posted"]["date"], "2025-09-30");
    let t = s.get(&tok, "/get_transactions", &format!("uuid={main}"));
    let last = t.json["transactions"].as_array().unwrap().last().cloned().unwrap();
    assert_eq!(last["Date"].as_str().unwrap().get(..10), Some("2025-08-04"));
    assert_eq!(s.balance(&tok, &main), "420");
}

#[test]
fn schedules_are_listed_changed_and_deleted_and_bad_rules_are_refused() {
    let s = srv();
    let (tok, main) = s.user("sch_crud", "0");
    let bills = s.child(&tok, &main, "Bills", json!({"allocation": 1}));
    let base = json!({"name": "Rent", "type": "withdraw", "uuid": bills, "amount": 700});
    let with = |extra: Value| {
        let mut b = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let bad = |extra: Value, msg: &str| {
        let r = s.post(&tok, "/create_schedule", with(extra));
        assert_eq!(r.status, 400, "{}", r.text);
        assert!(r.err().contains(msg), "{} (wanted {msg})", r.text);
    };
    bad(json!({"every": 0}), "every must be a whole number from 1 to 1000");
    bad(json!({"unit": "years", "month_day": "31", "start": "2025-02-01"}), "never");
    bad(json!({"unit": "months", "month_day": "30", "start": "2025-02-01", "end_date": "2025-03-29"}), "");
    bad(json!({"start": "2025-08-01", "end_date": "2025-07-01"}), "end");
    bad(json!({"unit": "days", "start": "2025-08-01", "end_date": "9999-12-31"}), "");
    bad(json!({"end_after": 20000}), "end_after must be a whole number from 1 to 10000");
    bad(json!({"type": "pay"}), "type must be deposit, withdraw or move");
    bad(json!({"type": "move"}), "move needs from_uuid and to_uuid");
    bad(json!({"nth": 2}), "nth and weekday go together");
    bad(json!({"unit": "fortnights"}), "unit must be days, weeks, months or years");
    s.post(&tok, "/create_schedule", with(json!({"uuid": "accnope"}))).fails(404, "Account not found");
    assert_eq!(s.get(&tok, "/schedules", "").json["schedules"], json!([]));
    let c = s.post(
        &tok,
        "/create_schedule",
        with(json!({"unit": "months", "nth": 1, "weekday": "mon",
        "weekend": "before", "end_after": 12, "start": "2025-07-01"})),
    );
    c.ok();
    let sc = &c.json["schedule"];
    assert_eq!(
        (sc["nth"].as_i64(), sc["weekday"].as_str(), sc["end_after"].as_i64()),
        (Some(1), Some("mon"), Some(12))
    );
    assert_eq!(sc["next"]["date"], "2025-08-04");
    let id = sc["id"].as_i64().unwrap();
    let u = s.post(
        &tok,
        "/update_schedule",
        json!({"id": id, "amount": 750, "month_day": "1", "weekend": "after"}),
    );
    u.ok();
    // 2025-08-01 is a Friday; 2025-11-01 a Saturday, moved to the Monday.
    assert_eq!(u.json["schedule"]["amount"], json!(750));
    assert_eq!(u.json["schedule"]["next"]["date"], "2025-08-01");
    let up = upcoming(&s, &tok, 120);
    assert!(states(&up).contains(&("2025-11-03".into(), "scheduled".into())), "{up:?}");
    let mut s = s;
    s.restart();
    let list = s.get(&tok, "/schedules", "");
    assert_eq!(list.json["schedules"][0]["amount"], json!(750), "{}", list.text);
    let one = s.get(&tok, "/schedule", &format!("id={id}"));
    assert_eq!(one.json["schedule"]["amount"], json!(750), "{}", one.text);
    s.get(&tok, "/schedule", "id=999").fails(404, "Schedule not found");
    s.post(&tok, "/update_schedule", json!({"id": 999, "amount": 1})).fails(404, "Schedule not found");
    s.post(&tok, "/delete_schedule", json!({"id": id})).ok();
    s.post(&tok, "/delete_schedule", json!({"id": id})).fails(404, "Schedule not found");
    assert_eq!(upcoming(&s, &tok, 366).len(), 0);
}

/// The forecast of a tree with envelopes and a Bill, then the same days lived through: the
/// poster posting each occurrence on its day gives exactly the balances the forecast projected,
/// and the Bill's shortfall is the one it foresaw.
#[test]
fn posting_the_forecasts_occurrences_day_by_day_gives_the_forecasts_balances() {
    let s = srv();
    let (tok, main) = s.user("sch_forecast", "100");
    let needs = s.child(&tok, &main, "Needs", json!({"allocation": 0.7}));
    let fun = s.child(&tok, &main, "Fun", json!({"allocation": 0.3}));
    let rent = s.child(
        &tok,
        &needs,
        "Rent",
        json!({"allocation": 1, "fixed_amount": 900, "freq": 30,
        "due_date": "2025-08-01"}),
    );
    s.post(&tok, "/set_account_type", json!({"uuid": rent, "account_type": "Bill"})).ok();
    // Start the walk at midnight, as the poster's day begins.
    let day0 = T0 - T0.rem_euclid(DAY);
    s.clock.set_secs(day0);
    for (extra, name) in [
        (
            json!({"type": "deposit", "uuid": main, "amount": 400, "unit": "weeks", "start": "2025-07-11"}),
            "Pay",
        ),
        (
            json!({"type": "withdraw", "uuid": fun, "amount": 45.5, "unit": "days", "every": 9, "start": "2025-07-12"}),
            "Cinema",
        ),
        (
            json!({"type": "move", "from_uuid": fun, "to_uuid": needs, "amount": 20, "unit": "months", "month_day": "last", "start": "2025-07-01"}),
            "Top-up",
        ),
    ] {
        let mut b = extra;
        b["name"] = json!(name);
        s.post(&tok, "/create_schedule", b).ok();
    }
    let f = s.get(&tok, "/forecast", "days=40");
    f.ok();
    let accounts = f.json["accounts"].as_array().unwrap().clone();
    assert_eq!(accounts.len(), 4, "{}", f.text);
    let projected = |uuid: &str| accounts.iter().find(|a| a["uuid"] == uuid).unwrap()["balance_end"].clone();
    let bills = f.json["bills"].as_array().unwrap();
    assert_eq!(bills[0]["uuid"], rent.as_str(), "{}", f.text);
    assert_eq!(bills[0]["due_date"], "2025-08-01");
    // Money is conserved in the projection.
    let m = &f.json["money"];
    let (start, dep, wd, end) = (
        m["start"].as_f64().unwrap(),
        m["deposited"].as_f64().unwrap(),
        m["withdrawn"].as_f64().unwrap(),
        m["end"].as_f64().unwrap(),
    );
    assert!((start + dep - wd - end).abs() < 1e-9, "{m}");
    // Live through the same 40 days.
    for d in 1..=40 {
        s.clock.set_secs(day0 + d * DAY);
        until("the day's postings", || {
            upcoming(&s, &tok, 1).iter().all(|o| {
                o["date"].as_str().unwrap() > common_day(day0 + d * DAY).as_str()
                    || o["state"] != "due" && o["state"] != "scheduled"
            })
        });
    }
    for (uuid, name) in [(&main, "main"), (&needs, "needs"), (&fun, "fun"), (&rent, "rent")] {
        let bal = s.get(&tok, "/get_balance", &format!("uuid={uuid}")).json["balance"].clone();
        assert_eq!(bal, projected(uuid), "{name}: {}", f.text);
    }
    // 6 weekly pays into main; in Fun, their 6 shares (a split carries its deposit's id) and 5
    // cinema withdrawals, one each 9 days.
    let posted = |uuid: &str| ids(&s, &tok, uuid).iter().filter(|i| i.starts_with("sch:")).count();
    assert_eq!((posted(&main), posted(&fun)), (6, 11));
    let total = s.get(&tok, "/compute_total_balance", &format!("uuid={main}")).json["total_balance"].clone();
    assert_eq!(total.as_f64(), m["end"].as_f64());
    // A scope of one subtree, and bad input.
    let sub = s.get(&tok, "/forecast", &format!("days=5&uuid={needs}"));
    assert_eq!(sub.json["accounts"].as_array().unwrap().len(), 2, "{}", sub.text);
    s.get(&tok, "/forecast", "uuid=accnope").fails(404, "Account not found");
    s.get(&tok, "/forecast", "days=400").fails(400, "days must be a whole number from 1 to 366");
}

fn common_day(secs: i64) -> String {
    let t = secs.div_euclid(DAY);
    // Civil date of a day number (Howard Hinnant's algorithm), as the service writes dates.
    let z = t + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// A changed rule starts afresh from today: nothing before today is posted for it, and its
/// occurrences never share a transaction id with the old rule's.
#[test]
fn a_changed_rule_owes_nothing_before_today_and_its_ids_never_meet_the_old_ones() {
    let s = srv();
    let (tok, main) = s.user("sch_rerule", "0");
    let c = s.post(
        &tok,
        "/create_schedule",
        json!({"name": "Allowance", "type": "deposit", "uuid": main,
        "amount": 5, "unit": "days", "start": "2025-07-10"}),
    );
    let id = c.json["schedule"]["id"].as_i64().unwrap();
    until("the first allowance", || s.balance(&tok, &main) == "5");
    // Moved to start a year earlier, weekly: no catch-up of last year.
    let u = s.post(&tok, "/update_schedule", json!({"id": id, "unit": "weeks", "start": "2024-07-11"}));
    u.ok();
    assert_eq!(u.json["schedule"]["next"]["date"], "2025-07-10", "{}", u.text);
    two_passes(&s);
    // Today's weekly occurrence is a new one (another id), so it posts too.
    until("today's weekly allowance", || s.balance(&tok, &main) == "10");
    two_passes(&s);
    assert_eq!(s.balance(&tok, &main), "10");
    let got: Vec<String> = ids(&s, &tok, &main).into_iter().filter(|i| i.starts_with("sch:")).collect();
    assert_eq!(got, [format!("sch:{id}:0"), format!("sch:{id}r1:52")]);
}
