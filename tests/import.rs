//! POST /import over HTTP (docs/import.md): preview, commit, never twice, hostile files.

mod common;

use common::{Body, Srv};
use serde_json::json;

/// An OFX 1.x statement written from the specification: SGML, unclosed tags, one checking
/// account, a salary in and two payments out.
const OFX: &str = "OFXHEADER:100\r\nDATA:OFXSGML\r\nVERSION:102\r\nSECURITY:NONE\r\nENCODING:USASCII\r\n\
CHARSET:1252\r\nCOMPRESSION:NONE\r\nOLDFILEUID:NONE\r\nNEWFILEUID:NONE\r\n\r\n\
<OFX><SIGNONMSGSRSV1><SONRS><STATUS><CODE>0<SEVERITY>INFO</STATUS><DTSERVER>20250131</SONRS></SIGNONMSGSRSV1>\r\n\
<BANKMSGSRSV1><STMTTRNRS><TRNUID>1<STATUS><CODE>0<SEVERITY>INFO</STATUS><STMTRS><CURDEF>USD\r\n\
<BANKACCTFROM><BANKID>123456789<ACCTID>000111222<ACCTTYPE>CHECKING</BANKACCTFROM>\r\n\
<BANKTRANLIST><DTSTART>20250101<DTEND>20250131\r\n\
<STMTTRN><TRNTYPE>CREDIT<DTPOSTED>20250105120000<TRNAMT>1500.00<FITID>A1<NAME>ACME PAYROLL<MEMO>January</STMTTRN>\r\n\
<STMTTRN><TRNTYPE>DEBIT<DTPOSTED>20250110<TRNAMT>-45.20<FITID>A2<NAME>GROCER</STMTTRN>\r\n\
<STMTTRN><TRNTYPE>DEBIT<DTPOSTED>20250111<TRNAMT>-9.99<FITID>A3<NAME>STREAMING</STMTTRN>\r\n\
</BANKTRANLIST><LEDGERBAL><BALAMT>1444.81<DTASOF>20250131</LEDGERBAL></STMTRS></STMTTRNRS></BANKMSGSRSV1></OFX>\r\n";

fn import(s: &Srv, tok: &str, query: &str, body: &[u8]) -> common::Resp {
    let target = if query.is_empty() { "/import".to_string() } else { format!("/import?{query}") };
    s.raw(
        "POST",
        &target,
        &[("Authorization", &format!("Bearer {tok}"))],
        Body::Raw("application/octet-stream", body),
    )
}

#[test]
fn a_preview_shows_each_line_and_changes_nothing() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_preview", "0");
    let r = import(&s, &tok, "", OFX.as_bytes());
    r.ok();
    assert_eq!(r.json["format"], "ofx");
    assert_eq!(r.json["committed"], false);
    let lines = r.json["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["date"], "2025-01-05");
    assert_eq!(lines[0]["amount"], json!(1500));
    assert_eq!(lines[0]["payee"], "ACME PAYROLL");
    assert_eq!(lines[0]["memo"], "January");
    assert_eq!(lines[0]["bank_id"], "A1");
    assert_eq!(lines[0]["import_id"], "imp:000111222:A1");
    assert_eq!(lines[0]["action"], "deposit");
    // The withdrawals are possible after the salary came in, in file order.
    assert_eq!(lines[1]["action"], "withdraw");
    assert_eq!(lines[2]["action"], "withdraw");
    assert_eq!(r.json["summary"]["net_amount"], json!(1444.81));
    assert_eq!(s.balance(&tok, &main), "0");
}

