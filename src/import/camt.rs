//! CAMT.053 (ISO 20022 bank-to-customer statement), versions .001.02 to .001.08: one
//! [`Statement`] per account and currency, several `<Stmt>` of one account merged, one [`Line`]
//! per booked `<Ntry>`.
//!
//! quick-xml reads the file as a stream and never expands DTD entities; a DOCTYPE is refused
//! outright, so an entity bomb is a few bytes and an error, and an unknown `&name;` is an error.

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use super::text::{self, shown};
use super::{ImportError, Line, Statement, Statements, MAX_LINES};

/// Deepest element nesting read. The deepest path the schemas define is about 15 elements
/// (Document/BkToCstmrStmt/Stmt/Ntry/NtryDtls/TxDtls/RmtInf/Strd/CdtrRefInf/Tp/CdOrPrtry/Cd);
/// 64 leaves room for a bank's `SplmtryData` envelope, and refusing deeper keeps a hostile
/// file's stack of open elements small.
pub const MAX_DEPTH: usize = 64;

/// The message versions read. The fields used here are the same in all of them, except that
/// the later ones nest `Sts` (`<Sts><Cd>BOOK</Cd></Sts>`) and the parties' names
/// (`Cdtr/Pty/Nm`); both forms are read whatever the version.
const VERSIONS: std::ops::RangeInclusive<u32> = 2..=8;

const ISO_NS: &str = "urn:iso:std:iso:20022:tech:xsd:";

pub fn read(bytes: &[u8]) -> Result<Vec<Statement>, ImportError> {
    super::check_size(bytes)?;
    let xml = text::decode(bytes, declared_encoding(bytes).as_deref());
    check_chars(&xml)?;
    let start = xml.len() - xml.trim_start().len();
    if !xml[start..].starts_with('<') {
        let line = line_of(&xml, start);
        return Err(ImportError::at(line, "not XML: a CAMT.053 file starts with `<`"));
    }
    Parser::new(&xml).run()
}

/// The `encoding` of the XML declaration, if the file opens with one (ASCII-compatible
/// charsets only: a UTF-16 file is not read).
fn declared_encoding(bytes: &[u8]) -> Option<String> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let head = &bytes[..bytes.len().min(256)];
    if !head.starts_with(b"<?xml") {
        return None;
    }
    let decl = &head[..head.windows(2).position(|w| w == b"?>")?];
    let at = decl.windows(8).position(|w| w == b"encoding")? + 8;
    let rest = std::str::from_utf8(&decl[at..]).ok()?.trim_start().strip_prefix('=')?.trim_start();
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let value = &rest[1..];
    Some(value[..value.find(quote)?].to_string())
}

/// XML 1.0 allows no control characters but tab and line ends: any other is binary data, named
/// by its line before the XML reader sees it.
fn check_chars(xml: &str) -> Result<(), ImportError> {
    match xml.bytes().position(|b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r')) {
        Some(pos) => Err(ImportError::at(line_of(xml, pos), "binary data (a control character) is not XML")),
        None => Ok(()),
    }
}

fn line_of(text: &str, pos: usize) -> usize {
    1 + memchr::memchr_iter(b'\n', &text.as_bytes()[..pos.min(text.len())]).count()
}

/// 1-based lines of byte offsets, counted on from the last offset asked (the reader only moves
/// forward), so naming every entry's line costs one pass over the file.
struct LineOf<'a> {
    text: &'a [u8],
    pos: usize,
    line: usize,
}

impl LineOf<'_> {
    fn at(&mut self, pos: usize) -> usize {
        let pos = pos.min(self.text.len());
        if pos < self.pos {
            (self.pos, self.line) = (0, 1);
        }
        self.line += memchr::memchr_iter(b'\n', &self.text[self.pos..pos]).count();
        self.pos = pos;
        self.line
    }
}

/// A value and the line of its element, read when the entry ends.
type At = Option<(String, usize)>;

/// What one `<Ntry>` says, as written.
#[derive(Default)]
struct Entry {
    line: usize,
    amount: At,
    currency: Option<String>,
    credit_debit: At,
    status: Option<String>,
    booked: At,
    valued: At,
    acct_svcr_ref: Option<String>,
    ntry_ref: Option<String>,
    creditor: Option<String>,
    debtor: Option<String>,
    unstructured: Vec<String>,
    creditor_ref: Option<String>,
    tx_info: Option<String>,
    entry_info: Option<String>,
}

/// What one `<Stmt>` says: its account and its lines with their currencies.
#[derive(Default)]
struct Stmt {
    iban: Option<String>,
    other_id: Option<String>,
    currency: Option<String>,
    lines: Vec<(Line, Option<String>)>,
}

