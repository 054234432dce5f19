//! Request parameters from the query string, a JSON body or a form body, merged by name with the
//! precedence and presence rules of SPEC 3.2, 3.3 and 3.6a. Numbers keep their literal text.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::de::{Deserializer as _, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use super::decl::{Kind, Param};
use super::ApiError;
use crate::domain::dates::parse_date;
use crate::domain::num::Dec;

/// One parameter as seen by a handler.
#[derive(Debug, Clone, PartialEq)]
pub enum PVal<'a> {
    /// Missing, JSON null, `{}` or `[]`.
    Missing,
    /// The empty string.
    Empty,
    /// A string (query, form, or JSON string).
    Str(Cow<'a, str>),
    /// A JSON number, by its literal text.
    Num(Cow<'a, str>),
    Bool(bool),
    /// A JSON array of two or more elements, or a non-empty object.
    Invalid,
}

/// Numeric reading of a parameter.
pub enum NumVal {
    Missing,
    NotNumeric,
    Num(Dec),
}

#[derive(Debug, Default)]
enum Body {
    #[default]
    None,
    /// Name, value, and for a number (or a one-element array holding one) its literal text.
    Json(Vec<(String, Value, Option<String>)>),
    Form(Pairs),
}

#[derive(Debug, Default)]
pub struct Params {
    query: Pairs,
    body: Body,
}

/// Percent-decoding for query and form values: `+` is a space, invalid escapes stay literal,
/// invalid UTF-8 becomes U+FFFD. Text without `%` or `+` is returned as it is.
pub fn percent_decode(s: &str) -> Cow<'_, str> {
    let b = s.as_bytes();
    if !b.iter().any(|c| *c == b'%' || *c == b'+') {
        return Cow::Borrowed(s);
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    Cow::Owned(match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// The decoded `name=value` pairs of a query string or form body, in order. Every name and
/// value lies in one buffer, so a request's pairs cost two allocations however many there are
/// (a query of one pair cost three before, and most requests have one or two).
#[derive(Debug, Default)]
struct Pairs {
    text: String,
    spans: Vec<(Range<usize>, Range<usize>)>,
}

impl Pairs {
    fn parse(s: &str) -> Pairs {
        let b = s.as_bytes();
        let mut spans = Vec::new();
        if memchr::memchr2(b'%', b'+', b).is_none() {
            // Nothing to decode (the usual case): the pairs are ranges of the text itself.
            let mut start = 0;
            for end in memchr::memchr_iter(b'&', b).chain(std::iter::once(b.len())) {
                if end > start {
                    let eq = memchr::memchr(b'=', &b[start..end]).map_or(end, |i| start + i);
                    spans.push((start..eq, (eq + 1).min(end)..end));
                }
                start = end + 1;
            }
            return Pairs { text: s.to_owned(), spans };
        }
        let mut text = String::with_capacity(s.len());
        let mut push = |part: &str| {
            let start = text.len();
            text.push_str(&percent_decode(part));
            start..text.len()
        };
        for p in s.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            spans.push((push(k), push(v)));
        }
        Pairs { text, spans }
    }

    /// The value of the first pair named `name`.
    fn get(&self, name: &str) -> Option<&str> {
        let at = |r: &Range<usize>| self.text.get(r.clone()).unwrap_or("");
        self.spans.iter().find(|(k, _)| at(k) == name).map(|(_, v)| at(v))
    }
}

/// Visits a JSON object keeping the first occurrence of each key.
struct FirstWins;

/// The literal text of a JSON number, or of the number inside a one-element array: serde_json
/// rewrites exponents (`1e3` becomes `1e+3`), SPEC 3.3 wants the text as written.
fn number_text(raw: &str, v: &Value) -> Option<String> {
    let raw = raw.trim_matches(|c: char| c.is_ascii_whitespace());
    match v {
        Value::Number(_) => Some(raw.to_string()),
        Value::Array(a) if a.len() == 1 && a[0].is_number() => {
            let inner = raw.strip_prefix('[')?.strip_suffix(']')?;
            Some(inner.trim_matches(|c: char| c.is_ascii_whitespace()).to_string())
        }
        _ => None,
    }
}

impl<'de> Visitor<'de> for FirstWins {
    type Value = Vec<(String, Value, Option<String>)>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out: Vec<(String, Value, Option<String>)> = Vec::new();
        // Keys seen, once there are many: a scan of `out` per key made a body of 80k keys
        // (under 1 MiB, no token needed) cost seconds of a worker.
        let mut seen: Option<std::collections::HashSet<String>> = None;
        while let Some(k) = map.next_key::<String>()? {
            let raw: &'de RawValue = map.next_value()?;
            let dup = match &mut seen {
                Some(set) => !set.insert(k.clone()),
                None => out.iter().any(|(ek, _, _)| *ek == k),
            };
            if dup {
                continue;
            }
            if seen.is_none() && out.len() >= 16 {
                seen =
                    Some(out.iter().map(|(ek, _, _)| ek.clone()).chain(std::iter::once(k.clone())).collect());
            }
            let v: Value = serde_json::from_str(raw.get()).map_err(serde::de::Error::custom)?;
            let lit = number_text(raw.get(), &v);
            out.push((k, v, lit));
        }
        Ok(out)
    }
}

fn parse_json_object(body: &[u8]) -> Option<Vec<(String, Value, Option<String>)>> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let v = (&mut de).deserialize_map(FirstWins).ok()?;
    de.end().ok()?;
    Some(v)
}

