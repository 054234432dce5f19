//! A small JSON object writer. Responses are written by hand so key order is the documented
//! order and numbers are exact decimal text (never through f64, never exponent notation).

use crate::domain::num::fmt_money;

#[derive(Debug, Default, Clone)]
pub struct Obj {
    buf: String,
}

pub fn escape_into(out: &mut String, s: &str) {
    out.push('"');
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
        let t = v.to_string();
        self.key(k).push_str(&t);
        self
    }

    pub fn money(self, k: &str, cents: i128) -> Obj {
        let t = fmt_money(cents);
        self.num(k, &t)
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
