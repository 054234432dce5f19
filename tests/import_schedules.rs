//! POST /import and the schedules over HTTP (docs/import.md, "What a line does"): a statement
//! line within a schedule's `approx_percent` of its amount, dated near an open occurrence, is
//! that occurrence's payment: applied with its real amount into the schedule's account, the
//! occurrence marked posted in the same write, so the poster never posts it; a line too far off
//! in amount, date or direction is not; a posted occurrence is matched as the transaction it is.

mod common;

use std::time::{Duration, Instant};

use common::{Body, Srv, T0};
use serde_json::{json, Value};

const DAY: i64 = 86_400;

fn srv() -> Srv {
    Srv::start_with(|c| c.schedule_poll_ms = 20)
}

/// An OFX statement of bank account `acct` with `lines` (day `YYYYMMDD`, amount, FITID).
fn ofx(acct: &str, lines: &[(&str, &str, &str)]) -> String {
    let mut s = format!(
        "OFXHEADER:100\r\nDATA:OFXSGML\r\nVERSION:102\r\nSECURITY:NONE\r\nENCODING:USASCII\r\nCHARSET:1252\r\n\r\n\
         <OFX><BANKMSGSRSV1><STMTTRNRS><TRNUID>1<STMTRS><CURDEF>EUR\r\n\
         <BANKACCTFROM><BANKID>1<ACCTID>{acct}<ACCTTYPE>CHECKING</BANKACCTFROM>\r\n<BANKTRANLIST>\r\n"
    );
    for (day, amount, id) in lines {
        let kind = if amount.starts_with('-') { "DEBIT" } else { "CREDIT" };
        s.push_str(&format!(
            "<STMTTRN><TRNTYPE>{kind}<DTPOSTED>{day}<TRNAMT>{amount}<FITID>{id}<NAME>Payee {id}</STMTTRN>\r\n"
        ));
    }
    s.push_str("</BANKTRANLIST></STMTRS></STMTTRNRS></BANKMSGSRSV1></OFX>\r\n");
    s
}

fn import(s: &Srv, tok: &str, query: &str, body: &str) -> common::Resp {
    let r = s.raw(
        "POST",
        &format!("/import?{query}"),
        &[("Authorization", &format!("Bearer {tok}"))],
        Body::Raw("application/octet-stream", body.as_bytes()),
    );
    r.ok();
    r
}

