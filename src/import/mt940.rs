//! MT940 (SWIFT customer statement): one [`Statement`] per account (`:25:`) and currency,
//! several messages of one account merged; one [`Line`] per `:61:`, with the `:86:` that
//! follows it as memo (and payee, when `:86:` is structured).
//!
//! Read as SWIFT writes it and as banks export it: with or without the `{1:}{2:}{4:` envelope,
//! with preamble lines before `:20:` (ING), messages ended by a line starting with `-`.

use super::text::{self, shown};
use super::{ImportError, Line, Statement, Statements, MAX_LINES};

/// Longest reference read in `:61:`. SWIFT allows 16 characters for each of the two; banks
/// overrun that, and 35 (the longest reference SWIFT fields carry) still keeps an id an id.
const MAX_REF_CHARS: usize = 35;

/// The fields of MT940; a line inside `:86:` that looks like another tag is text of `:86:`.
const TAGS: &[&str] = &[
    "13", "13D", "20", "21", "25", "25P", "28", "28C", "34F", "60", "60F", "60M", "61", "62", "62F", "62M",
    "64", "65", "86", "90C", "90D", "NS",
];

/// The keys of the `/KEY/value` style of `:86:` (Dutch and French banks) whose boundaries are
/// looked for; any other `/` is text.
const SLASH_KEYS: &[&str] = &[
    "TRTP", "IBAN", "BIC", "NAME", "REMI", "EREF", "MARF", "CSID", "ORDP", "BENM", "ULTC", "ULTD", "ULTB",
    "PURP", "RTRN", "ADDR", "ISDT", "CNTP", "IREF", "OREF", "SVCL", "PREF", "BUSP", "CHGS", "OCMT", "EXCH",
];

pub fn read(bytes: &[u8]) -> Result<Vec<Statement>, ImportError> {
    super::check_size(bytes)?;
    // SWIFT's character set is ASCII; banks' exports are UTF-8 or Latin-1/cp1252.
    let text = text::decode(bytes, None);
    let mut r = Reader::default();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.trim_end();
        if line.bytes().any(|b| b < 0x20 && b != b'\t') {
            return Err(ImportError::at(i + 1, "binary data (a control character) is not MT940"));
        }
        r.line(line, i + 1)?;
    }
    r.end_message()?;
    if !r.seen {
        return Err(ImportError::at(1, "no MT940 field (`:20:`, `:25:`, `:61:`...) in the file"));
    }
    Ok(r.out.into_vec())
}

/// A field: its tag, the line it starts on, and its text (the first line after the tag, then
/// continuation lines).
struct Field {
    tag: String,
    line: usize,
    lines: Vec<String>,
}

#[derive(Default)]
struct Message {
    account: Option<String>,
    opening: Option<String>,
    closing: Option<(String, usize)>,
    lines: Vec<Line>,
    /// Whether a `:86:` now belongs to the last line (it follows its `:61:`).
    attach: bool,
    /// The `:86:` text of the last line, read when the next line starts or the message ends.
    details: Vec<String>,
}

#[derive(Default)]
struct Reader {
    seen: bool,
    msg: Option<Message>,
    field: Option<Field>,
    count: usize,
    out: Statements,
}

impl Reader {
    fn line(&mut self, line: &str, n: usize) -> Result<(), ImportError> {
        let mut line = line;
        // The SWIFT envelope: `{1:...}{2:...}{4:` opens the text block, `-}` ends it.
        let b = line.as_bytes();
        if b.first() == Some(&b'{') && b.get(1).is_some_and(u8::is_ascii_digit) && b.get(2) == Some(&b':') {
            match line.find("{4:") {
                Some(p) if p + 3 < line.len() => line = &line[p + 3..],
                _ => return Ok(()),
            }
        }
        // No line of a field starts with `-` (SWIFT's rule): it ends the message (`-`, `-}`,
        // ING's `-XXX`).
        if line.starts_with('-') {
            return self.end_message();
        }
        if let Some((tag, rest)) = tag_of(line) {
            let in_86 = self.field.as_ref().is_some_and(|f| f.tag == "86");
            if TAGS.contains(&tag) || !in_86 {
                // `:20:` opens a message, also when the bank wrote no `-` before it.
                if tag == "20" {
                    self.end_message()?;
                } else {
                    self.flush()?;
                }
                self.seen = true;
                self.msg.get_or_insert_with(Message::default);
                self.field = Some(Field { tag: tag.to_string(), line: n, lines: vec![rest.to_string()] });
                return Ok(());
            }
        }
        // A field's next line; outside a field, a bank's preamble (ING's
        // `0000 01INGBNL2AXXXX00001`, `940 00`), skipped.
        if let Some(f) = &mut self.field {
            f.lines.push(line.to_string());
        }
        Ok(())
    }

