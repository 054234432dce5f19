//! CSV statements. Every bank lays its export out its own way, so the user saves a [`Mapping`]
//! under a name (JSON) that says where the header is and which column holds what, and reuses it
//! for each file of that bank.

use serde::{Deserialize, Serialize};

use super::text::{self, shown};
use super::{ImportError, Line, Statement, Statements, MAX_LINES};

/// A column, by its header's text (trimmed) or by 0-based index; a negative index counts from
/// the end of each row (`-1` is the last field), for banks whose rows are shorter than their
/// header. JSON: `{"name": "Betrag (EUR)"}` or `{"index": -2}`.
// Externally tagged, not untagged: serde_json's arbitrary_precision breaks untagged numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Column {
    Name(String),
    Index(i64),
}

/// Rows count only when this column holds this value (trimmed): Swedbank mixes balance and
/// turnover rows among its transactions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    pub column: Column,
    pub equals: String,
}

/// How a bank's CSV export maps to lines. Every field has a default, so a JSON mapping names
/// only what differs; unknown fields are refused (a misspelt field would be silently ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Mapping {
    /// `UTF-8` (default), `ISO-8859-1`, `cp1252`, `cp1257`...; a UTF-8 byte order mark is dropped.
    pub charset: String,
    /// `,` (default), `;`, `\t`, `|`.
    pub delimiter: char,
    /// Lines of the file before the header (or before the first row without a header).
    pub skip_lines: usize,
    /// The header is the first row after `skip_lines` whose first cell is this text (trimmed);
    /// none: the first row after `skip_lines`.
    pub header_first_cell: Option<String>,
    /// False for files without a header: every column is then an index.
    pub has_header: bool,
    /// The booking date (required).
    pub date: Option<Column>,
    /// `%d %m %Y %y %H %M %S` and `%%`; any other character is itself, and a space matches any
    /// run of spaces. Default `%Y-%m-%d`.
    pub date_format: String,
    /// One signed amount column...
    pub amount: Option<Column>,
    /// ...or a debit (money out) and a credit (money in) column, signs ignored, either may be
    /// empty...
    pub debit: Option<Column>,
    pub credit: Option<Column>,
    /// ...and with `amount`, a debit/credit indicator column: the amount is negated where it
    /// holds `debit_mark` (trimmed, case ignored). With `credit_mark`, any other value is refused.
    pub indicator: Option<Column>,
    pub debit_mark: Option<String>,
    pub credit_mark: Option<String>,
    /// `.` (default) or `,`.
    pub decimal_mark: char,
    /// Grouping character in amounts (`.`, `,`, space, `'`...), dropped before the decimal mark.
    pub thousands_separator: Option<char>,
    pub payee: Option<Column>,
    pub memo: Option<Column>,
    /// The bank's own id of each line.
    pub id: Option<Column>,
    /// Currency and account: a column, or one value for the whole file, or neither.
    pub currency: Option<Column>,
    pub account: Option<Column>,
    pub fixed_currency: Option<String>,
    pub fixed_account: Option<String>,
    pub filter: Option<Filter>,
}

impl Default for Mapping {
    fn default() -> Mapping {
        Mapping {
            charset: "UTF-8".to_string(),
            delimiter: ',',
            skip_lines: 0,
            header_first_cell: None,
            has_header: true,
            date: None,
            date_format: "%Y-%m-%d".to_string(),
            amount: None,
            debit: None,
            credit: None,
            indicator: None,
            debit_mark: None,
            credit_mark: None,
            decimal_mark: '.',
            thousands_separator: None,
            payee: None,
            memo: None,
            id: None,
            currency: None,
            account: None,
            fixed_currency: None,
            fixed_account: None,
            filter: None,
        }
    }
}