#[test]
fn a_commit_applies_every_line_once_and_a_second_import_adds_nothing() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_commit", "0");
    let r = import(&s, &tok, "commit=true", OFX.as_bytes());
    r.ok();
    assert_eq!(r.json["committed"], true);
    assert_eq!(s.balance(&tok, &main), "1444.81");
    let t = s.get(&tok, "/get_transactions", &format!("uuid={main}"));
    let ids: Vec<String> = t.json["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["TransactionID"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["imp:000111222:A1", "imp:000111222:A2", "imp:000111222:A3"]);
    // Again, and after a restart: every line is a duplicate and nothing moves.
    let again = import(&s, &tok, "commit=true", OFX.as_bytes());
    again.ok();
    assert_eq!(again.json["summary"]["duplicate"], json!(3));
    let mut s = s;
    s.restart();
    let third = import(&s, &tok, "commit=true", OFX.as_bytes());
    assert_eq!(third.json["summary"]["duplicate"], json!(3), "{}", third.text);
    assert_eq!(s.balance(&tok, &main), "1444.81");
}

#[test]
fn a_withdrawal_without_the_money_needs_attention_and_is_left_out() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_short", "0");
    let debits_only = OFX.replace("<TRNAMT>1500.00", "<TRNAMT>10.00");
    let r = import(&s, &tok, "commit=true", debits_only.as_bytes());
    r.ok();
    let lines = r.json["lines"].as_array().unwrap();
    assert_eq!(lines[1]["action"], "needs_attention");
    assert_eq!(lines[1]["reason"], "not enough money in the account");
    assert_eq!(lines[2]["action"], "withdraw");
    assert_eq!(s.balance(&tok, &main), "0.01");
}

#[test]
fn lines_without_a_bank_id_get_one_from_amount_date_and_occurrence() {
    let s = Srv::start();
    let (tok, _) = s.user("imp_noid", "0");
    let twice = OFX
        .replace("<FITID>A2", "")
        .replace("<FITID>A3<NAME>STREAMING", "<NAME>GROCER")
        .replace("-9.99", "-45.20")
        .replace("20250111", "20250110");
    let r = import(&s, &tok, "", twice.as_bytes());
    r.ok();
    let lines = r.json["lines"].as_array().unwrap();
    assert_eq!(lines[1]["import_id"], "imp:000111222:-4520:2025-01-10:1");
    assert_eq!(lines[2]["import_id"], "imp:000111222:-4520:2025-01-10:2");
    assert_eq!(lines[2]["action"], "withdraw");
}

#[test]
fn hostile_files_are_a_400_naming_the_line_and_change_nothing() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_hostile", "5");
    let r = import(&s, &tok, "commit=true", b"\x00\x01\x02garbage\xff\xfe");
    assert_eq!(r.status, 400, "{}", r.text);
    let bad_date = OFX.replace("20250110", "20251345");
    let r = import(&s, &tok, "commit=true", bad_date.as_bytes());
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.err().contains("line ") && r.err().contains("20251345"), "{}", r.text);
    let huge = OFX.replace("-45.20", "-1234567890123456789012345678901234567890");
    let r = import(&s, &tok, "commit=true", huge.as_bytes());
    assert_eq!(r.status, 400, "{}", r.text);
    let r = import(&s, &tok, "format=pdf", OFX.as_bytes());
    r.fails(400, "Unknown format");
    let r = import(&s, &tok, "", b"");
    r.fails(400, "Not a bank statement");
    assert_eq!(s.balance(&tok, &main), "5");
}

#[test]
fn a_file_over_the_limit_is_a_413_and_an_unknown_account_a_404() {
    let s = Srv::start();
    let (tok, _) = s.user("imp_limits", "0");
    let big = vec![b' '; pfm::import::MAX_FILE_BYTES + 1];
    let r = import(&s, &tok, "", &big);
    assert_eq!(r.status, 413, "{}", r.text);
    let r = import(&s, &tok, "uuid=nope", OFX.as_bytes());
    r.fails(404, "Account not found");
}

fn transactions(s: &Srv, tok: &str, uuid: &str) -> Vec<serde_json::Value> {
    let t = s.get(tok, "/get_transactions", &format!("uuid={uuid}"));
    t.ok();
    t.json["transactions"].as_array().expect("transactions").clone()
}

