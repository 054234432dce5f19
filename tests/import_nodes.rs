//! POST /import on several stateless nodes sharing one PostgreSQL database (docs/import.md,
//! "Never twice"): the same statement sent to two nodes at the same moment is applied once, the
//! other request answers 200 with every line a duplicate or a clear 409, and an overlapping
//! statement adds only its new lines. Real pfm processes on a fresh database of the server named
//! by `PFM_TEST_DATABASE_URL` (`.ci/postgres.sh` starts one; without it these tests print a note
//! and return).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::sync::Barrier;
use std::time::Instant;

use common::proc::{self, Proc as Node};
use common::{cents, Resp};
use pfm::domain::dates::{days_from_civil, fmt_day};
use serde_json::{json, Value};

/// What the user holds before any import, so that no debit of a statement ever lacks the money
/// whichever of two racing imports comes first.
const INITIAL_CENTS: i64 = 100_000;

/// The real binary on `db`; the nodes share the token secret the first one kept in the database.
fn node(db: &str) -> Node {
    proc::spawn(&std::env::temp_dir(), &["--database-url", db], &[])
}

/// Registers `user` on `reg` with [`INITIAL_CENTS`] and logs in on `login`: (token, main uuid).
fn user(reg: &Node, login: &Node, user: &str) -> (String, String) {
    let (st, v) = proc::request(
        reg.addr,
        "POST",
        "/register",
        None,
        json!({"user_id": user, "password": "secret123", "initial_balance": INITIAL_CENTS / 100}),
    );
    assert_eq!(st, 200, "{v}");
    let main = v["uuid"].as_str().expect("uuid").to_string();
    (proc::login(login.addr, user, "secret123"), main)
}

// ---------------------------------------------------------------------------------- statements

/// Line `i` (1-based) of every test statement: its day and signed cents. Every fifth line is a
/// debit; the line after each line `10k + 3` repeats its amount and day, so a statement without
/// bank ids has lines told apart only by their occurrence. No such pair straddles line 200 or
/// 300, where the overlapping statements start and end.
fn line(i: usize) -> (String, i64) {
    let k = if i % 10 == 4 { i - 1 } else { i };
    let cents = if k % 5 == 0 { -(50 + (k % 7) as i64) } else { 100 + k as i64 };
    (fmt_day(days_from_civil(2024, 1, 1) + (k / 3) as i64), cents)
}

/// `cents` as a statement writes it: `-1.05`.
fn decimal(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents.unsigned_abs() / 100, cents.unsigned_abs() % 100)
}

/// An OFX 1.x statement of bank account `acct` holding `lines`, each with its FITID `F<i>`.
fn ofx(acct: &str, lines: RangeInclusive<usize>) -> String {
    let mut s = format!(
        "OFXHEADER:100\r\nDATA:OFXSGML\r\nVERSION:102\r\nSECURITY:NONE\r\nENCODING:USASCII\r\nCHARSET:1252\r\n\r\n\
         <OFX><BANKMSGSRSV1><STMTTRNRS><TRNUID>1<STMTRS><CURDEF>EUR\r\n\
         <BANKACCTFROM><BANKID>1<ACCTID>{acct}<ACCTTYPE>CHECKING</BANKACCTFROM>\r\n<BANKTRANLIST>\r\n"
    );
    for i in lines {
        let (day, cents) = line(i);
        let kind = if cents < 0 { "DEBIT" } else { "CREDIT" };
        s.push_str(&format!(
            "<STMTTRN><TRNTYPE>{kind}<DTPOSTED>{}<TRNAMT>{}<FITID>F{i}<NAME>Payee {}</STMTTRN>\r\n",
            day.replace('-', ""),
            decimal(cents),
            i % 40
        ));
    }
    s.push_str("</BANKTRANLIST></STMTRS></STMTTRNRS></BANKMSGSRSV1></OFX>\r\n");
    s
}

/// A CSV export holding `lines`, without any bank id: `Date;Text;Amount` with decimal commas.
fn csv(lines: RangeInclusive<usize>) -> String {
    let mut s = String::from("Date;Text;Amount\n");
    for i in lines {
        let (day, cents) = line(i);
        s.push_str(&format!("{day};\"Shop {}; branch\";{}\n", i % 40, decimal(cents).replace('.', ",")));
    }
    s
}

/// The query of a CSV import whose lines are filed under bank account `acct`.
fn csv_query(acct: &str) -> String {
    let mapping = json!({"delimiter": ";", "date": {"name": "Date"}, "amount": {"name": "Amount"},
        "payee": {"name": "Text"}, "decimal_mark": ",", "fixed_account": acct});
    format!("format=csv&mapping={}", common::pct(&mapping.to_string()))
}