    /// Reads the field just ended.
    fn flush(&mut self) -> Result<(), ImportError> {
        let Some(f) = self.field.take() else { return Ok(()) };
        let Some(msg) = self.msg.as_mut() else { return Ok(()) };
        let first = f.lines[0].trim();
        match f.tag.as_str() {
            "25" => msg.account = Some(first.to_string()).filter(|a| !a.is_empty()),
            "60" | "60F" | "60M" => msg.opening = Some(balance(first, f.line)?),
            "62" | "62F" | "62M" => msg.closing = Some((balance(first, f.line)?, f.line)),
            "61" => {
                settle(msg);
                if self.count == MAX_LINES {
                    return Err(super::too_many_lines(f.line));
                }
                self.count += 1;
                msg.lines.push(statement_line(&f)?);
            }
            // Rabobank writes several `:86:` for one line: they are one text.
            "86" if msg.attach => msg.details.extend(f.lines),
            // A `:86:` after the closing balance is about the statement (ING's totals).
            _ => {}
        }
        msg.attach = f.tag == "61" || (f.tag == "86" && msg.attach);
        Ok(())
    }

    fn end_message(&mut self) -> Result<(), ImportError> {
        self.flush()?;
        let Some(mut msg) = self.msg.take() else { return Ok(()) };
        settle(&mut msg);
        let currency = match (msg.opening, msg.closing) {
            (Some(o), Some((c, line))) if o != c => {
                return Err(ImportError::at(
                    line,
                    format!("the closing balance is in {c}, the opening balance in {o}"),
                ))
            }
            (Some(o), _) => Some(o),
            (None, c) => c.map(|c| c.0),
        };
        self.out.of(msg.account, currency).lines.append(&mut msg.lines);
        Ok(())
    }
}

/// The tag of a line starting with one (`:61:`, `:60F:`, `:NS:`), and the rest of the line.
fn tag_of(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix(':')?;
    let end = rest.find(':')?;
    let tag = &rest[..end];
    let b = tag.as_bytes();
    let ok = tag == "NS"
        || (matches!(b.len(), 2 | 3)
            && b[..2].iter().all(u8::is_ascii_digit)
            && b.get(2).is_none_or(u8::is_ascii_uppercase));
    ok.then(|| (tag, &rest[end + 1..]))
}

/// Gives the last line its `:86:`: the memo (over `:61:`'s supplementary details) and, when
/// the text is structured, the payee.
fn settle(msg: &mut Message) {
    let details = std::mem::take(&mut msg.details);
    let Some(line) = msg.lines.last_mut() else { return };
    if details.is_empty() {
        return;
    }
    let (payee, memo) = information(&details);
    line.payee = payee;
    if memo.is_some() {
        line.memo = memo;
    }
}

/// Payee and memo of a `:86:` text. Structured texts wrap their fields at the line length, so
/// their lines are joined as one; free text is lines of words.
fn information(lines: &[String]) -> (Option<String>, Option<String>) {
    let joined: String = lines.concat();
    let b = joined.as_bytes();
    // German banks: a 3-digit transaction code, then `?NN` subfields.
    if b.len() >= 6
        && b[..3].iter().all(u8::is_ascii_digit)
        && b[3] == b'?'
        && b[4..6].iter().all(u8::is_ascii_digit)
    {
        return question_fields(&joined);
    }
    if let Some((payee, memo)) = slash_fields(&joined) {
        return (payee, memo);
    }
    (None, clean(&lines.join(" ")))
}

