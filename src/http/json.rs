//! A small JSON object writer. Responses are written by hand so key order is the documented
//! order and numbers are exact decimal text (never through f64, never exponent notation).

use std::fmt::Write as _;

#[derive(Debug, Default, Clone)]
pub struct Obj {
    buf: String,
}

/// Whether any byte of `x` is below 0x20, `"` or `\\` (SWAR byte tests; a borrow can flag a
/// byte above a matching one, never a word without one).
#[inline]
fn may_need_escape(x: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let below = |v: u64, n: u64| v.wrapping_sub(ONES * n) & !v & HIGHS;
    let zero = |v: u64| below(v, 1);
    (below(x, 0x20) | zero(x ^ (ONES * u64::from(b'"'))) | zero(x ^ (ONES * u64::from(b'\\')))) != 0
}

/// Whether some byte of `b` needs escaping, eight bytes at a time (the last word padded).
fn needs_escape(b: &[u8]) -> bool {
    let mut words = b.chunks_exact(8);
    let mut found = false;
    for c in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        found |= may_need_escape(u64::from_le_bytes(w));
    }
    let rest = words.remainder();
    let mut w = [b' '; 8];
    w[..rest.len()].copy_from_slice(rest);
    found || may_need_escape(u64::from_le_bytes(w))
}

pub fn escape_into(out: &mut String, s: &str) {
    // Most text (keys, ids, names, dates) needs no escaping: copied whole, in one reservation.
    if !needs_escape(s.as_bytes()) {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    out.push('"');
    let mut plain = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        let esc = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            b if b < 0x20 => "",
            _ => continue,
        };
        // Every byte that needs escaping is ASCII, so these slice bounds are char boundaries.
        out.push_str(&s[plain..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{:04x}", b);
        } else {
            out.push_str(esc);
        }
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

impl Obj {
    pub fn new() -> Obj {
        Obj { buf: String::with_capacity(128) }
    }

    fn key(&mut self, k: &str) -> &mut String {
        if !self.buf.is_empty() {
            self.buf.push(',');
        }
        escape_into(&mut self.buf, k);
        self.buf.push(':');
        &mut self.buf
    }

    pub fn str(mut self, k: &str, v: &str) -> Obj {
        let b = self.key(k);
        escape_into(b, v);
        self
    }

    pub fn opt_str(self, k: &str, v: Option<&str>) -> Obj {
        match v {
            Some(v) => self.str(k, v),
            None => self.null(k),
        }
    }

    /// A number already in canonical decimal text.
    pub fn num(mut self, k: &str, text: &str) -> Obj {
        self.key(k).push_str(text);
        self
    }

    pub fn int(mut self, k: &str, v: i128) -> Obj {
        let mut b = itoa::Buffer::new();
        self.key(k).push_str(b.format(v));
        self
    }

    pub fn money(mut self, k: &str, cents: i128) -> Obj {
        crate::domain::num::push_scaled(self.key(k), cents, 2);
        self
    }

    pub fn bool(mut self, k: &str, v: bool) -> Obj {
        self.key(k).push_str(if v { "true" } else { "false" });
        self
    }

    pub fn null(mut self, k: &str) -> Obj {
        self.key(k).push_str("null");
        self
    }

    /// Raw JSON value text.
    pub fn raw(mut self, k: &str, json: &str) -> Obj {
        self.key(k).push_str(json);
        self
    }

    pub fn obj(self, k: &str, o: Obj) -> Obj {
        let t = o.finish();
        self.raw(k, &t)
    }

    pub fn str_array(self, k: &str, items: &[&str]) -> Obj {
        let mut s = String::from("[");
        for (i, it) in items.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            escape_into(&mut s, it);
        }
        s.push(']');
        self.raw(k, &s)
    }

    /// An object of the given members' text (as [`Obj::members`] gives it).
    pub fn from_members(buf: String) -> Obj {
        Obj { buf }
    }

    /// The inner members, without braces.
    pub fn members(&self) -> &str {
        &self.buf
    }

    pub fn finish(self) -> String {
        let mut s = String::with_capacity(self.buf.len() + 2);
        s.push('{');
        s.push_str(&self.buf);
        s.push('}');
        s
    }
}

/// A JSON array of already-rendered values.
pub fn array(items: impl IntoIterator<Item = String>) -> String {
    let mut s = String::from("[");
    for (i, it) in items.into_iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&it);
    }
    s.push(']');
    s
}

