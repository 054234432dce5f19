//! OFX 1.x (SGML), OFX 2.x (XML) and QFX bank (`STMTRS`) and credit-card (`CCSTMTRS`)
//! statements. One tolerant tag scanner reads both dialects, because banks mix them: SGML data
//! elements may be closed or not, an XML header may precede SGML tags, values may sit in CDATA.
//!
//! Unclosed tags follow the SGML rule OFX relies on: an aggregate always has an end tag, a data
//! element need not. So a tag followed by text is a data element, and an empty tag whose name
//! never ends an aggregate anywhere in the file is an empty data element (a first pass collects
//! those names). An end tag closes every element still open inside it.
//!
//! Lines count from 1; `\n`, `\r\n` and a lone `\r` each end one.

use super::text;
use super::{ImportError, Line, Statement, MAX_FILE_BYTES, MAX_LINES};
use std::collections::{HashMap, HashSet};

/// Deepest nesting of open aggregates: real OFX goes about 10 deep (investment transactions), so
/// 64 leaves room for bank extensions while a hostile file cannot grow the stack without bound.
pub const MAX_DEPTH: usize = 64;
/// Longest tag name: OFX names (`INTU.USERID`, `CCSTMTTRNRS`) are well under 32 characters.
const MAX_NAME_BYTES: usize = 64;
/// Most distinct aggregate names in one file: OFX defines a few hundred, a file uses dozens.
const MAX_AGGREGATE_NAMES: usize = 1024;
/// How far into the file the header (and its charset) is looked for.
const HEADER_BYTES: usize = 4096;

/// Reads every bank and credit-card statement of an OFX or QFX file, one [`Statement`] per
/// account and currency (statements of the same account are merged, in file order).
pub fn read(bytes: &[u8]) -> Result<Vec<Statement>, ImportError> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(ImportError::at(0, format!("the file is larger than {} MiB", MAX_FILE_BYTES >> 20)));
    }
    let text = text::decode(bytes, declared_charset(bytes).as_deref());
    if let Some(at) = text.find('\0') {
        return Err(ImportError::at(line_at(&text, at), "binary data (a NUL byte), not an OFX file"));
    }
    let aggregates = aggregate_names(&text)?;
    Builder::default().run(&text, &aggregates)
}

/// The charset the header declares: OFX 1.x `ENCODING:UTF-8` or `CHARSET:1252` lines before the
/// first tag, or OFX 2.x's `<?xml ... encoding="..."?>`.
fn declared_charset(bytes: &[u8]) -> Option<String> {
    let head = &bytes[..bytes.len().min(HEADER_BYTES)];
    let sgml_end = head.iter().position(|&b| b == b'<').unwrap_or(head.len());
    let field = |key: &[u8]| -> Option<String> {
        let h = &head[..sgml_end];
        let at = h.windows(key.len()).position(|w| w.eq_ignore_ascii_case(key))? + key.len();
        let end = h[at..].iter().position(|&b| b == b'\n' || b == b'\r').map_or(h.len(), |e| at + e);
        Some(String::from_utf8_lossy(&h[at..end]).trim().to_string())
    };
    if field(b"ENCODING:").is_some_and(|e| e.eq_ignore_ascii_case("UTF-8")) {
        return Some("utf-8".into());
    }
    if let Some(c) = field(b"CHARSET:") {
        return Some(c);
    }
    let decl_start = head.windows(5).position(|w| w.eq_ignore_ascii_case(b"<?xml"))?;
    let decl = &head[decl_start..];
    let decl = &decl[..decl.windows(2).position(|w| w == b"?>").unwrap_or(decl.len())];
    let at = decl.windows(9).position(|w| w.eq_ignore_ascii_case(b"encoding="))? + 9;
    let quote = *decl.get(at)?;
    let value = &decl[at + 1..];
    let end = value.iter().position(|&b| b == quote)?;
    Some(String::from_utf8_lossy(&value[..end]).into_owned())
}

/// 1-based line of byte offset `at`.
fn line_at(text: &str, at: usize) -> usize {
    let mut lexer = Lexer { s: text, pos: 0, line: 1 };
    lexer.advance(at);
    lexer.line
}

/// Names (upper case) that end an aggregate somewhere in the file: an end tag that is not the
/// immediate close of a data element.
fn aggregate_names(text: &str) -> Result<HashSet<String>, ImportError> {
    let mut names = HashSet::new();
    let mut elements = Elements::new(text);
    while let Some((event, line)) = elements.next(&|_: &str| true)? {
        if let Event::Close(name) = event {
            let name = name.to_ascii_uppercase();
            if names.contains(&name) {
                continue;
            }
            if names.len() >= MAX_AGGREGATE_NAMES {
                return Err(ImportError::at(
                    line,
                    format!("more than {MAX_AGGREGATE_NAMES} different aggregate names: not an OFX file"),
                ));
            }
            names.insert(name);
        }
    }
    Ok(names)
}

// ------------------------------------------------------------------------------------ lexer