/// One statement file and what applying it once must leave: the import id of each of its lines.
#[derive(Clone)]
struct Statement {
    /// `format=...` and the mapping, if any.
    query: String,
    body: String,
    /// Line number in the statement's numbering -> the import id it must get.
    ids: BTreeMap<usize, String>,
}

impl Statement {
    fn ofx(acct: &str, lines: RangeInclusive<usize>) -> Statement {
        let ids = lines.clone().map(|i| (i, format!("imp:{acct}:F{i}"))).collect();
        Statement { query: "format=ofx".into(), body: ofx(acct, lines), ids }
    }

    /// Lines without bank ids get `imp:<account>:<cents>:<day>:<n>`, `n` counting the lines
    /// of one amount and day in the file.
    fn csv(acct: &str, lines: RangeInclusive<usize>) -> Statement {
        let mut seen: BTreeMap<(String, i64), u32> = BTreeMap::new();
        let ids = lines
            .clone()
            .map(|i| {
                let (day, cents) = line(i);
                let n = seen.entry((day.clone(), cents)).or_insert(0);
                *n += 1;
                (i, format!("imp:{acct}:{cents}:{day}:{n}"))
            })
            .collect();
        Statement { query: csv_query(acct), body: csv(lines), ids }
    }

    fn len(&self) -> usize {
        self.ids.len()
    }
}

/// Both kinds of statement of bank account `acct` over `lines`.
fn both_kinds(acct: &str, lines: RangeInclusive<usize>) -> [Statement; 2] {
    [Statement::ofx(&format!("{acct}-ofx"), lines.clone()), Statement::csv(&format!("{acct}-csv"), lines)]
}

// ----------------------------------------------------------------------------------- requests

/// POST /import of `st` (`commit`: applied, else a preview); panics when no answer comes.
fn import(n: &Node, tok: &str, st: &Statement, commit: bool) -> Resp {
    let path = format!("/import?{}&commit={commit}", st.query);
    proc::send(n.addr, "POST", &path, Some(tok), &[], &st.body)
        .unwrap_or_else(|e| panic!("POST /import on {}: {e}", n.addr))
}

/// Asserts an answer is a 200 or the 409 of a race lost to another node, never anything else;
/// true for a 200.
#[track_caller]
fn ok_or_lost_race(r: &Resp) -> bool {
    match r.status {
        200 => {
            assert_eq!(r.json["success"], json!(true), "{}", r.text);
            true
        }
        409 => {
            let msg = r.json["error"].as_str().unwrap_or_default();
            assert!(
                msg.contains("imported at the same time by another request") && msg.contains("import again"),
                "a 409 says what happened and what to do: {}",
                r.text
            );
            false
        }
        other => panic!("an import answered {other}: {}", r.text),
    }
}

/// The count of `action` in an import's summary.
fn count(r: &Resp, action: &str) -> u64 {
    r.json["summary"][action].as_u64().unwrap_or_else(|| panic!("no summary.{action}: {}", r.text))
}

/// Lines an answer applied (deposits and withdrawals).
fn applied(r: &Resp) -> u64 {
    count(r, "deposit") + count(r, "withdraw")
}

/// Asserts an answer applied nothing and shows every one of the statement's lines as a
/// duplicate, with the import id it was recorded under.
#[track_caller]
fn all_duplicates(r: &Resp, st: &Statement) {
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(count(r, "duplicate"), st.len() as u64, "{}", summary(r));
    assert_eq!(applied(r), 0, "{}", summary(r));
    let ids: BTreeSet<&str> =
        r.json["lines"].as_array().expect("lines").iter().filter_map(|l| l["import_id"].as_str()).collect();
    let want: BTreeSet<&str> = st.ids.values().map(String::as_str).collect();
    assert_eq!(ids, want);
}

fn summary(r: &Resp) -> String {
    r.json["summary"].to_string()
}

/// The main account's balance in cents, and the import ids in its log in log order.
fn main_state(n: &Node, tok: &str, main: &str) -> (i64, Vec<String>) {
    let (st, b) = proc::request(n.addr, "GET", &format!("/get_balance?uuid={main}"), Some(tok), Value::Null);
    assert_eq!(st, 200, "{b}");
    let (st, t) =
        proc::request(n.addr, "GET", &format!("/get_transactions?uuid={main}"), Some(tok), Value::Null);
    assert_eq!(st, 200, "{t}");
    let ids = t["transactions"]
        .as_array()
        .expect("transactions")
        .iter()
        .filter_map(|x| x["TransactionID"].as_str())
        .filter(|id| id.starts_with("imp:"))
        .map(str::to_string)
        .collect();
    (cents(&b["balance"]), ids)
}

