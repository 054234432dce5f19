//! UTC calendar arithmetic and the strict date grammar of SPEC 3.4. Instants are whole seconds
//! since the Unix epoch; days are days since the epoch.

use std::fmt::Write as _;
pub const DAY_SECS: i64 = 86_400;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Inverse of [`days_from_civil`].
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

pub fn day_of(secs: i64) -> i64 {
    secs.div_euclid(DAY_SECS)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

fn valid_date(y: i64, m: u32, d: u32) -> bool {
    (1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m)
}

/// `YYYY-MM-DD`
pub fn fmt_day(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `YYYY-MM-DD HH:MM:SS` (transaction dates, D30).
pub fn fmt_datetime(secs: i64) -> String {
    let day = day_of(secs);
    let t = secs - day * DAY_SECS;
    format!("{} {:02}:{:02}:{:02}", fmt_day(day), t / 3600, (t / 60) % 60, t % 60)
}

/// Due-date rendering of SPEC 10.6: date only at midnight, else date and time.
pub fn fmt_due(secs: i64) -> String {
    if secs.rem_euclid(DAY_SECS) == 0 {
        fmt_day(day_of(secs))
    } else {
        fmt_datetime(secs)
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (envelope timing).
pub fn fmt_millis(ms: i64) -> String {
    let mut out = String::with_capacity(24);
    push_millis(&mut out, ms);
    out
}

/// [`fmt_millis`] appended to `out` (every answer carries two of these).
pub fn push_millis(out: &mut String, ms: i64) {
    // Both times of an answer, and most answers of a busy second, share their date and time of
    // day: each thread remembers the last second it wrote.
    thread_local! {
        static LAST: std::cell::Cell<(i64, [u8; 19])> = const { std::cell::Cell::new((i64::MIN, [0; 19])) };
    }
    let secs = ms.div_euclid(1000);
    let (last, head) = LAST.get();
    if last == secs {
        let mut b = *b"0000-00-00T00:00:00.000Z";
        b[..19].copy_from_slice(&head);
        put_digits(&mut b[20..23], ms.rem_euclid(1000));
        out.push_str(std::str::from_utf8(&b).unwrap_or("0000-00-00T00:00:00.000Z"));
        return;
    }
    let day = day_of(secs);
    let t = secs - day * DAY_SECS;
    let (y, m, d) = civil_from_days(day);
    if !(0..=9999).contains(&y) {
        let _ = write!(
            out,
            "{}T{:02}:{:02}:{:02}.{:03}Z",
            fmt_day(day),
            t / 3600,
            (t / 60) % 60,
            t % 60,
            ms.rem_euclid(1000)
        );
        return;
    }
    // Digits are written into a fixed template, without the fmt machinery or a division by a
    // power per digit, and appended at once.
    let mut b = *b"0000-00-00T00:00:00.000Z";
    put_digits(&mut b[0..4], y);
    put_digits(&mut b[5..7], i64::from(m));
    put_digits(&mut b[8..10], i64::from(d));
    put_digits(&mut b[11..13], t / 3600);
    put_digits(&mut b[14..16], (t / 60) % 60);
    put_digits(&mut b[17..19], t % 60);
    put_digits(&mut b[20..23], ms.rem_euclid(1000));
    let mut head = [0u8; 19];
    head.copy_from_slice(&b[..19]);
    LAST.set((secs, head));
    out.push_str(std::str::from_utf8(&b).unwrap_or("0000-00-00T00:00:00.000Z"));
}

/// `v` (0 <= v < 10^len) as exactly `dst.len()` decimal digits.
fn put_digits(dst: &mut [u8], mut v: i64) {
    for c in dst.iter_mut().rev() {
        *c = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn digits(&mut self, min: usize, max: usize) -> Option<u32> {
        let start = self.i;
        while self.i < self.s.len() && self.i - start < max && self.s[self.i].is_ascii_digit() {
            self.i += 1;
        }
        if self.i - start < min {
            return None;
        }
        let mut v = 0u32;
        for c in &self.s[start..self.i] {
            v = v * 10 + u32::from(c - b'0');
        }
        Some(v)
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn done(&self) -> bool {
        self.i == self.s.len()
    }
}

/// `HH:MM` or `HH:MM:SS[.fraction]`; returns seconds of the day.
fn parse_time(c: &mut Cursor, allow_fraction: bool) -> Option<i64> {
    let h = c.digits(2, 2)?;
    if !c.eat(b':') {
        return None;
    }
    let mi = c.digits(2, 2)?;
    let mut s = 0;
    if c.eat(b':') {
        s = c.digits(2, 2)?;
        if allow_fraction && c.eat(b'.') {
            c.digits(1, usize::MAX)?;
        }
    }
    if h > 23 || mi > 59 || s > 59 {
        return None;
    }
    Some(i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s))
}

/// Parses a date of the SPEC 3.4 grammar into UTC seconds since the epoch.
pub fn parse_date(text: &str) -> Option<i64> {
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let s = t.as_bytes();
    let secs = if s.len() >= 10 && s[4] == b'-' && s[..4].iter().all(u8::is_ascii_digit) {
        parse_iso(s)
    } else {
        parse_dmy(s)
    }?;
    // An offset can carry a written year 0000 or 9999 out of four digits in UTC
    // (`0000-01-01T00:00+01:00`), where no answer could print it as YYYY-MM-DD: invalid.
    let first = days_from_civil(0, 1, 1) * DAY_SECS;
    let end = days_from_civil(10_000, 1, 1) * DAY_SECS;
    (first..end).contains(&secs).then_some(secs)
}

fn parse_iso(s: &[u8]) -> Option<i64> {
    let mut c = Cursor { s, i: 0 };
    let y = c.digits(4, 4)?;
    c.eat(b'-').then_some(())?;
    let m = c.digits(2, 2)?;
    c.eat(b'-').then_some(())?;
    let d = c.digits(2, 2)?;
    if !valid_date(i64::from(y), m, d) {
        return None;
    }
    let base = days_from_civil(i64::from(y), m, d) * DAY_SECS;
    if c.done() {
        return Some(base);
    }
    if !(c.eat(b'T') || c.eat(b' ')) {
        return None;
    }
    let tod = parse_time(&mut c, true)?;
    let mut offset = 0i64;
    if c.eat(b'Z') {
    } else if c.s.get(c.i) == Some(&b'+') || c.s.get(c.i) == Some(&b'-') {
        let neg = c.s[c.i] == b'-';
        c.i += 1;
        let oh = c.digits(2, 2)?;
        c.eat(b':').then_some(())?;
        let om = c.digits(2, 2)?;
        if oh > 23 || om > 59 {
            return None;
        }
        offset = i64::from(oh) * 3600 + i64::from(om) * 60;
        if neg {
            offset = -offset;
        }
    }
    if !c.done() {
        return None;
    }
    Some(base + tod - offset)
}

/// `A<sep>B<sep>YYYY [HH:MM[:SS]]`, day-first when valid, else month-first.
fn parse_dmy(s: &[u8]) -> Option<i64> {
    let mut c = Cursor { s, i: 0 };
    let a = c.digits(1, 2)?;
    let sep = *c.s.get(c.i)?;
    if !matches!(sep, b'-' | b'/' | b'.') {
        return None;
    }
    c.i += 1;
    let b = c.digits(1, 2)?;
    c.eat(sep).then_some(())?;
    let y = i64::from(c.digits(4, 4)?);
    let mut tod = 0;
    if !c.done() {
        c.eat(b' ').then_some(())?;
        tod = parse_time(&mut c, false)?;
        if !c.done() {
            return None;
        }
    }
    let day = if valid_date(y, b, a) {
        days_from_civil(y, b, a)
    } else if valid_date(y, a, b) {
        days_from_civil(y, a, b)
    } else {
        return None;
    };
    Some(day * DAY_SECS + tod)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Option<String> {
        parse_date(s).map(fmt_datetime)
    }

    #[test]
    fn civil_roundtrip() {
        for day in [-800_000, -1, 0, 1, 20_000, 2_932_896] {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
        assert_eq!(fmt_day(0), "1970-01-01");
        assert_eq!(fmt_day(days_from_civil(2025, 7, 10) - 365_000), "1026-03-10");
    }

    #[test]
    fn grammar_forms() {
        assert_eq!(p("2025-08-15").unwrap(), "2025-08-15 00:00:00");
        assert_eq!(p("2025-08-15T14:30").unwrap(), "2025-08-15 14:30:00");
        assert_eq!(p("2025-08-15 14:30:05.25").unwrap(), "2025-08-15 14:30:05");
        assert_eq!(p("2025-08-15T14:30:00+02:00").unwrap(), "2025-08-15 12:30:00");
        assert_eq!(p("2025-08-15T00:00:00Z").unwrap(), "2025-08-15 00:00:00");
        assert_eq!(p("16/11/2025 14:30").unwrap(), "2025-11-16 14:30:00");
        assert_eq!(p("11-16-2025").unwrap(), "2025-11-16 00:00:00");
        assert_eq!(p("2024-02-29").unwrap(), "2024-02-29 00:00:00");
        for bad in ["not-a-date", "2020-13-01", "12345", "2025-02-29", "2025-08-15T24:00", ""] {
            assert!(p(bad).is_none(), "{bad}");
        }
        // Years 0000-9999 in UTC: an offset may not carry a date out of them.
        assert_eq!(p("0000-01-01T00:00Z").unwrap(), "0000-01-01 00:00:00");
        assert_eq!(p("0000-01-01T00:00-01:00").unwrap(), "0000-01-01 01:00:00");
        assert_eq!(p("9999-12-31T23:59:59Z").unwrap(), "9999-12-31 23:59:59");
        assert_eq!(p("1/1/0000").unwrap(), "0000-01-01 00:00:00");
        for out in ["0000-01-01T00:00+01:00", "9999-12-31T23:00-02:00", "9999-12-31T23:59:59-00:01"] {
            assert!(p(out).is_none(), "{out}");
        }
    }

    #[test]
    fn due_rendering() {
        assert_eq!(fmt_due(parse_date("2025-12-31T00:00:00Z").unwrap()), "2025-12-31");
        assert_eq!(fmt_due(parse_date("2025-08-15T14:30:00+02:00").unwrap()), "2025-08-15 12:30:00");
        assert_eq!(fmt_millis(1_752_137_415_123), "2025-07-10T08:50:15.123Z");
    }
}

#[cfg(test)]
mod fmt_millis_tests {
    use super::*;

    #[test]
    fn fmt_millis_matches_the_general_formatting() {
        let bases =
            [0i64, 1, 999, 1_752_137_415_123, 253_402_300_799_999, -1, -86_400_001, 253_402_300_800_000];
        // Runs within one second, across seconds, and back to a second written before, so the
        // per-thread memory of the last second is exercised both ways.
        let mut seq = Vec::new();
        for b in bases {
            seq.extend([b, b, b + 1, b - 1, b + 1000, b, b - 1000, b + 999]);
        }
        for ms in seq {
            let secs = ms.div_euclid(1000);
            let day = day_of(secs);
            let t = secs - day * DAY_SECS;
            let want = format!(
                "{}T{:02}:{:02}:{:02}.{:03}Z",
                fmt_day(day),
                t / 3600,
                (t / 60) % 60,
                t % 60,
                ms.rem_euclid(1000)
            );
            assert_eq!(fmt_millis(ms), want, "{ms}");
        }
    }
}
