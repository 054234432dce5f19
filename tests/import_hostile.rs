//! Hostile statement files over HTTP (docs/import.md, "Limits and hostile files"): binary
//! garbage, truncated XML, entity bombs, deep nesting, impossible dates, 40-digit amounts, CSV
//! rows wider than their header, files over the size and line limits. Each gets a clear 400
//! naming the line (a 413 for the size), changes nothing in the account, and is answered within
//! a bound; in every format where the case applies (OFX 1, OFX 2, CAMT.053, MT940, CSV).
//! A zero amount, also written `-0.00`, is no error: the line needs attention.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Resp, Srv};
use pfm::import::{MAX_FILE_BYTES, MAX_LINES};
use serde_json::{json, Value};

/// Longest wait for the answer to a small hostile file.
const BOUND: Duration = Duration::from_secs(2);
/// Longest wait for the answer to a file at the size or line limit: a debug build reads such a
/// file ten times slower than a release build (which reads 20,000 CAMT lines in 0.14 s).
const LARGE_BOUND: Duration = Duration::from_secs(if cfg!(debug_assertions) { 30 } else { 2 });
/// Most memory the test process (client and server) may have used at its peak: an entity bomb
/// that expanded, or a stack of 100,000 open elements, would be far beyond it.
const PEAK_MEMORY_MIB: u64 = 1024;
/// Longest wait for any answer before the test fails as hung.
const HUNG: Duration = Duration::from_secs(120);

// -------------------------------------------------------------------------------------- formats

/// A statement format and how a test statement is written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fmt {
    /// OFX 1.x: SGML, data elements without end tags.
    Ofx1,
    /// OFX 2.x: XML.
    Ofx2,
    Camt,
    Mt940,
    Csv,
}

const ALL: [Fmt; 5] = [Fmt::Ofx1, Fmt::Ofx2, Fmt::Camt, Fmt::Mt940, Fmt::Csv];

/// One transaction line as a test writes it: a date (not checked: `2025-13-45` is written as
/// such), a decimal amount with an optional `-` (a debit), and the bank's id.
#[derive(Clone, Copy)]
struct Item<'a> {
    date: (u32, u32, u32),
    amount: &'a str,
    id: &'a str,
}

const fn item<'a>(date: (u32, u32, u32), amount: &'a str, id: &'a str) -> Item<'a> {
    Item { date, amount, id }
}

