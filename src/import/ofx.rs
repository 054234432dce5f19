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
use super::{ImportError, Line, Statement, Statements, MAX_LINES};
use std::collections::HashSet;

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
    super::check_size(bytes)?;
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
    statements: Statements,
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
        Ok(self.statements.into_vec())
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
                return Err(super::too_many_lines(line));
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
                self.statements.of(s.account, s.currency).lines.extend(s.lines);
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
#[path = "ofx_tests.rs"]
mod tests;