/// `166?00SEPA UEBERWEISUNG?20purpose?21purpose?32name?33name`: `?32`/`?33` the counterparty's
/// name, `?20`-`?29` and `?60`-`?63` the purpose (the posting text `?00` when there is none).
fn question_fields(text: &str) -> (Option<String>, Option<String>) {
    let (mut name, mut purpose, mut posting) = (String::new(), String::new(), String::new());
    let mut rest = text;
    while let Some(p) = rest.find('?') {
        let after = &rest[p + 1..];
        let code = after.get(..2).filter(|c| c.bytes().all(|b| b.is_ascii_digit()));
        let Some(code) = code else {
            rest = after;
            continue;
        };
        let body = &after[2..];
        let end = next_question_field(body);
        let value = &body[..end];
        match code {
            "00" => posting.push_str(value),
            "32" | "33" => name.push_str(value),
            c if c.starts_with('2') || matches!(c, "60" | "61" | "62" | "63") => purpose.push_str(value),
            _ => {}
        }
        rest = &body[end..];
    }
    (clean(&name), clean(&purpose).or_else(|| clean(&posting)))
}

fn next_question_field(s: &str) -> usize {
    let b = s.as_bytes();
    (0..b.len())
        .find(|&i| b[i] == b'?' && b.get(i + 1..i + 3).is_some_and(|d| d.iter().all(u8::is_ascii_digit)))
        .unwrap_or(b.len())
}

/// `/TRTP/SEPA OVERBOEKING/IBAN/.../NAME/name/REMI/text`: `NAME` the counterparty, `REMI` the
/// remittance text (its `USTD//` or `STRD/CUR/` marker dropped); `None` if the text is not in
/// this style.
fn slash_fields(text: &str) -> Option<(Option<String>, Option<String>)> {
    let key_at = |i: usize| -> Option<&str> {
        let rest = text.get(i + 1..)?;
        SLASH_KEYS.iter().copied().find(|k| rest.starts_with(k) && rest[k.len()..].starts_with('/'))
    };
    if !text.starts_with('/') || key_at(0).is_none() {
        return None;
    }
    let bounds: Vec<(usize, &str)> =
        text.match_indices('/').filter_map(|(i, _)| key_at(i).map(|k| (i, k))).collect();
    let value = |key: &str| {
        let at = bounds.iter().position(|(_, k)| *k == key)?;
        let start = bounds[at].0 + key.len() + 2;
        let end = bounds.get(at + 1).map_or(text.len(), |b| b.0);
        text.get(start..end.max(start))
    };
    let payee = value("NAME").and_then(|v| clean(v.trim_matches('/')));
    let memo = match value("REMI") {
        Some(v) => {
            let v = v.strip_prefix("USTD//").or_else(|| v.strip_prefix("STRD/CUR/")).unwrap_or(v);
            clean(v.trim_matches('/'))
        }
        None => clean(text),
    };
    Some((payee, memo))
}