/// One piece of markup or text, borrowed from the decoded file.
#[derive(Debug, Clone, Copy)]
enum Tok<'a> {
    Start {
        name: &'a str,
        empty: bool,
    },
    End(&'a str),
    /// Text between tags, entities still escaped.
    Text(&'a str),
    /// The inside of `<![CDATA[...]]>`, taken as written.
    CData(&'a str),
}

struct Lexer<'a> {
    s: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Lexer<'a> {
    /// Moves to byte `to`, counting the lines passed.
    fn advance(&mut self, to: usize) {
        let b = self.s.as_bytes();
        for i in self.pos..to {
            if b[i] == b'\n' || (b[i] == b'\r' && b.get(i + 1) != Some(&b'\n')) {
                self.line += 1;
            }
        }
        self.pos = to;
    }

    /// Whether a `<` at `at` opens markup; any other `<` is text (`a < b` in a payee).
    fn is_markup(&self, at: usize) -> bool {
        let b = &self.s.as_bytes()[at + 1..];
        match b.first() {
            Some(c) if c.is_ascii_alphabetic() || *c == b'!' || *c == b'?' => true,
            Some(b'/') => b.get(1).is_some_and(|c| c.is_ascii_alphabetic()),
            _ => false,
        }
    }

    fn find(&self, from: usize, needle: &str) -> Option<usize> {
        self.s[from..].find(needle).map(|i| from + i)
    }

    fn next(&mut self) -> Result<Option<(Tok<'a>, usize)>, ImportError> {
        loop {
            let (start, line) = (self.pos, self.line);
            if start >= self.s.len() {
                return Ok(None);
            }
            let b = self.s.as_bytes();
            if b[start] != b'<' || !self.is_markup(start) {
                let mut end = start + 1;
                loop {
                    match memchr::memchr(b'<', &b[end..]) {
                        Some(i) if self.is_markup(end + i) => {
                            end += i;
                            break;
                        }
                        Some(i) => end += i + 1,
                        None => {
                            end = b.len();
                            break;
                        }
                    }
                }
                self.advance(end);
                return Ok(Some((Tok::Text(&self.s[start..end]), line)));
            }
            let rest = &self.s[start..];
            let unclosed = |what: &str| ImportError::at(line, format!("{what} is not closed"));
            if rest.starts_with("<!--") {
                let end = self.find(start + 4, "-->").ok_or_else(|| unclosed("a comment `<!--`"))?;
                self.advance(end + 3);
            } else if rest.get(..9).is_some_and(|p| p.eq_ignore_ascii_case("<![CDATA[")) {
                let end = self.find(start + 9, "]]>").ok_or_else(|| unclosed("a `<![CDATA[` section"))?;
                self.advance(end + 3);
                return Ok(Some((Tok::CData(&self.s[start + 9..end]), line)));
            } else if rest.starts_with("<?") {
                let end = self.find(start + 2, "?>").ok_or_else(|| unclosed("a `<?` instruction"))?;
                self.advance(end + 2);
            } else if rest.starts_with("<!") {
                // OFX has no document type; refusing one keeps entity definitions out entirely.
                return Err(ImportError::at(
                    line,
                    "a `<!` declaration (document type, entity) is not accepted",
                ));
            } else {
                let closing = rest.as_bytes()[1] == b'/';
                let name_start = start + if closing { 2 } else { 1 };
                let name_len = b[name_start..]
                    .iter()
                    .position(|c| c.is_ascii_whitespace() || matches!(c, b'>' | b'<' | b'/'))
                    .unwrap_or(b.len() - name_start);
                let name = &self.s[name_start..name_start + name_len];
                if name.len() > MAX_NAME_BYTES {
                    return Err(ImportError::at(
                        line,
                        format!("`<{}...` is not an OFX tag: the name is too long", text::shown(name)),
                    ));
                }
                // The tag ends at the next `>`; a `<` first means it never does.
                let after = name_start + name_len;
                let end = match memchr::memchr2(b'>', b'<', &b[after..]) {
                    Some(i) if b[after + i] == b'>' => after + i,
                    _ => return Err(unclosed(&format!("the tag `<{}`", text::shown(name)))),
                };
                let empty = !closing && b[end - 1] == b'/' && end > after;
                self.advance(end + 1);
                let tok = if closing { Tok::End(name) } else { Tok::Start { name, empty } };
                return Ok(Some((tok, line)));
            }
        }
    }
}

/// Appends `raw` with its entities replaced: the five XML ones and numeric ones. Anything else
/// after `&` is kept as written (SGML files carry `AT&T`).
fn unescape_into(out: &mut String, raw: &str) {
    let mut rest = raw;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        // Entities are short: looking further would make a run of `&` quadratic.
        let semicolon = rest.as_bytes()[1..].iter().take(11).position(|&b| b == b';');
        let entity = semicolon.map(|i| &rest[1..1 + i]);
        let ch = entity.and_then(|e| match e {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => {
                let n = e.strip_prefix('#')?;
                let code = match n.strip_prefix(['x', 'X']) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                    None => n.parse().ok()?,
                };
                char::from_u32(code).filter(|c| *c != '\0')
            }
        });
        match (ch, entity) {
            (Some(c), Some(e)) => {
                out.push(c);
                rest = &rest[e.len() + 2..];
            }
            _ => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
}

// --------------------------------------------------------------------------------- elements

/// What the statement builder sees: aggregates opening and closing, and data elements.
#[derive(Debug)]
enum Event<'a> {
    Open(&'a str),
    Close(&'a str),
    /// A data element and its value (entities and CDATA decoded, trimmed).
    Data(&'a str, String),
}

/// Aggregates whose start tag always opens them, whatever follows.
const STRUCTURAL: [&str; 8] =
    ["OFX", "STMTRS", "CCSTMTRS", "STMTTRN", "BANKACCTFROM", "CCACCTFROM", "PAYEE", "STATUS"];

struct Elements<'a> {
    lexer: Lexer<'a>,
    pending: Option<(Tok<'a>, usize)>,
}

impl<'a> Elements<'a> {
    fn new(s: &'a str) -> Self {
        Elements { lexer: Lexer { s, pos: 0, line: 1 }, pending: None }
    }

    fn tok(&mut self) -> Result<Option<(Tok<'a>, usize)>, ImportError> {
        match self.pending.take() {
            Some(t) => Ok(Some(t)),
            None => self.lexer.next(),
        }
    }

    /// The next event; `is_aggregate` decides an empty start tag that its own end tag does not
    /// follow at once.
    fn next(
        &mut self,
        is_aggregate: &dyn Fn(&str) -> bool,
    ) -> Result<Option<(Event<'a>, usize)>, ImportError> {
        loop {
            let Some((tok, line)) = self.tok()? else { return Ok(None) };
            let name = match tok {
                // Text outside a data element: indentation, header lines, stray words.
                Tok::Text(_) | Tok::CData(_) => continue,
                Tok::End(name) => return Ok(Some((Event::Close(name), line))),
                Tok::Start { name, empty: true } => {
                    return Ok(Some((Event::Data(name, String::new()), line)))
                }
                Tok::Start { name, empty: false } => name,
            };
            if STRUCTURAL.iter().any(|s| s.eq_ignore_ascii_case(name)) {
                return Ok(Some((Event::Open(name), line)));
            }
            let mut value = String::new();
            loop {
                match self.lexer.next()? {
                    Some((Tok::Text(t), _)) => unescape_into(&mut value, t),
                    Some((Tok::CData(t), _)) => value.push_str(t),
                    Some((Tok::End(end), _)) if end.eq_ignore_ascii_case(name) => {
                        return Ok(Some((Event::Data(name, trimmed(value)), line)));
                    }
                    other => {
                        self.pending = other;
                        break;
                    }
                }
            }
            let value = trimmed(value);
            if value.is_empty() && is_aggregate(name) {
                return Ok(Some((Event::Open(name), line)));
            }
            return Ok(Some((Event::Data(name, value), line)));
        }
    }
}

fn trimmed(s: String) -> String {
    match s.trim() {
        t if t.len() == s.len() => s,
        t => t.to_string(),
    }
}

// ---------------------------------------------------------------------------------- builder

/// What an open element is to the builder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Statement,
    Transaction,
    Other,
}

struct Open<'a> {
    name: &'a str,
    line: usize,
    role: Role,
}

struct StatementSoFar {
    account: Option<String>,
    currency: Option<String>,
    lines: Vec<Line>,
}

#[derive(Default)]
struct TransactionSoFar {
    line: usize,
    day: Option<i64>,
    amount_cents: Option<i64>,
    name: Option<String>,
    payee_name: Option<String>,
    memo: Option<String>,
    fitid: Option<Option<String>>,
}

#[derive(Default)]
struct Builder<'a> {
    stack: Vec<Open<'a>>,
    statement: Option<StatementSoFar>,
    transaction: Option<TransactionSoFar>,
    transactions: usize,
    statements: Vec<Statement>,
    by_key: HashMap<(Option<String>, Option<String>), usize>,
    saw_ofx: bool,
    investment_line: Option<usize>,
    status: Option<(usize, String)>,
}