impl Mapping {
    /// Refuses a mapping that cannot read any file, saying why.
    pub fn check(&self) -> Result<(), String> {
        if self.date.is_none() {
            return Err("the mapping has no date column".into());
        }
        DateFormat::parse(&self.date_format)?;
        if !self.delimiter.is_ascii()
            || self.delimiter.is_ascii_alphanumeric()
            || "\"\r\n".contains(self.delimiter)
        {
            return Err(format!("`{}` cannot be the delimiter", self.delimiter.escape_default()));
        }
        match (&self.amount, &self.debit, &self.credit) {
            (Some(_), None, None) | (None, Some(_), Some(_)) => {}
            (Some(_), _, _) => {
                return Err("the mapping has both an amount column and debit/credit columns".into())
            }
            (None, None, None) => return Err("the mapping has no amount column".into()),
            _ => {
                return Err("a debit column needs a credit column, and a credit column a debit column".into())
            }
        }
        match (&self.indicator, &self.debit_mark) {
            (Some(_), Some(mark)) if self.amount.is_none() || mark.trim().is_empty() => {
                return Err("a debit/credit indicator needs one amount column and a debit mark".into())
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err("an indicator column and a debit mark go together".into())
            }
            _ => {}
        }
        if let Some(credit) = &self.credit_mark {
            let debit = self.debit_mark.as_deref().unwrap_or("").trim();
            if self.indicator.is_none() || credit.trim().eq_ignore_ascii_case(debit) {
                return Err("a credit mark needs an indicator column and a different debit mark".into());
            }
        }
        if !matches!(self.decimal_mark, '.' | ',') {
            return Err("the decimal mark is `.` or `,`".into());
        }
        if let Some(sep) = self.thousands_separator {
            if sep == self.decimal_mark || sep.is_ascii_digit() || sep == '-' || sep == '+' {
                return Err(format!("`{sep}` cannot be the thousands separator"));
            }
        }
        if self.currency.is_some() && self.fixed_currency.is_some() {
            return Err("the mapping has both a currency column and a fixed currency".into());
        }
        if self.account.is_some() && self.fixed_account.is_some() {
            return Err("the mapping has both an account column and a fixed account".into());
        }
        if self.header_first_cell.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err("the header's first cell is empty text".into());
        }
        if !self.has_header {
            if self.header_first_cell.is_some() {
                return Err("a file without a header has no header's first cell".into());
            }
            if self.columns().iter().any(|c| matches!(c, Column::Name(_))) {
                return Err("a file without a header names its columns by index".into());
            }
        }
        Ok(())
    }

    /// Every column the mapping reads.
    fn columns(&self) -> Vec<&Column> {
        let named = [&self.date, &self.amount, &self.debit, &self.credit, &self.indicator, &self.payee];
        let more = [&self.memo, &self.id, &self.currency, &self.account];
        let mut all: Vec<&Column> = named.into_iter().chain(more).flatten().collect();
        all.extend(self.filter.as_ref().map(|f| &f.column));
        all
    }
}

/// Reads a CSV file through its mapping: one [`Statement`] per account and currency, in the
/// order they first appear.
pub fn read(bytes: &[u8], m: &Mapping) -> Result<Vec<Statement>, ImportError> {
    m.check().map_err(|e| ImportError::at(0, e))?;
    super::check_size(bytes)?;
    let text = text::decode(bytes, Some(&m.charset));
    let date_format = DateFormat::parse(&m.date_format).map_err(|e| ImportError::at(0, e))?;
    let mut rows = Rows::new(&text, m.delimiter);
    let mut cols: Option<Cols> = None;
    let mut statements = Statements::default();
    let mut count = 0usize;
    while let Some(line) = rows.next()? {
        let rec = &rows.rec;
        if line <= m.skip_lines {
            continue;
        }
        let c = match &cols {
            Some(c) => c,
            None if m.has_header => {
                let first = rec.get(0).map(str::trim);
                if m.header_first_cell.as_deref().is_some_and(|want| first != Some(want.trim())) {
                    continue;
                }
                cols = Some(Cols::resolve(m, Some(rec), line)?);
                continue;
            }
            None => cols.insert(Cols::resolve(m, None, line)?),
        };
        if rec.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        if let Some(n) = c.header_len.filter(|n| rec.len() > *n) {
            return Err(ImportError::at(
                line,
                format!("the row has {} fields, more than the header's {n}", rec.len()),
            ));
        }
        if let Some((col, want)) = &c.filter {
            if col.get(rec) != Some(want.trim()) {
                continue;
            }
        }
        let day = date_format.day(c.date.need(rec, line)?, line)?;
        let amount_cents = c.amount(m, rec, line)?;
        let opt = |col: &Option<Col>| {
            col.as_ref().and_then(|c| c.get(rec)).filter(|v| !v.is_empty()).map(String::from)
        };
        let account = opt(&c.account).or_else(|| m.fixed_account.clone());
        let currency = opt(&c.currency).or_else(|| m.fixed_currency.clone());
        if count == MAX_LINES {
            return Err(super::too_many_lines(line));
        }
        count += 1;
        statements.of(account, currency).lines.push(Line {
            day,
            amount_cents,
            payee: opt(&c.payee),
            memo: opt(&c.memo),
            bank_id: opt(&c.id),
            source_line: line,
        });
    }
    if cols.is_none() {
        return Err(ImportError::at(
            0,
            match &m.header_first_cell {
                Some(t) => format!("no row starts with the header cell `{}`", shown(t.trim())),
                None => format!("the file has no row after its first {} lines", m.skip_lines),
            },
        ));
    }
    Ok(statements.into_vec())
}