/// `:61:` — value date `YYMMDD`, entry date `MMDD` (optional), mark `C`/`D`/`RC`/`RD`, funds
/// code (optional letter), amount with a decimal comma, transaction type (`N`/`F`/`S` and 3
/// characters), the account owner's reference, `//` and the bank's reference (optional), and on
/// the next line supplementary details (optional).
fn statement_line(f: &Field) -> Result<Line, ImportError> {
    let n = f.line;
    let s = f.lines[0].trim();
    let b = s.as_bytes();
    let bad = |what: &str| ImportError::at(n, format!("`:61:{}`: {what}", shown(s)));
    let day = match s.get(..6).filter(|d| d.bytes().all(|c| c.is_ascii_digit())) {
        Some(d) => yymmdd(d, n)?,
        None => return Err(bad("no value date (YYMMDD)")),
    };
    let mut p = 6;
    if let Some(md) = s.get(p..p + 4).filter(|d| d.bytes().all(|c| c.is_ascii_digit())) {
        // The year of the entry date is the value date's or next to it: 29 February passes.
        let (m, d) = (md[..2].parse().unwrap_or(0), md[2..].parse().unwrap_or(0));
        text::day(2000, m, d, n, md)?;
        p += 4;
    }
    // A reversal of a credit takes the money back out; a reversal of a debit puts it back.
    let (credit, len) = match &b[p..] {
        [b'R', b'C', ..] => (false, 2),
        [b'R', b'D', ..] => (true, 2),
        [b'C', ..] => (true, 1),
        [b'D', ..] => (false, 1),
        _ => return Err(bad("no debit/credit mark (C, D, RC or RD)")),
    };
    p += len;
    // The funds code: the third letter of the currency, when the bank needs it.
    if b.get(p).is_some_and(u8::is_ascii_uppercase) {
        p += 1;
    }
    let end = p + b[p..].iter().take_while(|c| c.is_ascii_digit() || **c == b',').count();
    if end == p {
        return Err(bad("no amount"));
    }
    let cents = text::amount_cents(&s[p..end], true, n)?;
    p = end;
    let kind = s
        .get(p..p + 4)
        .filter(|t| t.as_bytes()[0].is_ascii_alphabetic() && t.bytes().all(|c| c.is_ascii_alphanumeric()));
    if kind.is_none() {
        return Err(bad("no transaction type (N, F or S and 3 characters)"));
    }
    let refs = &s[p + 4..];
    let (customer, bank) = match refs.find("//") {
        Some(i) => (&refs[..i], &refs[i + 2..]),
        None => (refs, ""),
    };
    if customer.chars().count() > MAX_REF_CHARS || bank.chars().count() > MAX_REF_CHARS {
        return Err(bad(&format!("a reference is longer than {MAX_REF_CHARS} characters")));
    }
    // The bank's reference, else the owner's, as mt-940 reads them; NONREF is none.
    let id = |r: &str| Some(r.trim()).filter(|r| !r.is_empty() && *r != "NONREF").map(str::to_string);
    Ok(Line {
        day,
        amount_cents: if credit { cents } else { -cents },
        payee: None,
        memo: clean(&f.lines[1..].join(" ")),
        bank_id: id(bank).or_else(|| id(customer)),
        source_line: n,
    })
}

/// `:60F:`/`:62F:` — mark, date `YYMMDD`, currency, amount: the currency, once the rest is
/// checked.
fn balance(s: &str, n: usize) -> Result<String, ImportError> {
    let bad = |what: &str| ImportError::at(n, format!("`{}` is not a balance: {what}", shown(s)));
    let Some(rest) = s.strip_prefix('C').or_else(|| s.strip_prefix('D')) else {
        return Err(bad("no C/D mark"));
    };
    match rest.get(..6).filter(|d| d.bytes().all(|c| c.is_ascii_digit())) {
        Some(d) => yymmdd(d, n)?,
        None => return Err(bad("no date (YYMMDD)")),
    };
    let cur = rest.get(6..9).filter(|c| c.bytes().all(|b| b.is_ascii_uppercase()));
    let Some(cur) = cur else { return Err(bad("no currency")) };
    text::amount_cents(&rest[9..], true, n)?;
    Ok(cur.to_string())
}

/// Days of a `YYMMDD` date. Two-digit years: 80-99 are 1980-1999, 00-79 are 2000-2079 (SWIFT
/// began in the 1970s, and no statement is dated ahead).
fn yymmdd(d: &str, n: usize) -> Result<i64, ImportError> {
    let v = |r: std::ops::Range<usize>| d[r].parse::<u32>().unwrap_or(0);
    let yy = i64::from(v(0..2));
    let year = if yy >= 80 { 1900 + yy } else { 2000 + yy };
    text::day(year, v(2..4), v(4..6), n, d)
}