/// Two good lines before the line under test, one after: the message must name the line under
/// test, not the first or the last.
const BEFORE: [Item<'static>; 2] = [item((2025, 1, 5), "100.00", "G1"), item((2025, 1, 6), "-20.00", "G2")];
const AFTER: Item<'static> = item((2025, 1, 8), "3.50", "G4");

impl Fmt {
    fn name(self) -> &'static str {
        match self {
            Fmt::Ofx1 => "OFX 1",
            Fmt::Ofx2 => "OFX 2",
            Fmt::Camt => "CAMT.053",
            Fmt::Mt940 => "MT940",
            Fmt::Csv => "CSV",
        }
    }

    /// The bank account of the format's statements (so the formats' import ids never meet).
    fn account(self) -> &'static str {
        match self {
            Fmt::Ofx1 => "100200300",
            Fmt::Ofx2 => "400500600",
            Fmt::Camt => "NL01BANK0123456789",
            Fmt::Mt940 => "NL02BANK9876543210",
            Fmt::Csv => "CSV-1",
        }
    }

    /// The query naming the format (and for CSV, its mapping).
    fn query(self) -> String {
        match self {
            Fmt::Ofx1 | Fmt::Ofx2 => "format=ofx".into(),
            Fmt::Camt => "format=camt053".into(),
            Fmt::Mt940 => "format=mt940".into(),
            Fmt::Csv => format!("format=csv&mapping={}", common::pct(&csv_mapping().to_string())),
        }
    }

    /// Everything before the first transaction line.
    fn head(self) -> String {
        match self {
            Fmt::Ofx1 => format!(
                "OFXHEADER:100\r\nDATA:OFXSGML\r\nVERSION:102\r\nSECURITY:NONE\r\nENCODING:USASCII\r\n\
                 CHARSET:1252\r\nCOMPRESSION:NONE\r\nOLDFILEUID:NONE\r\nNEWFILEUID:NONE\r\n\r\n\
                 <OFX><SIGNONMSGSRSV1><SONRS><STATUS><CODE>0<SEVERITY>INFO</STATUS><DTSERVER>20250131\
                 </SONRS></SIGNONMSGSRSV1>\r\n<BANKMSGSRSV1><STMTTRNRS><TRNUID>1<STATUS><CODE>0\
                 <SEVERITY>INFO</STATUS>\r\n<STMTRS><CURDEF>EUR\r\n<BANKACCTFROM><BANKID>1<ACCTID>{}\
                 <ACCTTYPE>CHECKING</BANKACCTFROM>\r\n<BANKTRANLIST><DTSTART>20250101<DTEND>20250131\r\n",
                self.account()
            ),
            Fmt::Ofx2 => format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n\
                 <?OFX OFXHEADER=\"200\" VERSION=\"220\" SECURITY=\"NONE\" OLDFILEUID=\"NONE\" NEWFILEUID=\"NONE\"?>\n\
                 <OFX>\n<SIGNONMSGSRSV1><SONRS><STATUS><CODE>0</CODE><SEVERITY>INFO</SEVERITY></STATUS>\
                 <DTSERVER>20250131</DTSERVER><LANGUAGE>ENG</LANGUAGE></SONRS></SIGNONMSGSRSV1>\n\
                 <BANKMSGSRSV1>\n<STMTTRNRS>\n<TRNUID>1</TRNUID>\n\
                 <STATUS><CODE>0</CODE><SEVERITY>INFO</SEVERITY></STATUS>\n<STMTRS>\n<CURDEF>EUR</CURDEF>\n\
                 <BANKACCTFROM><BANKID>1</BANKID><ACCTID>{}</ACCTID><ACCTTYPE>CHECKING</ACCTTYPE></BANKACCTFROM>\n\
                 <BANKTRANLIST>\n<DTSTART>20250101</DTSTART>\n<DTEND>20250131</DTEND>\n",
                self.account()
            ),
            Fmt::Camt => format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
                 <Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.053.001.02\">\n<BkToCstmrStmt>\n\
                 <GrpHdr><MsgId>M1</MsgId><CreDtTm>2025-01-31T00:00:00</CreDtTm></GrpHdr>\n<Stmt>\n<Id>S1</Id>\n\
                 <Acct><Id><IBAN>{}</IBAN></Id><Ccy>EUR</Ccy></Acct>\n",
                self.account()
            ),
            Fmt::Mt940 => format!(":20:STMT1\n:25:{}\n:28C:1/1\n:60F:C250101EUR0,00\n", self.account()),
            Fmt::Csv => "Date,Amount,Id,Payee\n".into(),
        }
    }

    /// Everything after the last transaction line.
    fn tail(self) -> &'static str {
        match self {
            Fmt::Ofx1 => {
                "</BANKTRANLIST><LEDGERBAL><BALAMT>0<DTASOF>20250131</LEDGERBAL></STMTRS>\
                          </STMTTRNRS></BANKMSGSRSV1></OFX>\r\n"
            }
            Fmt::Ofx2 => {
                "</BANKTRANLIST>\n<LEDGERBAL><BALAMT>0</BALAMT><DTASOF>20250131</DTASOF></LEDGERBAL>\n\
                          </STMTRS>\n</STMTTRNRS>\n</BANKMSGSRSV1>\n</OFX>\n"
            }
            Fmt::Camt => "</Stmt>\n</BkToCstmrStmt>\n</Document>\n",
            Fmt::Mt940 => ":62F:C250131EUR0,00\n-\n",
            Fmt::Csv => "",
        }
    }

    /// One transaction line (one line of text, ending with its line break).
    fn line(self, it: &Item) -> String {
        let (y, m, d) = it.date;
        let debit = it.amount.starts_with('-');
        let unsigned = it.amount.trim_start_matches('-');
        match self {
            Fmt::Ofx1 => format!(
                "<STMTTRN><TRNTYPE>{}<DTPOSTED>{y:04}{m:02}{d:02}<TRNAMT>{}<FITID>{}<NAME>Payee {}</STMTTRN>\r\n",
                if debit { "DEBIT" } else { "CREDIT" },
                it.amount,
                it.id,
                it.id
            ),
            Fmt::Ofx2 => format!(
                "<STMTTRN><TRNTYPE>{}</TRNTYPE><DTPOSTED>{y:04}{m:02}{d:02}</DTPOSTED><TRNAMT>{}</TRNAMT>\
                 <FITID>{}</FITID><NAME>Payee {}</NAME></STMTTRN>\n",
                if debit { "DEBIT" } else { "CREDIT" },
                it.amount,
                it.id,
                it.id
            ),
            Fmt::Camt => format!(
                "<Ntry><Amt Ccy=\"EUR\">{unsigned}</Amt><CdtDbtInd>{}</CdtDbtInd><Sts>BOOK</Sts>\
                 <BookgDt><Dt>{y:04}-{m:02}-{d:02}</Dt></BookgDt><AcctSvcrRef>{}</AcctSvcrRef></Ntry>\n",
                if debit { "DBIT" } else { "CRDT" },
                it.id
            ),
            Fmt::Mt940 => {
                let mut amount = unsigned.replace('.', ",");
                if !amount.contains(',') {
                    amount.push(',');
                }
                format!(
                    ":61:{:02}{m:02}{d:02}{}{amount}NTRFNONREF//{}\n:86:Payee of the line\n",
                    y % 100,
                    if debit { "D" } else { "C" },
                    it.id
                )
            }
            Fmt::Csv => format!("{y:04}-{m:02}-{d:02},{},{},Payee {}\n", it.amount, it.id, it.id),
        }
    }

    /// A statement of `items`.
    fn file(self, items: &[Item]) -> String {
        let mut s = self.head();
        for it in items {
            s.push_str(&self.line(it));
        }
        s.push_str(self.tail());
        s
    }

    /// The good lines around `it`.
    fn around(self, it: Item) -> String {
        self.file(&[BEFORE[0], BEFORE[1], it, AFTER])
    }

    /// How the date of `it` is written in this format, as a message quotes it.
    fn date_text(self, it: &Item) -> String {
        let (y, m, d) = it.date;
        match self {
            Fmt::Ofx1 | Fmt::Ofx2 => format!("{y:04}{m:02}{d:02}"),
            Fmt::Mt940 => format!("{:02}{m:02}{d:02}", y % 100),
            Fmt::Camt | Fmt::Csv => format!("{y:04}-{m:02}-{d:02}"),
        }
    }
}

