//! Bank statements in (docs/import.md): OFX 1.x/2.x and QFX, CAMT.053, MT940 and CSV read into
//! one shape, [`Statement`]s of [`Line`]s, with exact amounts in cents. Pure: no I/O, no clock.
//! The format is taken from the content ([`detect`]) or named by the caller, never from a file
//! name. Every failure is an [`ImportError`] naming the line, and a file costs bounded memory and
//! time: at most [`MAX_FILE_BYTES`] and [`MAX_LINES`] lines.

pub mod camt;
pub mod csv;
pub mod mt940;
pub mod ofx;
pub mod text;

/// Largest statement file accepted: a year of a busy account is well under 1 MiB.
pub const MAX_FILE_BYTES: usize = 8 << 20;
/// Most transaction lines in one file: what one import may apply in one atomic operation.
pub const MAX_LINES: usize = 20_000;

/// The size limit every reader checks before it reads anything.
pub(crate) fn check_size(bytes: &[u8]) -> Result<(), ImportError> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(ImportError::at(0, format!("the file is larger than {} MiB", MAX_FILE_BYTES >> 20)));
    }
    Ok(())
}

/// The error of the first transaction line past [`MAX_LINES`] (a reader stops there).
pub(crate) fn too_many_lines(line: usize) -> ImportError {
    ImportError::at(line, format!("the file has more than {MAX_LINES} transaction lines"))
}

/// One transaction line as the bank wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The bank's calendar date of the line (booking date; OFX `DTPOSTED`, CAMT `BookgDt`,
    /// MT940 `:61:` value date, the CSV's date column), as days since 1970-01-01.
    pub day: i64,
    /// Signed amount in cents: credits positive, debits negative.
    pub amount_cents: i64,
    pub payee: Option<String>,
    pub memo: Option<String>,
    /// The bank's own id of the line (OFX `FITID`, CAMT `AcctSvcrRef`/`NtryRef`/`EndToEndId`,
    /// MT940 bank reference, a CSV id column), when it gives one (an empty id is none).
    pub bank_id: Option<String>,
    /// 1-based line of the source text where the line starts, for messages.
    pub source_line: usize,
}

/// One account's lines in one file (a file may hold several accounts, and several statements of
/// the same account, which are merged).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Statement {
    /// The bank account (OFX `ACCTID`, CAMT IBAN or other id, MT940 `:25:`, CSV mapping).
    pub account: Option<String>,
    pub currency: Option<String>,
    pub lines: Vec<Line>,
}

/// Statements filed by account and currency, in the order each first appears: how every reader
/// merges the statements of one account in a file.
#[derive(Debug, Default)]
pub(crate) struct Statements {
    out: Vec<Statement>,
    index: std::collections::HashMap<(Option<String>, Option<String>), usize>,
}

impl Statements {
    /// The statement of `account` in `currency`, made empty at its first use.
    pub(crate) fn of(&mut self, account: Option<String>, currency: Option<String>) -> &mut Statement {
        let out = &mut self.out;
        let i = *self.index.entry((account, currency)).or_insert_with_key(|(account, currency)| {
            out.push(Statement { account: account.clone(), currency: currency.clone(), lines: Vec::new() });
            out.len() - 1
        });
        &mut self.out[i]
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    pub(crate) fn into_vec(self) -> Vec<Statement> {
        self.out
    }
}

/// Why a file could not be read: the 1-based line (0: the file as a whole) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportError {
    pub line: usize,
    pub msg: String,
}

impl ImportError {
    pub fn at(line: usize, msg: impl Into<String>) -> ImportError {
        ImportError { line, msg: msg.into() }
    }
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => f.write_str(&self.msg),
            n => write!(f, "line {n}: {}", self.msg),
        }
    }
}

/// The statement formats read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OFX 1.x (SGML) and 2.x (XML), and QFX (OFX with Intuit's additions).
    Ofx,
    Camt053,
    Mt940,
    Csv,
}

impl Format {
    /// The name answers and channels give it (`format=` takes it too).
    pub fn name(self) -> &'static str {
        match self {
            Format::Ofx => "ofx",
            Format::Camt053 => "camt053",
            Format::Mt940 => "mt940",
            Format::Csv => "csv",
        }
    }

    pub fn parse(name: &str) -> Option<Format> {
        match name.to_ascii_lowercase().as_str() {
            "ofx" | "qfx" => Some(Format::Ofx),
            "camt" | "camt053" | "camt.053" => Some(Format::Camt053),
            "mt940" => Some(Format::Mt940),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }
}

/// The format of a file, from its content: an OFX header or `<OFX>`, a CAMT.053 document
/// namespace or `<BkToCstmrStmt>`, MT940 tags (`:20:` and `:61:`); anything else that is text
/// is offered to the CSV reader, which needs a mapping.
pub fn detect(bytes: &[u8]) -> Option<Format> {
    let head = &bytes[..bytes.len().min(64 << 10)];
    let has = |needle: &[u8]| head.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle));
    if has(b"OFXHEADER") || has(b"<OFX>") {
        Some(Format::Ofx)
    } else if has(b"camt.053") || has(b"<BkToCstmrStmt>") {
        Some(Format::Camt053)
    } else if has(b":20:") && has(b":61:") {
        Some(Format::Mt940)
    } else if std::str::from_utf8(head).is_ok() || !head.contains(&0) {
        Some(Format::Csv)
    } else {
        None
    }
}