struct Parser<'a> {
    reader: Reader<&'a [u8]>,
    lines: LineOf<'a>,
    /// Local names of the open elements, and the line each opened on.
    stack: Vec<(String, usize)>,
    text: String,
    statement_seen: bool,
    stmt_at: Option<usize>,
    stmt: Stmt,
    ntry_at: Option<usize>,
    ntry: Entry,
    out: Statements,
    count: usize,
}

impl<'a> Parser<'a> {
    fn new(xml: &'a str) -> Parser<'a> {
        let mut reader = Reader::from_str(xml);
        reader.config_mut().expand_empty_elements = true;
        Parser {
            reader,
            lines: LineOf { text: xml.as_bytes(), pos: 0, line: 1 },
            stack: Vec::new(),
            text: String::new(),
            statement_seen: false,
            stmt_at: None,
            stmt: Stmt::default(),
            ntry_at: None,
            ntry: Entry::default(),
            out: Statements::default(),
            count: 0,
        }
    }

    fn run(mut self) -> Result<Vec<Statement>, ImportError> {
        let mut root_line = 1;
        loop {
            let before = self.reader.buffer_position() as usize;
            let event = match self.reader.read_event() {
                Ok(e) => e,
                Err(e) => {
                    let line = self.lines.at(self.reader.error_position() as usize);
                    return Err(ImportError::at(line, format!("not well-formed XML: {}", brief(&e))));
                }
            };
            let line = self.lines.at(before);
            match event {
                Event::Start(e) => {
                    if self.stack.is_empty() {
                        root_line = line;
                        check_namespace(&e, line)?;
                    }
                    self.start(&e, line)?;
                }
                Event::End(_) => self.end()?,
                Event::Text(t) => {
                    let s = t.unescape().map_err(|e| ImportError::at(line, brief(&e)))?;
                    self.text.push_str(&s);
                }
                Event::CData(c) => self.text.push_str(&String::from_utf8_lossy(&c)),
                Event::DocType(_) => {
                    return Err(ImportError::at(
                        line,
                        "a DOCTYPE is refused: CAMT.053 needs none, and its entities are not expanded",
                    ))
                }
                Event::Eof => break,
                // Expanded into Start and End by the configuration.
                Event::Empty(_) => {}
                Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            }
        }
        let last = self.lines.at(usize::MAX);
        if let Some((name, opened)) = self.stack.last() {
            return Err(ImportError::at(
                last,
                format!("the file ends inside <{}> (opened on line {opened}): it is truncated", shown(name)),
            ));
        }
        if !self.statement_seen {
            return Err(ImportError::at(root_line, "no <BkToCstmrStmt>: this is not a CAMT.053 statement"));
        }
        Ok(self.out.into_vec())
    }

    fn start(&mut self, e: &BytesStart, line: usize) -> Result<(), ImportError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(ImportError::at(line, format!("elements are nested deeper than {MAX_DEPTH}")));
        }
        let name = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
        let i = self.stack.len();
        let parent = i.checked_sub(1).map(|p| self.stack[p].0.as_str());
        match name.as_str() {
            "BkToCstmrStmt" => self.statement_seen = true,
            "Stmt" if parent == Some("BkToCstmrStmt") && self.stmt_at.is_none() => {
                self.stmt_at = Some(i);
                self.stmt = Stmt::default();
            }
            "Ntry" if self.stmt_at.is_some_and(|s| s + 1 == i) => {
                self.ntry_at = Some(i);
                self.ntry = Entry { line, ..Entry::default() };
            }
            "Amt" if self.ntry_at.is_some_and(|n| n + 1 == i) => {
                let attr = attribute(e, b"Ccy", line)?;
                if let Some(a) = attr {
                    let v = a.unescape_value().map_err(|e| ImportError::at(line, brief(&e)))?;
                    self.ntry.currency = Some(currency(&v, line)?);
                }
            }
            _ => {}
        }
        self.stack.push((name, line));
        self.text.clear();
        Ok(())
    }

    fn end(&mut self) -> Result<(), ImportError> {
        // The reader refuses an end tag that closes nothing; this is not reached.
        let Some(i) = self.stack.len().checked_sub(1) else {
            return Err(ImportError::at(self.lines.line, "an end tag closes nothing"));
        };
        let line = self.stack[i].1;
        let value = self.text.trim().to_string();
        self.text.clear();
        let path: Vec<&str> = self.stack.iter().map(|(n, _)| n.as_str()).collect();
        if let Some(n) = self.ntry_at {
            if i == n {
                self.ntry_at = None;
                let entry = std::mem::take(&mut self.ntry);
                if let Some(l) = entry_line(entry)? {
                    if self.count == MAX_LINES {
                        return Err(super::too_many_lines(l.0.source_line));
                    }
                    self.count += 1;
                    self.stmt.lines.push(l);
                }
            } else {
                entry_field(&mut self.ntry, &path[n + 1..], value, line);
            }
        } else if let Some(s) = self.stmt_at {
            if i == s {
                self.stmt_at = None;
                let stmt = std::mem::take(&mut self.stmt);
                self.merge(stmt);
            } else {
                match &path[s + 1..] {
                    ["Acct", "Id", "IBAN"] => self.stmt.iban = some(value),
                    ["Acct", "Id", "Othr", "Id"] => self.stmt.other_id = some(value),
                    ["Acct", "Ccy"] => self.stmt.currency = Some(currency(&value, line)?),
                    _ => {}
                }
            }
        }
        self.stack.pop();
        Ok(())
    }

    /// Files a statement's lines under its account and each line's currency (the entry's
    /// `Amt@Ccy`, else the account's), so a merged statement is never in two currencies.
    fn merge(&mut self, stmt: Stmt) {
        let account = stmt.iban.or(stmt.other_id);
        if stmt.lines.is_empty() {
            self.out.of(account.clone(), stmt.currency.clone());
        }
        for (line, cur) in stmt.lines {
            self.out.of(account.clone(), cur.or_else(|| stmt.currency.clone())).lines.push(line);
        }
    }
}