fn csv_mapping() -> Value {
    json!({"date": {"name": "Date"}, "amount": {"name": "Amount"}, "id": {"name": "Id"},
        "payee": {"name": "Payee"}, "fixed_account": Fmt::Csv.account()})
}

/// The 1-based line of the one line of `text` that holds `needle`.
#[track_caller]
fn line_of(text: &str, needle: &str) -> usize {
    let found: Vec<usize> =
        text.split('\n').enumerate().filter(|(_, l)| l.contains(needle)).map(|(i, _)| i + 1).collect();
    assert_eq!(found.len(), 1, "`{needle}` on lines {found:?}");
    found[0]
}

// ------------------------------------------------------------------------------------- requests

/// A user whose tree and logs already hold something: a child account the main account's
/// deposits flow into, and a committed statement.
struct Account {
    tok: String,
    main: String,
    child: String,
    /// What the account shows before any hostile file (see [`Account::state`]).
    before: Value,
}

impl Account {
    fn new(s: &Srv, user: &str) -> Account {
        let (tok, main) = s.user(user, "1000");
        let child = s.child(&tok, &main, "Needs", json!({"allocation": 0.5}));
        let mut a = Account { tok, main, child, before: Value::Null };
        // Under a bank account of its own: the formats' statements below are all new.
        let setup = Fmt::Ofx1.around(item((2025, 1, 7), "-1.25", "G3")).replace(Fmt::Ofx1.account(), "SETUP");
        let (r, _) = send(s, &a.tok, "commit=true", setup.as_bytes());
        r.ok();
        a.before = a.state(s);
        a
    }

    /// Balances, the total, and both accounts' transaction lists.
    fn state(&self, s: &Srv) -> Value {
        let total = s.get(&self.tok, "/compute_total_balance", &format!("uuid={}", self.main));
        total.ok();
        json!({
            "main": s.balance(&self.tok, &self.main),
            "child": s.balance(&self.tok, &self.child),
            "total": total.json["total_balance"],
            "main_log": s.txs(&self.tok, &self.main),
            "child_log": s.txs(&self.tok, &self.child),
        })
    }

    #[track_caller]
    fn unchanged(&self, s: &Srv) {
        assert_eq!(self.state(s), self.before, "a refused file changed the account");
    }
}

/// POST /import?`query` with `body`, on a connection of its own that gives up after [`HUNG`]:
/// the answer and how long it took.
fn send(s: &Srv, tok: &str, query: &str, body: &[u8]) -> (Resp, Duration) {
    let head = format!(
        "POST /import?{query} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nAuthorization: Bearer {tok}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let started = Instant::now();
    let mut c = TcpStream::connect(s.addr()).expect("connect");
    c.set_read_timeout(Some(HUNG)).expect("timeout");
    c.set_write_timeout(Some(HUNG)).expect("timeout");
    c.write_all(head.as_bytes()).expect("write");
    // A server that refuses a body before reading it whole may close the connection meanwhile.
    let _ = c.write_all(body);
    let mut out = Vec::new();
    if let Err(e) = c.read_to_end(&mut out) {
        panic!("no answer after {:?}: {e}", started.elapsed());
    }
    let took = started.elapsed();
    let (head, text) = common::split_answer(&out).unwrap_or_else(|| panic!("a cut answer: {out:?}"));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|c| c.parse().ok()).expect("status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    (Resp { status, headers, text, json }, took)
}

/// Asserts `msg` reads as a sentence for a person: short, printable, no program internals.
#[track_caller]
fn clear(msg: &str) {
    assert!(!msg.trim().is_empty() && msg.chars().count() <= 300, "length: {msg:?}");
    assert!(!msg.chars().any(|c| c.is_control() || c == '\u{fffd}'), "unprintable: {msg:?}");
    for internal in ["Error(", "Err(", "Some(", "None", "panicked", "unwrap", "{ ", "\\u"] {
        assert!(!msg.contains(internal), "program internals ({internal}): {msg:?}");
    }
}

/// Sends a file for commit and asserts a 400 `line <line>: ...` that contains `says` and is
/// clear, answered within `bound`, leaving the account as it was. Returns the message.
#[track_caller]
fn refused(
    s: &Srv,
    a: &Account,
    query: &str,
    body: &[u8],
    line: usize,
    says: &str,
    bound: Duration,
) -> String {
    let (r, took) = send(s, &a.tok, &format!("commit=true&{query}"), body);
    let msg = r.json["error"].as_str().unwrap_or_default().to_string();
    assert_eq!(r.status, 400, "{}", &r.text[..r.text.len().min(500)]);
    assert_eq!(r.json["success"], json!(false));
    let prefix = format!("line {line}: ");
    assert!(msg.starts_with(&prefix), "want `{prefix}...`: {msg:?}");
    assert!(msg.contains(says), "want `{says}` in {msg:?}");
    clear(&msg);
    assert!(took < bound, "answered after {took:?}: {msg}");
    a.unchanged(s);
    eprintln!("{took:>12.3?}  {msg}");
    msg
}

/// Peak resident memory of this process (the server runs in it), in MiB.
fn peak_memory_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    kib / 1024
}