/// A statement imported into an envelope (a card account's own envelope) lands there, and its
/// records carry payee, memo and import id; records made any other way read as before.
#[test]
fn an_import_into_an_envelope_applies_there_and_its_records_carry_payee_memo_and_import_id() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_child", "0");
    let card = s.child(&tok, &main, "Card", json!({"allocation": 1}));
    s.post(&tok, "/deposit", json!({"uuid": main, "amount": 20, "channel": "cash"})).ok();
    let r = import(&s, &tok, &format!("uuid={card}&commit=true"), OFX.as_bytes());
    r.ok();
    assert_eq!(r.json["uuid"], card.as_str());
    let lines = r.json["lines"].as_array().unwrap();
    assert_eq!(
        lines.iter().map(|l| l["action"].as_str().unwrap()).collect::<Vec<_>>(),
        ["deposit", "withdraw", "withdraw"]
    );
    assert!(
        lines.iter().all(|l| l["envelope"] == card.as_str() && l["envelope_name"] == "Card"),
        "{}",
        r.text
    );
    assert_eq!(s.balance(&tok, &card), "1464.81");
    let recs = transactions(&s, &tok, &card);
    let imported: Vec<_> = recs.iter().filter(|t| t.get("ImportID").is_some()).collect();
    assert_eq!(imported.len(), 3, "{recs:?}");
    assert_eq!(imported[0]["Payee"], "ACME PAYROLL");
    assert_eq!(imported[0]["Memo"], "January");
    assert_eq!(imported[0]["ImportID"], "imp:000111222:A1");
    assert_eq!(imported[0]["TransactionID"], "imp:000111222:A1");
    assert_eq!(imported[0]["Date"], "2025-01-05 00:00:00");
    assert_eq!(imported[1]["Payee"], "GROCER");
    assert_eq!(imported[1]["Memo"], serde_json::Value::Null);
    // The deposit made by hand (and main's records) carry no new field.
    let by_hand = recs.iter().find(|t| t.get("ImportID").is_none()).expect("the split of the deposit");
    assert!(by_hand.get("Payee").is_none() && by_hand.get("Memo").is_none(), "{by_hand}");
    assert!(transactions(&s, &tok, &main).iter().all(|t| t.get("Payee").is_none()));
    // Not twice, into this account or any other, after a restart too; the notes survive it.
    let mut s = s;
    s.restart();
    let again = import(&s, &tok, "commit=true", OFX.as_bytes());
    assert_eq!(again.json["summary"]["duplicate"], json!(3), "{}", again.text);
    assert_eq!(transactions(&s, &tok, &card)[1]["Payee"], "ACME PAYROLL");
    assert_eq!(s.balance(&tok, &card), "1464.81");
}

fn rule(s: &Srv, tok: &str, body: serde_json::Value) -> common::Resp {
    s.post(tok, "/add_import_rule", body)
}