/// A text with its runs of white space (tabs, line breaks) made one space.
fn clean(v: &str) -> Option<String> {
    Some(v.split_whitespace().collect::<Vec<_>>().join(" ")).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::dates::days_from_civil;
    use crate::import::corpus;

    /// A message of account `acct` in EUR around the `:61:`/`:86:` lines `body` (line 5 on).
    fn msg(acct: &str, body: &str) -> String {
        format!(":20:REF\n:25:{acct}\n:28C:1/1\n:60F:C240301EUR100,00\n{body}:62F:C240331EUR100,00\n-\n")
    }

    fn ok(text: &str) -> Vec<Statement> {
        read(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn lines(text: &str) -> Vec<Line> {
        ok(text).into_iter().flat_map(|s| s.lines).collect()
    }

    fn err(text: impl AsRef<[u8]>) -> ImportError {
        match read(text.as_ref()) {
            Ok(s) => panic!("read: {s:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn every_corpus_statement_reads_as_the_manifest_says() {
        let entries = corpus::entries("mt940");
        assert_eq!(entries.len(), 2);
        for e in entries {
            let got = read(&corpus::bytes(&e)).unwrap_or_else(|err| panic!("{}: {err}", e["file"]));
            corpus::check(&e, &got);
        }
    }

    #[test]
    fn statement_lines_as_swift_writes_them() {
        let body = "\
:61:2403010301D25,03NTRFNONREF//BANK1
:61:240302C1200,NTRFINV 42
:61:240303RC7,5NMSCNONREF
:61:240304RD1,00NMSCNONREF//R4
:61:2403050305DR3,00N024NONREF
:61:991231C1,00NTRFA
:61:790101C1,00NTRFB
";
        let got = ok(&msg("NL01INGB0001234567", body));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].account.as_deref(), Some("NL01INGB0001234567"));
        assert_eq!(got[0].currency.as_deref(), Some("EUR"));
        let l = &got[0].lines;
        // D and RC (a credit taken back) are out, C and RD (a debit put back) in; `DR` is a
        // debit with the funds code R (the last letter of EUR).
        let amounts: Vec<i64> = l.iter().map(|l| l.amount_cents).collect();
        assert_eq!(amounts, [-2503, 120_000, -750, 100, -300, 100, 100]);
        // The bank's reference, else the owner's; NONREF is none.
        let ids: Vec<_> = l.iter().map(|l| l.bank_id.as_deref()).collect();
        assert_eq!(ids, [Some("BANK1"), Some("INV 42"), None, Some("R4"), None, Some("A"), Some("B")]);
        // The value date; years 80-99 are 19xx, the rest 20xx.
        let days: Vec<i64> = l.iter().map(|l| l.day).collect();
        let want = [
            (2024, 3, 1),
            (2024, 3, 2),
            (2024, 3, 3),
            (2024, 3, 4),
            (2024, 3, 5),
            (1999, 12, 31),
            (2079, 1, 1),
        ]
        .map(|(y, m, d)| days_from_civil(y, m, d));
        assert_eq!(days, want);
        let at: Vec<usize> = l.iter().map(|l| l.source_line).collect();
        assert_eq!(at, [5, 6, 7, 8, 9, 10, 11]);
    }

    #[test]
    fn information_gives_memo_and_structured_payee() {
        let body = "\
:61:240301D1,00NTRFNONREF
:86: RC AFREKENING\tBETALINGSVERKEER
BETREFT REKENING 4715589
:61:240301D2,00NTRFNONREF
:86:166?00SEPA UEBERWEISUNG?20Rechnung 47?2111?32MUELLER G
MBH?33 & CO
:61:240301D3,00NTRFNONREF
:86:/TRTP/SEPA OVERBOEKING/IBAN/FR1420041010050500013M02606/BIC/PSSTFRPP/NAME/Boulangerie L'Etoil
e/REMI/USTD//Facture 2025/0042/EREF/E1
:61:240301D4,00NTRFNONREF//R4
Paiement mobile
:61:240301D5,00NTRFNONREF//R5
Supplementary
:86:B32?TREMBLAY, MARIE
:61:240301D6,00NTRFNONREF
:86:first part
:86:second part
:61:240301D7,00NTRFNONREF
:86:005?00Kartenzahlung
:61:240301D8,00NTRFNONREF
:86:/TRTP/SEPA INCASSO/ORDP//NAME/Energie BV/EREF/E2
";
        let l = lines(&msg("NL01", body));
        let pm: Vec<_> = l.iter().map(|l| (l.payee.as_deref(), l.memo.as_deref())).collect();
        assert_eq!(
            pm,
            [
                // Free text: lines of words, tabs as spaces.
                (None, Some("RC AFREKENING BETALINGSVERKEER BETREFT REKENING 4715589")),
                // `?NN` subfields run across line ends.
                (Some("MUELLER GMBH & CO"), Some("Rechnung 4711")),
                (Some("Boulangerie L'Etoile"), Some("Facture 2025/0042")),
                // No :86: the supplementary details of :61:.
                (None, Some("Paiement mobile")),
                // Not `?NN` subfields: free text.
                (None, Some("B32?TREMBLAY, MARIE")),
                (None, Some("first part second part")),
                (None, Some("Kartenzahlung")),
                // No REMI: the whole text.
                (Some("Energie BV"), Some("/TRTP/SEPA INCASSO/ORDP//NAME/Energie BV/EREF/E2")),
            ]
        );
    }

    #[test]
    fn information_after_the_closing_balance_is_the_statements() {
        let text = msg("NL01", ":61:240301D1,00NTRFNONREF\n:86:the line\n")
            .replace(":62F:C240331EUR100,00\n", ":62F:C240331EUR100,00\n:86:D000004C000002D25,24C28,71\n");
        assert_eq!(lines(&text)[0].memo.as_deref(), Some("the line"));
    }

    #[test]
    fn envelopes_preambles_and_messages() {
        let swift = format!(
            "{{1:F01BANKFRPPAXXX0000000000}}\r\n{{2:I940BANKFRPPXXXXN}}\r\n{{4:\r\n{}-}}\r\n{{1:F01X}}{{2:I940X}}{{4:\r\n{}-}}{{5:{{CHK:1}}}}\r\n",
            msg("FR76", ":61:240301C1,00NTRFNONREF//A\r\n").trim_end_matches("-\n"),
            msg("FR76", ":61:240302C2,00NTRFNONREF//B\r\n").trim_end_matches("-\n"),
        );
        let got = ok(&swift);
        assert_eq!(got.len(), 1, "one account, two messages: merged");
        assert_eq!(got[0].lines.iter().map(|l| l.amount_cents).collect::<Vec<_>>(), [100, 200]);
        assert_eq!(got[0].lines[1].source_line, 16);
        // ING's preamble lines and `-XXX` trailer; a second account; `:20:` with no `-` before.
        let ing = format!(
            "0000 01INGBNL2AXXXX00001\n940 00\n{}-XXX\n{}",
            msg("0001", ":61:240301C1,00NTRFNONREF\n").trim_end_matches("-\n"),
            msg("0002", ":61:240301C2,00NTRFNONREF\n").trim_end_matches("-\n"),
        ) + &msg("0001", ":61:240301C3,00NTRFNONREF\n");
        let got = ok(&ing);
        let acc: Vec<_> = got.iter().map(|s| (s.account.as_deref(), s.lines.len())).collect();
        assert_eq!(acc, [(Some("0001"), 2), (Some("0002"), 1)]);
        // A Latin-1 export.
        let latin: Vec<u8> = msg("NL01", ":61:240301C1,00NTRFNONREF\n:86:caf\u{e9}\n")
            .chars()
            .map(|c| c as u32 as u8)
            .collect();
        assert_eq!(read(&latin).unwrap()[0].lines[0].memo.as_deref(), Some("café"));
    }

    #[test]
    fn fields_that_are_wrong_name_their_line() {
        let cases = [
            (":61:251345C1,00NTRFNONREF\n", "not a date"),
            (":61:250229C1,00NTRFNONREF\n", "not a date"),
            (":61:2503011345C1,00NTRFNONREF\n", "not a date"),
            (":61:20251345C1,00NTRFNONREF\n", "not a date"),
            (":61:2503X1C1,00NTRFNONREF\n", "no value date"),
            (&format!(":61:250301C{},00NTRFNONREF\n", "9".repeat(40)), "too large"),
            (":61:250301C1,001NTRFNONREF\n", "more than 2 decimals"),
            (":61:250301X1,00NTRFNONREF\n", "debit/credit mark"),
            (":61:250301ECR1,00NTRFNONREF\n", "debit/credit mark"),
            (":61:250301CNTRFNONREF\n", "no amount"),
            (":61:250301C1,00//X\n", "transaction type"),
            (":61:250301C1,00NTR\n", "transaction type"),
            (&format!(":61:250301C1,00NTRF{}\n", "R".repeat(36)), "longer than"),
            (":61:\u{e9}\u{e9}\u{e9}\n", "no value date"),
            (":61:\n", "no value date"),
        ];
        for (body, want) in cases {
            // The bad line is line 6, after a good one on line 5.
            let text = msg("NL01", &(":61:240301C1,00NTRFNONREF\n".to_string() + body));
            let e = err(&text);
            assert_eq!(e.line, 6, "{body}: {e}");
            assert!(e.msg.contains(want), "{body}: {e}");
        }
    }

    #[test]
    fn references_are_text() {
        let l = lines(&msg("NL01", ":61:240301C1,00NTRFA\u{e9}//B\u{e9}\n:61:240301C1,00NTRF A //\n"));
        let ids: Vec<_> = l.iter().map(|l| l.bank_id.as_deref()).collect();
        assert_eq!(ids, [Some("B\u{e9}"), Some("A")]);
    }

    #[test]
    fn balances_are_checked_and_give_the_currency() {
        let text = msg("NL01", "").replace(":60F:C240301EUR100,00", ":60F:C241301EUR100,00");
        assert_eq!(err(text).line, 4);
        let text =
            msg("NL01", "").replace(":60F:C240301EUR100,00", &format!(":60F:C240301EUR{}", "1".repeat(40)));
        assert_eq!(err(text).line, 4);
        let text = msg("NL01", "").replace(":60F:C240301EUR", ":60F:C240301eur");
        assert!(err(text).msg.contains("no currency"));
        let text = msg("NL01", "").replace(":62F:C240331EUR", ":62F:C240331USD");
        let e = err(text);
        assert_eq!(e.line, 5, "{e}");
        // No opening balance: the closing one's currency.
        let text = msg("NL01", ":61:240301C1,00NTRFNONREF\n").replace(":60F:C240301EUR100,00\n", "");
        assert_eq!(ok(&text)[0].currency.as_deref(), Some("EUR"));
    }

    #[test]
    fn binary_garbage_and_text_without_fields_are_refused() {
        let e = err(b":20:X\n:25:1\n\x00\x01\x02\xff\xfe");
        assert_eq!(e.line, 3, "{e}");
        let e = err(b"\x89PNG\r\n\x1a\n");
        assert_eq!(e.line, 2, "{e}");
        assert_eq!(err("just some\ntext\n").line, 1);
        assert_eq!(err("").line, 1);
    }

    #[test]
    fn a_cut_anywhere_never_panics() {
        let text = msg(
            "NL01",
            ":61:2403010301D25,03NTRFNONREF//BANK1\nsupp\n:86:166?00SEPA?20Rechnung?32MUELLER\n:61:240302C1,00NTRFX\n:86:/TRTP/X/NAME/N/REMI/R\n",
        );
        for cut in 0..=text.len() {
            let _ = read(&text.as_bytes()[..cut]);
        }
    }

    #[test]
    fn more_than_max_lines_stop_the_read_there() {
        let body = ":61:240301C1,00NTRFNONREF\n:86:x\n".repeat(MAX_LINES + 5);
        let t = std::time::Instant::now();
        let e = err(msg("NL01", &body));
        assert_eq!(e.line, 5 + 2 * MAX_LINES, "{e}");
        assert!(e.msg.contains("more than"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        let body = ":61:240301C1,00NTRFNONREF\n".repeat(MAX_LINES);
        assert_eq!(lines(&msg("NL01", &body)).len(), MAX_LINES);
    }
}