fn is(name: &str, want: &str) -> bool {
    name.eq_ignore_ascii_case(want)
}

fn non_empty(v: String) -> Option<String> {
    (!v.is_empty()).then_some(v)
}

impl<'a> Builder<'a> {
    fn run(mut self, text: &'a str, aggregates: &HashSet<String>) -> Result<Vec<Statement>, ImportError> {
        let is_aggregate = |name: &str| aggregates.contains(&name.to_ascii_uppercase());
        let mut elements = Elements::new(text);
        while let Some((event, line)) = elements.next(&is_aggregate)? {
            match event {
                Event::Open(name) => self.open(name, line)?,
                Event::Close(name) => {
                    // An end tag closes what is still open inside it; a stray one is ignored.
                    if let Some(at) = self.stack.iter().rposition(|o| is(o.name, name)) {
                        while self.stack.len() > at {
                            self.close()?;
                        }
                    }
                }
                Event::Data(name, value) => self.data(name, value, line)?,
            }
        }
        let last_line = elements.lexer.line;
        if !self.saw_ofx {
            return Err(ImportError::at(1, "not an OFX file: no <OFX> element"));
        }
        if let Some(open) = self.stack.iter().rev().find(|o| o.role != Role::Other) {
            if let Some(t) = &self.transaction {
                self.check_transaction(t)?;
            }
            return Err(ImportError::at(
                open.line,
                format!("<{}> is not closed: the file ends at line {last_line} (truncated?)", open.name),
            ));
        }
        if self.statements.is_empty() {
            if let Some((line, status)) = self.status {
                return Err(ImportError::at(line, format!("the bank reports an error: {status}")));
            }
            if let Some(line) = self.investment_line {
                return Err(ImportError::at(line, "investment statements (INVSTMTRS) are not read"));
            }
            return Err(ImportError::at(
                last_line,
                "no bank or credit-card statement (STMTRS or CCSTMTRS) in the file",
            ));
        }
        Ok(self.statements)
    }