/// Names under which the reference builds an R data frame (SPEC 8.3, 10.18): jsonlite writes
/// those as arrays of row objects with plain values, every other list member boxed.
const DATA_FRAMES: [&str; 2] = ["\"transactions\"", "\"time_series\""];

/// Re-renders one of our JSON answers as the reference's jsonlite serializer would write the same
/// R values (docs/hostile-input.md, `RESPONSE_STYLE=reference`; SPEC 3.5 and D1 describe the differences):
/// every scalar member of an object becomes a one-element array, `null` becomes `{}`, an empty
/// object (an empty R list) `[]`, arrays of scalars (R vectors) stay plain, data-frame members
/// become rows of plain values (missing values left out), and numbers keep at most 4 decimals.
/// Text that does not parse is returned unchanged.
pub fn reference_style(body: &str) -> String {
    let mut r = Restyle { s: body.as_bytes(), i: 0, out: String::with_capacity(body.len() + body.len() / 2) };
    match r.top() {
        Some(()) => r.out,
        None => body.to_string(),
    }
}

struct Restyle<'a> {
    s: &'a [u8],
    i: usize,
    out: String,
}

impl Restyle<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    fn text(&self, from: usize) -> Option<&str> {
        std::str::from_utf8(&self.s[from..self.i]).ok()
    }

    /// A string token, quotes and escapes included, as written.
    fn string(&mut self) -> Option<&str> {
        self.ws();
        let from = self.i;
        if self.s.get(self.i) != Some(&b'"') {
            return None;
        }
        self.i += 1;
        loop {
            match *self.s.get(self.i)? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return self.text(from);
                }
                _ => self.i += 1,
            }
        }
    }

    /// A number, `true`, `false` or `null` token as written.
    fn atom(&mut self) -> Option<&str> {
        self.ws();
        let from = self.i;
        while self.s.get(self.i).is_some_and(|c| c.is_ascii_alphanumeric() || b"+-.".contains(c)) {
            self.i += 1;
        }
        (self.i > from).then_some(())?;
        self.text(from)
    }

    fn top(&mut self) -> Option<()> {
        if self.peek()? != b'{' {
            return None;
        }
        self.object(true, true)?;
        self.ws();
        (self.i == self.s.len()).then_some(())
    }

    /// An object: an R list (`boxed`) or a data-frame row (plain values, nulls left out).
    fn object(&mut self, boxed: bool, top: bool) -> Option<()> {
        self.eat(b'{')?;
        let start = self.out.len();
        self.out.push('{');
        let mut first = true;
        if self.peek()? != b'}' {
            loop {
                let key = self.string()?.to_string();
                self.eat(b':')?;
                let frame = DATA_FRAMES.contains(&key.as_str());
                if !boxed && self.peek()? == b'n' {
                    self.atom()?;
                } else {
                    if !first {
                        self.out.push(',');
                    }
                    first = false;
                    self.out.push_str(&key);
                    self.out.push(':');
                    self.value(boxed, frame)?;
                }
                if self.peek()? == b',' {
                    self.i += 1;
                    continue;
                }
                break;
            }
        }
        self.eat(b'}')?;
        if first && boxed && !top {
            // An empty R list.
            self.out.truncate(start);
            self.out.push_str("[]");
        } else {
            self.out.push('}');
        }
        Some(())
    }

    /// A value; `boxed`: it is a member of an R list; `frame`: it is a data frame.
    fn value(&mut self, boxed: bool, frame: bool) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(true, false),
            b'[' => {
                self.i += 1;
                self.out.push('[');
                let mut first = true;
                while self.peek()? != b']' {
                    if !first {
                        self.eat(b',')?;
                        self.out.push(',');
                    }
                    first = false;
                    match self.peek()? {
                        b'{' => self.object(!frame, false)?,
                        _ => self.value(false, false)?,
                    }
                }
                self.i += 1;
                self.out.push(']');
                Some(())
            }
            b'"' => {
                let s = self.string()?.to_string();
                self.scalar(boxed, &s);
                Some(())
            }
            _ => {
                let a = self.atom()?.to_string();
                match a.as_str() {
                    "null" if boxed => self.out.push_str("{}"),
                    "null" | "true" | "false" => self.scalar(boxed, &a),
                    n => self.scalar(boxed, &round4(n)),
                }
                Some(())
            }
        }
    }

    fn scalar(&mut self, boxed: bool, text: &str) {
        if boxed {
            self.out.push('[');
            self.out.push_str(text);
            self.out.push(']');
        } else {
            self.out.push_str(text);
        }
    }
}