#[track_caller]
fn memory_stayed_bounded() {
    let peak = peak_memory_mib();
    assert!(peak < PEAK_MEMORY_MIB, "the process peaked at {peak} MiB");
}

/// `n` bytes of binary garbage (a fixed seed): every byte value, NULs and line breaks among them.
fn garbage(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = b"\x00\x01\x02\xff\xfe\x89PNG".to_vec();
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(n);
    out
}

// ---------------------------------------------------------------------------------------- tests

#[test]
fn binary_garbage_is_refused_naming_the_line_in_every_format() {
    let s = Srv::start();
    let a = Account::new(&s, "hostile_garbage");
    let junk = garbage(4096);
    for f in ALL {
        // The whole file garbage, its format named: the first line is where it goes wrong.
        refused(&s, &a, &f.query(), &junk, 1, "", BOUND);
    }
    // Garbage in the middle of a statement: named by its line, the format read from the head.
    for f in [Fmt::Ofx1, Fmt::Ofx2, Fmt::Camt, Fmt::Mt940] {
        let mut body = f.head().into_bytes();
        body.extend_from_slice(f.line(&BEFORE[0]).as_bytes());
        let at = body.iter().filter(|b| **b == b'\n').count() + 1;
        body.extend_from_slice(b"\x00\x01\x02 binary \xff\xfe\x1b[0m\n");
        body.extend_from_slice(f.line(&AFTER).as_bytes());
        body.extend_from_slice(f.tail().as_bytes());
        let what = match f {
            Fmt::Mt940 => "is not MT940",
            Fmt::Camt => "is not XML",
            _ => "not an OFX file",
        };
        refused(&s, &a, "", &body, at, what, BOUND);
    }
    // Garbage in no format at all: not a statement (there is no line to name). Without a NUL
    // byte it may be text in a single-byte charset, which only a CSV mapping could read.
    let (r, took) = send(&s, &a.tok, "commit=true", &junk);
    r.fails(400, "Not a bank statement");
    assert!(took < BOUND);
    let no_nul: Vec<u8> = junk.iter().map(|b| b.max(&1)).copied().collect();
    let (r, took) = send(&s, &a.tok, "commit=true", &no_nul);
    r.fails(400, "a CSV file needs a mapping");
    assert!(took < BOUND);
    a.unchanged(&s);
}

#[test]
fn truncated_xml_is_refused_naming_a_line_wherever_it_is_cut() {
    let s = Srv::start();
    let a = Account::new(&s, "hostile_truncated");
    let it = item((2025, 1, 7), "-1.25", "T3");
    for f in [Fmt::Ofx2, Fmt::Camt, Fmt::Ofx1] {
        let full = f.around(it);
        // From the first transaction line to the end of the statement: for OFX its `</STMTRS>`
        // (what follows it holds no transaction); for CAMT the document's last `>`.
        let from = f.head().len();
        let to = match f {
            Fmt::Camt => full.trim_end().len() - 1,
            _ => full.find("</STMTRS>").expect("</STMTRS>") + "</STMTRS>".len() - 1,
        };
        let mut worst = Duration::ZERO;
        for cut in from..=to {
            let body = &full.as_bytes()[..cut];
            let (r, took) = send(&s, &a.tok, &format!("commit=true&{}", f.query()), body);
            let msg = r.json["error"].as_str().unwrap_or_default();
            assert_eq!(r.status, 400, "{} cut at {cut} of {}: {}", f.name(), full.len(), r.text);
            let lines = body.iter().filter(|b| **b == b'\n').count() + 1;
            let named =
                msg.strip_prefix("line ").and_then(|m| m.split_once(": ")).and_then(|(n, _)| n.parse().ok());
            assert!(
                named.is_some_and(|n: usize| (1..=lines).contains(&n)),
                "{} cut at {cut}: {msg:?}",
                f.name()
            );
            clear(msg);
            worst = worst.max(took);
        }
        assert!(worst < BOUND, "{}: {worst:?}", f.name());
        a.unchanged(&s);
        // A file cut inside its last transaction, its format read from the content.
        let cut = full.find("G4").expect("G4");
        let want = line_of(&full, "G4");
        let says = if f == Fmt::Camt { "truncated" } else { "not closed" };
        refused(&s, &a, "", &full.as_bytes()[..cut], want, says, BOUND);
        eprintln!("{}: {} cuts refused, the slowest in {worst:?}", f.name(), to - from + 1);
    }
}