/// The records of the text, each with the 1-based line of the file where it starts.
struct Rows<'t> {
    text: &'t [u8],
    rdr: csv::Reader<&'t [u8]>,
    rec: csv::StringRecord,
}

impl<'t> Rows<'t> {
    fn new(text: &'t str, delimiter: char) -> Rows<'t> {
        let rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .delimiter(delimiter as u8)
            .from_reader(text.as_bytes());
        Rows { text: text.as_bytes(), rdr, rec: csv::StringRecord::new() }
    }

    fn next(&mut self) -> Result<Option<usize>, ImportError> {
        let line0 = self.rdr.position().line() as usize;
        match self.rdr.read_record(&mut self.rec) {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            // The text is valid UTF-8 and in memory: not expected, but never a panic.
            Err(e) => return Err(ImportError::at(line0, format!("unreadable CSV: {e}"))),
        }
        // A record's position is where the previous one ended: before the `\n` of a CRLF and any
        // blank lines, which the reader skips.
        let pos = self.rec.position().map(|p| (p.byte() as usize, p.line() as usize)).unwrap_or((0, line0));
        let skipped = self.text.get(pos.0..).unwrap_or_default();
        let newlines =
            skipped.iter().take_while(|b| matches!(b, b'\r' | b'\n')).filter(|b| **b == b'\n').count();
        Ok(Some(pos.1 + newlines))
    }
}

/// A column found in the header.
#[derive(Debug, Clone, Copy)]
enum Place {
    At(usize),
    FromEnd(usize),
}

#[derive(Debug, Clone)]
struct Col {
    place: Place,
    what: &'static str,
}

impl Col {
    fn get<'r>(&self, rec: &'r csv::StringRecord) -> Option<&'r str> {
        let i = match self.place {
            Place::At(i) => Some(i),
            Place::FromEnd(k) => rec.len().checked_sub(k),
        };
        i.and_then(|i| rec.get(i)).map(str::trim)
    }

    fn need<'r>(&self, rec: &'r csv::StringRecord, line: usize) -> Result<&'r str, ImportError> {
        self.get(rec).ok_or_else(|| {
            let n = rec.len();
            ImportError::at(line, format!("the row has no {} column ({n} field{})", self.what, plural(n)))
        })
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The mapping's columns, placed in the header.
struct Cols {
    header_len: Option<usize>,
    date: Col,
    amount: Option<Col>,
    debit: Option<Col>,
    credit: Option<Col>,
    indicator: Option<Col>,
    payee: Option<Col>,
    memo: Option<Col>,
    id: Option<Col>,
    currency: Option<Col>,
    account: Option<Col>,
    filter: Option<(Col, String)>,
}