fn json_pval<'a>(v: &'a Value, lit: Option<&'a str>) -> PVal<'a> {
    match v {
        Value::Null => PVal::Missing,
        Value::String(s) if s.is_empty() => PVal::Empty,
        Value::String(s) => PVal::Str(Cow::Borrowed(s)),
        Value::Number(n) => match lit {
            Some(t) => PVal::Num(Cow::Borrowed(t)),
            None => PVal::Num(Cow::Owned(n.to_string())),
        },
        Value::Bool(b) => PVal::Bool(*b),
        Value::Object(o) if o.is_empty() => PVal::Missing,
        Value::Object(_) => PVal::Invalid,
        Value::Array(a) if a.is_empty() => PVal::Missing,
        Value::Array(a) if a.len() == 1 => match &a[0] {
            Value::Array(_) | Value::Object(_) => PVal::Invalid,
            inner => json_pval(inner, lit),
        },
        Value::Array(_) => PVal::Invalid,
    }
}

impl Params {
    /// Builds the parameters; `Err` is the 400 `Invalid request body`.
    pub fn parse(query: Option<&str>, content_type: Option<&str>, body: &[u8]) -> Result<Params, ApiError> {
        let query = query.map(Pairs::parse).unwrap_or_default();
        let mut p = Params { query, body: Body::None };
        // A UTF-8 byte order mark is not part of the body (RFC 8259 8.1; some writers add one).
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        if body.iter().all(|c| c.is_ascii_whitespace()) {
            return Ok(p);
        }
        let media = content_type.map(|ct| ct.split(';').next().unwrap_or("").trim());
        let is_json = match media {
            Some(m) if m.eq_ignore_ascii_case("application/json") => true,
            Some(m) if m.eq_ignore_ascii_case("application/x-www-form-urlencoded") => false,
            Some(_) => return Ok(p),
            None => body.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'{'),
        };
        p.body = if is_json {
            Body::Json(parse_json_object(body).ok_or_else(|| ApiError::bad("Invalid request body"))?)
        } else {
            // `from_utf8` first: `from_utf8_lossy` checks a valid body several times slower.
            Body::Form(match std::str::from_utf8(body) {
                Ok(text) => Pairs::parse(text),
                Err(_) => Pairs::parse(&String::from_utf8_lossy(body)),
            })
        };
        Ok(p)
    }

    pub fn get(&self, name: &str) -> PVal<'_> {
        fn text(s: &str) -> PVal<'_> {
            if s.is_empty() {
                PVal::Empty
            } else {
                PVal::Str(Cow::Borrowed(s))
            }
        }
        if let Some(v) = self.query.get(name) {
            return text(v);
        }
        match &self.body {
            Body::None => PVal::Missing,
            Body::Form(pairs) => pairs.get(name).map_or(PVal::Missing, text),
            Body::Json(m) => m
                .iter()
                .find(|(k, _, _)| k == name)
                .map_or(PVal::Missing, |(_, v, lit)| json_pval(v, lit.as_deref())),
        }
    }

    /// A string parameter; missing and empty are `None`.
    pub fn str(&self, name: &str) -> Result<Option<String>, ApiError> {
        Ok(self.text(name)?.map(Cow::into_owned))
    }

    /// [`Params::str`] borrowed from the request where it can be (no allocation).
    pub fn text(&self, name: &str) -> Result<Option<Cow<'_, str>>, ApiError> {
        match self.get(name) {
            PVal::Missing | PVal::Empty => Ok(None),
            PVal::Str(s) | PVal::Num(s) => Ok(Some(s)),
            PVal::Bool(b) => Ok(Some(Cow::Borrowed(if b { "true" } else { "false" }))),
            PVal::Invalid => Err(invalid(name)),
        }
    }

    pub fn num(&self, name: &str) -> Result<NumVal, ApiError> {
        Ok(match self.get(name) {
            PVal::Missing | PVal::Empty => NumVal::Missing,
            PVal::Str(s) | PVal::Num(s) => Dec::parse(&s).map_or(NumVal::NotNumeric, NumVal::Num),
            PVal::Bool(_) => NumVal::NotNumeric,
            PVal::Invalid => return Err(invalid(name)),
        })
    }
}