/// The billion laughs: ten entities, each ten of the one before.
fn laughs(root: &str) -> String {
    let mut dtd = String::from("<!DOCTYPE lolz [\n<!ENTITY lol \"lol\">\n");
    for i in 1..=10 {
        let prev = if i == 1 { "lol".to_string() } else { format!("lol{}", i - 1) };
        dtd += &format!("<!ENTITY lol{i} \"{}\">\n", format!("&{prev};").repeat(10));
    }
    dtd + &format!("]>\n<{root}>&lol10;</{root}>\n")
}

/// A CAMT statement using an entity no DOCTYPE defines.
fn undefined_entity() -> String {
    Fmt::Camt.around(item((2025, 1, 7), "1.00", "E3")).replace(
        "<AcctSvcrRef>E3</AcctSvcrRef>",
        "<AcctSvcrRef>E3</AcctSvcrRef><AddtlNtryInf>&lol9;</AddtlNtryInf>",
    )
}

#[test]
fn an_entity_bomb_is_refused_before_anything_expands() {
    let s = Srv::start();
    let a = Account::new(&s, "hostile_bomb");
    let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    // One big entity used many times: the quadratic blowup.
    let quadratic = |root: &str| {
        format!(
            "<!DOCTYPE q [<!ENTITY a \"{}\">]>\n<{root}>{}</{root}>\n",
            "x".repeat(64 << 10),
            "&a;".repeat(50_000)
        )
    };
    let external = |root: &str| {
        format!("<!DOCTYPE d [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>\n<{root}>&x;</{root}>\n")
    };
    let bombs: [fn(&str) -> String; 3] = [laughs, quadratic, external];
    for make in bombs {
        // CAMT: the DOCTYPE is refused at its line, whatever it defines.
        let camt = format!("{xml}{}", make("Document"))
            .replace("<Document>", "<Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.053.001.02\">");
        refused(&s, &a, &Fmt::Camt.query(), camt.as_bytes(), 2, "DOCTYPE", BOUND);
        // OFX 2 and OFX 1: any `<!` declaration is refused at its line.
        let ofx2 = format!("{xml}<?OFX OFXHEADER=\"200\" VERSION=\"220\"?>\n{}", make("OFX"));
        refused(&s, &a, "format=ofx", ofx2.as_bytes(), 3, "declaration", BOUND);
        let ofx1 = format!("OFXHEADER:100\nDATA:OFXSGML\nVERSION:102\n\n{}", make("OFX"));
        refused(&s, &a, "format=ofx", ofx1.as_bytes(), 5, "declaration", BOUND);
    }
    // Without a DOCTYPE, an entity is not defined: CAMT refuses it at its line, OFX keeps the
    // text as written (`AT&T`), never looking anything up.
    let (r, took) = send(&s, &a.tok, "commit=true", undefined_entity().as_bytes());
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.err().starts_with(&format!("line {}: ", line_of(&undefined_entity(), "E3"))), "{}", r.text);
    assert!(r.err().contains("entity `lol9`") && took < BOUND, "{}", r.text);
    for f in [Fmt::Ofx1, Fmt::Ofx2] {
        let body = f.around(item((2025, 1, 7), "1.00", "&lol9;"));
        let (r, took) = send(&s, &a.tok, "", body.as_bytes());
        r.ok();
        assert!(took < BOUND);
        assert_eq!(r.json["lines"][2]["bank_id"], "&lol9;", "{}", r.text);
    }
    a.unchanged(&s);
    memory_stayed_bounded();
}

