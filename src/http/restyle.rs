//! The reference response style (`RESPONSE_STYLE=reference`): our answers re-rendered as the
//! reference's R serializer writes the same values.

/// Whether a member's quoted key names one under which the reference builds an R data frame
/// (the endpoints' declarations say which): jsonlite writes those as arrays of row objects
/// with plain values, every other list member boxed.
fn is_frame(quoted_key: &str) -> bool {
    let key = quoted_key.strip_prefix('"').and_then(|k| k.strip_suffix('"')).unwrap_or("");
    crate::api::endpoints::data_frames().contains(&key)
}

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
                let frame = is_frame(&key);
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