pub fn invalid(name: &str) -> ApiError {
    ApiError::bad(format!("Invalid value for parameter '{name}'"))
}

/// `<name> is too long` when `v` has more than `max` characters.
pub fn check_len(name: &str, v: Option<&str>, max: usize) -> Result<(), ApiError> {
    match v {
        Some(s) if s.chars().count() > max => Err(ApiError::bad(format!("{name} is too long"))),
        _ => Ok(()),
    }
}

/// Reading a parameter through its declaration: presence, type, limits and messages all come
/// from the [`Param`], so a handler holds no message or limit of its own.
impl Params {
    /// A text parameter (absent: `None`, or its `missing` message when required), borrowed from
    /// the request where it can be. Its length is checked by [`Params::check_lengths`], at the
    /// step where the endpoint's table checks lengths.
    pub fn text_of(&self, p: &Param) -> Result<Option<Cow<'_, str>>, ApiError> {
        match self.text(p.name)? {
            Some(v) => Ok(Some(v)),
            None => p.msgs.missing.map_or(Ok(None), |m| Err(ApiError::bad(m))),
        }
    }

    /// "A string parameter too long" (SPEC 14.2): `<name> is too long` for the first of `params`,
    /// in their order, longer than its declared limit.
    pub fn check_lengths(&self, params: &[&Param]) -> Result<(), ApiError> {
        for p in params {
            if let Kind::Text { max_chars: Some(max) } = p.kind {
                check_len(p.name, self.text(p.name)?.as_deref(), max)?;
            }
        }
        Ok(())
    }

    /// A required text parameter.
    pub fn req_text_of(&self, p: &Param) -> Result<String, ApiError> {
        let missing = || ApiError::bad(p.msgs.missing.unwrap_or("parameter is required"));
        self.text_of(p)?.map(Cow::into_owned).ok_or_else(missing)
    }

    /// The number of a numeric parameter, before its type's checks.
    fn number_of(&self, p: &Param) -> Result<Option<Dec>, ApiError> {
        match self.num(p.name)? {
            NumVal::Missing => p.msgs.missing.map_or(Ok(None), |m| Err(ApiError::bad(m))),
            NumVal::NotNumeric => Err(ApiError::bad(p.msgs.invalid)),
            NumVal::Num(d) => Ok(Some(d)),
        }
    }

    /// A numeric parameter read by its kind: cents for money, millionths, or a whole number.
    pub fn num_of(&self, p: &Param) -> Result<Option<i64>, ApiError> {
        let Some(d) = self.number_of(p)? else { return Ok(None) };
        let m = &p.msgs;
        let range = || ApiError::bad(m.out_of_range.unwrap_or(m.invalid));
        match p.kind {
            Kind::Money { positive } => {
                if d.is_negative() || (positive && d.is_zero()) {
                    return Err(range());
                }
                money_cents(p.name, &d).map(Some)
            }
            Kind::Millionths { max_millionths, positive } => {
                if d.is_negative() || (positive && d.is_zero()) {
                    return Err(range());
                }
                let large = || ApiError::bad(m.too_large.unwrap_or(m.invalid));
                if d.abs_gt(max_millionths, 6) {
                    return Err(large());
                }
                d.rounded_abs(6).and_then(|v| i64::try_from(v).ok()).map(Some).ok_or_else(large)
            }
            Kind::Int { min, max } => integral(&d, min, max, m.invalid).map(Some),
            Kind::Text { .. } | Kind::Date | Kind::Bool | Kind::NumericDate => {
                Err(ApiError::Internal(format!("{} is not declared numeric", p.name)))
            }
        }
    }

    /// A required numeric parameter.
    pub fn req_num_of(&self, p: &Param) -> Result<i64, ApiError> {
        let missing = || ApiError::bad(p.msgs.missing.unwrap_or("parameter is required"));
        self.num_of(p)?.ok_or_else(missing)
    }

    /// A boolean parameter (SPEC 3.4's spellings), `default` when absent; anything else is its
    /// `invalid` message.
    pub fn flag_of(&self, p: &Param, default: bool) -> Result<bool, ApiError> {
        let bad = || ApiError::bad(p.msgs.invalid);
        match self.get(p.name) {
            PVal::Missing | PVal::Empty => Ok(default),
            PVal::Bool(b) => Ok(b),
            PVal::Str(s) => match s.as_ref() {
                "true" | "TRUE" | "True" | "T" => Ok(true),
                "false" | "FALSE" | "False" | "F" => Ok(false),
                _ => Err(bad()),
            },
            PVal::Num(_) | PVal::Invalid => Err(bad()),
        }
    }

    /// A date parameter (SPEC 3.4); absent or empty is `None`, unparsable its `invalid` message.
    pub fn date_of(&self, p: &Param) -> Result<Option<i64>, ApiError> {
        match self.text(p.name)? {
            None => p.msgs.missing.map_or(Ok(None), |m| Err(ApiError::bad(m))),
            Some(s) => parse_date(&s).map(Some).ok_or_else(|| ApiError::bad(p.msgs.invalid)),
        }
    }
}