#[test]
fn tags_nested_100000_deep_are_refused_at_the_depth_limit() {
    let s = Srv::start();
    let a = Account::new(&s, "hostile_nesting");
    let depth = 100_000;
    for (f, tag) in [(Fmt::Ofx1, "A"), (Fmt::Ofx2, "A"), (Fmt::Camt, "a")] {
        // Inside the line under test, one tag a line, then every end tag.
        let deep = format!("{}{}", format!("<{tag}>\n").repeat(depth), format!("</{tag}>").repeat(depth));
        let full = f.around(item((2025, 1, 7), "1.00", "N3"));
        let body = match f {
            Fmt::Camt => full.replace("<AcctSvcrRef>N3", &format!("{deep}<AcctSvcrRef>N3")),
            _ => full.replace("<FITID>N3", &format!("{deep}<FITID>N3")),
        };
        let first = line_of(&full, "N3");
        let (r, took) = send(&s, &a.tok, "commit=true", body.as_bytes());
        let msg = r.json["error"].as_str().unwrap_or_default().to_string();
        assert_eq!(r.status, 400, "{}: {}", f.name(), r.text);
        // Refused at the limit (64 open elements), not after reading 100,000 of them.
        let n: usize = msg
            .strip_prefix("line ")
            .and_then(|m| m.split_once(": "))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or_else(|| panic!("no line: {msg:?}"));
        assert!((first..first + 64).contains(&n), "{}: line {n}, the first tag on {first}: {msg}", f.name());
        assert!(msg.contains("nested") && msg.contains("64"), "{msg}");
        clear(&msg);
        assert!(took < BOUND, "{}: {took:?}", f.name());
        eprintln!("{took:>12.3?}  {msg}");
    }
    a.unchanged(&s);
    memory_stayed_bounded();
}

#[test]
fn impossible_dates_are_refused_naming_the_line_and_the_date() {
    let s = Srv::start();
    let a = Account::new(&s, "hostile_dates");
    for date in [(2025, 13, 45), (2025, 2, 29), (2025, 4, 31), (2025, 0, 10), (2025, 12, 0)] {
        for f in ALL {
            let it = item(date, "1.00", "D3");
            let body = f.around(it);
            let says = format!("`{}` is not a date", f.date_text(&it));
            refused(&s, &a, &f.query(), body.as_bytes(), line_of(&body, "D3"), &says, BOUND);
        }
    }
    // A CSV date format without separators reads `20251345` as month 13.
    let mapping = csv_mapping().as_object().cloned().map(|mut m| {
        m.insert("date_format".into(), json!("%Y%m%d"));
        Value::Object(m)
    });
    let q = format!("format=csv&mapping={}", common::pct(&mapping.expect("a mapping").to_string()));
    let body = "Date,Amount,Id,Payee\n20250105,1.00,G1,P\n20251345,1.00,D3,P\n";
    refused(&s, &a, &q, body.as_bytes(), 3, "`20251345` is not a date", BOUND);
}

#[test]
fn forty_digit_amounts_are_refused_naming_the_line() {
    let s = Srv::start();
    let a = Account::new(&s, "hostile_amounts");
    let forty = "1234567890123456789012345678901234567890";
    let cases = [
        (forty.to_string(), "is too large"),
        (format!("-{forty}"), "is too large"),
        (format!("{}.99", &forty[..38]), "is too large"),
        // Digits past the cents would need rounding: refused, never rounded.
        (format!("0.{}", &forty[..38]), "more than 2 decimals"),
        ("1.005".to_string(), "more than 2 decimals"),
    ];
    for (amount, says) in &cases {
        for f in ALL {
            let body = f.around(item((2025, 1, 7), amount, "M3"));
            refused(&s, &a, &f.query(), body.as_bytes(), line_of(&body, "M3"), says, BOUND);
        }
    }
}

/// Cents of a JSON money number (`182.25`, `12`, `0.5`).
fn cents(v: &Value) -> i64 {
    let t = v.to_string();
    let (whole, frac) = t.split_once('.').unwrap_or((&t, ""));
    assert!(!whole.starts_with('-') && frac.len() <= 2, "not a balance in cents: {t}");
    whole.parse::<i64>().expect("whole") * 100 + format!("{frac:0<2}").parse::<i64>().expect("cents")
}

