//! Exact reduced fractions for `num_periods` (SPEC 2.4, D16): numerator and denominator fit in
//! i64 (14.3), arithmetic runs in i128.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frac {
    pub num: i64,
    /// Always > 0.
    pub den: i64,
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    a = a.abs();
    b = b.abs();
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Frac {
    pub const ONE: Frac = Frac { num: 1, den: 1 };

    pub fn int(n: i64) -> Frac {
        Frac { num: n, den: 1 }
    }

    /// Reduces `num/den` (den != 0); `None` when the reduced form does not fit in i64.
    pub fn new(num: i128, den: i128) -> Option<Frac> {
        let (mut num, mut den) = if den < 0 { (-num, -den) } else { (num, den) };
        let g = gcd(num, den).max(1);
        num /= g;
        den /= g;
        Some(Frac { num: i64::try_from(num).ok()?, den: i64::try_from(den).ok()? })
    }

    pub fn add_int(self, k: i64) -> Option<Frac> {
        Frac::new(i128::from(self.num) + i128::from(k) * i128::from(self.den), i128::from(self.den))
    }

    /// `self - a/b` with b > 0.
    pub fn sub_ratio(self, a: i64, b: i64) -> Option<Frac> {
        let num = i128::from(self.num) * i128::from(b) - i128::from(a) * i128::from(self.den);
        Frac::new(num, i128::from(self.den) * i128::from(b))
    }

    /// `round(self * cents)` half away from zero, in i128.
    pub fn times_round(self, cents: i64) -> i128 {
        crate::domain::num::div_round(i128::from(self.num) * i128::from(cents), i128::from(self.den))
    }

    /// Decimal rounded half away from zero to 6 digits, trailing zeros stripped (SPEC 2.9).
    pub fn display(self) -> String {
        let m = crate::domain::num::div_round(i128::from(self.num) * 1_000_000, i128::from(self.den));
        crate::domain::num::fmt_scaled(m, 6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn withdrawal_example_w1() {
        let p = Frac::ONE.sub_ratio(35_000, 75_000).unwrap();
        assert_eq!(p, Frac { num: 8, den: 15 });
        assert_eq!(p.display(), "0.533333");
        assert_eq!(p.times_round(75_000), 40_000);
        let p2 = p.add_int(1).unwrap();
        assert_eq!(p2, Frac { num: 23, den: 15 });
        assert_eq!(p2.times_round(75_000), 115_000);
        assert_eq!(Frac::int(-9).display(), "-9");
    }
}