/// Files one element's text under the entry, by its path below `<Ntry>`.
fn entry_field(n: &mut Entry, path: &[&str], value: String, line: usize) {
    let first = |slot: &mut Option<String>, v: String| {
        if slot.is_none() {
            *slot = clean(&v);
        }
    };
    match path {
        ["Amt"] => n.amount = Some((value, line)),
        ["CdtDbtInd"] => n.credit_debit = Some((value, line)),
        // Earlier versions write the code as text, later ones in `Cd`.
        ["Sts"] | ["Sts", "Cd"] if !value.is_empty() => n.status = Some(value),
        ["BookgDt", "Dt" | "DtTm"] => n.booked = Some((value, line)),
        ["ValDt", "Dt" | "DtTm"] => n.valued = Some((value, line)),
        ["AcctSvcrRef"] => n.acct_svcr_ref = some(value),
        ["NtryRef"] => n.ntry_ref = some(value),
        ["AddtlNtryInf"] => n.entry_info = clean(&value),
        ["NtryDtls", "TxDtls", rest @ ..] => match rest {
            // Later versions wrap the party in `Pty`.
            ["RltdPties", "Cdtr", "Nm"] | ["RltdPties", "Cdtr", "Pty", "Nm"] => first(&mut n.creditor, value),
            ["RltdPties", "Dbtr", "Nm"] | ["RltdPties", "Dbtr", "Pty", "Nm"] => first(&mut n.debtor, value),
            ["RmtInf", "Ustrd"] => {
                // A batch repeats one text per transaction: keep it once.
                if let Some(v) = clean(&value).filter(|v| !n.unstructured.contains(v)) {
                    n.unstructured.push(v);
                }
            }
            ["RmtInf", "Strd", "CdtrRefInf", "Ref"] => first(&mut n.creditor_ref, value),
            ["AddtlTxInf"] => first(&mut n.tx_info, value),
            _ => {}
        },
        _ => {}
    }
}

/// The line of a booked entry and its currency; `None` for an entry that is not booked.
fn entry_line(n: Entry) -> Result<Option<(Line, Option<String>)>, ImportError> {
    // Pending and information-only entries come again once booked: taking them would count
    // them twice. An entry without a status is taken (a statement lists booked entries).
    if n.status.as_deref().is_some_and(|s| s != "BOOK") {
        return Ok(None);
    }
    let Some((amt, amt_line)) = &n.amount else {
        return Err(ImportError::at(n.line, "the entry has no <Amt>"));
    };
    let cents = amount(amt, *amt_line)?;
    // `CdtDbtInd` is the direction of this booking, also for a reversal (`RvslInd`).
    let credit = match &n.credit_debit {
        Some((s, _)) if s == "CRDT" => true,
        Some((s, _)) if s == "DBIT" => false,
        Some((s, l)) => return Err(ImportError::at(*l, format!("`{}` is not CRDT or DBIT", shown(s)))),
        None => return Err(ImportError::at(n.line, "the entry has no <CdtDbtInd>")),
    };
    // The booking date, as expected.py reads it; the value date only when a bank leaves the
    // booking date out, since a line needs a day.
    let Some((date, date_line)) = n.booked.as_ref().or(n.valued.as_ref()) else {
        return Err(ImportError::at(n.line, "the entry has neither <BookgDt> nor <ValDt>"));
    };
    let day = iso_date(date, *date_line)?;
    let memo = if n.unstructured.is_empty() {
        n.creditor_ref.or(n.tx_info).or(n.entry_info)
    } else {
        Some(n.unstructured.join(" "))
    };
    let line = Line {
        day,
        amount_cents: if credit { cents } else { -cents },
        payee: if credit { n.debtor } else { n.creditor },
        memo,
        // Transaction-level references (EndToEndId...) are the payer's, not the bank's id of
        // the line, and the corpus's figures take none of them.
        bank_id: reference(n.acct_svcr_ref).or_else(|| reference(n.ntry_ref)),
        source_line: n.line,
    };
    Ok(Some((line, n.currency)))
}