/// A zero amount, `-0.00` too, is no error: the line needs attention, the others are applied,
/// and it is not recorded (a later import shows it again). CAMT writes amounts unsigned: its
/// zero is a `0.00` debit or credit, and `-0.00` is no amount at all. The account has no child
/// accounts, so the debits are withdrawn from it.
#[test]
fn negative_zero_is_a_zero_line_that_needs_attention_and_moves_no_money() {
    let s = Srv::start();
    let (tok, main) = s.user("hostile_zero", "1000");
    let total = || {
        let t = s.get(&tok, "/compute_total_balance", &format!("uuid={main}"));
        t.ok();
        cents(&t.json["total_balance"])
    };
    let before = total();
    assert_eq!(before, 100_000);
    let mut applied = 0;
    // (format, amount, whether the file's other lines are new)
    let cases = [
        (Fmt::Ofx1, "-0.00", true),
        (Fmt::Ofx2, "-0.00", true),
        // A zero debit: `D0,00`, and for CAMT `0.00` with `DBIT`.
        (Fmt::Mt940, "-0.00", true),
        (Fmt::Camt, "-0.00", true),
        (Fmt::Csv, "-0.00", true),
        (Fmt::Csv, "-0", false),
        (Fmt::Csv, "0.00", false),
    ];
    for (f, zero, new) in cases {
        let body = f.around(item((2025, 1, 7), zero, "Z3"));
        let q = format!("commit=true&{}", f.query());
        let (r, took) = send(&s, &tok, &q, body.as_bytes());
        assert!(took < BOUND, "{took:?}");
        r.ok();
        let lines = r.json["lines"].as_array().expect("lines");
        let z = &lines[2];
        assert_eq!(z["action"], "needs_attention", "{} {zero}: {z}", f.name());
        assert_eq!(z["reason"], "the amount is zero", "{z}");
        assert_eq!(z["amount"], json!(0), "{z}");
        assert_eq!(z["line"], json!(line_of(&body, "Z3")), "{z}");
        let actions: Vec<&Value> = lines.iter().map(|l| &l["action"]).collect();
        if new {
            assert_eq!(actions, ["deposit", "withdraw", "needs_attention", "deposit"], "{}", r.text);
            applied += 10_000 - 2_000 + 350;
        } else {
            assert_eq!(actions, ["duplicate", "duplicate", "needs_attention", "duplicate"], "{}", r.text);
        }
        assert_eq!(r.json["summary"]["needs_attention"], json!(1));
        assert_eq!(total(), before + applied, "{} {zero}", f.name());
        // The zero line is not recorded: the same file again shows it again, and nothing moves.
        let again = send(&s, &tok, &q, body.as_bytes()).0;
        again.ok();
        assert_eq!(again.json["lines"][2]["action"], "needs_attention", "{}", again.text);
        assert_eq!(total(), before + applied);
        let ids: Vec<String> =
            s.txs(&tok, &main).iter().filter_map(|t| t["TransactionID"].as_str().map(String::from)).collect();
        assert!(!ids.iter().any(|i| i.contains("Z3")), "a zero line was recorded: {ids:?}");
    }
    assert_eq!(applied, 5 * 8_350);
    // A signed CAMT amount is refused, zero or not.
    let a = Account::new(&s, "hostile_zero_camt");
    let body = Fmt::Camt.around(item((2025, 1, 7), "1.00", "Z3")).replace(">1.00<", ">-0.00<");
    refused(&s, &a, "", body.as_bytes(), line_of(&body, "Z3"), "`-0.00` is not an amount", BOUND);
}

#[test]
fn csv_rows_with_more_fields_than_the_header_are_refused_naming_the_row() {
    let s = Srv::start();
    let a = Account::new(&s, "hostile_wide_rows");
    let q = Fmt::Csv.query();
    let body =
        "Date,Amount,Id,Payee\n2025-01-05,1.00,W1,P\n2025-01-06,2.00,W2,P,extra\n2025-01-07,3.00,W3,P\n";
    refused(&s, &a, &q, body.as_bytes(), 3, "the row has 5 fields, more than the header's 4", BOUND);
    // Lines before the header, CRLF, a quoted delimiter (one field), a quoted line break and a
    // blank line: the row is still named by its line in the file.
    let mapping = csv_mapping().as_object().cloned().map(|mut m| {
        m.insert("header_first_cell".into(), json!("Date"));
        Value::Object(m)
    });
    let q = format!("format=csv&mapping={}", common::pct(&mapping.expect("a mapping").to_string()));
    let body = "Bank export\r\nAccount,X\r\n\r\nDate,Amount,Id,Payee\r\n2025-01-05,1.00,W1,\"Shop, Inc\"\r\n\
                2025-01-06,2.00,W2,\"two\r\nlines\"\r\n\r\n2025-01-07,3.00,W3,P,,\r\n";
    refused(&s, &a, &q, body.as_bytes(), 9, "the row has 6 fields, more than the header's 4", BOUND);
    // A row too short for a column the mapping reads is refused too.
    let body = "Date,Amount,Id,Payee\n2025-01-05,1.00,W1,P\n2025-01-06\n";
    refused(&s, &a, &Fmt::Csv.query(), body.as_bytes(), 3, "the row has no amount column (1 field)", BOUND);
}

#[test]
fn a_file_one_byte_over_8_mib_is_a_413_in_every_format_and_one_at_the_limit_is_read() {
    let s = Srv::start();
    let a = Account::new(&s, "hostile_size");
    for f in ALL {
        let mut body = f.around(item((2025, 1, 7), "1.00", "B3")).into_bytes();
        body.resize(MAX_FILE_BYTES + 1, b'\n');
        let (r, took) = send(&s, &a.tok, &format!("commit=true&{}", f.query()), &body);
        assert_eq!(r.status, 413, "{}: {}", f.name(), r.text);
        let msg = r.json["error"].as_str().unwrap_or_default();
        assert!(msg.contains("too large"), "{msg:?}");
        clear(msg);
        assert!(took < LARGE_BOUND, "{}: {took:?}", f.name());
        a.unchanged(&s);
        eprintln!("{}: {took:>12.3?}  413 {msg}", f.name());
    }
    // At the limit exactly, a file is read (a preview: nothing changes either).
    for f in ALL {
        let mut body = f.around(item((2025, 1, 7), "1.00", "B3")).into_bytes();
        body.resize(MAX_FILE_BYTES, b'\n');
        let (r, took) = send(&s, &a.tok, &f.query(), &body);
        r.ok();
        assert_eq!(r.json["summary"]["lines"], json!(4), "{}: {}", f.name(), r.json["summary"]);
        assert!(took < LARGE_BOUND, "{}: {took:?}", f.name());
        eprintln!("{}: {took:>12.3?}  8 MiB read", f.name());
    }
    a.unchanged(&s);
}