/// A plain decimal's text rounded half away from zero to at most 4 decimals, trailing zeros
/// dropped (jsonlite's default `digits = 4`). Other text is returned as is.
fn round4(t: &str) -> String {
    let (neg, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t),
    };
    let Some((int, frac)) = digits.split_once('.') else { return t.to_string() };
    if frac.len() <= 4 || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit()) {
        return t.to_string();
    }
    let mut d: Vec<u8> = int.bytes().chain(frac.bytes().take(4)).collect();
    if frac.as_bytes()[4] >= b'5' {
        let mut k = d.len();
        loop {
            if k == 0 {
                d.insert(0, b'1');
                break;
            }
            k -= 1;
            if d[k] == b'9' {
                d[k] = b'0';
            } else {
                d[k] += 1;
                break;
            }
        }
    }
    let split = d.len() - 4;
    let int_part = String::from_utf8_lossy(&d[..split]).trim_start_matches('0').to_string();
    let frac_part = String::from_utf8_lossy(&d[split..]).trim_end_matches('0').to_string();
    let int_part = if int_part.is_empty() { "0".to_string() } else { int_part };
    let zero = int_part == "0" && frac_part.is_empty();
    let mut s = String::new();
    if neg && !zero {
        s.push('-');
    }
    s.push_str(&int_part);
    if !frac_part.is_empty() {
        s.push('.');
        s.push_str(&frac_part);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-by-byte definition the fast path must agree with.
    fn escape_naive(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    proptest::proptest! {
        #[test]
        fn escaping_matches_the_byte_by_byte_definition(s in "[\\x00-\\x7f\\u{80}-\\u{10ffff}]{0,40}") {
            let mut out = String::new();
            escape_into(&mut out, &s);
            proptest::prop_assert_eq!(out, escape_naive(&s));
        }
    }

    #[test]
    fn every_byte_that_needs_escaping_is_found_at_every_position() {
        for b in 0u8..0x80 {
            for pos in 0..20 {
                let mut s = "abcdefghijklmnopqrst".to_string().into_bytes();
                s[pos] = b;
                let s = String::from_utf8(s).unwrap();
                let mut out = String::new();
                escape_into(&mut out, &s);
                assert_eq!(out, escape_naive(&s), "byte {b:#x} at {pos}");
            }
        }
    }

    #[test]
    fn escaping_covers_quotes_backslashes_and_control_characters_only() {
        let mut out = String::new();
        escape_into(&mut out, "plain é ✓ \"q\" \\ \n\r\t\u{1}\u{1f} end");
        assert_eq!(out, r#""plain é ✓ \"q\" \\ \n\r\t\u0001\u001f end""#);
        let mut empty = String::new();
        escape_into(&mut empty, "");
        assert_eq!(empty, r#""""#);
    }

    #[test]
    fn reference_style_boxes_lists_and_keeps_frames_plain() {
        let plain = r#"{"success":true,"status":200,"uuid":"u","n":null,"names":["a","b"],"none":[],
            "matches":[{"uuid":"x","name":"Rent"}],"transactions":[{"Type":"Deposit","Amount":10.5,"x":null}],
            "tree":{"child_accounts":{},"balance":1,"kids":{"A":{"name":"A"}}},"execution_time":0.0123456}"#;
        assert_eq!(
            reference_style(plain),
            r#"{"success":[true],"status":[200],"uuid":["u"],"n":{},"names":["a","b"],"none":[],"matches":[{"uuid":["x"],"name":["Rent"]}],"transactions":[{"Type":"Deposit","Amount":10.5}],"tree":{"child_accounts":[],"balance":[1],"kids":{"A":{"name":["A"]}}},"execution_time":[0.0123]}"#
        );
        assert_eq!(reference_style(r#"{"status":"ok"}"#), r#"{"status":["ok"]}"#);
        assert_eq!(reference_style("not json"), "not json");
    }

    #[test]
    fn four_decimals_half_away_from_zero() {
        for (a, b) in [
            ("0.333333", "0.3333"),
            ("0.99995", "1"),
            ("-0.00004", "0"),
            ("-1.23456", "-1.2346"),
            ("12", "12"),
            ("1.5", "1.5"),
            ("9.99996", "10"),
        ] {
            assert_eq!(round4(a), b, "{a}");
        }
    }
}