/// Refuses any ISO 20022 message but camt.053 of the versions read; a root without a namespace
/// is read by its element names.
fn check_namespace(root: &BytesStart, line: usize) -> Result<(), ImportError> {
    // Without quick-xml's duplicate check, which is quadratic in the attributes (see `attribute`).
    for attr in root.attributes().with_checks(false) {
        let attr = attr.map_err(|e| ImportError::at(line, brief(&e)))?;
        if !attr.key.as_ref().starts_with(b"xmlns") {
            continue;
        }
        let ns = attr.unescape_value().map_err(|e| ImportError::at(line, brief(&e)))?;
        let Some(msg) = ns.strip_prefix(ISO_NS) else { continue };
        let version = msg.strip_prefix("camt.053.001.").and_then(|v| v.parse::<u32>().ok());
        match version {
            Some(v) if VERSIONS.contains(&v) => {}
            Some(_) => {
                return Err(ImportError::at(
                    line,
                    format!("`{}` is not read: CAMT.053 versions .001.02 to .001.08 are", shown(msg)),
                ))
            }
            None => {
                return Err(ImportError::at(line, format!("`{}` is not a CAMT.053 statement", shown(msg))))
            }
        }
    }
    Ok(())
}

/// An `xs:decimal` amount: digits and one `.`, no sign, no grouping.
fn amount(text: &str, line: usize) -> Result<i64, ImportError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(ImportError::at(line, format!("`{}` is not an amount", shown(text))));
    }
    text::amount_cents(text, false, line)
}

/// `YYYY-MM-DD` of an `xs:date` or `xs:dateTime`: the bank's calendar date as written, its time
/// and zone ignored.
fn iso_date(text: &str, line: usize) -> Result<i64, ImportError> {
    let b = text.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let ok = b.len() >= 10
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && (b.len() == 10 || matches!(b[10], b'T' | b'Z' | b'+' | b'-'));
    if !ok {
        return Err(ImportError::at(line, format!("`{}` is not a date", shown(text))));
    }
    let n = |r: std::ops::Range<usize>| text[r].parse::<u32>().unwrap_or(0);
    text::day(i64::from(n(0..4)), n(5..7), n(8..10), line, text)
}

fn currency(text: &str, line: usize) -> Result<String, ImportError> {
    let t = text.trim();
    if t.len() == 3 && t.bytes().all(|b| b.is_ascii_uppercase()) {
        Ok(t.to_string())
    } else {
        Err(ImportError::at(line, format!("`{}` is not a currency code", shown(t))))
    }
}

/// A reference, unless it is a bank's word for none.
fn reference(r: Option<String>) -> Option<String> {
    r.filter(|r| r != "NONREF" && r != "NOTPROVIDED")
}

fn some(v: String) -> Option<String> {
    Some(v).filter(|v| !v.is_empty())
}

/// A name or text with its runs of white space (line breaks of the XML) made one space.
fn clean(v: &str) -> Option<String> {
    Some(v.split_whitespace().collect::<Vec<_>>().join(" ")).filter(|v| !v.is_empty())
}

/// An XML error as a message (it may quote the file; see [`text::xml_error`]).
fn brief(e: &dyn std::fmt::Display) -> String {
    text::xml_error(e)
}