/// Reads a file of a known format. CSV needs its mapping.
pub fn read(
    bytes: &[u8],
    format: Format,
    mapping: Option<&csv::Mapping>,
) -> Result<Vec<Statement>, ImportError> {
    check_size(bytes)?;
    let statements = match format {
        Format::Ofx => ofx::read(bytes)?,
        Format::Camt053 => camt::read(bytes)?,
        Format::Mt940 => mt940::read(bytes)?,
        Format::Csv => match mapping {
            Some(m) => csv::read(bytes, m)?,
            None => return Err(ImportError::at(0, "a CSV file needs a mapping")),
        },
    };
    let lines: usize = statements.iter().map(|s| s.lines.len()).sum();
    if lines > MAX_LINES {
        return Err(too_many_lines(0));
    }
    Ok(statements)
}

/// The real statements of `../shared/statements` and the figures independent parsers read from
/// them (MANIFEST.json): each format's tests check every file of theirs against it.
#[cfg(test)]
pub(crate) mod corpus {
    use super::Statement;
    use serde_json::Value;

    fn dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/statements")
    }

    /// Every manifest entry whose `format` starts with `prefix`.
    pub fn entries(prefix: &str) -> Vec<Value> {
        let text =
            std::fs::read_to_string(dir().join("MANIFEST.json")).expect("../shared/statements/MANIFEST.json");
        let all: Vec<Value> = serde_json::from_str(&text).expect("manifest JSON");
        all.into_iter().filter(|e| e["format"].as_str().is_some_and(|f| f.starts_with(prefix))).collect()
    }

    pub fn bytes(entry: &Value) -> Vec<u8> {
        std::fs::read(dir().join(entry["file"].as_str().expect("file"))).expect("statement file")
    }

    fn cents_text(c: i64) -> String {
        let sign = if c < 0 { "-" } else { "" };
        format!("{sign}{}.{:02}", c.unsigned_abs() / 100, c.unsigned_abs() % 100)
    }

    fn decimal_cents(text: &str) -> i64 {
        let neg = text.starts_with('-');
        let t = text.trim_start_matches('-');
        let (w, f) = t.split_once('.').unwrap_or((t, ""));
        let f = format!("{f:0<2}");
        let v: i64 = w.parse::<i64>().expect("whole") * 100 + f[..2].parse::<i64>().expect("cents");
        if neg {
            -v
        } else {
            v
        }
    }

    /// Checks what a reader made of one file against the manifest: accounts, lines, signed sums
    /// (per account), first and last date, and the first ids. Each reader's tests call it.
    #[allow(dead_code)]
    pub fn check(entry: &Value, got: &[Statement]) {
        let file = entry["file"].as_str().unwrap_or("?");
        let lines: Vec<_> = got.iter().flat_map(|s| s.lines.iter()).collect();
        assert_eq!(got.len() as u64, entry["accounts"].as_u64().unwrap(), "{file}: accounts");
        assert_eq!(lines.len() as u64, entry["transactions"].as_u64().unwrap(), "{file}: transactions");
        for pa in entry["per_account"].as_array().unwrap() {
            let want_acc = pa["account"].as_str();
            let st = got
                .iter()
                .find(|s| s.account.as_deref() == want_acc || got.len() == 1)
                .unwrap_or_else(|| panic!("{file}: account {want_acc:?} missing"));
            let sum: i64 = st.lines.iter().map(|l| l.amount_cents).sum();
            let want = decimal_cents(pa["sum_amount"].as_str().unwrap());
            assert_eq!(cents_text(sum), cents_text(want), "{file}: sum of {want_acc:?}");
            assert_eq!(
                st.lines.len() as u64,
                pa["transactions"].as_u64().unwrap(),
                "{file}: lines of {want_acc:?}"
            );
            if let (Some(w), Some(g)) = (pa["currency"].as_str(), st.currency.as_deref()) {
                assert_eq!(g, w, "{file}: currency");
            }
        }
        let mut days: Vec<i64> = lines.iter().map(|l| l.day).collect();
        days.sort_unstable();
        let day_text = |d: i64| crate::domain::dates::fmt_day(d);
        if let (Some(first), Some(last)) = (entry["first_date"].as_str(), entry["last_date"].as_str()) {
            assert_eq!(day_text(days[0]), first, "{file}: first date");
            assert_eq!(day_text(*days.last().unwrap()), last, "{file}: last date");
        }
        for (i, want) in entry["ids"].as_array().unwrap().iter().enumerate() {
            let got_id = lines.get(i).and_then(|l| l.bank_id.as_deref());
            match want.as_str() {
                Some("") | None => assert_eq!(got_id, None, "{file}: id {i}"),
                Some(w) => assert_eq!(got_id, Some(w), "{file}: id {i}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every real statement of the corpus is recognised by its content alone.
    #[test]
    fn every_corpus_file_is_recognised_by_its_content() {
        for e in corpus::entries("") {
            let want = match e["format"].as_str().unwrap_or("") {
                f if f.starts_with("ofx") || f == "qfx" => Format::Ofx,
                f if f.starts_with("camt") => Format::Camt053,
                "mt940" => Format::Mt940,
                _ => Format::Csv,
            };
            assert_eq!(detect(&corpus::bytes(&e)), Some(want), "{}", e["file"]);
        }
    }

    #[test]
    fn a_format_reads_back_from_its_name() {
        for f in [Format::Ofx, Format::Camt053, Format::Mt940, Format::Csv] {
            assert_eq!(Format::parse(f.name()), Some(f));
        }
    }

    #[test]
    fn binary_garbage_is_no_format() {
        assert_eq!(detect(b"\x00\x01\x02\xff\xfe\x00"), None);
    }
}