/// Asserts what both nodes show is every line of `applied` once and nothing else: the main
/// account's balance is the initial one plus each line's amount once, and its log holds each
/// line's import id exactly once.
#[track_caller]
fn applied_once(nodes: [&Node; 2], tok: &str, main: &str, applied: &[(Statement, RangeInclusive<usize>)]) {
    let mut want_ids = BTreeSet::new();
    let mut want_cents = INITIAL_CENTS;
    for (st, lines) in applied {
        for i in lines.clone() {
            assert!(want_ids.insert(st.ids[&i].clone()), "the test applies line {i} twice");
            want_cents += line(i).1;
        }
    }
    for n in nodes {
        let (balance, ids) = main_state(n, tok, main);
        let distinct: BTreeSet<String> = ids.iter().cloned().collect();
        assert_eq!(distinct.len(), ids.len(), "a transaction id twice in the main account's log");
        let missing: Vec<_> = want_ids.difference(&distinct).take(5).collect();
        let extra: Vec<_> = distinct.difference(&want_ids).take(5).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "missing {missing:?}, not in any statement {extra:?}"
        );
        assert_eq!(balance, want_cents, "the balance of one application of every line");
    }
}

/// `sts` sent to the two nodes at the same moment (a barrier, then one request each): the
/// answers in node order, and whether the two requests were in flight together.
fn at_once(a: &Node, b: &Node, tok: &str, sts: [&Statement; 2]) -> ([Resp; 2], bool) {
    let barrier = Barrier::new(2);
    let timed = |n: &Node, st: &Statement| {
        barrier.wait();
        let sent = Instant::now();
        let r = import(n, tok, st, true);
        (r, sent, Instant::now())
    };
    let [(ra, sa, ea), (rb, sb, eb)] = std::thread::scope(|s| {
        let (ha, hb) = (s.spawn(|| timed(a, sts[0])), s.spawn(|| timed(b, sts[1])));
        [ha.join().expect("thread"), hb.join().expect("thread")]
    });
    ([ra, rb], sa.max(sb) < ea.min(eb))
}

// -------------------------------------------------------------------------------------- tests

#[test]
fn the_same_statement_sent_to_two_nodes_at_once_is_applied_exactly_once() {
    let Some(db) =
        common::pg_database("the_same_statement_sent_to_two_nodes_at_once_is_applied_exactly_once")
    else {
        return;
    };
    let (a, b) = (node(&db), node(&db));
    let (tok, main) = user(&a, &b, "twin_import");
    let nodes = [&a, &b];
    let mut done: Vec<(Statement, RangeInclusive<usize>)> = Vec::new();
    let (mut races_lost, mut duplicates_seen) = (0, 0);
    for round in 0..6 {
        for st in both_kinds(&format!("R{round}"), 1..=300) {
            let (answers, together) = at_once(&a, &b, &tok, [&st, &st]);
            assert!(together, "round {round}: the two imports were not in flight together");
            let oks: Vec<bool> = answers.iter().map(ok_or_lost_race).collect();
            // Exactly one request applied the lines, every applicable one of them; the other
            // found them all there, or lost the race and says so.
            let appliers: Vec<&Resp> = answers.iter().filter(|r| r.status == 200 && applied(r) > 0).collect();
            assert_eq!(appliers.len(), 1, "round {round}: {:?}", answers.map(|r| summary(&r)));
            assert_eq!(applied(appliers[0]), st.len() as u64, "{}", summary(appliers[0]));
            assert_eq!(appliers[0].json["committed"], json!(true));
            for (i, r) in answers.iter().enumerate() {
                if r.status == 200 && applied(r) == 0 {
                    all_duplicates(r, &st);
                    duplicates_seen += 1;
                }
                if !oks[i] {
                    // Retried, the loser finds every line there.
                    races_lost += 1;
                    all_duplicates(&import(nodes[i], &tok, &st, true), &st);
                }
            }
            done.push((st.clone(), 1..=300));
            applied_once(nodes, &tok, &main, &done);
            // A third import on either node, and a preview on the other, show every line as a
            // duplicate and change nothing.
            let (third, other) = (nodes[round % 2], nodes[(round + 1) % 2]);
            all_duplicates(&import(third, &tok, &st, true), &st);
            let preview = import(other, &tok, &st, false);
            all_duplicates(&preview, &st);
            assert_eq!(preview.json["committed"], json!(false));
            applied_once(nodes, &tok, &main, &done);
        }
    }
    eprintln!(
        "12 races: {races_lost} answered 409, {duplicates_seen} answered 200 with every line a duplicate"
    );
}