impl Cols {
    fn resolve(m: &Mapping, header: Option<&csv::StringRecord>, line: usize) -> Result<Cols, ImportError> {
        let place = |what: &'static str, c: &Option<Column>| -> Result<Option<Col>, ImportError> {
            let Some(c) = c else { return Ok(None) };
            let place = match (c, header) {
                (Column::Name(name), Some(h)) => {
                    let mut found = h.iter().enumerate().filter(|(_, f)| f.trim() == name.trim());
                    let (i, _) = found.next().ok_or_else(|| {
                        ImportError::at(line, format!("the header has no column `{}` ({what})", shown(name)))
                    })?;
                    if found.next().is_some() {
                        return Err(ImportError::at(
                            line,
                            format!("the header has two columns `{}`", shown(name)),
                        ));
                    }
                    Place::At(i)
                }
                // check() refuses names without a header.
                (Column::Name(_), None) => return Err(ImportError::at(line, "a column name needs a header")),
                (Column::Index(i), _) if *i >= 0 => {
                    let i = usize::try_from(*i).unwrap_or(usize::MAX);
                    if let Some(h) = header.filter(|h| i >= h.len()) {
                        let n = h.len();
                        return Err(ImportError::at(
                            line,
                            format!("the {what} column {i} is past the header's {n} field{}", plural(n)),
                        ));
                    }
                    Place::At(i)
                }
                (Column::Index(i), _) => {
                    Place::FromEnd(usize::try_from(i.unsigned_abs()).unwrap_or(usize::MAX))
                }
            };
            Ok(Some(Col { place, what }))
        };
        let filter = match &m.filter {
            Some(f) => place("filter", &Some(f.column.clone()))?.map(|c| (c, f.equals.clone())),
            None => None,
        };
        Ok(Cols {
            header_len: header.map(|h| h.len()),
            date: place("date", &m.date)?
                .ok_or_else(|| ImportError::at(0, "the mapping has no date column"))?,
            amount: place("amount", &m.amount)?,
            debit: place("debit", &m.debit)?,
            credit: place("credit", &m.credit)?,
            indicator: place("indicator", &m.indicator)?,
            payee: place("payee", &m.payee)?,
            memo: place("memo", &m.memo)?,
            id: place("id", &m.id)?,
            currency: place("currency", &m.currency)?,
            account: place("account", &m.account)?,
            filter,
        })
    }

    /// The signed cents of a row, by whichever amount layout the mapping has.
    fn amount(&self, m: &Mapping, rec: &csv::StringRecord, line: usize) -> Result<i64, ImportError> {
        let cents = |text: &str| -> Result<i64, ImportError> {
            let comma = m.decimal_mark == ',';
            match m.thousands_separator {
                Some(sep) => {
                    // Only before the decimal mark: a separator among the decimals is an error.
                    let (whole, frac) = text.split_at(text.rfind(m.decimal_mark).unwrap_or(text.len()));
                    let whole: String = whole.chars().filter(|c| *c != sep).collect();
                    text::amount_cents(&format!("{whole}{frac}"), comma, line)
                }
                None => text::amount_cents(text, comma, line),
            }
        };
        if let Some(col) = &self.amount {
            let text = col.need(rec, line)?;
            if text.is_empty() {
                return Err(ImportError::at(line, "the amount is empty"));
            }
            let v = cents(text)?;
            let Some(ind) = &self.indicator else { return Ok(v) };
            let mark = ind.need(rec, line)?;
            let is =
                |want: &Option<String>| want.as_deref().is_some_and(|w| mark.eq_ignore_ascii_case(w.trim()));
            return if is(&m.debit_mark) {
                Ok(-v)
            } else if m.credit_mark.is_none() || is(&m.credit_mark) {
                Ok(v)
            } else {
                Err(ImportError::at(
                    line,
                    format!("`{}` is neither the debit nor the credit mark", shown(mark)),
                ))
            };
        }
        let (Some(debit), Some(credit)) = (&self.debit, &self.credit) else {
            return Err(ImportError::at(0, "the mapping has no amount column"));
        };
        let (d, c) = (debit.need(rec, line)?, credit.need(rec, line)?);
        if d.is_empty() && c.is_empty() {
            return Err(ImportError::at(line, "both the debit and the credit are empty"));
        }
        let side = |t: &str| if t.is_empty() { Ok(0) } else { cents(t).map(i64::abs) };
        Ok(side(c)? - side(d)?)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Day,
    Month,
    Year,
    Year2,
    Hour,
    Minute,
    Second,
    Space,
    Lit(char),
}

