//! The recurrence engine against an independent implementation: python-dateutil's `rrule`
//! (`tests/rrule_oracle.py`), over thousands of seeded random rules biased to month ends and
//! February 29. One `python3` process answers every rule: the first K nominal days, and the
//! nominal days with their indexes around a window, near the start or decades after it. Weekend
//! moves, which `rrule` does not know, are applied here to its days.
//!
//! Needs python3 with python-dateutil (`python3 -m pip install python-dateutil`, or Debian's
//! `python3-dateutil` for /usr/bin/python3). Without them the test fails, unless
//! `PFM_SKIP_RRULE=1`. `PFM_PYTHON` names another interpreter; `PFM_RRULE_RULES` and
//! `PFM_RRULE_SEED` change the number of rules (default 3000) and the seed.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use pfm::domain::dates::{civil_from_days, days_from_civil, fmt_day};
use pfm::domain::recur::{End, MonthDay, Occurrence, Recurrence, Unit, Weekday, Weekend};
use serde::Deserialize;
use serde_json::json;

/// First occurrences compared per rule.
const K: usize = 24;
const WEEKDAYS: [Weekday; 7] =
    [Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Thu, Weekday::Fri, Weekday::Sat, Weekday::Sun];

/// splitmix64: a seeded sequence, the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    /// True with probability `percent` / 100.
    fn chance(&mut self, percent: i64) -> bool {
        self.range(0, 99) < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.range(0, items.len() as i64 - 1) as usize]
    }
}

