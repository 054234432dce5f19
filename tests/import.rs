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
fn a_file_over_the_limit_is_a_413_and_a_child_cannot_be_committed_to() {
    let s = Srv::start();
    let (tok, main) = s.user("imp_limits", "0");
    let big = vec![b' '; pfm::import::MAX_FILE_BYTES + 1];
    let r = import(&s, &tok, "", &big);
    assert_eq!(r.status, 413, "{}", r.text);
    let child = s.child(&tok, &main, "Bills", json!({"allocation": 0.5}));
    let r = import(&s, &tok, &format!("uuid={child}&commit=true"), OFX.as_bytes());
    r.fails(400, "Only the main account can be committed to");
    let r = import(&s, &tok, "uuid=nope", OFX.as_bytes());
    r.fails(404, "Account not found");
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
    let q: String = format!("commit=true&format=csv&mapping={}", pct(&mapping.to_string()));
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

fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
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