/// Rules choose each line's envelope (first match wins), the preview names the rule, a line
/// the client assigns goes where it says, and what nothing chooses waits for a person.
#[test]
fn rules_and_the_clients_choices_pick_each_lines_envelope() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_rules", "0");
    let food = s.child(&tok, &main, "Food", json!({"allocation": 0.5}));
    let fun = s.child(&tok, &main, "Fun", json!({"allocation": 0.5}));
    let r1 =
        rule(&s, &tok, json!({"envelope": food, "field": "payee", "match": "contains", "value": "grocer"}));
    r1.ok();
    let food_rule = r1.json["rule"]["id"].as_i64().unwrap();
    // A second rule that would also match the groceries: the first one wins.
    rule(&s, &tok, json!({"envelope": fun, "value": "GROCER", "match": "equals"})).ok();
    let r = import(&s, &tok, "", OFX.as_bytes());
    r.ok();
    let lines = r.json["lines"].as_array().unwrap();
    assert_eq!(lines[0]["action"], "deposit");
    assert_eq!(lines[0]["envelope"], main.as_str());
    assert!(lines[0].get("rule").is_none());
    assert_eq!(lines[1]["action"], "withdraw");
    assert_eq!(lines[1]["envelope"], food.as_str());
    assert_eq!(lines[1]["rule"], json!(food_rule));
    assert_eq!(lines[2]["action"], "needs_attention");
    assert!(lines[2]["reason"].as_str().unwrap().starts_with("no envelope chosen"), "{}", r.text);
    // The person chooses Fun for the streaming line and commits.
    let id = lines[2]["import_id"].as_str().unwrap().to_string();
    let choice = common::pct(&json!({ id.clone(): fun }).to_string());
    let r = import(&s, &tok, &format!("commit=true&envelopes={choice}"), OFX.as_bytes());
    r.ok();
    let lines = r.json["lines"].as_array().unwrap();
    assert_eq!(lines[2]["action"], "withdraw");
    assert_eq!(lines[2]["envelope"], fun.as_str());
    assert_eq!(r.json["summary"]["withdraw"], json!(2));
    // 1500 split in halves, then each envelope pays its own line; nothing created or lost.
    assert_eq!(s.balance(&tok, &food), "704.8");
    assert_eq!(s.balance(&tok, &fun), "740.01");
    let total = s.get(&tok, "/compute_total_balance", &format!("uuid={main}"));
    assert_eq!(total.json["total_balance"], json!(1444.81), "{}", total.text);
    // A choice naming no line of the file, or no account, is refused and changes nothing.
    let bad = common::pct(&json!({"imp:000111222:A9": fun}).to_string());
    let r = import(
        &s,
        &tok,
        &format!("commit=true&envelopes={bad}"),
        OFX.replace("<FITID>A", "<FITID>Z").as_bytes(),
    );
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.err().contains("imp:000111222:A9 is not the import id of a line"), "{}", r.text);
    let bad = common::pct(&json!({ id.replace(":A", ":Z"): "accnope" }).to_string());
    let r = import(
        &s,
        &tok,
        &format!("commit=true&envelopes={bad}"),
        OFX.replace("<FITID>A", "<FITID>Z").as_bytes(),
    );
    assert!(r.status == 400 && r.err().contains("not found"), "{}", r.text);
    let r = import(&s, &tok, "envelopes=%5B1%5D", OFX.as_bytes());
    assert!(r.status == 400 && r.err().starts_with("Invalid envelopes"), "{}", r.text);
    assert_eq!(s.balance(&tok, &fun), "740.01");
}