#[test]
fn twenty_thousand_and_one_lines_are_refused_naming_the_line_past_the_limit() {
    let s = Srv::start();
    let a = Account::new(&s, "hostile_lines");
    let ids: Vec<String> = (1..=MAX_LINES + 1).map(|i| format!("L{i:06}")).collect();
    let items: Vec<Item> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            item((2024 + (i / 336 % 2) as u32, 1 + (i / 28 % 12) as u32, 1 + (i % 28) as u32), "1.00", id)
        })
        .collect();
    for f in ALL {
        let body = f.file(&items);
        let past = line_of(&body, &ids[MAX_LINES]);
        let says = format!("the file has more than {MAX_LINES} transaction lines");
        refused(&s, &a, &f.query(), body.as_bytes(), past, &says, LARGE_BOUND);
        // One line fewer is a statement: a preview reads every line. Not on PostgreSQL, where
        // each line's duplicate check is a query of its own: 20,000 round trips, up to 30 s a
        // file in a loaded debug run, and the readers' limit is the same on every engine.
        if common::pg_admin_url().is_some() {
            continue;
        }
        let body = f.file(&items[..MAX_LINES]);
        let (r, took) = send(&s, &a.tok, &f.query(), body.as_bytes());
        r.ok();
        assert_eq!(r.json["summary"]["lines"], json!(MAX_LINES), "{}", f.name());
        assert!(took < LARGE_BOUND, "{}: {took:?}", f.name());
        eprintln!("{}: {took:>12.3?}  {MAX_LINES} lines previewed", f.name());
    }
    a.unchanged(&s);
}

/// A CAMT root element with 40,000 attributes (390 KB) is answered within the bound: the root's
/// attributes are read in linear time. quick-xml's own duplicate check compares each attribute
/// with every one before it; reading the namespace through it took 33 s for these in a debug
/// build (3.5 s in release), and 8 MiB holds 20 times as many attributes, 400 times the time.
#[test]
fn a_camt_root_with_many_attributes_is_answered_within_the_bound() {
    let s = Srv::start();
    let a = Account::new(&s, "hostile_attributes");
    let attrs: String = (0..40_000).map(|i| format!(" a{i}=\"\"")).collect();
    let body = Fmt::Camt.around(item((2025, 1, 7), "1.00", "A3")).replacen(
        "<Document ",
        &format!("<Document{attrs} "),
        1,
    );
    let (r, took) = send(&s, &a.tok, "commit=true&format=camt053", body.as_bytes());
    assert!(r.status == 200 || r.status == 400, "{}", r.text);
    assert!(took < BOUND, "{} bytes answered after {took:?}", body.len());
    eprintln!("{} bytes answered {} in {took:?}", body.len(), r.status);
}

/// Messages a person can read: a value quoted from a file shows no control characters (a CSV
/// field or an OFX value of binary data: NULs, an escape sequence), and an XML reader's error
/// says what is wrong without the reader's byte ranges.
#[test]
fn messages_about_binary_data_and_unknown_entities_are_clear() {
    let s = Srv::start();
    let a = Account::new(&s, "hostile_clarity");
    let mut csv = Fmt::Csv.head().into_bytes();
    csv.extend_from_slice(Fmt::Csv.line(&BEFORE[0]).as_bytes());
    csv.extend_from_slice(b"2025-01-06,\x00\x01\x02\xff\xfe,G2,Payee\n");
    let ofx = Fmt::Ofx1
        .around(item((2025, 1, 7), "1.00", "C3"))
        .replace("<TRNAMT>1.00", "<TRNAMT>1.00\x01\x1b[31m");
    let entity = undefined_entity();
    let cases = [
        (Fmt::Csv.query(), csv, 3),
        ("format=ofx".to_string(), ofx.clone().into_bytes(), line_of(&ofx, "C3")),
        (String::new(), entity.clone().into_bytes(), line_of(&entity, "E3")),
    ];
    let mut unclear = Vec::new();
    for (query, body, line) in cases {
        let (r, took) = send(&s, &a.tok, &format!("commit=true&{query}"), &body);
        assert_eq!(r.status, 400, "{}", r.text);
        let msg = r.err();
        assert!(msg.starts_with(&format!("line {line}: ")) && took < BOUND, "{msg:?}");
        if msg.chars().any(|c| c.is_control() || c == '\u{fffd}') || msg.contains("..") {
            unclear.push(msg);
        }
    }
    a.unchanged(&s);
    assert!(unclear.is_empty(), "{unclear:#?}");
}