fn passes(s: &Srv) -> u64 {
    let m = s.raw("GET", "/metrics", &[], Body::None);
    m.text
        .lines()
        .find_map(|l| l.strip_prefix("pfm_schedule_passes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Two whole passes of the poster after this call.
fn two_passes(s: &Srv) {
    let from = passes(s);
    let end = Instant::now() + Duration::from_secs(10);
    while passes(s) < from + 2 {
        assert!(Instant::now() < end, "no two passes of the poster in 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// /upcoming's (date, name, state) of every occurrence within `days`.
fn upcoming(s: &Srv, tok: &str, days: i64) -> Vec<(String, String, String)> {
    let r = s.get(tok, "/upcoming", &format!("days={days}"));
    r.ok();
    r.json["occurrences"]
        .as_array()
        .expect("occurrences")
        .iter()
        .map(|o| {
            let f = |k: &str| o[k].as_str().unwrap_or_default().to_string();
            (f("date"), f("name"), f("state"))
        })
        .collect()
}

fn ids(s: &Srv, tok: &str, uuid: &str) -> Vec<String> {
    s.txs(tok, uuid).iter().map(|t| t["TransactionID"].as_str().unwrap_or_default().to_string()).collect()
}

fn schedule(s: &Srv, tok: &str, body: Value) -> i64 {
    let r = s.post(tok, "/create_schedule", body);
    r.ok();
    r.json["schedule"]["id"].as_i64().expect("id")
}

fn line(r: &common::Resp, i: usize) -> Value {
    r.json["lines"][i].clone()
}

#[test]
fn a_line_within_the_percent_pays_the_occurrence_and_the_poster_never_posts_it() {
    let s = srv();
    let (tok, main) = s.user("imp_sched_rent", "0");
    let rent = s.child(&tok, &main, "Rent", json!({"allocation": 1}));
    s.deposit(&tok, &main, "3000").ok();
    // Today is 2025-07-10; the rent of 1000.00, 5 % either way, is due on the 12th monthly.
    let id = schedule(
        &s,
        &tok,
        json!({"name": "Rent", "type": "withdraw", "uuid": rent, "amount": 1000, "approx_percent": 5,
               "unit": "months", "start": "2025-07-12"}),
    );
    // The bank took 1020.00 three days after the due day. The statement goes into the main
    // account, which splits its money further: without the schedule the debit would wait for
    // an envelope; as the rent, it is paid from the rent's.
    let st = ofx("CHK", &[("20250715", "-1020.00", "R1")]);
    let p = import(&s, &tok, "", &st);
    let l = line(&p, 0);
    assert_eq!(l["action"], "matched", "{}", p.text);
    assert_eq!(l["schedule"], json!(id));
    assert_eq!(l["schedule_name"], "Rent");
    assert_eq!(l["occurrence"], json!(0));
    assert_eq!(l["occurrence_date"], "2025-07-12");
    assert_eq!(l["matched"], format!("sch:{id}:0"));
    assert_eq!(l["envelope"], rent.as_str());
    assert_eq!(p.json["summary"]["matched"], json!(1));
    assert_eq!(p.json["summary"]["net_amount"], json!(-1020));
    // The preview changed nothing.
    assert_eq!(s.balance(&tok, &rent), "3000");
    assert_eq!(upcoming(&s, &tok, 5), [("2025-07-12".into(), "Rent".into(), "scheduled".into())]);
    let c = import(&s, &tok, "commit=true", &st);
    assert_eq!(line(&c, 0)["action"], "matched", "{}", c.text);
    assert_eq!(s.balance(&tok, &rent), "1980");
    assert_eq!(ids(&s, &tok, &rent).last().map(String::as_str), Some("imp:CHK:R1"));
    assert_eq!(upcoming(&s, &tok, 5), [("2025-07-12".into(), "Rent".into(), "posted".into())]);
    // The rent's day comes and goes: the poster posts nothing for it.
    s.clock.set_secs(T0 + 10 * DAY);
    two_passes(&s);
    assert_eq!(s.balance(&tok, &rent), "1980");
    assert!(!ids(&s, &tok, &rent).iter().any(|i| i.starts_with("sch:")), "{:?}", ids(&s, &tok, &rent));
    // The statement again: a duplicate, nothing moves.
    let again = import(&s, &tok, "commit=true", &st);
    assert_eq!(line(&again, 0)["action"], "duplicate", "{}", again.text);
    // August's rent the poster posts itself, for its amount.
    s.clock.set_secs(T0 + 33 * DAY);
    let end = Instant::now() + Duration::from_secs(10);
    while s.balance(&tok, &rent) != "980" {
        assert!(Instant::now() < end, "August's rent not posted: {}", s.balance(&tok, &rent));
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its statement line, 1.5 % off two days later, is that posted transaction: matched, and
    // nothing is applied twice.
    let aug = ofx("CHK", &[("20250814", "-1015.00", "R2")]);
    let c = import(&s, &tok, "commit=true", &aug);
    let l = line(&c, 0);
    assert_eq!(
        (l["action"].as_str(), l["matched"].as_str()),
        (Some("matched"), Some(&*format!("sch:{id}:1")))
    );
    assert!(l.get("schedule").is_none(), "{l}");
    assert_eq!(s.balance(&tok, &rent), "980");
    two_passes(&s);
    assert_eq!(s.balance(&tok, &rent), "980");
}

#[test]
fn a_line_off_in_amount_date_or_direction_is_not_the_schedules_and_each_occurrence_is_paid_once() {
    let s = srv();
    let (tok, main) = s.user("imp_sched_off", "0");
    let bills = s.child(&tok, &main, "Bills", json!({"allocation": 1}));
    s.deposit(&tok, &main, "5000").ok();
    let rent = schedule(
        &s,
        &tok,
        json!({"name": "Rent", "type": "withdraw", "uuid": bills, "amount": 1000, "approx_percent": 5,
               "unit": "months", "start": "2025-07-20"}),
    );
    let gym = schedule(
        &s,
        &tok,
        json!({"name": "Gym", "type": "withdraw", "uuid": bills, "amount": 40,
               "unit": "months", "start": "2025-07-20"}),
    );
    let pay = schedule(
        &s,
        &tok,
        json!({"name": "Salary", "type": "deposit", "uuid": main, "amount": 2000, "approx_percent": 10,
               "unit": "months", "start": "2025-07-25"}),
    );
    // Imported into the bills envelope itself, so a line that is no schedule's is a plain
    // withdrawal or deposit there.
    let st = ofx(
        "OFF",
        &[
            ("20250721", "-1100.00", "A"), // 10 % off the rent
            ("20250721", "1000.00", "B"),  // a credit of the rent's amount
            ("20250724", "-1000.00", "C"), // 4 days after: outside the window
            ("20250721", "-40.01", "D"),   // a cent off a schedule without a percent
            ("20250722", "-40.00", "E"),   // the gym, exactly
            ("20250720", "-40.00", "F"),   // the gym again: its occurrence is taken
            ("20250723", "-950.00", "G"),  // the rent, 5 % off, three days late
            ("20250727", "1850.00", "H"),  // the salary, 7.5 % short, two days late
        ],
    );
    let r = import(&s, &tok, &format!("uuid={bills}&commit=true"), &st);
    let action = |i: usize| {
        let l = line(&r, i);
        (l["action"].as_str().unwrap_or_default().to_string(), l["schedule"].as_i64())
    };
    let want = [
        ("withdraw", None),
        ("deposit", None),
        ("withdraw", None),
        ("withdraw", None),
        ("matched", Some(gym)),
        ("withdraw", None),
        ("matched", Some(rent)),
        ("matched", Some(pay)),
    ];
    for (i, (a, sch)) in want.iter().enumerate() {
        assert_eq!(action(i), (a.to_string(), *sch), "line {i}: {}", line(&r, i));
    }
    // The salary's line went into the salary's account (the main account), not the bills.
    assert_eq!(line(&r, 7)["envelope"], main.as_str());
    assert_eq!(r.json["summary"]["matched"], json!(3));
    // Every applied line moved its own amount: 5000 - 1100 + 1000 - 1000 - 40.01 - 40 - 40
    // - 950 in the bills envelope; the salary's 1850 flowed down from the main account.
    assert_eq!(s.balance(&tok, &bills), "4679.99");
    let up = upcoming(&s, &tok, 20);
    for (name, date) in [("Rent", "2025-07-20"), ("Gym", "2025-07-20"), ("Salary", "2025-07-25")] {
        let state = up.iter().find(|o| o.0 == date && o.1 == name).map(|o| o.2.clone());
        assert_eq!(state.as_deref(), Some("posted"), "{name}: {up:?}");
    }
    // Days later the poster posts none of them, and the bills envelope keeps its balance.
    s.clock.set_secs(T0 + 20 * DAY);
    two_passes(&s);
    assert_eq!(s.balance(&tok, &bills), "4679.99");
}
