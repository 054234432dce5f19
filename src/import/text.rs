//! What every format shares: charsets, amounts and calendar dates as banks write them.

use super::ImportError;
use crate::domain::dates::days_from_civil;

/// Most digits an amount may have: 1e12 in cents fits 15, and no bank writes more. A 40-digit
/// amount is refused, not rounded.
pub const MAX_AMOUNT_DIGITS: usize = 15;

/// Text of `bytes` in the named charset (`UTF-8`, `1252`, `CP1252`, `windows-1252`, `8859-1`,
/// `ISO-8859-1`, `cp1257`...), with a UTF-8 byte order mark dropped. Bytes that are valid UTF-8
/// under a single-byte label are read as UTF-8: banks declare 1252 and write UTF-8 (the Chase
/// QFX of the corpus), and no real cp1252 text is valid UTF-8 by chance past a few letters.
pub fn decode(bytes: &[u8], charset: Option<&str>) -> String {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if let Ok(s) = std::str::from_utf8(bytes) {
        return s.to_string();
    }
    let label = charset.map(|c| c.trim().to_ascii_lowercase()).unwrap_or_default();
    let label = match label.as_str() {
        "1252" | "cp1252" => "windows-1252".to_string(),
        "1257" | "cp1257" => "windows-1257".to_string(),
        l if l.starts_with("8859-") => format!("iso-{l}"),
        l => l.to_string(),
    };
    // Unknown or absent labels: Windows-1252, the superset of Latin-1 banks mean.
    let enc = encoding_rs::Encoding::for_label(label.as_bytes()).unwrap_or(encoding_rs::WINDOWS_1252);
    enc.decode_without_bom_handling(bytes).0.into_owned()
}

/// Cents of a decimal amount as banks write it: optional sign (`-`, `+`, or a trailing `-`),
/// `.` or `,` as the decimal mark (`decimal_comma`: `,` is the mark and `.` groups thousands;
/// otherwise `,` groups), at most 2 decimals (more are refused: a statement is never
/// rounded), at most [`MAX_AMOUNT_DIGITS`] digits. `-0` is 0.
pub fn amount_cents(text: &str, decimal_comma: bool, line: usize) -> Result<i64, ImportError> {
    let bad = || ImportError::at(line, format!("`{}` is not an amount", shown(text)));
    let mut t = text.trim();
    let mut neg = false;
    if let Some(rest) = t.strip_prefix('-') {
        (neg, t) = (true, rest);
    } else if let Some(rest) = t.strip_prefix('+') {
        t = rest;
    } else if let Some(rest) = t.strip_suffix('-') {
        (neg, t) = (true, rest);
    }
    let (mark, group) = if decimal_comma { (',', '.') } else { ('.', ',') };
    let (whole, frac) = match t.rfind(mark) {
        Some(i) => (&t[..i], &t[i + 1..]),
        None => (t, ""),
    };
    let whole: String = whole.chars().filter(|c| *c != group && *c != ' ' && *c != '\'').collect();
    if whole.is_empty() && frac.is_empty() {
        return Err(bad());
    }
    if !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    // Trailing zeros past the cents are exact (`10.500`); other digits would need rounding.
    if frac.trim_end_matches('0').len() > 2 || frac.len() > MAX_AMOUNT_DIGITS {
        return Err(ImportError::at(line, format!("`{}` has more than 2 decimals", shown(text))));
    }
    let frac = &frac[..frac.len().min(2)];
    let whole = whole.trim_start_matches('0');
    if whole.len() + 2 > MAX_AMOUNT_DIGITS {
        return Err(ImportError::at(line, format!("`{}` is too large", shown(text))));
    }
    let w: i64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| bad())? };
    let f: i64 = format!("{frac:0<2}").parse().map_err(|_| bad())?;
    let v = w * 100 + f;
    Ok(if neg { -v } else { v })
}

/// Days since 1970-01-01 of a calendar date, or an error naming it (`20251345` is refused).
pub fn day(y: i64, m: u32, d: u32, line: usize, text: &str) -> Result<i64, ImportError> {
    let days_in = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 0,
    };
    if !(1000..=9999).contains(&y) || d == 0 || d > days_in {
        return Err(ImportError::at(line, format!("`{}` is not a date", shown(text))));
    }
    Ok(days_from_civil(y, m, d))
}