#[test]
fn a_statement_imported_on_one_node_is_all_duplicates_in_a_preview_on_the_other_at_once() {
    let Some(db) = common::pg_database(
        "a_statement_imported_on_one_node_is_all_duplicates_in_a_preview_on_the_other_at_once",
    ) else {
        return;
    };
    let (a, b) = (node(&db), node(&db));
    let (tok, main) = user(&a, &b, "import_then_preview");
    let nodes = [&a, &b];
    let mut done = Vec::new();
    for k in 0..4 {
        for st in both_kinds(&format!("P{k}"), 1..=250) {
            let (writer, reader) = (nodes[k % 2], nodes[(k + 1) % 2]);
            // Before the import, the other node's preview would apply every line.
            let before = import(reader, &tok, &st, false);
            assert_eq!(before.status, 200, "{}", before.text);
            assert_eq!(applied(&before), st.len() as u64, "{}", summary(&before));
            let r = import(writer, &tok, &st, true);
            assert_eq!(r.status, 200, "{}", r.text);
            assert_eq!(applied(&r), st.len() as u64, "{}", summary(&r));
            // The very next request, on the other node.
            all_duplicates(&import(reader, &tok, &st, false), &st);
            all_duplicates(&import(reader, &tok, &st, true), &st);
            done.push((st, 1..=250));
            applied_once(nodes, &tok, &main, &done);
        }
    }
}

#[test]
fn an_overlapping_statement_adds_only_its_new_lines_on_either_node() {
    let Some(db) = common::pg_database("an_overlapping_statement_adds_only_its_new_lines_on_either_node")
    else {
        return;
    };
    let (a, b) = (node(&db), node(&db));
    let (tok, main) = user(&a, &b, "overlap");
    let nodes = [&a, &b];
    let mut done = Vec::new();
    // One after the other: lines 1..300 on one node, then 200..500 on the other.
    for (first, second) in both_kinds("O", 1..=300).into_iter().zip(both_kinds("O", 200..=500)) {
        let r = import(&a, &tok, &first, true);
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(applied(&r), 300, "{}", summary(&r));
        let r = import(&b, &tok, &second, true);
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!((applied(&r), count(&r, "duplicate")), (200, 101), "{}", summary(&r));
        for l in r.json["lines"].as_array().expect("lines") {
            let id = l["import_id"].as_str().expect("import id");
            let i = second.ids.iter().find(|(_, v)| v.as_str() == id).map(|(i, _)| *i).expect("a line's id");
            let want = if i <= 300 {
                "duplicate"
            } else if line(i).1 < 0 {
                "withdraw"
            } else {
                "deposit"
            };
            assert_eq!(l["action"], want, "line {i}: {l}");
        }
        done.push((first, 1..=300));
        done.push((second.clone(), 301..=500));
        applied_once(nodes, &tok, &main, &done);
        // The whole range again: nothing new.
        let whole = if second.query == "format=ofx" {
            Statement::ofx("O-ofx", 1..=500)
        } else {
            Statement::csv("O-csv", 1..=500)
        };
        all_duplicates(&import(&a, &tok, &whole, true), &whole);
    }
    // At the same moment: lines 1..300 on one node and 200..500 on the other, several rounds.
    // Whichever commits first, the other adds only the lines it lacks (or loses the race and,
    // retried, adds them then).
    for round in 0..4 {
        let acct = format!("OO{round}");
        for (low, high) in both_kinds(&acct, 1..=300).into_iter().zip(both_kinds(&acct, 200..=500)) {
            let (answers, together) = at_once(&a, &b, &tok, [&low, &high]);
            assert!(together, "round {round}: the two imports were not in flight together");
            for (i, r) in answers.iter().enumerate() {
                if !ok_or_lost_race(r) {
                    let st = [&low, &high][i];
                    let retried = import(nodes[i], &tok, st, true);
                    assert_eq!(retried.status, 200, "{}", retried.text);
                }
            }
            let applied_total: u64 = answers.iter().filter(|r| r.status == 200).map(applied).sum();
            assert!(applied_total <= 500, "round {round}: {:?}", answers.map(|r| summary(&r)));
            done.push((low.clone(), 1..=300));
            done.push((high.clone(), 301..=500));
            applied_once(nodes, &tok, &main, &done);
            let whole = if low.query == "format=ofx" {
                Statement::ofx(&format!("{acct}-ofx"), 1..=500)
            } else {
                Statement::csv(&format!("{acct}-csv"), 1..=500)
            };
            all_duplicates(&import(nodes[round % 2], &tok, &whole, false), &whole);
        }
    }
}
