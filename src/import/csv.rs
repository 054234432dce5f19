//! CSV statements. Every bank lays its export out its own way, so the user saves a [`Mapping`]
//! under a name (JSON) that says where the header is and which column holds what, and reuses it
//! for each file of that bank.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::text::{self, shown};
use super::{ImportError, Line, Statement, MAX_FILE_BYTES, MAX_LINES};

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
    if bytes.len() > MAX_FILE_BYTES {
        return Err(ImportError::at(0, format!("the file is larger than {} MiB", MAX_FILE_BYTES >> 20)));
    }
    let text = text::decode(bytes, Some(&m.charset));
    let date_format = DateFormat::parse(&m.date_format).map_err(|e| ImportError::at(0, e))?;
    let mut rows = Rows::new(&text, m.delimiter);
    let mut cols: Option<Cols> = None;
    let mut statements: Vec<Statement> = Vec::new();
    let mut index: HashMap<(Option<String>, Option<String>), usize> = HashMap::new();
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
            return Err(ImportError::at(
                line,
                format!("the file has more than {MAX_LINES} transaction lines"),
            ));
        }
        count += 1;
        let at = *index.entry((account.clone(), currency.clone())).or_insert_with(|| {
            statements.push(Statement { account, currency, lines: Vec::new() });
            statements.len() - 1
        });
        statements[at].lines.push(Line {
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
    Ok(statements)
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
mod tests {
    use super::*;
    use crate::domain::dates::days_from_civil;
    use crate::import::corpus;

    fn name(n: &str) -> Option<Column> {
        Some(Column::Name(n.into()))
    }

    fn idx(i: i64) -> Option<Column> {
        Some(Column::Index(i))
    }

    /// Date and amount by name: the layout most unit tests use.
    fn plain() -> Mapping {
        Mapping { date: name("Date"), amount: name("Amount"), ..Mapping::default() }
    }

    fn lines(st: &[Statement]) -> Vec<&Line> {
        st.iter().flat_map(|s| s.lines.iter()).collect()
    }

    fn amounts(st: &[Statement]) -> Vec<i64> {
        lines(st).iter().map(|l| l.amount_cents).collect()
    }

    fn err(bytes: &[u8], m: &Mapping) -> ImportError {
        read(bytes, m).expect_err("refused")
    }

    /// The mapping a user would save for each CSV of the corpus: CSV_SPECS of its expected.py.
    fn corpus_mapping(file: &str) -> Option<Mapping> {
        let m = match file {
            "csv_dkb_cc_latin1.csv" => Mapping {
                charset: "ISO-8859-1".into(),
                delimiter: ';',
                header_first_cell: Some("Umsatz abgerechnet".into()),
                date: name("Wertstellung"),
                date_format: "%d.%m.%Y".into(),
                amount: name("Betrag (EUR)"),
                decimal_mark: ',',
                fixed_currency: Some("EUR".into()),
                fixed_account: Some("1234********1234".into()),
                ..Mapping::default()
            },
            "csv_swedbank_lt.csv" => Mapping {
                header_first_cell: Some("Sąskaitos Nr.".into()),
                filter: Some(Filter { column: Column::Index(1), equals: "20".into() }),
                date: idx(2),
                amount: idx(5),
                indicator: idx(7),
                debit_mark: Some("D".into()),
                currency: idx(6),
                account: idx(0),
                id: idx(8),
                ..Mapping::default()
            },
            "csv_dab_bom.csv" => Mapping {
                delimiter: ';',
                header_first_cell: Some("Buchungstag".into()),
                date: name("Buchungstag"),
                date_format: "%d.%m.%Y %H:%M:%S".into(),
                amount: name("Betrag in EUR"),
                decimal_mark: ',',
                thousands_separator: Some('.'),
                fixed_currency: Some("EUR".into()),
                ..Mapping::default()
            },
            "csv_danske_cp1257.csv" => Mapping {
                charset: "cp1257".into(),
                header_first_cell: Some("Date".into()),
                date: idx(0),
                date_format: "%Y:%m:%d".into(),
                amount: idx(-2),
                fixed_currency: Some("USD".into()),
                ..Mapping::default()
            },
            _ => return None,
        };
        Some(m)
    }

    #[test]
    fn every_corpus_csv_reads_as_the_manifest_says() {
        let entries = corpus::entries("csv");
        assert_eq!(entries.len(), 4);
        for e in entries {
            let file = e["file"].as_str().unwrap();
            let m = corpus_mapping(file).unwrap_or_else(|| panic!("{file}: no mapping"));
            let got = read(&corpus::bytes(&e), &m).unwrap_or_else(|err| panic!("{file}: {err}"));
            corpus::check(&e, &got);
        }
    }

    #[test]
    fn defaults_read_a_plain_file() {
        let csv = "\u{feff}Date,Payee,Memo,Id,Amount\n2024-01-31, Shop ,milk,A1,-12.50\n2024-02-01,,,,3\n";
        let m = Mapping { payee: name("Payee"), memo: name("Memo"), id: name("Id"), ..plain() };
        let st = read(csv.as_bytes(), &m).unwrap();
        assert_eq!(st.len(), 1);
        assert_eq!((st[0].account.as_deref(), st[0].currency.as_deref()), (None, None));
        let l = &st[0].lines;
        assert_eq!(
            l[0],
            Line {
                day: days_from_civil(2024, 1, 31),
                amount_cents: -1250,
                payee: Some("Shop".into()),
                memo: Some("milk".into()),
                bank_id: Some("A1".into()),
                source_line: 2,
            }
        );
        assert_eq!((l[1].payee.as_deref(), l[1].bank_id.as_deref(), l[1].amount_cents), (None, None, 300));
        assert_eq!(l[1].source_line, 3);
    }

    #[test]
    fn semicolon_and_tab_delimiters() {
        let m = Mapping { delimiter: ';', ..plain() };
        let st = read(b"Date;Amount\n2024-01-02;1,5\n", &Mapping { decimal_mark: ',', ..m }).unwrap();
        assert_eq!(amounts(&st), [150]);
        let m = Mapping { delimiter: '\t', ..plain() };
        assert_eq!(amounts(&read(b"Date\tAmount\n2024-01-02\t-7\n", &m).unwrap()), [-700]);
    }

    #[test]
    fn header_after_skipped_lines_or_found_by_its_first_cell() {
        let csv = b"Account 1\nPeriod,x\n\nDate,Amount\n2024-01-02,1\n";
        let m = Mapping { skip_lines: 3, ..plain() };
        let st = read(csv, &m).unwrap();
        assert_eq!((amounts(&st), lines(&st)[0].source_line), (vec![100], 5));
        let m = Mapping { header_first_cell: Some(" Date ".into()), ..plain() };
        assert_eq!(amounts(&read(csv, &m).unwrap()), [100]);
        // Without either, the first row is the header, and it lacks the columns.
        let e = err(csv, &plain());
        assert_eq!(e.line, 1);
        assert!(e.msg.contains("no column `Date`"), "{e}");
    }

    #[test]
    fn columns_by_index_and_from_the_end() {
        let m = Mapping { date: idx(0), amount: idx(-1), payee: idx(1), ..Mapping::default() };
        let st = read(b"D,P,X,A\n2024-03-01,shop,9,-1\n2024-03-02,short,2\n", &m).unwrap();
        assert_eq!(amounts(&st), [-100, 200]);
        assert_eq!(lines(&st)[1].payee.as_deref(), Some("short"));
        let e = err(b"D,P\n2024-03-01,1\n", &Mapping { amount: idx(5), ..m.clone() });
        assert_eq!(e.line, 1);
        assert!(e.msg.contains("past the header"), "{e}");
    }

    #[test]
    fn date_formats() {
        let day = |fmt: &str, text: &str| DateFormat::parse(fmt).unwrap().day(text, 1);
        let d = |y, m, d| -> Result<i64, ImportError> { Ok(days_from_civil(y, m, d)) };
        assert_eq!(day("%Y:%m:%d", "2012:03:01"), d(2012, 3, 1));
        assert_eq!(day("%d.%m.%Y %H:%M:%S", "01.10.2013  23:59:60"), d(2013, 10, 1));
        assert_eq!(day("%d/%m/%y", "5/1/24"), d(2024, 1, 5));
        assert_eq!(day("%m/%d/%y", "12/31/99"), d(1999, 12, 31));
        assert_eq!(day("%Y%m%d", "20240229"), d(2024, 2, 29));
        assert_eq!(day("%d%%%m%%%Y", "01%02%2024"), d(2024, 2, 1));
        assert_eq!(day("%d. %m. %Y", " 1. 2. 2024 "), d(2024, 2, 1));
        for (fmt, bad) in [
            ("%Y%m%d", "20251345"),
            ("%Y%m%d", "20230229"),
            ("%Y-%m-%d", "2024-01-01x"),
            ("%Y-%m-%d", "2024/01/01"),
            ("%Y-%m-%d", "24-01-01"),
            ("%Y-%m-%d", ""),
            ("%d.%m.%Y %H:%M", "01.10.2013 24:00"),
            ("%d.%m.%Y", "00.10.2013"),
        ] {
            let e = day(fmt, bad).unwrap_err();
            assert_eq!(e.line, 1, "{bad}");
        }
    }

    #[test]
    fn debit_and_credit_columns() {
        let m = Mapping { date: idx(0), debit: idx(1), credit: idx(2), ..Mapping::default() };
        let csv = b"Date,Out,In\n2024-01-01,12.00,\n2024-01-02,,5.5\n2024-01-03,-3,0\n2024-01-04,1,2\n";
        assert_eq!(amounts(&read(csv, &m).unwrap()), [-1200, 550, -300, 100]);
        let e = err(b"Date,Out,In\n2024-01-01,,\n", &m);
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("empty"), "{e}");
    }

    #[test]
    fn amount_with_a_debit_credit_indicator() {
        let m = Mapping {
            date: idx(0),
            amount: idx(1),
            indicator: idx(2),
            debit_mark: Some("D".into()),
            ..Mapping::default()
        };
        let csv = b"Date,Sum,DK\n2024-01-01,14.34,D\n2024-01-02,1600.00,K\n2024-01-03,1,d\n";
        assert_eq!(amounts(&read(csv, &m).unwrap()), [-1434, 160_000, -100]);
        let strict = Mapping { credit_mark: Some("K".into()), ..m };
        let e = err(b"Date,Sum,DK\n2024-01-01,1,D\n2024-01-02,1,X\n", &strict);
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("neither the debit nor the credit mark"), "{e}");
    }

    #[test]
    fn decimal_comma_and_thousands_separators() {
        let m = Mapping { delimiter: ';', decimal_mark: ',', thousands_separator: Some('.'), ..plain() };
        let csv = b"Date;Amount\n2024-01-01;9.999,99\n2024-01-02;-1.234.567,8\n2024-01-03;-,46\n";
        assert_eq!(amounts(&read(csv, &m).unwrap()), [999_999, -123_456_780, -46]);
        let m = Mapping { delimiter: ';', decimal_mark: ',', thousands_separator: Some('\u{a0}'), ..plain() };
        assert_eq!(
            amounts(&read("Date;Amount\n2024-01-01;1\u{a0}234,5\n".as_bytes(), &m).unwrap()),
            [123_450]
        );
        let m = Mapping { thousands_separator: Some('\''), ..plain() };
        assert_eq!(amounts(&read(b"Date,Amount\n2024-01-01,1'234.05\n", &m).unwrap()), [123_405]);
        // A separator among the decimals is not a grouping.
        let m = Mapping { delimiter: ';', decimal_mark: ',', thousands_separator: Some('.'), ..plain() };
        assert_eq!(err(b"Date;Amount\n2024-01-01;1,2.3\n", &m).line, 2);
    }

    #[test]
    fn accounts_and_currencies_by_column_or_fixed() {
        let m = Mapping { account: name("Acc"), currency: name("Cur"), ..plain() };
        let csv = b"Date,Acc,Cur,Amount\n2024-01-01,A,EUR,1\n2024-01-01,B,EUR,2\n2024-01-02,A,USD,3\n2024-01-03,A,EUR,4\n";
        let st = read(csv, &m).unwrap();
        let got: Vec<_> = st
            .iter()
            .map(|s| {
                (
                    s.account.as_deref(),
                    s.currency.as_deref(),
                    s.lines.iter().map(|l| l.amount_cents).sum::<i64>(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [(Some("A"), Some("EUR"), 500), (Some("B"), Some("EUR"), 200), (Some("A"), Some("USD"), 300)]
        );
        let m = Mapping { fixed_account: Some("DE12".into()), fixed_currency: Some("EUR".into()), ..plain() };
        let st = read(b"Date,Amount\n2024-01-01,1\n", &m).unwrap();
        assert_eq!((st[0].account.as_deref(), st[0].currency.as_deref()), (Some("DE12"), Some("EUR")));
    }

    #[test]
    fn row_filter_keeps_only_matching_rows() {
        let m = Mapping { filter: Some(Filter { column: idx(1).unwrap(), equals: "20".into() }), ..plain() };
        let csv = b"Date,Type,Amount\n2024-01-01,10,999\n2024-01-02, 20 ,5\n2024-01-31,86,x\nTotal\n";
        let st = read(csv, &m).unwrap();
        assert_eq!((amounts(&st), lines(&st)[0].source_line), (vec![500], 3));
    }

    #[test]
    fn charsets_and_bom() {
        let m = Mapping { charset: "cp1252".into(), payee: name("Payee"), ..plain() };
        let st = read(b"Date,Payee,Amount\n2024-01-01,Caf\xe9 \x80,1\n", &m).unwrap();
        assert_eq!(lines(&st)[0].payee.as_deref(), Some("Café €"));
        let m = Mapping { delimiter: ';', header_first_cell: Some("Date".into()), ..plain() };
        let st = read(b"\xef\xbb\xbf;\nDate;Amount\n2024-01-01;1\n", &m).unwrap();
        assert_eq!(lines(&st)[0].source_line, 3);
    }

    #[test]
    fn crlf_blank_lines_and_quoted_newlines_keep_file_lines() {
        let csv = b"Date,Memo,Amount\r\n2024-01-01,\"two\r\nlines\",1\r\n\r\n\r\n2024-01-02,x,2\r\n2024-01-03,\"a \"\"q\"\"\",3\r\n";
        let st = read(csv, &Mapping { memo: name("Memo"), ..plain() }).unwrap();
        let got: Vec<_> = lines(&st).iter().map(|l| (l.source_line, l.memo.clone().unwrap())).collect();
        assert_eq!(got, [(2, "two\r\nlines".into()), (6, "x".into()), (7, "a \"q\"".into())]);
        let e = err(b"Date,Amount\r\n2024-01-01,1\r\n\r\n2024-13-01,2\r\n", &plain());
        assert_eq!(e.line, 4);
    }

    #[test]
    fn unescaped_inner_quotes_are_read_not_refused() {
        let m = Mapping { payee: name("Payee"), ..plain() };
        let st = read(b"Date,Payee,Amount\n2024-01-01,\"UAB \"Naktida\"\",1\n", &m).unwrap();
        assert_eq!(amounts(&st), [100]);
        assert!(lines(&st)[0].payee.as_deref().unwrap().contains("Naktida"));
    }

    #[test]
    fn a_file_without_a_header() {
        let m =
            Mapping { has_header: false, skip_lines: 1, date: idx(0), amount: idx(1), ..Mapping::default() };
        let st = read(b"export 2024\n2024-01-01,1,extra,fields\n2024-01-02,2\n", &m).unwrap();
        assert_eq!((amounts(&st), lines(&st)[0].source_line), (vec![100, 200], 2));
    }

    #[test]
    fn check_refuses_mappings_that_cannot_work() {
        let refused = |m: Mapping, why: &str| {
            let e = m.check().expect_err(why);
            assert!(e.contains(why), "{e} / {why}");
            assert_eq!(err(b"Date,Amount\n2024-01-01,1\n", &m).line, 0);
        };
        assert_eq!(plain().check(), Ok(()));
        refused(Mapping { date: None, ..plain() }, "no date column");
        refused(Mapping { date_format: "%d.%b.%Y".into(), ..plain() }, "unknown directive `%b`");
        refused(Mapping { date_format: "%d.%m.%Y %".into(), ..plain() }, "lone `%`");
        refused(Mapping { date_format: "%d.%m".into(), ..plain() }, "needs one %d");
        refused(Mapping { date_format: "%d.%m.%Y %H %H".into(), ..plain() }, "repeats");
        refused(
            Mapping { debit: idx(1), credit: idx(2), ..plain() },
            "both an amount column and debit/credit",
        );
        refused(Mapping { amount: None, ..plain() }, "no amount column");
        refused(Mapping { amount: None, debit: idx(1), ..plain() }, "needs a credit column");
        refused(Mapping { indicator: idx(3), ..plain() }, "go together");
        refused(Mapping { debit_mark: Some("D".into()), ..plain() }, "go together");
        let dc = Mapping { amount: None, debit: idx(1), credit: idx(2), ..plain() };
        refused(Mapping { indicator: idx(3), debit_mark: Some("D".into()), ..dc }, "needs one amount column");
        refused(Mapping { credit_mark: Some("K".into()), ..plain() }, "credit mark needs");
        refused(Mapping { decimal_mark: ';', ..plain() }, "decimal mark");
        refused(
            Mapping { thousands_separator: Some('.'), decimal_mark: '.', ..plain() },
            "thousands separator",
        );
        refused(Mapping { delimiter: '"', ..plain() }, "delimiter");
        refused(Mapping { delimiter: '§', ..plain() }, "delimiter");
        refused(
            Mapping { currency: idx(2), fixed_currency: Some("EUR".into()), ..plain() },
            "fixed currency",
        );
        refused(Mapping { account: idx(2), fixed_account: Some("A".into()), ..plain() }, "fixed account");
        refused(Mapping { header_first_cell: Some(" ".into()), ..plain() }, "empty text");
        refused(Mapping { has_header: false, ..plain() }, "by index");
    }

    #[test]
    fn mapping_json_round_trip_and_defaults() {
        // Every field away from its default.
        let m = Mapping {
            charset: "cp1257".into(),
            delimiter: '\t',
            skip_lines: 2,
            header_first_cell: Some("Sąskaitos Nr.".into()),
            has_header: true,
            date: name("Data"),
            date_format: "%d.%m.%y %H:%M:%S".into(),
            amount: idx(-3),
            debit: idx(4),
            credit: idx(5),
            indicator: idx(7),
            debit_mark: Some("D".into()),
            credit_mark: Some("K".into()),
            decimal_mark: ',',
            thousands_separator: Some('.'),
            payee: name("Gavėjas"),
            memo: idx(9),
            id: idx(8),
            currency: idx(6),
            account: idx(0),
            fixed_currency: Some("LTL".into()),
            fixed_account: Some("LT79".into()),
            filter: Some(Filter { column: Column::Index(1), equals: "20".into() }),
        };
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<Mapping>(&json).unwrap(), m);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::from_value::<Mapping>(value).unwrap(), m);
        let short: Mapping =
            serde_json::from_str(r#"{"date": {"name": "Datum"}, "amount": {"index": -2}, "delimiter": ";"}"#)
                .unwrap();
        assert_eq!(
            short,
            Mapping { date: name("Datum"), amount: idx(-2), delimiter: ';', ..Mapping::default() }
        );
        assert_eq!(
            (short.charset.as_str(), short.date_format.as_str(), short.has_header),
            ("UTF-8", "%Y-%m-%d", true)
        );
        assert!(serde_json::from_str::<Mapping>(r#"{"dat": {"name": "Datum"}}"#).is_err());
    }

    #[test]
    fn binary_garbage_is_an_error_not_a_panic() {
        let e = err(b"\x00\x01\x02\xff\xfe\x00\n\x89PNG\r\n\x1a\n", &plain());
        assert_eq!(e.line, 1);
        let m = Mapping { header_first_cell: Some("Date".into()), ..plain() };
        let e = err(b"\x00\x01\x02\xff\xfe\x00\n\x89PNG\r\n\x1a\n", &m);
        assert_eq!(e.line, 0);
        assert!(e.msg.contains("no row starts with the header cell `Date`"), "{e}");
        // Pseudo-random bytes after a good header, through every amount layout: never a panic.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let layouts = [
            Mapping { amount: idx(-1), ..plain() },
            Mapping { amount: None, debit: name("Amount"), credit: name("Payee"), ..plain() },
            Mapping { indicator: idx(2), debit_mark: Some("D".into()), ..plain() },
        ];
        for round in 0..300 {
            let mut bytes = b"Date,Payee,Memo,Id,Amount\n".to_vec();
            for _ in 0..(round % 97) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bytes.push(b",\n\"0123456789-.D"[(x % 16) as usize]);
            }
            let _ = read(&bytes, &layouts[round % 3]);
        }
    }

    #[test]
    fn a_row_wider_than_its_header_is_refused() {
        let e = err(b"Date,Amount\n2024-01-01,1\n2024-01-02,2,oops\n", &plain());
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("3 fields, more than the header's 2"), "{e}");
    }

    #[test]
    fn a_missing_column_names_the_line() {
        let m = plain();
        let e = err(
            b"Date,Payee,Amount\n2024-01-01,x,1\n2024-01-02,y\n",
            &Mapping { amount: idx(2), ..m.clone() },
        );
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("no amount column (2 fields)"), "{e}");
        let e = err(b"Date,Payee\n", &m);
        assert_eq!(e.line, 1);
        assert!(e.msg.contains("no column `Amount` (amount)"), "{e}");
        let e = err(b"Date,Amount,Amount\n", &m);
        assert!(e.msg.contains("two columns `Amount`"), "{e}");
        let e = err(b"Date,Amount\n2024-01-01,\n", &m);
        assert_eq!((e.line, e.msg.as_str()), (2, "the amount is empty"));
    }

    #[test]
    fn unparsable_dates_name_the_line() {
        let m = Mapping { date_format: "%Y%m%d".into(), ..plain() };
        let e = err(b"Date,Amount\n20240101,1\n20251345,2\n", &m);
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("`20251345` is not a date"), "{e}");
    }

    #[test]
    fn huge_amounts_are_refused_and_negative_zero_is_zero() {
        let big = format!("Date,Amount\n2024-01-01,{}\n", "9".repeat(40));
        let e = err(big.as_bytes(), &plain());
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("too large"), "{e}");
        let st = read(b"Date,Amount\n2024-01-01,-0\n2024-01-02,-0.00\n", &plain()).unwrap();
        assert_eq!(amounts(&st), [0, 0]);
        let m = Mapping { indicator: idx(2), debit_mark: Some("D".into()), ..plain() };
        assert_eq!(amounts(&read(b"Date,Amount,DC\n2024-01-01,0.00,D\n", &m).unwrap()), [0]);
    }

    #[test]
    fn more_than_max_lines_stops_at_the_first_line_too_many() {
        let mut csv = String::from("Date,Amount\n");
        for _ in 0..=MAX_LINES {
            csv.push_str("2024-01-01,1\n");
        }
        // Never read: the reader stops before it.
        csv.push_str("garbage,garbage\n");
        let e = err(csv.as_bytes(), &plain());
        assert_eq!(e.line, MAX_LINES + 2);
        assert!(e.msg.contains("more than"), "{e}");
    }

    #[test]
    fn a_file_larger_than_the_limit_is_refused() {
        let big = vec![b'a'; MAX_FILE_BYTES + 1];
        assert_eq!(err(&big, &plain()).line, 0);
    }
}