/// `YYYYMMDD` at the start of `text` (OFX dates, which may go on with a time and zone).
pub fn yyyymmdd(text: &str, line: usize) -> Result<i64, ImportError> {
    let t = text.trim();
    let digits = t.get(..8).filter(|d| d.bytes().all(|b| b.is_ascii_digit()));
    let Some(d) = digits else {
        return Err(ImportError::at(line, format!("`{}` is not a date", shown(text))));
    };
    let n = |r: std::ops::Range<usize>| d[r].parse::<u32>().unwrap_or(0);
    day(i64::from(n(0..4)), n(4..6), n(6..8), line, text)
}

/// At most 40 characters of a value, for a message (a hostile file's value can be megabytes).
pub fn shown(text: &str) -> String {
    if text.is_empty() {
        return "(empty)".into();
    }
    let mut s = readable(text, 40);
    if text.chars().nth(40).is_some() {
        s.push('…');
    }
    s
}

/// At most `max` characters of `text` as a person can read them in a message: control
/// characters and undecodable bytes (U+FFFD) written as escapes (`\u{1b}`), never as they are.
pub fn readable(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars().take(max) {
        if c.is_control() || c == '\u{fffd}' {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// An XML reader's error as a person reads it: without the reader's byte ranges (`at 1..5`,
/// `range 1..5`), at most 120 characters.
pub fn xml_error(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let mut words: Vec<&str> = Vec::new();
    for w in text.split(' ') {
        let range = |w: &str| {
            let w = w.trim_end_matches([':', ',']);
            w.split_once("..").is_some_and(|(a, b)| {
                !a.is_empty()
                    && a.bytes().all(|c| c.is_ascii_digit())
                    && b.bytes().all(|c| c.is_ascii_digit())
            })
        };
        if range(w) {
            // "at range 1..5:" / "at 1..5:": drop the range and the words that lead to it.
            while matches!(words.last(), Some(&"at") | Some(&"range") | Some(&"position")) {
                words.pop();
            }
            if let Some(last) = words.last_mut() {
                if w.ends_with(':') && !last.ends_with(':') {
                    // Keep the colon that introduced what follows.
                    words.push(":");
                }
            }
            continue;
        }
        words.push(w);
    }
    let joined = words.join(" ").replace(" :", ":");
    readable(&joined, 120)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_text_shows_no_control_characters_and_errors_no_byte_ranges() {
        assert_eq!(shown("1.00\u{1}\u{1b}[31m"), "1.00\\u{1}\\u{1b}[31m");
        assert_eq!(shown("a\u{fffd}b"), "a\\u{fffd}b");
        assert_eq!(
            xml_error(&"Error while escaping character at range 1..5: Unrecognized escape symbol: \"lol9\""),
            "Error while escaping character: Unrecognized escape symbol: \"lol9\""
        );
        assert_eq!(xml_error(&"ill-formed document: at 10..12"), "ill-formed document:");
    }

    #[test]
    fn amounts_as_banks_write_them() {
        let ok = |t: &str, comma: bool| amount_cents(t, comma, 1).unwrap();
        assert_eq!(ok("-59.50", false), -5950);
        assert_eq!(ok("1,234.5", false), 123_450);
        assert_eq!(ok("-200,00", true), -20_000);
        assert_eq!(ok("1.234,56", true), 123_456);
        assert_eq!(ok("12.34-", false), -1234);
        assert_eq!(ok("-0", false), 0);
        assert_eq!(ok("+7", false), 700);
        assert_eq!(ok(".5", false), 50);
        assert_eq!(ok("10.500", false), 1050);
        for bad in ["", "-", "abc", "1.2.3x", "1.234", "0.001", "1234567890123456789012345678901234567890"] {
            assert!(amount_cents(bad, false, 3).is_err(), "{bad}");
        }
        assert_eq!(amount_cents("9999999999999999", false, 4).unwrap_err().line, 4);
    }

    #[test]
    fn dates_are_checked() {
        assert_eq!(yyyymmdd("20110331120000[-5:EST]", 1).unwrap(), days_from_civil(2011, 3, 31));
        assert!(yyyymmdd("20251345", 2).is_err());
        assert!(yyyymmdd("20230229", 2).is_err());
        assert!(yyyymmdd("2024022", 2).is_err());
        assert_eq!(yyyymmdd("20240229", 2).unwrap(), days_from_civil(2024, 2, 29));
    }

    #[test]
    fn charsets() {
        assert_eq!(decode(b"pr\xe9pay\xe9e", Some("8859-1")), "prépayée");
        assert_eq!(decode(b"\x80 \x97", Some("1252")), "€ —");
        assert_eq!(decode("\u{a6}".as_bytes(), Some("1252")), "\u{a6}");
        assert_eq!(decode(b"\xef\xbb\xbfok", None), "ok");
    }
}