#[test]
fn rules_are_listed_changed_reordered_deleted_and_kept_across_restarts() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_rule_crud", "0");
    let food = s.child(&tok, &main, "Food", json!({"allocation": 1}));
    let list = |s: &Srv| s.get(&tok, "/import_rules", "").json["rules"].as_array().unwrap().clone();
    assert!(list(&s).is_empty());
    let a = rule(&s, &tok, json!({"envelope": food, "value": "grocer"})).json["rule"]["id"].as_i64().unwrap();
    let b =
        rule(&s, &tok, json!({"envelope": food, "min_amount": 100, "max_amount": 200, "applies_to": "both"}));
    b.ok();
    assert_eq!(b.json["rule"]["field"], serde_json::Value::Null);
    assert_eq!(b.json["rule"]["min_amount"], json!(100));
    let b = b.json["rule"]["id"].as_i64().unwrap();
    let c = rule(
        &s,
        &tok,
        json!({"envelope": food, "value": "rent", "field": "memo", "match": "starts_with", "position": 1}),
    );
    let c = c.json["rule"]["id"].as_i64().unwrap();
    let ids = |v: &[serde_json::Value]| v.iter().map(|r| r["id"].as_i64().unwrap()).collect::<Vec<_>>();
    assert_eq!(ids(&list(&s)), [c, a, b]);
    let first = &list(&s)[0];
    assert_eq!(
        (first["field"].as_str(), first["match"].as_str(), first["value"].as_str()),
        (Some("memo"), Some("starts_with"), Some("rent"))
    );
    assert_eq!(first["envelope_name"], "Food");
    // Change: the parameters sent replace the rule's, the others stay.
    let u =
        s.post(&tok, "/update_import_rule", json!({"id": a, "match": "equals", "applies_to": "deposits"}));
    u.ok();
    assert_eq!(
        (u.json["rule"]["value"].as_str(), u.json["rule"]["match"].as_str()),
        (Some("grocer"), Some("equals"))
    );
    assert_eq!(u.json["rule"]["applies_to"], "deposits");
    let u = s.post(&tok, "/update_import_rule", json!({"id": b, "clear": "max_amount", "position": 1}));
    assert_eq!(u.json["rule"]["max_amount"], serde_json::Value::Null, "{}", u.text);
    assert_eq!(ids(&list(&s)), [b, c, a]);
    s.post(&tok, "/reorder_import_rules", json!({"ids": format!("{a},{b},{c}")})).ok();
    assert_eq!(ids(&list(&s)), [a, b, c]);
    // Refusals: each clear, and none changes anything.
    let fails = |path: &str, body: serde_json::Value, status: u16, msg: &str| {
        s.post(&tok, path, body).fails(status, msg);
    };
    fails(
        "/reorder_import_rules",
        json!({"ids": format!("{a},{b}")}),
        400,
        "ids must list every rule id exactly once",
    );
    fails(
        "/reorder_import_rules",
        json!({"ids": format!("{a},{b},{b}")}),
        400,
        "ids must list every rule id exactly once",
    );
    fails("/add_import_rule", json!({"value": "x"}), 400, "envelope is required");
    fails(
        "/add_import_rule",
        json!({"envelope": food}),
        400,
        "A rule needs a text to compare (value) or an amount bound (min_amount, max_amount)",
    );
    fails(
        "/add_import_rule",
        json!({"envelope": food, "value": "x", "match": "regex"}),
        400,
        "match must be equals, contains or starts_with",
    );
    fails(
        "/add_import_rule",
        json!({"envelope": food, "value": "x", "field": "name"}),
        400,
        "field must be payee, memo or payee_or_memo",
    );
    fails(
        "/add_import_rule",
        json!({"envelope": food, "value": "x", "applies_to": "all"}),
        400,
        "applies_to must be withdrawals, deposits or both",
    );
    fails(
        "/add_import_rule",
        json!({"envelope": food, "min_amount": 5, "max_amount": 1}),
        400,
        "min_amount is more than max_amount",
    );
    fails(
        "/add_import_rule",
        json!({"envelope": food, "min_amount": -5}),
        400,
        "min_amount must not be negative",
    );
    fails(
        "/add_import_rule",
        json!({"envelope": "accnope", "value": "x"}),
        404,
        "Envelope account not found",
    );
    fails("/add_import_rule", json!({"envelope": food, "value": "x".repeat(257)}), 400, "value is too long");
    fails("/update_import_rule", json!({"id": 999, "value": "x"}), 404, "Import rule not found");
    fails(
        "/update_import_rule",
        json!({"id": b, "clear": "min_amount"}),
        400,
        "A rule needs a text to compare (value) or an amount bound (min_amount, max_amount)",
    );
    fails(
        "/update_import_rule",
        json!({"id": b, "clear": "envelope"}),
        400,
        "clear lists value, min_amount or max_amount",
    );
    fails("/delete_import_rule", json!({"id": 999}), 404, "Import rule not found");
    fails("/delete_import_rule", json!({"id": "x"}), 400, "id must be a positive whole number");
    assert_eq!(ids(&list(&s)), [a, b, c]);
    let d = s.post(&tok, "/delete_import_rule", json!({"id": b}));
    d.ok();
    assert_eq!(d.json["deleted"], json!(b));
    let mut s = s;
    s.restart();
    let kept = s.get(&tok, "/import_rules", "").json["rules"].as_array().unwrap().clone();
    assert_eq!(ids(&kept), [a, c]);
    // A new rule never takes a deleted rule's id.
    let e = rule(&s, &tok, json!({"envelope": food, "value": "e"})).json["rule"]["id"].as_i64().unwrap();
    assert!(e > c && e > b, "{e}");
    // A rule whose envelope was deleted chooses nothing, and says so.
    s.post(&tok, "/reorder_import_rules", json!({"ids": format!("{e},{a},{c}")})).ok();
    let gone = s.child(&tok, &main, "Gone", json!({"allocation": 0}));
    s.post(&tok, "/update_import_rule", json!({"id": e, "envelope": gone, "value": "grocer"})).ok();
    let r = s.raw(
        "DELETE",
        "/delete",
        &[("Authorization", &format!("Bearer {tok}"))],
        Body::Json(json!({"uuid": gone})),
    );
    r.ok();
    let p = import(&s, &tok, "", OFX.as_bytes());
    let line = &p.json["lines"][1];
    assert_eq!(
        (line["action"].as_str(), line["reason"].as_str()),
        (Some("needs_attention"), Some("the rule's envelope no longer exists")),
        "{}",
        p.text
    );
    assert_eq!(line["rule"], json!(e));
}