/// The attribute `name` of `e`. quick-xml's own lookup checks every attribute against every one
/// before it for duplicates: quadratic in an element's attributes, which a hostile file may give
/// by the hundred thousand.
fn attribute<'a>(
    e: &'a BytesStart<'a>,
    name: &[u8],
    line: usize,
) -> Result<Option<quick_xml::events::attributes::Attribute<'a>>, ImportError> {
    for attr in e.attributes().with_checks(false) {
        let attr = attr.map_err(|err| ImportError::at(line, brief(&err)))?;
        if attr.key.as_ref() == name {
            return Ok(Some(attr));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::dates::days_from_civil;
    use crate::import::corpus;

    /// A camt.053 document of the given version around `stmts`.
    fn doc(version: &str, stmts: &str) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
             <Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.053.001.{version}\">\n\
             <BkToCstmrStmt>\n<GrpHdr><MsgId>M1</MsgId></GrpHdr>\n{stmts}</BkToCstmrStmt>\n</Document>\n"
        )
    }

    fn stmt(iban: &str, ccy: &str, entries: &str) -> String {
        let ccy = if ccy.is_empty() { String::new() } else { format!("<Ccy>{ccy}</Ccy>") };
        format!("<Stmt>\n<Id>S</Id>\n<Acct><Id><IBAN>{iban}</IBAN></Id>{ccy}</Acct>\n{entries}</Stmt>\n")
    }

    /// One entry on one line: amount, CRDT/DBIT, then whatever else it holds.
    fn ntry(amt: &str, cd: &str, rest: &str) -> String {
        format!("<Ntry><Amt Ccy=\"EUR\">{amt}</Amt><CdtDbtInd>{cd}</CdtDbtInd>{rest}</Ntry>\n")
    }

    const BOOK: &str = "<Sts>BOOK</Sts><BookgDt><Dt>2024-03-01</Dt></BookgDt>";

    fn one(xml: &str) -> Vec<Statement> {
        read(xml.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(xml: impl AsRef<[u8]>) -> ImportError {
        match read(xml.as_ref()) {
            Ok(s) => panic!("read: {s:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn every_corpus_statement_reads_as_the_manifest_says() {
        let entries = corpus::entries("camt053");
        assert_eq!(entries.len(), 4);
        for e in entries {
            let got = read(&corpus::bytes(&e)).unwrap_or_else(|err| panic!("{}: {err}", e["file"]));
            corpus::check(&e, &got);
        }
    }

    #[test]
    fn signs_dates_and_lines() {
        let entries = [
            ntry("8.85", "CRDT", BOOK),
            ntry("7.00", "DBIT", BOOK),
            // A date and time: the date as written, its zone ignored.
            ntry("1", "DBIT", "<Sts>BOOK</Sts><BookgDt><DtTm>2014-12-31T23:30:00-05:00</DtTm></BookgDt>"),
            // No booking date: the value date.
            ntry("0.5", "CRDT", "<Sts>BOOK</Sts><ValDt><Dt>2024-02-29</Dt></ValDt>"),
        ]
        .concat();
        let got = one(&doc("02", &stmt("NL26VAYB8060476890", "EUR", &entries)));
        assert_eq!(got.len(), 1);
        let s = &got[0];
        assert_eq!((s.account.as_deref(), s.currency.as_deref()), (Some("NL26VAYB8060476890"), Some("EUR")));
        let amounts: Vec<i64> = s.lines.iter().map(|l| l.amount_cents).collect();
        assert_eq!(amounts, [885, -700, -100, 50]);
        let days: Vec<i64> = s.lines.iter().map(|l| l.day).collect();
        let want = [(2024, 3, 1), (2024, 3, 1), (2014, 12, 31), (2024, 2, 29)]
            .map(|(y, m, d)| days_from_civil(y, m, d));
        assert_eq!(days, want);
        // Each line names the line its <Ntry> opens on.
        let at: Vec<usize> = s.lines.iter().map(|l| l.source_line).collect();
        assert_eq!(at, [8, 9, 10, 11]);
    }

    #[test]
    fn only_booked_entries_are_lines() {
        let entries = [
            ntry("1", "CRDT", BOOK),
            ntry("2", "CRDT", "<Sts>PDNG</Sts><BookgDt><Dt>2024-03-01</Dt></BookgDt>"),
            ntry("4", "CRDT", "<Sts>INFO</Sts><BookgDt><Dt>2024-03-01</Dt></BookgDt>"),
            // .001.08's nested status.
            ntry("8", "CRDT", "<Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>2024-03-01</Dt></BookgDt>"),
            ntry("16", "CRDT", "<Sts><Cd>PDNG</Cd></Sts><BookgDt><Dt>2024-03-01</Dt></BookgDt>"),
            // No status at all: taken.
            ntry("32", "CRDT", "<BookgDt><Dt>2024-03-01</Dt></BookgDt>"),
        ]
        .concat();
        let got = one(&doc("08", &stmt("NL26VAYB8060476890", "EUR", &entries)));
        let amounts: Vec<i64> = got[0].lines.iter().map(|l| l.amount_cents).collect();
        assert_eq!(amounts, [100, 800, 3200]);
    }

    #[test]
    fn statements_of_one_account_merge_and_accounts_stay_apart() {
        let body = [
            stmt("NL01", "EUR", &ntry("1", "CRDT", BOOK)),
            stmt("NL02", "EUR", &ntry("2", "CRDT", BOOK)),
            stmt("NL01", "EUR", &ntry("3", "DBIT", BOOK)),
            // Othr/Id when there is no IBAN; no Acct/Ccy: the entry's currency.
            "<Stmt><Acct><Id><Othr><Id>12345678</Id></Othr></Id></Acct>\n".to_string()
                + &ntry("4", "CRDT", BOOK)
                + "</Stmt>\n",
            // A statement without entries is still its account's.
            stmt("NL03", "CHF", ""),
        ]
        .concat();
        let got = one(&doc("04", &body));
        let summary: Vec<(Option<&str>, Option<&str>, Vec<i64>)> = got
            .iter()
            .map(|s| {
                (
                    s.account.as_deref(),
                    s.currency.as_deref(),
                    s.lines.iter().map(|l| l.amount_cents).collect(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (Some("NL01"), Some("EUR"), vec![100, -300]),
                (Some("NL02"), Some("EUR"), vec![200]),
                (Some("12345678"), Some("EUR"), vec![400]),
                (Some("NL03"), Some("CHF"), vec![]),
            ]
        );
    }

    #[test]
    fn an_entry_in_another_currency_is_its_own_statement() {
        let usd = "<Ntry><Amt Ccy=\"USD\">5</Amt><CdtDbtInd>CRDT</CdtDbtInd><Sts>BOOK</Sts>\
                   <BookgDt><Dt>2024-03-01</Dt></BookgDt></Ntry>\n";
        let got = one(&doc("02", &stmt("NL01", "EUR", &(ntry("1", "CRDT", BOOK) + usd))));
        let cur: Vec<_> = got.iter().map(|s| (s.currency.as_deref(), s.lines.len())).collect();
        assert_eq!(cur, [(Some("EUR"), 1), (Some("USD"), 1)]);
    }

    #[test]
    fn the_bank_id_is_the_servicer_reference_then_the_entry_reference() {
        let refs = "<Refs><EndToEndId>E2E-1</EndToEndId></Refs>";
        let entries = [
            ntry("1", "CRDT", &format!("{BOOK}<NtryRef>N1</NtryRef><AcctSvcrRef>A1</AcctSvcrRef>")),
            ntry("1", "CRDT", &format!("{BOOK}<NtryRef>N2</NtryRef>")),
            // The payer's end-to-end id is not the bank's id of the line.
            ntry("1", "CRDT", &format!("{BOOK}<NtryDtls><TxDtls>{refs}</TxDtls></NtryDtls>")),
            ntry("1", "CRDT", &format!("{BOOK}<AcctSvcrRef>NONREF</AcctSvcrRef>")),
            ntry("1", "CRDT", &format!("{BOOK}<NtryRef>N5</NtryRef><AcctSvcrRef>NOTPROVIDED</AcctSvcrRef>")),
            ntry("1", "CRDT", &format!("{BOOK}<AcctSvcrRef> </AcctSvcrRef>")),
        ]
        .concat();
        let got = one(&doc("02", &stmt("NL01", "EUR", &entries)));
        let ids: Vec<_> = got[0].lines.iter().map(|l| l.bank_id.as_deref()).collect();
        assert_eq!(ids, [Some("A1"), Some("N2"), None, None, Some("N5"), None]);
    }

    #[test]
    fn payee_is_the_counterparty_and_memo_the_remittance_text() {
        let parties = "<RltdPties><Dbtr><Nm>Payer\n  Ltd</Nm></Dbtr><Cdtr><Pty><Nm>Shop &amp; Co</Nm></Pty></Cdtr></RltdPties>";
        let tx = |rmt: &str| format!("<TxDtls>{parties}<RmtInf>{rmt}</RmtInf></TxDtls>");
        let entries = [
            // A debit pays the creditor; .001.08 nests the name in Pty.
            ntry(
                "1",
                "DBIT",
                &format!("{BOOK}<NtryDtls>{}</NtryDtls>", tx("<Ustrd>Invoice 1</Ustrd><Ustrd>and 2</Ustrd>")),
            ),
            // A credit comes from the debtor; a batch's repeated text is kept once.
            ntry(
                "1",
                "CRDT",
                &format!(
                    "{BOOK}<NtryDtls>{}{}</NtryDtls>",
                    tx("<Ustrd>Refund</Ustrd>"),
                    tx("<Ustrd>Refund</Ustrd>")
                ),
            ),
            // No unstructured text: the creditor reference, then the additional information.
            ntry(
                "1",
                "DBIT",
                &format!(
                    "{BOOK}<NtryDtls>{}</NtryDtls>",
                    tx("<Strd><CdtrRefInf><Ref>RF18 5390</Ref></CdtrRefInf></Strd>")
                ),
            ),
            ntry(
                "1",
                "DBIT",
                &format!("{BOOK}<NtryDtls><TxDtls><AddtlTxInf>Card 1234</AddtlTxInf></TxDtls></NtryDtls>"),
            ),
            ntry("1", "DBIT", &format!("{BOOK}<AddtlNtryInf>Fees</AddtlNtryInf>")),
        ]
        .concat();
        let got = one(&doc("08", &stmt("NL01", "EUR", &entries)));
        let l = &got[0].lines;
        let pm: Vec<_> = l.iter().map(|l| (l.payee.as_deref(), l.memo.as_deref())).collect();
        assert_eq!(
            pm,
            [
                (Some("Shop & Co"), Some("Invoice 1 and 2")),
                (Some("Payer Ltd"), Some("Refund")),
                (Some("Shop & Co"), Some("RF18 5390")),
                (None, Some("Card 1234")),
                (None, Some("Fees")),
            ]
        );
    }

    #[test]
    fn v02_parties_name_directly() {
        let e = ntry(
            "1",
            "DBIT",
            &format!("{BOOK}<NtryDtls><TxDtls><RltdPties><Cdtr><Nm>Shop</Nm></Cdtr></RltdPties></TxDtls></NtryDtls>"),
        );
        assert_eq!(one(&doc("02", &stmt("NL01", "EUR", &e)))[0].lines[0].payee.as_deref(), Some("Shop"));
    }

    #[test]
    fn text_as_xml_writes_it() {
        let e = ntry(
            "1",
            "CRDT",
            &format!("{BOOK}<AddtlNtryInf>caf&#233; &lt;x&gt; <![CDATA[a<b]]></AddtlNtryInf>"),
        );
        assert_eq!(
            one(&doc("02", &stmt("NL01", "EUR", &e)))[0].lines[0].memo.as_deref(),
            Some("café <x> a<b")
        );
        // A declared single-byte charset.
        let latin = doc(
            "02",
            &stmt(
                "NL01",
                "EUR",
                &ntry("1", "CRDT", &format!("{BOOK}<AddtlNtryInf>caf\u{e9}</AddtlNtryInf>")),
            ),
        )
        .replace("UTF-8", "ISO-8859-1");
        let bytes: Vec<u8> = latin.chars().map(|c| c as u32 as u8).collect();
        assert_eq!(read(&bytes).unwrap()[0].lines[0].memo.as_deref(), Some("café"));
    }

    #[test]
    fn prefixed_and_unnamed_namespaces() {
        let prefixed = doc("05", &stmt("NL01", "EUR", &ntry("1", "CRDT", BOOK)))
            .replace("<Document xmlns=", "<c:Document xmlns:c=")
            .replace("</Document>", "</c:Document>")
            .replace("<Ntry>", "<c:Ntry>")
            .replace("</Ntry>", "</c:Ntry>");
        assert_eq!(one(&prefixed)[0].lines.len(), 1);
        let bare = format!(
            "<Document><BkToCstmrStmt>{}</BkToCstmrStmt></Document>",
            stmt("NL01", "", &ntry("1", "CRDT", BOOK))
        );
        assert_eq!(one(&bare)[0].currency.as_deref(), Some("EUR"));
    }

    #[test]
    fn other_messages_and_versions_are_refused() {
        let e = err(doc("09", ""));
        assert_eq!(e.line, 2, "{e}");
        assert!(e.msg.contains("camt.053.001.09"), "{e}");
        assert_eq!(err(doc("01", "")).line, 2);
        let report = doc("02", "").replace("camt.053.001.02", "camt.052.001.02");
        assert!(err(report).msg.contains("camt.052"));
        let other = "<?xml version=\"1.0\"?>\n<Foo><Bar/></Foo>\n";
        assert_eq!(err(other).line, 2);
    }

    #[test]
    fn entries_that_are_wrong_name_their_line() {
        let cases = [
            (ntry("1", "CRDT", "<Sts>BOOK</Sts><BookgDt><Dt>2025-13-45</Dt></BookgDt>"), "not a date"),
            (ntry("1", "CRDT", "<Sts>BOOK</Sts><BookgDt><Dt>20251345</Dt></BookgDt>"), "not a date"),
            (ntry("1", "CRDT", "<Sts>BOOK</Sts><BookgDt><Dt>2023-02-29</Dt></BookgDt>"), "not a date"),
            (ntry("1", "CRDT", "<Sts>BOOK</Sts><BookgDt><Dt>2024-03-011</Dt></BookgDt>"), "not a date"),
            (ntry(&"9".repeat(40), "CRDT", BOOK), "too large"),
            (ntry("-5.00", "CRDT", BOOK), "not an amount"),
            (ntry("1,000.00", "CRDT", BOOK), "not an amount"),
            (ntry("1.005", "CRDT", BOOK), "more than 2 decimals"),
            (ntry("", "CRDT", BOOK), "not an amount"),
            (ntry("1", "CRED", BOOK), "not CRDT or DBIT"),
            (ntry("1", "CRDT", "<Sts>BOOK</Sts>"), "neither <BookgDt> nor <ValDt>"),
            ("<Ntry><CdtDbtInd>CRDT</CdtDbtInd></Ntry>\n".to_string(), "no <Amt>"),
            ("<Ntry><Amt>1</Amt></Ntry>\n".to_string(), "no <CdtDbtInd>"),
            ("<Ntry><Amt Ccy=\"euro\">1</Amt></Ntry>\n".to_string(), "not a currency"),
        ];
        for (entry, want) in cases {
            // The entry sits on line 9, after a good one on line 8.
            let xml = doc("02", &stmt("NL01", "EUR", &(ntry("1", "CRDT", BOOK) + &entry)));
            let e = err(&xml);
            assert_eq!(e.line, 9, "{entry}: {e}");
            assert!(e.msg.contains(want), "{entry}: {e}");
        }
    }

    #[test]
    fn a_truncated_file_is_refused_wherever_it_is_cut() {
        let xml = doc("08", &stmt("NL01", "EUR", &(ntry("1", "CRDT", BOOK) + &ntry("2", "DBIT", BOOK))));
        let full = xml.trim_end().len();
        for cut in 0..full {
            if let Ok(s) = read(&xml.as_bytes()[..cut]) {
                panic!("cut at {cut} read as {s:?}");
            }
        }
        let e = err(&xml[..xml.find("</Stmt>").unwrap()]);
        assert_eq!(e.line, 10, "{e}");
        assert!(e.msg.contains("truncated"), "{e}");
        assert!(read(&xml.as_bytes()[..full]).is_ok());
    }

    #[test]
    fn binary_garbage_and_plain_text_are_refused_with_a_line() {
        let e = err(b"<Document>\n\x00\x01\x02\xff\xfe");
        assert_eq!(e.line, 2, "{e}");
        let e = err(b"\x89PNG\r\n\x1a\n\x00\x00");
        assert_eq!(e.line, 2, "{e}");
        let e = err("\n\nhello, world\n");
        assert_eq!(e.line, 3, "{e}");
        assert!(err("").line >= 1);
        let e = err("<Document><BkToCstmrStmt></Stmt></BkToCstmrStmt></Document>");
        assert!(e.msg.contains("not well-formed"), "{e}");
    }

    #[test]
    fn a_doctype_is_refused_so_entities_never_expand() {
        // The billion laughs: ten entities each ten times the last.
        let mut bomb = String::from("<?xml version=\"1.0\"?>\n<!DOCTYPE lolz [\n<!ENTITY lol \"lol\">\n");
        for i in 1..10 {
            let prev = if i == 1 { "lol".to_string() } else { format!("lol{}", i - 1) };
            bomb += &format!("<!ENTITY lol{i} \"{}\">\n", format!("&{prev};").repeat(10));
        }
        bomb += "]>\n<Document><BkToCstmrStmt><Stmt><Ntry><Amt>&lol9;</Amt></Ntry></Stmt></BkToCstmrStmt></Document>\n";
        let e = err(&bomb);
        assert_eq!(e.line, 2, "{e}");
        assert!(e.msg.contains("DOCTYPE"), "{e}");
        let xxe =
            "<?xml version=\"1.0\"?>\n<!DOCTYPE d [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>\n<Document/>";
        assert!(err(xxe).msg.contains("DOCTYPE"));
        // An entity used without a DOCTYPE is unknown, not looked up.
        let e = err(doc(
            "02",
            &stmt("NL01", "EUR", &ntry("1", "CRDT", &format!("{BOOK}<AddtlNtryInf>&lol9;</AddtlNtryInf>"))),
        ));
        assert_eq!(e.line, 8, "{e}");
    }

    #[test]
    fn deep_nesting_is_refused_early() {
        let depth = 100_000;
        let xml = doc(
            "02",
            &stmt("NL01", "EUR", &ntry("1", "CRDT", &("<a>\n".repeat(depth) + &"</a>".repeat(depth)))),
        );
        let t = std::time::Instant::now();
        let e = err(&xml);
        assert!(e.msg.contains("nested deeper"), "{e}");
        // <Ntry> on line 8 is the 4th element: the 61st <a> below it is the 65th, on line 68.
        assert_eq!(e.line, 8 + MAX_DEPTH - 4, "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn more_than_max_lines_entries_stop_the_read_there() {
        let entries = ntry("1", "CRDT", BOOK).repeat(MAX_LINES + 5);
        let e = err(doc("02", &stmt("NL01", "EUR", &entries)));
        assert_eq!(e.line, 8 + MAX_LINES, "{e}");
        assert!(e.msg.contains("more than"), "{e}");
        // Exactly MAX_LINES is a file.
        let entries = ntry("1", "CRDT", BOOK).repeat(MAX_LINES);
        assert_eq!(one(&doc("02", &stmt("NL01", "EUR", &entries)))[0].lines.len(), MAX_LINES);
    }
}
