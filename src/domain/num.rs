//! Exact decimal numbers: parsing client text without binary floating point, and printing
//! money, millionths and fractions in the canonical plain-decimal forms of SPEC 2.9.

/// An exact decimal `(-1)^neg * digits * 10^exp`, normalised so `digits` has no leading or
/// trailing zeros (zero is the empty digit string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dec {
    pub neg: bool,
    digits: Vec<u8>,
    exp: i64,
}

/// The value of a `Dec` at a fixed scale (e.g. 2 for cents, 6 for millionths).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scaled {
    /// `floor(|value| * 10^scale)`, or `None` when it does not fit in 38 digits.
    pub trunc: Option<i128>,
    /// Whether digits below the scale are non-zero (the value is not exact at this scale).
    pub rem_nonzero: bool,
    /// Whether rounding half away from zero adds one to `trunc`.
    pub round_up: bool,
}

/// Exponents beyond this are clamped: they already make any value "too large" or zero-like,
/// and clamping keeps the arithmetic on exponents overflow-free.
const EXP_CLAMP: i64 = 1_000_000_000_000;

impl Dec {
    /// Parses the grammar of SPEC 3.4 after trimming ASCII whitespace:
    /// `^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`.
    pub fn parse(text: &str) -> Option<Dec> {
        let s = text.trim_matches(|c: char| c.is_ascii_whitespace()).as_bytes();
        let mut i = 0;
        let mut neg = false;
        if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
            neg = s[i] == b'-';
            i += 1;
        }
        let int_start = i;
        while i < s.len() && s[i].is_ascii_digit() {
            i += 1;
        }
        let int_digits = &s[int_start..i];
        let mut frac_digits: &[u8] = &[];
        if i < s.len() && s[i] == b'.' {
            i += 1;
            let fs = i;
            while i < s.len() && s[i].is_ascii_digit() {
                i += 1;
            }
            frac_digits = &s[fs..i];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return None;
        }
        let mut exp: i64 = 0;
        if i < s.len() && (s[i] == b'e' || s[i] == b'E') {
            i += 1;
            let mut eneg = false;
            if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
                eneg = s[i] == b'-';
                i += 1;
            }
            let es = i;
            while i < s.len() && s[i].is_ascii_digit() {
                exp = (exp * 10 + i64::from(s[i] - b'0')).min(EXP_CLAMP);
                i += 1;
            }
            if es == i {
                return None;
            }
            if eneg {
                exp = -exp;
            }
        }
        if i != s.len() {
            return None;
        }
        let mut digits: Vec<u8> = int_digits.iter().chain(frac_digits.iter()).map(|d| d - b'0').collect();
        exp -= frac_digits.len() as i64;
        let lead = digits.iter().take_while(|d| **d == 0).count();
        digits.drain(..lead);
        while digits.last() == Some(&0) {
            digits.pop();
            exp += 1;
        }
        if digits.is_empty() {
            return Some(Dec { neg: false, digits, exp: 0 });
        }
        Some(Dec { neg, digits, exp })
    }

    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Strictly negative (so `-0` is not negative).
    pub fn is_negative(&self) -> bool {
        self.neg && !self.is_zero()
    }

    /// Whether the value is a whole number.
    pub fn is_integral(&self) -> bool {
        self.is_zero() || self.exp >= 0
    }

    pub fn scaled(&self, scale: u32) -> Scaled {
        if self.is_zero() {
            return Scaled { trunc: Some(0), rem_nonzero: false, round_up: false };
        }
        let shift = self.exp + i64::from(scale);
        let len = self.digits.len() as i64;
        if shift >= 0 {
            let total = len + shift;
            if total > 38 {
                return Scaled { trunc: None, rem_nonzero: false, round_up: false };
            }
            let mut v: i128 = 0;
            for d in &self.digits {
                v = v * 10 + i128::from(*d);
            }
            for _ in 0..shift {
                v *= 10;
            }
            return Scaled { trunc: Some(v), rem_nonzero: false, round_up: false };
        }
        // Some digits fall below the scale; the last digit is non-zero by normalisation.
        let keep = len + shift; // digits kept in the integer part (may be <= 0)
        if keep > 38 {
            return Scaled { trunc: None, rem_nonzero: true, round_up: false };
        }
        let mut v: i128 = 0;
        if keep > 0 {
            for d in &self.digits[..keep as usize] {
                v = v * 10 + i128::from(*d);
            }
        }
        let round_up = if keep >= 0 { self.digits[keep as usize] >= 5 } else { false };
        Scaled { trunc: Some(v), rem_nonzero: true, round_up }
    }

    /// `|value| * m`, exact (a unit conversion such as days to seconds); any length of digits.
    pub fn abs_times(&self, m: u32) -> Dec {
        if self.is_zero() || m == 0 {
            return Dec { neg: false, digits: Vec::new(), exp: 0 };
        }
        // Schoolbook multiplication by a small factor, least significant digit first.
        let mut out = Vec::with_capacity(self.digits.len() + 10);
        let mut carry = 0u64;
        for d in self.digits.iter().rev() {
            let v = u64::from(*d) * u64::from(m) + carry;
            out.push((v % 10) as u8);
            carry = v / 10;
        }
        while carry > 0 {
            out.push((carry % 10) as u8);
            carry /= 10;
        }
        // Normalised like `parse`: trailing zeros move into the exponent; the leading digit of
        // a product of non-zero numbers is non-zero.
        let zeros = out.iter().take_while(|d| **d == 0).count();
        out.drain(..zeros);
        out.reverse();
        Dec { neg: false, digits: out, exp: self.exp + zeros as i64 }
    }

    /// `|value| * 10^scale` rounded half away from zero; `None` when huge.
    pub fn rounded_abs(&self, scale: u32) -> Option<i128> {
        let s = self.scaled(scale);
        s.trunc.map(|t| t + i128::from(s.round_up))
    }

    /// Compares `|value|` with `limit / 10^scale` exactly: true when strictly greater.
    pub fn abs_gt(&self, limit: i128, scale: u32) -> bool {
        let s = self.scaled(scale);
        match s.trunc {
            None => true,
            Some(t) => t > limit || (t == limit && s.rem_nonzero),
        }
    }
}