    fn open(&mut self, name: &'a str, line: usize) -> Result<(), ImportError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(ImportError::at(line, format!("tags nested more than {MAX_DEPTH} deep")));
        }
        let mut role = Role::Other;
        if is(name, "OFX") {
            self.saw_ofx = true;
        } else if is(name, "STMTRS") || is(name, "CCSTMTRS") {
            if self.statement.is_some() {
                return Err(ImportError::at(line, format!("<{name}> inside another statement")));
            }
            self.statement = Some(StatementSoFar { account: None, currency: None, lines: Vec::new() });
            role = Role::Statement;
        } else if is(name, "STMTTRN") && self.statement.is_some() {
            if self.transaction.is_some() {
                return Err(ImportError::at(
                    line,
                    "<STMTTRN> inside another <STMTTRN> (a missing </STMTTRN>?)",
                ));
            }
            self.transactions += 1;
            if self.transactions > MAX_LINES {
                return Err(ImportError::at(
                    line,
                    format!("the file has more than {MAX_LINES} transactions"),
                ));
            }
            self.transaction = Some(TransactionSoFar { line, ..Default::default() });
            role = Role::Transaction;
        } else if is(name, "INVSTMTRS") {
            self.investment_line.get_or_insert(line);
        }
        self.stack.push(Open { name, line, role });
        Ok(())
    }

    fn close(&mut self) -> Result<(), ImportError> {
        let Some(open) = self.stack.pop() else { return Ok(()) };
        match open.role {
            Role::Other => {}
            Role::Transaction => {
                let t = self.transaction.take().unwrap_or_default();
                self.check_transaction(&t)?;
                let line = Line {
                    day: t.day.unwrap_or_default(),
                    amount_cents: t.amount_cents.unwrap_or_default(),
                    payee: t.name.or(t.payee_name),
                    memo: t.memo,
                    bank_id: t.fitid.flatten(),
                    source_line: t.line,
                };
                if let Some(s) = &mut self.statement {
                    s.lines.push(line);
                }
            }
            Role::Statement => {
                let Some(s) = self.statement.take() else { return Ok(()) };
                let key = (s.account.clone(), s.currency.clone());
                match self.by_key.get(&key) {
                    Some(&i) => self.statements[i].lines.extend(s.lines),
                    None => {
                        self.by_key.insert(key, self.statements.len());
                        self.statements.push(Statement {
                            account: s.account,
                            currency: s.currency,
                            lines: s.lines,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    fn check_transaction(&self, t: &TransactionSoFar) -> Result<(), ImportError> {
        for (missing, tag) in [(t.day.is_none(), "DTPOSTED"), (t.amount_cents.is_none(), "TRNAMT")] {
            if missing {
                return Err(ImportError::at(t.line, format!("the transaction (<STMTTRN>) has no <{tag}>")));
            }
        }
        Ok(())
    }

    fn data(&mut self, name: &str, value: String, line: usize) -> Result<(), ImportError> {
        let Some(top) = self.stack.last() else { return Ok(()) };
        let twice = || ImportError::at(line, format!("a second <{name}> in one transaction"));
        match (top.role, &mut self.transaction, &mut self.statement) {
            (Role::Transaction, Some(t), _) => {
                if is(name, "DTPOSTED") {
                    if t.day.is_some() {
                        return Err(twice());
                    }
                    t.day = Some(text::yyyymmdd(&value, line)?);
                } else if is(name, "TRNAMT") {
                    if t.amount_cents.is_some() {
                        return Err(twice());
                    }
                    // OFX allows `,` as the decimal mark and has no thousands separator.
                    let comma = value.contains(',') && !value.contains('.');
                    t.amount_cents = Some(text::amount_cents(&value, comma, line)?);
                } else if is(name, "FITID") {
                    if t.fitid.is_some() {
                        return Err(twice());
                    }
                    t.fitid = Some(non_empty(value));
                } else if is(name, "NAME") && t.name.is_none() {
                    t.name = non_empty(value);
                } else if is(name, "MEMO") && t.memo.is_none() {
                    t.memo = non_empty(value);
                }
            }
            (_, Some(t), _) if is(top.name, "PAYEE") && is(name, "NAME") => {
                t.payee_name = t.payee_name.take().or(non_empty(value));
            }
            (Role::Statement, None, Some(s)) if is(name, "CURDEF") => s.currency = non_empty(value),
            (_, None, Some(s))
                if (is(top.name, "BANKACCTFROM") || is(top.name, "CCACCTFROM")) && is(name, "ACCTID") =>
            {
                s.account = non_empty(value)
            }
            _ if is(top.name, "STATUS") => {
                // A non-zero status explains a file without statements.
                if is(name, "CODE") && value != "0" && self.status.is_none() {
                    self.status = Some((line, format!("status {}", text::shown(&value))));
                } else if is(name, "MESSAGE") {
                    if let Some((_, s)) = &mut self.status {
                        if !s.contains(':') {
                            s.push_str(&format!(": {}", text::shown(&value)));
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::dates::days_from_civil;
    use crate::import::corpus;

    const SGML_HEADER: &str = "OFXHEADER:100\nDATA:OFXSGML\nVERSION:102\nSECURITY:NONE\nENCODING:USASCII\n\
                               CHARSET:1252\nCOMPRESSION:NONE\nOLDFILEUID:NONE\nNEWFILEUID:NONE\n\n";

    /// An OFX 1.x bank statement around `transactions`, SGML without end tags on data elements.
    fn sgml(transactions: &str) -> String {
        format!(
            "{SGML_HEADER}<OFX>\n<BANKMSGSRSV1>\n<STMTTRNRS>\n<TRNUID>1\n<STMTRS>\n<CURDEF>USD\n\
             <BANKACCTFROM>\n<BANKID>121099999\n<ACCTID>999988\n<ACCTTYPE>CHECKING\n</BANKACCTFROM>\n\
             <BANKTRANLIST>\n<DTSTART>20051001\n<DTEND>20051028\n{transactions}</BANKTRANLIST>\n\
             </STMTRS>\n</STMTTRNRS>\n</BANKMSGSRSV1>\n</OFX>\n"
        )
    }

    fn read_str(s: &str) -> Result<Vec<Statement>, ImportError> {
        read(s.as_bytes())
    }

    fn one_line(s: &str) -> Line {
        let st = read_str(s).unwrap();
        assert_eq!(st.len(), 1);
        assert_eq!(st[0].lines.len(), 1);
        st[0].lines[0].clone()
    }

    fn err(s: &[u8]) -> ImportError {
        read(s).expect_err("the file must be refused")
    }

    /// The line of the first occurrence of `needle`.
    fn line_of(s: &str, needle: &str) -> usize {
        s[..s.find(needle).expect(needle)].matches('\n').count() + 1
    }

    #[test]
    fn every_ofx_and_qfx_file_of_the_corpus() {
        let entries: Vec<_> = corpus::entries("ofx").into_iter().chain(corpus::entries("qfx")).collect();
        assert_eq!(entries.len(), 9);
        for e in &entries {
            let got = read(&corpus::bytes(e)).unwrap_or_else(|err| panic!("{}: {err}", e["file"]));
            corpus::check(e, &got);
        }
    }

    /// The payees of the corpus in the charsets their headers declare (or not).
    #[test]
    fn corpus_payees_are_decoded() {
        let first = |file: &str| {
            let e = corpus::entries("").into_iter().find(|e| e["file"] == file).expect(file);
            read(&corpus::bytes(&e)).unwrap()[0].lines[0].clone()
        };
        let l = first("qfx_actual_1252.qfx");
        assert_eq!(
            (l.payee.as_deref(), l.memo.as_deref()),
            (Some("Café Métro €uro"), Some("Paiement 5€ — débit"))
        );
        assert_eq!(first("qfx_actual_8859-1.qfx").payee.as_deref(), Some("Paiement facture/Carte prépayée"));
        assert_eq!(first("qfx_chase_cc.qfx").payee.as_deref(), Some("SQ *ECCO UN POCO \u{a6} NATURA"));
        let l = first("ofx2_suncorp_cdata.ofx");
        assert_eq!(l.payee.as_deref(), Some("EFTPOS WDL HANDYWAY ALDI STORE"));
        assert_eq!(l.memo.as_deref(), Some("EFTPOS WDL HANDYWAY ALDI STORE   GEELONG WEST VICAU"));
    }

    /// The OFX 1.x spec's form: header lines, unclosed data elements, end tags on aggregates.
    #[test]
    fn sgml_statement_with_unclosed_tags() {
        let f = sgml(
            "<STMTTRN>\n<TRNTYPE>CHECK\n<DTPOSTED>20051004120000[-5:EST]\n<TRNAMT>-200.00\n\
             <FITID>00002\n<CHECKNUM>1000\n<NAME>Check 1000\n<MEMO>rent\n</STMTTRN>\n",
        );
        let st = read_str(&f).unwrap();
        assert_eq!(st.len(), 1);
        assert_eq!(st[0].account.as_deref(), Some("999988"));
        assert_eq!(st[0].currency.as_deref(), Some("USD"));
        assert_eq!(
            st[0].lines,
            vec![Line {
                day: days_from_civil(2005, 10, 4),
                amount_cents: -20_000,
                payee: Some("Check 1000".into()),
                memo: Some("rent".into()),
                bank_id: Some("00002".into()),
                source_line: line_of(&f, "<STMTTRN>"),
            }]
        );
    }

    /// Blank lines before the header, the body on one line with end tags, empty elements.
    #[test]
    fn one_line_body_with_end_tags_and_empty_elements() {
        let f = format!(
            "\n\n\n{SGML_HEADER}<OFX><BANKMSGSRSV1><STMTTRNRS><STMTRS><CURDEF></CURDEF><BANKACCTFROM>\
             <BANKID>NPBS</BANKID><ACCTID>12345678</ACCTID><ACCTTYPE></ACCTTYPE></BANKACCTFROM>\
             <BANKTRANLIST><STMTTRN><TRNTYPE>Credit</TRNTYPE><DTPOSTED>20180507</DTPOSTED>\
             <TRNAMT>12.34</TRNAMT><FITID></FITID><NAME></NAME><MEMO>CBA:Transfer</MEMO><CURRENCY>\
             <CURRATE>1.0000</CURRATE><CURSYM>AUD</CURSYM></CURRENCY></STMTTRN></BANKTRANLIST>\
             </STMTRS></STMTTRNRS></BANKMSGSRSV1></OFX>"
        );
        let st = read_str(&f).unwrap();
        assert_eq!((st[0].account.as_deref(), st[0].currency.as_deref()), (Some("12345678"), None));
        let l = &st[0].lines[0];
        assert_eq!((l.amount_cents, l.bank_id.as_deref(), l.payee.as_deref()), (1234, None, None));
        assert_eq!((l.memo.as_deref(), l.source_line), (Some("CBA:Transfer"), line_of(&f, "<OFX>")));
    }

    /// An empty data element without an end tag does not swallow the elements after it.
    #[test]
    fn empty_unclosed_element_is_an_empty_data_element() {
        let l = one_line(&sgml(
            "<STMTTRN>\n<CHECKNUM>\n<DTPOSTED>20051004\n<TRNAMT>1\n<FITID>\n<NAME>After\n</STMTTRN>\n",
        ));
        assert_eq!((l.amount_cents, l.bank_id, l.payee.as_deref()), (100, None, Some("After")));
    }

    #[test]
    fn tag_names_are_read_in_any_case_and_values_kept_as_written() {
        let l = one_line(&sgml(
            "<stmttrn>\n<TrnType>Credit\n<dtposted>20051004\n<trnamt>+5\n<fitid>aBc\n<name>MiXeD\n</stmttrn>\n",
        ));
        assert_eq!(
            (l.amount_cents, l.bank_id.as_deref(), l.payee.as_deref()),
            (500, Some("aBc"), Some("MiXeD"))
        );
    }

    #[test]
    fn payee_aggregate_name_when_there_is_no_name() {
        let l = one_line(&sgml(
            "<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>-1.5\n<PAYEE>\n<NAME>Power Co\n<ADDR1>1 Main St\n\
             <CITY>X\n</PAYEE>\n<MEMO>bill\n</STMTTRN>\n",
        ));
        assert_eq!(
            (l.amount_cents, l.payee.as_deref(), l.memo.as_deref()),
            (-150, Some("Power Co"), Some("bill"))
        );
    }

    #[test]
    fn charsets_from_the_header() {
        let file = |charset: &str, name: &[u8]| -> Vec<u8> {
            let f = sgml("<STMTTRN>\n<DTPOSTED>20221019\n<TRNAMT>-20.00\n<NAME>@@\n</STMTTRN>\n");
            let f = f.replace("CHARSET:1252", charset);
            let (a, b) = f.split_once("@@").unwrap();
            [a.as_bytes(), name, b.as_bytes()].concat()
        };
        let payee = |f: Vec<u8>| read(&f).unwrap()[0].lines[0].payee.clone().unwrap();
        assert_eq!(payee(file("CHARSET:1252", b"Caf\xe9 \x80uro \x97 x")), "Café €uro — x");
        assert_eq!(payee(file("CHARSET:8859-1", b"pr\xe9pay\xe9e")), "prépayée");
        // UTF-8 bytes under a 1252 header (Chase) are UTF-8.
        assert_eq!(
            payee(file("CHARSET:1252", "SQ *ECCO \u{a6} NATURA".as_bytes())),
            "SQ *ECCO \u{a6} NATURA"
        );
        assert_eq!(
            declared_charset(b"\n\nOFXHEADER:100\r\nCHARSET:8859-1\r\n<OFX>").as_deref(),
            Some("8859-1")
        );
        assert_eq!(
            declared_charset(b"OFXHEADER:100\nENCODING:UTF-8\nCHARSET:NONE\n").as_deref(),
            Some("utf-8")
        );
        assert_eq!(
            declared_charset(b"<?xml version='1.0' encoding='us-ascii'?><OFX>").as_deref(),
            Some("us-ascii")
        );
    }

    const XML_HEAD: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\r\n\
                            <?OFX OFXHEADER=\"200\" VERSION=\"200\" SECURITY=\"NONE\" OLDFILEUID=\"NONE\" \
                            NEWFILEUID=\"NONE\"?>  \r\n";

    /// OFX 2.x: processing instructions, CDATA, entities, a comma as the decimal mark.
    #[test]
    fn xml_statement_with_cdata_entities_and_decimal_comma() {
        let f = format!(
            "{XML_HEAD}<OFX>\r\n<!-- a comment <STMTTRN> -->\r\n<BANKMSGSRSV1><STMTTRNRS><STMTRS>\r\n\
             <CURDEF>AUD</CURDEF><BANKACCTFROM><BANKID>S</BANKID><ACCTID>123456789</ACCTID>\
             </BANKACCTFROM>\r\n<BANKTRANLIST>\r\n<STMTTRN>\r\n<DTPOSTED>20131215</DTPOSTED>\r\n\
             <TRNAMT>-200,00</TRNAMT>\r\n<FITID>1</FITID>\r\n\
             <NAME><![CDATA[EFTPOS <ALDI> & CO  ]]></NAME>\r\n\
             <MEMO>AT&amp;T &lt;x&gt; &quot;q&quot; &apos;a&apos; &#233;&#xE9; AT&T &bogus; &#0;</MEMO>\r\n\
             </STMTTRN>\r\n<STMTTRN><DTPOSTED>20131216</DTPOSTED><TRNAMT>1,5</TRNAMT><FITID/></STMTTRN>\r\n\
             </BANKTRANLIST></STMTRS></STMTTRNRS></BANKMSGSRSV1></OFX>"
        );
        let st = read_str(&f).unwrap();
        let l = &st[0].lines;
        assert_eq!((st[0].account.as_deref(), st[0].currency.as_deref()), (Some("123456789"), Some("AUD")));
        assert_eq!((l[0].amount_cents, l[1].amount_cents, l[1].bank_id.as_deref()), (-20_000, 150, None));
        assert_eq!(l[0].payee.as_deref(), Some("EFTPOS <ALDI> & CO"));
        assert_eq!(l[0].memo.as_deref(), Some("AT&T <x> \"q\" 'a' éé AT&T &bogus; &#0;"));
        let want = (line_of(&f, "<STMTTRN>\r\n"), line_of(&f, "<STMTTRN><DTPOSTED>20131216"));
        assert_eq!((l[0].source_line, l[1].source_line), want);
    }

    /// ANZ: an OFX 2 XML header followed by SGML tags.
    #[test]
    fn xml_header_with_sgml_body() {
        let f = format!(
            "{XML_HEAD}<OFX>\n<CREDITCARDMSGSRSV1>\n<CCSTMTTRNRS>\n<CCSTMTRS>\n<CURDEF>AUD\n<CCACCTFROM>\n\
             <ACCTID>1234123412341234\n</CCACCTFROM>\n<BANKTRANLIST>\n<STMTTRN>\n<TRNTYPE>DEBIT\n\
             <DTPOSTED>20170508000000\n<TRNAMT>-5.50\n<FITID>201705080001\n<MEMO>SOME MEMO\n</STMTTRN>\n\
             </BANKTRANLIST>\n<LEDGERBAL>\n<BALAMT>-123.45\n</LEDGERBAL>\n</CCSTMTRS>\n</CCSTMTTRNRS>\n\
             </CREDITCARDMSGSRSV1>\n</OFX>\n"
        );
        let st = read_str(&f).unwrap();
        assert_eq!(st[0].account.as_deref(), Some("1234123412341234"));
        assert_eq!((st[0].lines[0].amount_cents, st[0].lines[0].day), (-550, days_from_civil(2017, 5, 8)));
    }

    /// Two accounts, bank and card; the bank account's second statement is merged into its first.
    #[test]
    fn several_accounts_and_merged_statements() {
        let bank = |acct: &str, fitid: &str| {
            format!(
                "<STMTTRNRS><STMTRS><CURDEF>EUR<BANKACCTFROM><ACCTID>{acct}</BANKACCTFROM><BANKTRANLIST>\
                 <STMTTRN><DTPOSTED>20240101<TRNAMT>1.00<FITID>{fitid}\n</STMTTRN></BANKTRANLIST>\
                 </STMTRS></STMTTRNRS>\n"
            )
        };
        let f = format!(
            "{SGML_HEADER}<OFX><BANKMSGSRSV1>\n{}{}</BANKMSGSRSV1><CREDITCARDMSGSRSV1><CCSTMTTRNRS>\
             <CCSTMTRS><CURDEF>EUR<CCACCTFROM><ACCTID>card</CCACCTFROM><BANKTRANLIST><STMTTRN>\
             <DTPOSTED>20240102<TRNAMT>-3<FITID>c1</STMTTRN></BANKTRANLIST></CCSTMTRS></CCSTMTTRNRS>\
             </CREDITCARDMSGSRSV1><BANKMSGSRSV1>{}</BANKMSGSRSV1></OFX>",
            bank("A", "a1"),
            bank("B", "b1"),
            bank("A", "a2"),
        );
        let st = read_str(&f).unwrap();
        let got: Vec<_> = st
            .iter()
            .map(|s| {
                let ids: Vec<_> = s.lines.iter().map(|l| l.bank_id.clone().unwrap()).collect();
                (s.account.clone().unwrap(), ids)
            })
            .collect();
        let want =
            |a: &str, ids: &[&str]| (a.to_string(), ids.iter().map(|i| i.to_string()).collect::<Vec<_>>());
        assert_eq!(got, vec![want("A", &["a1", "a2"]), want("B", &["b1"]), want("card", &["c1"])]);
    }

    /// A transfer's destination account and a balance's name are not the statement's.
    #[test]
    fn account_and_names_of_other_aggregates_are_not_taken() {
        let st = read_str(&sgml(
            "<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>-1\n<BANKACCTTO>\n<BANKID>1\n<ACCTID>other\n\
             </BANKACCTTO>\n</STMTTRN>\n<BALLIST><BAL><NAME>Interest<VALUE>1</BAL></BALLIST>\n",
        ))
        .unwrap();
        assert_eq!((st[0].account.as_deref(), st[0].lines[0].payee.as_deref()), (Some("999988"), None));
    }

    #[test]
    fn line_numbers_count_crlf_and_lone_cr() {
        let f = sgml("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n</STMTTRN>\n");
        let want = line_of(&f, "<STMTTRN>");
        assert_eq!(one_line(&f.replace('\n', "\r\n")).source_line, want);
        assert_eq!(one_line(&f.replace('\n', "\r")).source_line, want);
    }

    // ---------------------------------------------------------------------------- hostile

    #[test]
    fn binary_garbage_is_refused_with_a_line() {
        let e = err(b"OFXHEADER:100\n\n<OFX>\n\x00\x01\x02\xff\xfe");
        assert_eq!(e.line, 4, "{e}");
        let mut noise = Vec::new();
        let mut x: u32 = 0x1234_5678;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            noise.push((x % 255 + 1) as u8);
        }
        assert!(err(&noise).line >= 1);
        assert_eq!(err(b"just some text").line, 1);
    }

    #[test]
    fn transaction_without_amount_or_date_names_its_line() {
        for (drop, tag) in [("<TRNAMT>1\n", "TRNAMT"), ("<DTPOSTED>20051004\n", "DTPOSTED")] {
            let f = sgml(&"<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n</STMTTRN>\n".replace(drop, ""));
            let e = read_str(&f).unwrap_err();
            assert_eq!(e.line, line_of(&f, "<STMTTRN>"), "{e}");
            assert!(e.msg.contains(tag), "{e}");
        }
    }

    /// Every cut of a file before its statement ends is refused, and none panics.
    #[test]
    fn truncated_files_are_refused() {
        let f = sgml("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n<NAME>A &amp; B\n</STMTTRN>\n");
        let end = f.find("</STMTRS>").unwrap() + "</STMTRS>".len();
        for cut in 0..end {
            let e = read(&f.as_bytes()[..cut]).unwrap_err();
            assert!(e.line >= 1 || cut == 0, "cut at {cut}: {e}");
        }
        let e = read_str(&f[..f.find("</STMTTRN>").unwrap()]).unwrap_err();
        assert!(e.msg.contains("truncated"), "{e}");
        assert!(read_str(&f[..end]).is_ok());
    }

    #[test]
    fn impossible_dates_and_huge_amounts_name_their_line() {
        let f = sgml("<STMTTRN>\n<DTPOSTED>20251345\n<TRNAMT>1\n</STMTTRN>\n");
        assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, "<DTPOSTED>"));
        let f = sgml(
            "<STMTTRN>\n<DTPOSTED>20251231\n<TRNAMT>1234567890123456789012345678901234567890\n</STMTTRN>\n",
        );
        assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, "<TRNAMT>"));
        let f = sgml("<STMTTRN>\n<DTPOSTED>20251231\n<TRNAMT>1\n<TRNAMT>2\n</STMTTRN>\n");
        assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, "<TRNAMT>2"));
    }

    #[test]
    fn deep_nesting_is_capped() {
        let depth = 100_000;
        let f = format!("{SGML_HEADER}<OFX>\n{}{}</OFX>", "<A>\n".repeat(depth), "</A>".repeat(depth));
        let e = read_str(&f).unwrap_err();
        // <OFX> is the first open aggregate, so the A that goes past the cap is the 64th.
        assert_eq!(e.line, line_of(&f, "<OFX>") + MAX_DEPTH, "{e}");
        // Unclosed tags are empty data elements, not nesting.
        let f =
            sgml(&format!("{}<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n</STMTTRN>\n", "<B>".repeat(depth)));
        assert_eq!(read_str(&f).unwrap()[0].lines.len(), 1);
        let f = sgml("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n<STMTTRN>\n");
        assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, "<TRNAMT>1\n<STMTTRN>") + 1);
    }

    #[test]
    fn more_than_max_lines_transactions_stops_early() {
        let tx = "<STMTTRN><DTPOSTED>20240101<TRNAMT>1</STMTTRN>\n";
        let f = sgml(&tx.repeat(MAX_LINES + 1000));
        let e = read_str(&f).unwrap_err();
        assert_eq!(e.line, line_of(&f, "<STMTTRN>") + MAX_LINES, "{e}");
        assert_eq!(read_str(&sgml(&tx.repeat(MAX_LINES))).unwrap()[0].lines.len(), MAX_LINES);
    }

    #[test]
    fn unclosed_markup_and_odd_tags_name_their_line() {
        for (body, needle) in [
            ("<!-- never closed\n", "<!--"),
            ("<NAME><![CDATA[never closed\n", "<NAME>"),
            ("<NAME>a <B c\n<MEMO>x\n", "<NAME>"),
            ("<?pi never closed\n", "<?pi"),
        ] {
            let f = sgml(&format!("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n{body}</STMTTRN>\n"));
            assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, needle), "{body}");
        }
        let doctype = "<!DOCTYPE OFX [<!ENTITY a \"aaaa\">]>";
        let f = sgml(&format!("\n{doctype}\n"));
        assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, doctype));
        let long = format!("<{}>", "N".repeat(MAX_NAME_BYTES + 1));
        let f = sgml(&format!("\n{long}x\n"));
        assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, &long));
        let many: String = (0..MAX_AGGREGATE_NAMES + 1).map(|i| format!("<A{i}><X>1</A{i}>\n")).collect();
        assert!(read_str(&sgml(&many)).is_err());
        // A `<` that opens no tag is text.
        let l = one_line(&sgml("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n<NAME>1 < 2 <= 3\n</STMTTRN>\n"));
        assert_eq!(l.payee.as_deref(), Some("1 < 2 <= 3"));
    }

    /// Megabytes of `&`, stray `<` and entity starts cost linear time.
    #[test]
    fn pathological_values_cost_linear_time() {
        for junk in ["&", "< ", "&#", "&#x", "<"] {
            let value = junk.repeat(1 << 20);
            let f = sgml(&format!("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n<MEMO>{value}\n</STMTTRN>\n"));
            let l = one_line(&f);
            assert_eq!(l.memo.map(|m| m.len()), Some(value.trim().len()), "{junk}");
        }
    }

    #[test]
    fn files_without_a_bank_statement() {
        let f = format!(
            "{SGML_HEADER}<OFX><SIGNONMSGSRSV1><SONRS><STATUS><CODE>15500<SEVERITY>ERROR\
                         <MESSAGE>bad password</STATUS></SONRS></SIGNONMSGSRSV1></OFX>"
        );
        assert!(read_str(&f).unwrap_err().msg.contains("15500: bad password"));
        let f = format!(
            "{SGML_HEADER}<OFX><INVSTMTMSGSRSV1><INVSTMTTRNRS>\n<INVSTMTRS><INVBANKTRAN>\
                         <STMTTRN><DTPOSTED>20240101<TRNAMT>1</STMTTRN></INVBANKTRAN></INVSTMTRS>\
                         </INVSTMTTRNRS></INVSTMTMSGSRSV1></OFX>"
        );
        assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, "<INVSTMTRS>"));
        assert!(read_str(&format!("{SGML_HEADER}<OFX></OFX>")).is_err());
    }

    /// Structured noise made of OFX's own pieces: every outcome is a value or an error.
    #[test]
    fn random_pieces_never_panic() {
        const PIECES: [&str; 22] = [
            "<OFX>",
            "</OFX>",
            "<STMTRS>",
            "</STMTRS>",
            "<CCSTMTRS>",
            "<STMTTRN>",
            "</STMTTRN>",
            "<TRNAMT>",
            "-1,5",
            "1.25",
            "<DTPOSTED>",
            "20240229",
            "<FITID>",
            "</FITID>",
            "<![CDATA[x]]>",
            "&#x1F600;",
            "&#",
            "\n",
            "\r",
            "<A>",
            "</A>",
            "<ACCTID>é",
        ];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..3_000 {
            let mut f = String::from("OFXHEADER:100\n");
            for _ in 0..(x % 60) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                f.push_str(PIECES[(x % PIECES.len() as u64) as usize]);
            }
            if let Err(e) = read_str(&f) {
                assert!(e.line >= 1, "{f:?}: {e}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let mut f = b"OFXHEADER:100\n<OFX><STMTRS><STMTTRN>".to_vec();
            f.extend(bytes);
            let _ = read(&f);
        }
    }
}
