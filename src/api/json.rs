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
}