/// Canonical money text of SPEC 2.9: `1500`, `1500.5`, `0.05`, `-12.3`.
pub fn fmt_money(cents: i128) -> String {
    fmt_scaled(cents, 2)
}

/// Plain decimal with trailing zeros stripped, from an integer at `scale` fractional digits.
pub fn fmt_scaled(v: i128, scale: u32) -> String {
    let mut out = String::with_capacity(24);
    push_scaled(&mut out, v, scale);
    out
}

/// [`fmt_scaled`] appended to `out`: every answer renders a few of these, so no allocation and,
/// for values that fit 64 bits (all real amounts), no 128-bit division.
pub fn push_scaled(out: &mut String, v: i128, scale: u32) {
    if v < 0 {
        out.push('-');
    }
    let a = v.unsigned_abs();
    let p = 10u128.pow(scale);
    let (int, mut frac) = match (u64::try_from(a), u64::try_from(p)) {
        (Ok(a), Ok(p)) => (u128::from(a / p), u128::from(a % p)),
        _ => (a / p, a % p),
    };
    let mut ib = itoa::Buffer::new();
    out.push_str(ib.format(int));
    if frac != 0 {
        let mut width = scale as usize;
        while frac.is_multiple_of(10) {
            frac /= 10;
            width -= 1;
        }
        out.push('.');
        let f = ib.format(frac);
        for _ in f.len()..width {
            out.push('0');
        }
        out.push_str(f);
    }
}