#[test]
fn csv_mappings_saved_by_name_are_used_listed_and_deleted() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_mapping", "0");
    let csv = "Date,Payee,Amount\n2025-03-01,Shop,12.50\n2025-03-02,Cafe,-2.50\n";
    let mapping = json!({"date": {"name": "Date"}, "payee": {"name": "Payee"}, "amount": {"name": "Amount"}});
    let saved = s.post(&tok, "/save_csv_mapping", json!({"name": "My bank", "mapping": mapping.to_string()}));
    saved.ok();
    assert_eq!(saved.json["mapping"], mapping);
    let r = import(&s, &tok, "format=csv&mapping_name=My%20bank&commit=true", csv.as_bytes());
    r.ok();
    assert_eq!(s.balance(&tok, &main), "10");
    let mut s = s;
    s.restart();
    let list = s.get(&tok, "/csv_mappings", "");
    assert_eq!(list.json["mappings"], json!([{"name": "My bank", "mapping": mapping}]), "{}", list.text);
    import(&s, &tok, "format=csv&mapping_name=Other", csv.as_bytes()).fails(404, "CSV mapping not found");
    let bad = s.post(&tok, "/save_csv_mapping", json!({"name": "Broken", "mapping": "{\"amount\": 3}"}));
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(bad.err().starts_with("Invalid mapping"), "{}", bad.text);
    s.post(&tok, "/delete_csv_mapping", json!({"name": "My bank"})).ok();
    s.post(&tok, "/delete_csv_mapping", json!({"name": "My bank"})).fails(404, "CSV mapping not found");
    assert_eq!(s.get(&tok, "/csv_mappings", "").json["mappings"], json!([]));
}

/// A payment entered by hand, then found on the statement a few days later, is taken for the
/// same payment: matched, not applied again; and the next import knows it as a duplicate.
#[test]
fn a_line_matching_a_transaction_entered_by_hand_is_matched_not_applied_twice() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_match", "100");
    s.post(
        &tok,
        "/withdraw",
        json!({"uuid": main, "amount": 45.20, "channel": "card", "transaction_date": "2025-01-08"}),
    )
    .ok();
    // Same amount, but 5 days from the statement's date: not taken for it.
    s.post(
        &tok,
        "/withdraw",
        json!({"uuid": main, "amount": 9.99, "channel": "card", "transaction_date": "2025-01-05"}),
    )
    .ok();
    let hand = transactions(&s, &tok, &main)[0]["TransactionID"].as_str().unwrap().to_string();
    let r = import(&s, &tok, "commit=true", OFX.as_bytes());
    r.ok();
    let lines = r.json["lines"].as_array().unwrap();
    assert_eq!(lines[1]["action"], "matched", "{}", r.text);
    assert_eq!(lines[1]["matched"], hand.as_str());
    assert_eq!(lines[2]["action"], "withdraw");
    assert_eq!(r.json["summary"]["matched"], json!(1));
    // 100 - 45.20 - 9.99 by hand, then the salary and the streaming line: 1534.82.
    assert_eq!(s.balance(&tok, &main), "1534.82");
    let again = import(&s, &tok, "", OFX.as_bytes());
    assert_eq!(again.json["summary"]["duplicate"], json!(3), "{}", again.text);
}