/// A parsed `date_format`.
struct DateFormat<'f> {
    text: &'f str,
    parts: Vec<Part>,
}

impl<'f> DateFormat<'f> {
    fn parse(text: &'f str) -> Result<DateFormat<'f>, String> {
        let mut parts = Vec::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            parts.push(match c {
                '%' => match chars.next() {
                    Some('d') => Part::Day,
                    Some('m') => Part::Month,
                    Some('Y') => Part::Year,
                    Some('y') => Part::Year2,
                    Some('H') => Part::Hour,
                    Some('M') => Part::Minute,
                    Some('S') => Part::Second,
                    Some('%') => Part::Lit('%'),
                    Some(o) => return Err(format!("the date format has an unknown directive `%{o}`")),
                    None => return Err("the date format ends with a lone `%`".into()),
                },
                c if c.is_whitespace() => Part::Space,
                c => Part::Lit(c),
            });
        }
        let n = |p: &[Part]| parts.iter().filter(|x| p.contains(x)).count();
        if n(&[Part::Day]) != 1 || n(&[Part::Month]) != 1 || n(&[Part::Year, Part::Year2]) != 1 {
            return Err(format!("the date format `{}` needs one %d, one %m and one %Y or %y", shown(text)));
        }
        if [Part::Hour, Part::Minute, Part::Second].iter().any(|p| n(&[*p]) > 1) {
            return Err(format!("the date format `{}` repeats a time directive", shown(text)));
        }
        Ok(DateFormat { text, parts })
    }

    /// Days since 1970-01-01 of a date written in this format; a time is checked and dropped.
    fn day(&self, value: &str, line: usize) -> Result<i64, ImportError> {
        let bad = || {
            ImportError::at(
                line,
                format!("`{}` is not a date in the format `{}`", shown(value), shown(self.text)),
            )
        };
        let s = value.trim().as_bytes();
        let mut i = 0;
        let (mut y, mut m, mut d) = (0i64, 0u32, 0u32);
        for part in &self.parts {
            let (min, max, limit) = match part {
                Part::Space => {
                    let start = i;
                    while s.get(i).is_some_and(u8::is_ascii_whitespace) {
                        i += 1;
                    }
                    if i == start {
                        return Err(bad());
                    }
                    continue;
                }
                Part::Lit(c) => {
                    let mut buf = [0; 4];
                    let lit = c.encode_utf8(&mut buf).as_bytes();
                    if !s[i..].starts_with(lit) {
                        return Err(bad());
                    }
                    i += lit.len();
                    continue;
                }
                Part::Year => (4, 4, 9999),
                Part::Year2 => (2, 2, 99),
                Part::Month | Part::Day => (1, 2, 99),
                Part::Hour => (1, 2, 23),
                Part::Minute => (1, 2, 59),
                Part::Second => (1, 2, 60),
            };
            let digits = s[i..].iter().take(max).take_while(|b| b.is_ascii_digit()).count();
            if digits < min {
                return Err(bad());
            }
            let v = s[i..i + digits].iter().fold(0u32, |v, b| v * 10 + u32::from(b - b'0'));
            i += digits;
            if v > limit {
                return Err(bad());
            }
            match part {
                Part::Year => y = i64::from(v),
                // POSIX: 69-99 are 1969-1999, 00-68 are 2000-2068.
                Part::Year2 => y = i64::from(v) + if v < 69 { 2000 } else { 1900 },
                Part::Month => m = v,
                Part::Day => d = v,
                _ => {}
            }
        }
        if i != s.len() {
            return Err(bad());
        }
        text::day(y, m, d, line, value.trim())
    }
}

#[cfg(test)]
#[path = "csv_tests.rs"]
mod tests;