/// Integer division rounding half away from zero (den > 0).
pub fn div_round(num: i128, den: i128) -> i128 {
    debug_assert!(den > 0);
    let q = num / den;
    let r = num % den;
    if 2 * r.abs() >= den {
        q + num.signum()
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cents(s: &str) -> (Option<i128>, bool) {
        let d = Dec::parse(s).unwrap();
        let sc = d.scaled(2);
        (sc.trunc, sc.rem_nonzero)
    }

    #[test]
    fn grammar() {
        for ok in ["1", "+1", "-1", "1.", ".5", "1.5e3", "1E-2", " 7 ", "00.10"] {
            assert!(Dec::parse(ok).is_some(), "{ok}");
        }
        for bad in ["", ".", "e5", "1e", "NaN", "Inf", "0x10", "1.2.3", "1 2", "--1", "ten"] {
            assert!(Dec::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn money_exactness() {
        assert_eq!(cents("10.50"), (Some(1050), false));
        assert_eq!(cents("10.500"), (Some(1050), false));
        assert_eq!(cents("1.005e2"), (Some(10050), false));
        assert_eq!(cents("10.005"), (Some(1000), true));
        assert_eq!(cents("1e40").0, None);
        assert!(Dec::parse("1e999999999999999999").unwrap().scaled(2).trunc.is_none());
        assert_eq!(Dec::parse("1e-999999999999").unwrap().scaled(2).trunc, Some(0));
    }

    #[test]
    fn rounding_and_comparison() {
        assert_eq!(Dec::parse("0.0000004").unwrap().rounded_abs(6), Some(0));
        assert_eq!(Dec::parse("0.0000005").unwrap().rounded_abs(6), Some(1));
        assert_eq!(Dec::parse("0.3333335").unwrap().rounded_abs(6), Some(333334));
        assert!(Dec::parse("1.0000001").unwrap().abs_gt(1_000_000, 6));
        assert!(!Dec::parse("1.000000").unwrap().abs_gt(1_000_000, 6));
        assert!(Dec::parse("-0.0000001").unwrap().is_negative());
        assert!(!Dec::parse("-0").unwrap().is_negative());
    }

    #[test]
    fn abs_times_is_exact() {
        let secs = |s: &str| Dec::parse(s).unwrap().abs_times(86_400).scaled(0).trunc;
        assert_eq!(secs("1.5"), Some(129_600));
        assert_eq!(secs("-0.5"), Some(43_200));
        assert_eq!(secs("20000.5"), Some(1_728_043_200));
        assert_eq!(secs("0"), Some(0));
        // 1 s is 1/86400 day = 0.0000115740740...: one digit short of it truncates to 0 s.
        assert_eq!(secs("0.0000115740740740740740740740740741"), Some(1));
        assert_eq!(secs("0.0000115740740740740740740740740740"), Some(0));
        assert_eq!(secs("1e3"), Some(86_400_000));
        let d = Dec::parse("1.25").unwrap().abs_times(100);
        assert_eq!(d, Dec::parse("125").unwrap(), "normalised like parse");
    }

    proptest::proptest! {
        #[test]
        fn abs_times_matches_integer_arithmetic(v in 0i64..1_000_000_000_000, scale in 0u32..9, m in 0u32..100_000) {
            let text = fmt_scaled(i128::from(v), scale);
            let got = Dec::parse(&text).unwrap().abs_times(m).scaled(scale).trunc;
            proptest::prop_assert_eq!(got, Some(i128::from(v) * i128::from(m)));
        }
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_money(150000), "1500");
        assert_eq!(fmt_money(150050), "1500.5");
        assert_eq!(fmt_money(5), "0.05");
        assert_eq!(fmt_money(-1230), "-12.3");
        assert_eq!(fmt_scaled(333333, 6), "0.333333");
        assert_eq!(fmt_scaled(0, 6), "0");
        assert_eq!(fmt_scaled(-5, 6), "-0.000005");
        // Past 64 bits the 128-bit path takes over, with the same text.
        assert_eq!(fmt_scaled(i128::MAX, 2), "1701411834604692317316873037158841057.27");
        assert_eq!(fmt_scaled(i128::MIN, 0), i128::MIN.to_string());
        assert_eq!(fmt_scaled(i128::from(u64::MAX) * 100 + 1, 2), format!("{}.01", u64::MAX));
        assert_eq!(div_round(5, 2), 3);
        assert_eq!(div_round(-5, 2), -3);
        assert_eq!(div_round(4, 3), 1);
    }
}