#[test]
fn the_same_key_replays_an_import_and_a_different_file_is_a_422() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_idem", "0");
    let headers = [("Authorization", format!("Bearer {tok}")), ("Idempotency-Key", "import-1".to_string())];
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = s.raw("POST", "/import?commit=true", &h, Body::Raw("application/octet-stream", OFX.as_bytes()));
    a.ok();
    let b = s.raw("POST", "/import?commit=true", &h, Body::Raw("application/octet-stream", OFX.as_bytes()));
    assert_eq!(b.text, a.text);
    assert_eq!(b.header("idempotent-replayed"), Some("true"));
    let other = OFX.replace("A1", "B1");
    let c = s.raw("POST", "/import?commit=true", &h, Body::Raw("application/octet-stream", other.as_bytes()));
    assert_eq!(c.status, 422, "{}", c.text);
    assert_eq!(s.balance(&tok, &main), "1444.81");
}

/// A CSV export read through a mapping in the query: decimal comma, `;`, a preamble before the
/// header, a column by name and one by position.
#[test]
fn a_csv_statement_imports_through_its_mapping() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_csv", "0");
    let csv =
        "Konto;DE001\n\nBuchungstag;Text;Betrag\n03.02.2025;Gehalt;1.200,00\n04.02.2025;Miete;-700,50\n";
    let mapping = json!({"delimiter": ";", "header_first_cell": "Buchungstag", "date": {"name": "Buchungstag"},
        "date_format": "%d.%m.%Y", "amount": {"index": -1}, "payee": {"name": "Text"},
        "decimal_mark": ",", "thousands_separator": ".", "fixed_account": "DE001"});
    let q: String = format!("commit=true&format=csv&mapping={}", common::pct(&mapping.to_string()));
    let r = import(&s, &tok, &q, csv.as_bytes());
    r.ok();
    let lines = r.json["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["payee"], "Gehalt");
    assert_eq!(lines[1]["date"], "2025-02-04");
    assert_eq!(lines[1]["import_id"], "imp:DE001:-70050:2025-02-04:1");
    assert_eq!(s.balance(&tok, &main), "499.5");
    // Without a mapping, or with a broken one: a 400 and nothing changes.
    import(&s, &tok, "format=csv", csv.as_bytes()).fails(400, "a CSV file needs a mapping");
    let r = import(&s, &tok, "format=csv&mapping=%7B%22nope%22%3A1%7D", csv.as_bytes());
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.err().starts_with("Invalid mapping"), "{}", r.text);
    assert_eq!(s.balance(&tok, &main), "499.5");
}

/// An OFX statement of `n` credits of 1.00 with distinct ids, spread over a year.
fn big_ofx(n: usize) -> String {
    let mut s = String::from("OFXHEADER:100\nDATA:OFXSGML\nVERSION:102\n\n<OFX><BANKMSGSRSV1><STMTTRNRS><STMTRS><CURDEF>EUR<BANKACCTFROM><ACCTID>BIG</BANKACCTFROM><BANKTRANLIST>\n");
    for i in 0..n {
        s.push_str(&format!(
            "<STMTTRN><TRNTYPE>CREDIT<DTPOSTED>2025{:02}{:02}<TRNAMT>1.00<FITID>F{i}<NAME>P{}</STMTTRN>\n",
            1 + (i / 28) % 12,
            1 + i % 28,
            i % 50
        ));
    }
    s.push_str("</BANKTRANLIST></STMTRS></STMTTRNRS></BANKMSGSRSV1></OFX>\n");
    s
}