fn leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn month_len(y: i64, m: u32) -> u32 {
    match m {
        2 if leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A start from 1900 to 2199, half of them on the 28th to 31st or on February 29.
fn start_day(rng: &mut Rng) -> i64 {
    let y = rng.range(1900, 2199);
    if rng.chance(12) {
        let leap_year = (y..).find(|&y| leap(y)).unwrap_or(2000);
        return days_from_civil(leap_year, 2, 29);
    }
    let m = rng.range(1, 12) as u32;
    let len = month_len(y, m);
    let d = if rng.chance(45) {
        (rng.range(28, 31) as u32).min(len)
    } else {
        rng.range(1, i64::from(len)) as u32
    };
    days_from_civil(y, m, d)
}

fn random_rule(rng: &mut Rng) -> Recurrence {
    let start_day = start_day(rng);
    let unit = match rng.range(0, 99) {
        0..=24 => Unit::Days,
        25..=39 => Unit::Weeks,
        40..=79 => Unit::Months,
        _ => Unit::Years,
    };
    let every: u32 = match unit {
        Unit::Days => rng.pick(&[1, 1, 1, 2, 3, 7, 10, 14, 15, 28, 30, 31, 45]),
        Unit::Weeks => rng.pick(&[1, 1, 2, 2, 3, 4, 6, 8]),
        Unit::Months => rng.pick(&[1, 1, 1, 1, 2, 3, 3, 4, 5, 6, 7, 11, 12, 13, 18, 24]),
        Unit::Years => rng.pick(&[1, 1, 1, 1, 2, 3, 4, 5, 8]),
    };
    let (mut month_day, mut nth_weekday) = (None, None);
    if matches!(unit, Unit::Months | Unit::Years) {
        match rng.range(0, 99) {
            0..=34 => {}
            35..=59 => {
                let mut d = if rng.chance(50) { rng.range(28, 31) } else { rng.range(1, 31) };
                // A day the only month visited never has (the 30th of February yearly) is
                // refused by check(), and rrule searches to year 9999 for it: only a few.
                let (_, month, _) = civil_from_days(start_day);
                let one_month = unit == Unit::Years || every.is_multiple_of(12);
                if one_month && d > i64::from(month_len(2000, month)) && rng.chance(95) {
                    d = i64::from(month_len(2000, month));
                }
                month_day = Some(MonthDay::Day(d as u8));
            }
            60..=69 => month_day = Some(MonthDay::Last),
            _ => nth_weekday = Some((rng.pick(&[1, 2, 3, 4, 5, 5, -1, -1]), rng.pick(&WEEKDAYS))),
        }
    }
    let end = match rng.range(0, 9) {
        0..=3 => End::Never,
        4..=6 => End::After(rng.range(1, 60) as u32),
        _ => End::Until(start_day + rng.range(0, 8000)),
    };
    let weekend = rng.pick(&[Weekend::Keep, Weekend::Before, Weekend::After]);
    Recurrence { start_day, every, unit, month_day, nth_weekday, end, weekend }
}

/// A window near the start, or years after it; lengths from one day to a few years. Now and
/// then, for a yearly or at least yearly-spaced monthly rule, a window centuries away on a
/// series made endless: past one 400-year calendar cycle, the index is counted by whole cycles.
fn random_window(rng: &mut Rng, r: &mut Recurrence) -> (i64, i64) {
    let reach = match r.unit {
        Unit::Days => 2_000,
        Unit::Weeks => 8_000,
        Unit::Months => 12_000,
        Unit::Years => 80_000,
    };
    let sparse = r.unit == Unit::Years || (r.unit == Unit::Months && r.every >= 12);
    let offset = if sparse && rng.chance(4) {
        r.end = End::Never;
        rng.range(146_097, 255_669)
    } else if rng.chance(70) {
        rng.range(-40, 400)
    } else {
        rng.range(400, reach)
    };
    let from = r.start_day + offset;
    (from, from + rng.pick(&[0, 0, 1, 2, 6, 30, 90, 400, 1500]))
}

/// The oracle's view of one rule; field names are the script's.
fn wire(r: &Recurrence, from: i64, to: i64) -> serde_json::Value {
    json!({
        "start": r.start_day,
        "every": r.every,
        "unit": format!("{:?}", r.unit),
        "month_day": match r.month_day {
            Some(MonthDay::Day(d)) => json!(d),
            Some(MonthDay::Last) => json!(-1),
            None => json!(null),
        },
        "nth": r.nth_weekday.map(|(n, w)| json!([n, WEEKDAYS.iter().position(|x| *x == w)])),
        "count": match r.end { End::After(c) => json!(c), _ => json!(null) },
        "until": match r.end { End::Until(u) => json!(u), _ => json!(null) },
        "k": K,
        "from": from,
        "to": to,
    })
}

#[derive(Deserialize)]
struct Answer {
    first: Vec<i64>,
    window: Vec<(u32, i64)>,
}

/// The weekend move, written again here from the weekday arithmetic (1970-01-01 a Thursday).
fn moved(weekend: Weekend, day: i64) -> i64 {
    match (weekend, (day + 3).rem_euclid(7)) {
        (Weekend::Before, 5) => day - 1,
        (Weekend::Before, 6) => day - 2,
        (Weekend::After, 5) => day + 2,
        (Weekend::After, 6) => day + 1,
        _ => day,
    }
}

/// Every answer of the oracle, in order; None when it cannot run and PFM_SKIP_RRULE=1.
fn ask_oracle(lines: String, count: usize) -> Option<Vec<Answer>> {
    let python = std::env::var("PFM_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/rrule_oracle.py");
    let skip = std::env::var("PFM_SKIP_RRULE").is_ok_and(|v| v == "1");
    let install = "install python-dateutil (`python3 -m pip install python-dateutil`, or apt's \
                   python3-dateutil for /usr/bin/python3), or set PFM_SKIP_RRULE=1 to skip this check";
    let child = Command::new(&python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if skip => {
            eprintln!("skipped (PFM_SKIP_RRULE=1): cannot run {python}: {e}");
            return None;
        }
        Err(e) => panic!("cannot run {python} ({e}): the rrule check needs python3 with dateutil: {install}"),
    };
    // Written from a thread so that a large input cannot block against a full output pipe.
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let writer = std::thread::spawn(move || stdin.write_all(lines.as_bytes()));
    let mut out = String::new();
    child.stdout.take().expect("stdout is piped").read_to_string(&mut out).expect("oracle output");
    let mut err = String::new();
    child.stderr.take().expect("stderr is piped").read_to_string(&mut err).expect("oracle errors");
    let status = child.wait().expect("oracle exit");
    let written = writer.join().expect("writer thread");
    if status.code() == Some(3) {
        if skip {
            eprintln!("skipped (PFM_SKIP_RRULE=1): {}", err.trim());
            return None;
        }
        panic!("{}: the rrule check needs it: {install}", err.trim());
    }
    assert!(status.success() && written.is_ok(), "the oracle failed ({status}): {err}");
    let answers: Vec<Answer> =
        out.lines().map(|line| serde_json::from_str(line).expect("an oracle answer")).collect();
    assert_eq!(answers.len(), count, "one answer per rule");
    Some(answers)
}

fn show(o: Option<&Occurrence>) -> String {
    o.map_or("none".into(), |o| format!("#{} {} -> {}", o.n, fmt_day(o.nominal_day), fmt_day(o.day)))
}

#[test]
fn occurrences_match_python_dateutil_rrule() {
    let env_number =
        |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let count = env_number("PFM_RRULE_RULES", 3000) as usize;
    let mut rng = Rng(env_number("PFM_RRULE_SEED", 20_250_725));
    let cases: Vec<(Recurrence, i64, i64)> = (0..count)
        .map(|_| {
            let mut r = random_rule(&mut rng);
            let (from, to) = random_window(&mut rng, &mut r);
            (r, from, to)
        })
        .collect();
    let lines: String = cases.iter().map(|(r, from, to)| format!("{}\n", wire(r, *from, *to))).collect();
    let Some(answers) = ask_oracle(lines, cases.len()) else { return };

    let mut failures = Vec::new();
    let mut compared = [0usize; 2];
    for ((r, from, to), answer) in cases.iter().zip(&answers) {
        let (from, to) = (*from, *to);
        let mut wrong = Vec::new();
        // The first K, walked and one by one.
        let first: Vec<Occurrence> = r.iter_from(i64::MIN).take(K).collect();
        let nominal: Vec<i64> = first.iter().map(|o| o.nominal_day).collect();
        if nominal != answer.first {
            let fmt = |days: &[i64]| days.iter().map(|d| fmt_day(*d)).collect::<Vec<_>>().join(" ");
            wrong.push(format!("first: ours {}\n  rrule {}", fmt(&nominal), fmt(&answer.first)));
        }
        for (i, o) in first.iter().enumerate() {
            if o.n as usize != i || o.day != moved(r.weekend, o.nominal_day) || r.occurrence(o.n) != Some(*o)
            {
                let want = answer.first.get(i).map_or("none".into(), |d| fmt_day(moved(r.weekend, *d)));
                wrong.push(format!("occurrence {i}: ours {}, rrule's moved to {want}", show(Some(o))));
            }
        }
        if answer.first.len() < K && r.occurrence(answer.first.len() as u32).is_some() {
            wrong.push(format!("occurrence {} should not exist", answer.first.len()));
        }
        // The window, selected by moved day, with rrule's indexes.
        let expected: Vec<Occurrence> = answer
            .window
            .iter()
            .map(|&(n, nominal_day)| Occurrence { n, nominal_day, day: moved(r.weekend, nominal_day) })
            .collect();
        let inside: Vec<Occurrence> =
            expected.iter().copied().filter(|o| from <= o.day && o.day <= to).collect();
        let ours = r.occurrences_between(from, to);
        if ours != inside {
            let list = |v: &[Occurrence]| v.iter().map(|o| show(Some(o))).collect::<Vec<_>>().join(", ");
            wrong.push(format!("window: ours [{}]\n  rrule [{}]", list(&ours), list(&inside)));
        }
        let next = expected.iter().find(|o| o.day >= from);
        if r.next_from(from).as_ref() != next {
            wrong.push(format!("next_from: ours {}, rrule {}", show(r.next_from(from).as_ref()), show(next)));
        }
        compared[0] += nominal.len();
        compared[1] += ours.len();
        if !wrong.is_empty() {
            failures.push(format!(
                "{r:?} (start {}, window {} to {}):\n  {}",
                fmt_day(r.start_day),
                fmt_day(from),
                fmt_day(to),
                wrong.join("\n  ")
            ));
        }
    }
    eprintln!(
        "{} rules, {} first occurrences and {} window occurrences compared with rrule",
        cases.len(),
        compared[0],
        compared[1]
    );
    assert!(
        failures.is_empty(),
        "{} of {} rules differ from rrule; the first:\n{}",
        failures.len(),
        cases.len(),
        failures.iter().take(5).cloned().collect::<Vec<_>>().join("\n")
    );
}