/// A whole number in `[min, max]`, else `invalid`.
fn integral(d: &Dec, min: i64, max: i64, invalid: &str) -> Result<i64, ApiError> {
    let v = if d.is_integral() && !d.abs_gt(i128::from(max.max(min.abs())), 0) {
        d.rounded_abs(0).and_then(|v| i64::try_from(v).ok()).map(|v| if d.is_negative() { -v } else { v })
    } else {
        None
    };
    v.filter(|v| (min..=max).contains(v)).ok_or_else(|| ApiError::bad(invalid))
}

/// Largest single money amount, in cents (SPEC 3.4 step 5).
pub const MONEY_MAX_CENTS: i128 = 100_000_000_000_000;

/// Steps 4 and 5 of the money grammar for an already numeric, sign-checked value.
pub fn money_cents(name: &str, d: &Dec) -> Result<i64, ApiError> {
    let s = d.scaled(2);
    if s.rem_nonzero {
        return Err(ApiError::bad(format!("{name} must have at most 2 decimal places")));
    }
    match s.trunc {
        Some(c) if c <= MONEY_MAX_CENTS => Ok(c as i64),
        _ => Err(ApiError::bad(format!("{name} is too large"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first of duplicate JSON keys wins, whether a key repeats among the first few or
    /// after many (where a set of seen keys takes over from a scan).
    #[test]
    fn json_first_key_wins_among_many() {
        for n in [3usize, 16, 17, 40, 5000] {
            let mut body = String::from("{");
            for i in 0..n {
                body.push_str(&format!("\"k{i}\":{i},"));
            }
            // Every key again, and the 17th key a third time, each with another value.
            for i in 0..n {
                body.push_str(&format!("\"k{i}\":\"again\","));
            }
            body.push_str("\"k16\":\"third\",\"last\":true}");
            let m = parse_json_object(body.as_bytes()).expect("an object");
            assert_eq!(m.len(), n + 1 + usize::from(n <= 16), "{n} keys");
            for (i, (k, v, lit)) in m.iter().take(n).enumerate() {
                assert_eq!(
                    (k.as_str(), lit.as_deref()),
                    (format!("k{i}").as_str(), Some(i.to_string().as_str()))
                );
                assert!(v.is_number(), "{k}");
            }
        }
    }

    #[test]
    fn decoding() {
        assert_eq!(percent_decode("a+b%20c"), "a b c");
        assert_eq!(percent_decode("%zz%"), "%zz%");
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }

    /// Pairs hold exactly what decoding each name and value on its own gives, in order, and a
    /// lookup finds the first pair of a name; strings drawn from the characters that matter.
    #[test]
    fn pairs_match_decoding_each_part() {
        const ALPHABET: [&str; 14] =
            ["a", "b", "=", "&", "%", "+", "2", "0", "f", "F", "z", "é", "%ff", "%e2%82"];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..5000 {
            let len = (next() % 16) as usize;
            let s: String = (0..len).map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize]).collect();
            let want: Vec<(String, String)> = s
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (percent_decode(k).into_owned(), percent_decode(v).into_owned()),
                    None => (percent_decode(p).into_owned(), String::new()),
                })
                .collect();
            let got = Pairs::parse(&s);
            let got_list: Vec<(String, String)> = got
                .spans
                .iter()
                .map(|(k, v)| (got.text[k.clone()].to_string(), got.text[v.clone()].to_string()))
                .collect();
            assert_eq!(got_list, want, "{s:?}");
            for (k, _) in &want {
                let first = want.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
                assert_eq!(got.get(k), first, "{s:?} {k:?}");
            }
            assert_eq!(got.get("never"), None);
        }
    }

    /// A form body that is not UTF-8 reads with its bad bytes replaced, as before the fast path.
    #[test]
    fn a_form_body_with_bad_bytes_reads_with_replacements() {
        let p = Params::parse(None, Some("application/x-www-form-urlencoded"), b"user_id=a\xffb&amount=5")
            .unwrap();
        assert_eq!(p.str("user_id").unwrap().as_deref(), Some("a\u{fffd}b"));
        assert_eq!(p.str("amount").unwrap().as_deref(), Some("5"));
        let p = Params::parse(None, None, "user_id=\u{e9}t\u{e9}".as_bytes()).unwrap();
        assert_eq!(p.str("user_id").unwrap().as_deref(), Some("\u{e9}t\u{e9}"));
    }

    #[test]
    fn precedence_and_presence() {
        let p = Params::parse(
            Some("uuid=q&uuid=second&e="),
            Some("application/json"),
            br#"{"uuid":"b","amount":10.50,"x":[1],"y":[1,2],"n":null,"s":"","e":"body"}"#,
        )
        .unwrap();
        assert_eq!(p.get("uuid"), PVal::Str("q".into()));
        assert_eq!(p.get("amount"), PVal::Num("10.50".into()));
        assert_eq!(p.get("x"), PVal::Num("1".into()));
        assert_eq!(p.get("y"), PVal::Invalid);
        assert_eq!(p.get("n"), PVal::Missing);
        assert_eq!(p.get("s"), PVal::Empty);
        assert_eq!(p.get("e"), PVal::Empty);
        let lit = Params::parse(None, None, br#"{"t":1e3,"u":[ 2.50E-1 ],"v":-0.0}"#).unwrap();
        assert_eq!(lit.get("t"), PVal::Num("1e3".into()));
        assert_eq!(lit.get("u"), PVal::Num("2.50E-1".into()));
        assert_eq!(lit.str("v").unwrap().as_deref(), Some("-0.0"));
        let dup = Params::parse(None, None, br#"{"a":"1","a":"2"}"#).unwrap();
        assert_eq!(dup.get("a"), PVal::Str("1".into()));
        assert!(Params::parse(None, Some("application/json"), b"[1]").is_err());
        let form = Params::parse(None, None, b"amount=5&channel=AB+SA").unwrap();
        assert_eq!(form.get("channel"), PVal::Str("AB SA".into()));
        let ws = Params::parse(None, Some("application/json"), b"  \n").unwrap();
        assert_eq!(ws.get("a"), PVal::Missing);
    }
}