/// The largest file a commit takes is applied whole, as one operation, into a tree with
/// children (every credit flows down); one line more is refused and changes nothing.
#[test]
fn the_largest_import_commits_whole_and_one_line_more_is_refused() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_big", "0");
    s.child(&tok, &main, "Needs", json!({"allocation": 0.6}));
    s.child(&tok, &main, "Wants", json!({"allocation": 0.4}));
    let n = pfm::import::MAX_LINES;
    let r = import(&s, &tok, "commit=true", big_ofx(n).as_bytes());
    r.ok();
    assert_eq!(r.json["summary"]["deposit"], json!(n));
    let total = s.get(&tok, "/compute_total_balance", &format!("uuid={main}"));
    assert_eq!(total.json["total_balance"], json!(n));
    let r = import(&s, &tok, "commit=true", big_ofx(n + 1).as_bytes());
    assert_eq!(r.status, 400, "{}", &r.text[..r.text.len().min(300)]);
    let total = s.get(&tok, "/compute_total_balance", &format!("uuid={main}"));
    assert_eq!(total.json["total_balance"], json!(n));
}

/// Every real statement of `../shared/statements` but the CSVs (which need their bank's mapping,
/// tested with the reader) previews over HTTP with the figures independent parsers read.
#[test]
fn every_real_statement_previews_with_the_manifests_figures() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/statements");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("MANIFEST.json")).expect("manifest"))
            .expect("json");
    let s = Srv::start();
    let (tok, _) = s.user("imp_corpus", "0");
    let mut seen = 0;
    for e in manifest.as_array().unwrap().iter().filter(|e| e["format"] != "csv") {
        let file = e["file"].as_str().unwrap();
        let r = import(&s, &tok, "", &std::fs::read(dir.join(file)).expect("file"));
        assert_eq!(r.status, 200, "{file}: {}", r.text);
        let lines = r.json["lines"].as_array().unwrap();
        assert_eq!(lines.len() as u64, e["transactions"].as_u64().unwrap(), "{file}");
        if let Some(sum) = e["sum_amount"].as_str() {
            let cents: i64 =
                lines.iter().map(|l| (l["amount"].as_f64().unwrap() * 100.0).round() as i64).sum();
            let want = (sum.parse::<f64>().unwrap() * 100.0).round() as i64;
            assert_eq!(cents, want, "{file}");
        }
        seen += 1;
    }
    assert_eq!(seen, 15);
}

/// An import's answer too large to keep with its key is not kept: a retry with the same key runs
/// again and finds every line a duplicate, so nothing is applied twice.
#[test]
fn a_large_import_retried_with_its_key_applies_nothing_twice() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_idem_big", "0");
    let headers = [("Authorization", format!("Bearer {tok}")), ("Idempotency-Key", "big-1".to_string())];
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let body = big_ofx(2000);
    let a = s.raw("POST", "/import?commit=true", &h, Body::Raw("application/octet-stream", body.as_bytes()));
    a.ok();
    assert_eq!(a.json["summary"]["deposit"], json!(2000));
    let b = s.raw("POST", "/import?commit=true", &h, Body::Raw("application/octet-stream", body.as_bytes()));
    b.ok();
    assert_eq!(b.header("idempotent-replayed"), None);
    assert_eq!(b.json["summary"]["duplicate"], json!(2000));
    assert_eq!(s.balance(&tok, &main), "2000");
}

/// Delta sync sees a committed import like any write: one change, every imported record.
#[test]
fn delta_sync_lists_what_an_import_committed() {
    let s = Srv::start();
    let (tok, _) = s.user("imp_sync", "0");
    let before = s.get(&tok, "/changes", "");
    before.ok();
    let known = before.json["server_knowledge"].as_i64().unwrap();
    import(&s, &tok, "commit=true", OFX.as_bytes()).ok();
    let after = s.get(&tok, "/changes", &format!("since={known}"));
    after.ok();
    let ids: Vec<&str> = after.json["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["TransactionID"].as_str())
        .collect();
    assert_eq!(ids, ["imp:000111222:A1", "imp:000111222:A2", "imp:000111222:A3"], "{}", after.text);
    // The same file again commits nothing, so sync has nothing new.
    let now = after.json["server_knowledge"].as_i64().unwrap();
    import(&s, &tok, "commit=true", OFX.as_bytes()).ok();
    let again = s.get(&tok, "/changes", &format!("since={now}"));
    assert_eq!(again.json["transactions"], json!([]), "{}", again.text);
}
