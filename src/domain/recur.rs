//! Recurring dates of scheduled transactions ("salary on the 25th, rent on the 1st, the phone
//! bill every 30 days"): a rule, its check, and its occurrences in any window of days. Pure: no
//! I/O, no clock; days are days since 1970-01-01 in the UTC calendar, as in [`super::dates`].
//!
//! The nominal dates are exactly those of python-dateutil's `rrule` with `dtstart` = the start
//! (`tests/recurrence_rrule.rs` compares the two over thousands of random rules):
//! - `Days`, `Weeks`: `DAILY` / `WEEKLY` with `interval` = `every` (weekly on the start's weekday).
//! - `Months`: `MONTHLY` with `bymonthday` (the start's day of the month unless set; `Last` is
//!   `-1`) or `byweekday=WD(n)`. A month without that day (the 31st in April, a 5th Monday) is
//!   skipped, not moved to its end: choose `Last` for "the end of every month".
//! - `Years`: `YEARLY` with `bymonth` = the start's month and the same day choice, so a series
//!   on February 29 falls in leap years only.
//! - `End::After(c)` is `count=c`, `End::Until(u)` is `until=u` (inclusive).
//!
//! As in `rrule`, the start is the first day the series may fall on, not necessarily an
//! occurrence itself: monthly on the 5th from a start on the 20th begins the next month. The
//! calendar ends at 9999-12-31 (where `rrule` stops too), so every series is finite.
//!
//! Weekend moves come after the rule (`rrule` knows nothing of them): an occurrence that falls
//! on a Saturday or Sunday moves to the Friday before or the Monday after and keeps its index.
//! Ends apply to nominal days, so a moved occurrence may fall up to two days outside
//! `[start, until]`; windows select by the moved day. Moves never reorder a series, but they can
//! put several occurrences on one day (a daily series moved off the weekend puts three on each
//! Friday or Monday): all are kept, each with its own index.
//!
//! A window far from the start is found without walking the series: daily and weekly indexes
//! are arithmetic, and so are monthly and yearly ones when every month has the chosen day (the
//! 1st to 28th, the last day, the 1st to 4th or last weekday). The 30th and 31st repeat their
//! gaps every 12 months; the 29th and 5th weekdays count their gaps from a table of the 400-year
//! Gregorian cycle (which repeats with its weekdays), one byte per month up to two cycles.

use serde::{Deserialize, Serialize};

use super::dates::{civil_from_days, days_from_civil, fmt_day};

/// The most occurrences an `End::After` may ask for.
pub const MAX_OCCURRENCES: u32 = 10_000;
/// The furthest an `End::Until` may be from the start, in calendar years. A series without an
/// end is allowed: it is only ever read in windows.
pub const MAX_SPAN_YEARS: i64 = 100;
/// 0000-01-01, the first day a series may start: the first the date grammar accepts.
pub const FIRST_DAY: i64 = -719_528;
/// 9999-12-31, the last day of the calendar: the last the date grammar accepts, and where
/// `rrule` stops.
pub const LAST_DAY: i64 = 2_932_896;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    Days,
    Weeks,
    Months,
    Years,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MonthDay {
    /// 1..=31; months without that day are skipped.
    Day(u8),
    Last,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Weekday {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    Never,
    /// This many occurrences in all.
    After(u32),
    /// The last nominal day allowed, inclusive.
    Until(i64),
}

/// Where an occurrence on a Saturday or Sunday goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Weekend {
    Keep,
    /// The Friday before.
    Before,
    /// The Monday after.
    After,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recurrence {
    /// The first day the series may fall on (`rrule`'s `dtstart`), days since 1970-01-01.
    pub start_day: i64,
    /// The interval, at least 1.
    pub every: u32,
    pub unit: Unit,
    /// Months and years: the day of the month (default: the start's).
    pub month_day: Option<MonthDay>,
    /// Months and years: the 1st to 5th, or last (-1), weekday of the month. Not with `month_day`.
    pub nth_weekday: Option<(i8, Weekday)>,
    pub end: End,
    pub weekend: Weekend,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Occurrence {
    /// 0-based index in the series.
    pub n: u32,
    /// The day the rule gives.
    pub nominal_day: i64,
    /// The day after the weekend move.
    pub day: i64,
}

impl Weekday {
    const ALL: [Weekday; 7] =
        [Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Thu, Weekday::Fri, Weekday::Sat, Weekday::Sun];

    /// The weekday of a day since the epoch (1970-01-01 was a Thursday).
    pub fn of(day: i64) -> Weekday {
        Weekday::ALL[(day + 3).rem_euclid(7) as usize]
    }
}

impl Weekend {
    /// The day an occurrence nominally on `day` is moved to.
    pub fn apply(self, day: i64) -> i64 {
        match (self, Weekday::of(day)) {
            (Weekend::Before, Weekday::Sat) => day - 1,
            (Weekend::Before, Weekday::Sun) => day - 2,
            (Weekend::After, Weekday::Sat) => day + 2,
            (Weekend::After, Weekday::Sun) => day + 1,
            _ => day,
        }
    }
}

impl Recurrence {
    /// Ok when the rule is one a person may save; else why not, in words for that person.
    pub fn check(&self) -> Result<(), String> {
        self.plan().map_err(str::to_string)?;
        match self.end {
            End::Never => {}
            End::After(0) => return Err("the series ends before it starts".into()),
            End::After(count) if count > MAX_OCCURRENCES => {
                return Err(format!(
                    "too many occurrences: a series may have at most {} (or no end)",
                    thousands(MAX_OCCURRENCES)
                ))
            }
            End::After(_) => {}
            End::Until(until) if until < self.start_day => {
                return Err("the series ends before it starts".into())
            }
            End::Until(until) if until > years_later(self.start_day, MAX_SPAN_YEARS) => {
                return Err(format!(
                    "the series ends too far away: at most {MAX_SPAN_YEARS} years after its start (or no end)"
                ))
            }
            End::Until(until) if until > LAST_DAY => {
                return Err(format!("the series must end by {}", fmt_day(LAST_DAY)))
            }
            End::Until(_) => {}
        }
        if let Some(message) = self.impossible_day() {
            return Err(message);
        }
        if self.occurrence(0).is_none() {
            return Err(
                "the series has no occurrence: no date between its start and its end fits the rule".into()
            );
        }
        Ok(())
    }

    /// The occurrences whose moved day is in `[from_day, to_day]`, in order. The caller bounds
    /// the window: a daily series has one occurrence per day of it.
    pub fn occurrences_between(&self, from_day: i64, to_day: i64) -> Vec<Occurrence> {
        self.iter_from(from_day).take_while(|o| o.day <= to_day).collect()
    }

    /// The `n`th occurrence (0-based), None past the end.
    pub fn occurrence(&self, n: u32) -> Option<Occurrence> {
        let plan = self.plan().ok()?;
        let period = match &plan {
            Plan::Step { .. } => 0,
            Plan::Months(months) => months.kth_hit(i64::from(n) + months.clip)?,
        };
        self.occurrences(Some(plan), u64::from(n), period, i64::MIN).next()
    }

    /// The first occurrence whose moved day is on or after `day`.
    pub fn next_from(&self, day: i64) -> Option<Occurrence> {
        self.iter_from(day).next()
    }

    /// The occurrences whose moved day is on or after `day`, in order, to the end of the series.
    /// Positioning does not walk the series (see the module documentation).
    pub fn iter_from(&self, day: i64) -> Occurrences {
        // Clamped so that the arithmetic below cannot overflow; no series lives out there.
        let day = day.clamp(FIRST_DAY - 3, LAST_DAY + 3);
        let Ok(plan) = self.plan() else {
            return self.occurrences(None, 0, 0, day);
        };
        // A Saturday or Sunday up to two days before `day` may be moved onto it.
        let lookback = if self.weekend == Weekend::After { 2 } else { 0 };
        let from = (day - lookback).max(self.start_day);
        let (n, period) = match &plan {
            Plan::Step { start, step } => (ceil_div(from - start, *step), 0),
            Plan::Months(months) => {
                let p = ceil_div(month_of(from) - months.first, months.step);
                // The day of `from`'s own month may fall before it; no later month's can.
                let hit = months.next_hit(p).and_then(|hit| match months.day(hit) {
                    Some(d) if d < from => months.next_hit(hit + 1),
                    _ => Some(hit),
                });
                match hit {
                    Some(p) => (months.hits_before(p) - months.clip, p),
                    // No month ever has the chosen day.
                    None => (0, i64::MAX),
                }
            }
        };
        // `n` is at most the number of days in the calendar, far below u64::MAX.
        self.occurrences(Some(plan), n as u64, period, day)
    }

    fn occurrences(&self, plan: Option<Plan>, n: u64, period: i64, min_day: i64) -> Occurrences {
        Occurrences { plan, end: self.end, weekend: self.weekend, n, period, min_day }
    }

    /// How the rule lays out its nominal days, or why its shape is wrong.
    fn plan(&self) -> Result<Plan, &'static str> {
        if self.every == 0 {
            return Err("every must be at least 1");
        }
        if !(FIRST_DAY..=LAST_DAY).contains(&self.start_day) {
            return Err("the start must be a date from 0000-01-01 to 9999-12-31");
        }
        if let Some(MonthDay::Day(d)) = self.month_day {
            if !(1..=31).contains(&d) {
                return Err("month_day must be 1 to 31 or 'last'");
            }
        }
        if let Some((k, _)) = self.nth_weekday {
            if !matches!(k, 1..=5 | -1) {
                return Err("nth_weekday must be 1 to 5 or -1");
            }
        }
        if self.month_day.is_some() && self.nth_weekday.is_some() {
            return Err("month_day and nth_weekday cannot both be set");
        }
        let every = i64::from(self.every);
        let step = match self.unit {
            Unit::Days | Unit::Weeks => {
                if self.month_day.is_some() || self.nth_weekday.is_some() {
                    return Err("month_day/nth_weekday need a unit of months or years");
                }
                let step = if self.unit == Unit::Days { every } else { 7 * every };
                return Ok(Plan::Step { start: self.start_day, step });
            }
            Unit::Months => every,
            Unit::Years => 12 * every,
        };
        let pick = match (self.month_day, self.nth_weekday) {
            (Some(MonthDay::Day(d)), _) => Pick::Day(u32::from(d)),
            (Some(MonthDay::Last), _) => Pick::Last,
            (None, Some((k, weekday))) => Pick::Nth(k, weekday),
            (None, None) => Pick::Day(civil_from_days(self.start_day).2),
        };
        Ok(Plan::Months(MonthPlan::new(self.start_day, step, pick)))
    }

    /// A day of the month that the only month of the year the series visits never has.
    fn impossible_day(&self) -> Option<String> {
        let one_month = match self.unit {
            Unit::Years => true,
            Unit::Months => self.every.is_multiple_of(12),
            Unit::Days | Unit::Weeks => false,
        };
        let (_, month, start_dom) = civil_from_days(self.start_day);
        let dom = match self.month_day {
            Some(MonthDay::Day(d)) => u32::from(d),
            Some(MonthDay::Last) => return None,
            None if self.nth_weekday.is_none() => start_dom,
            None => return None,
        };
        // February's longest is the 29th (leap years).
        (one_month && dom > days_in_month(4, month)).then(|| {
            format!(
                "the {} of {} never comes: choose another day or 'last'",
                ordinal(dom),
                MONTH_NAMES[month as usize - 1]
            )
        })
    }
}

/// Occurrences in order, from [`Recurrence::iter_from`].
#[derive(Debug, Clone)]
pub struct Occurrences {
    /// None once the series has ended.
    plan: Option<Plan>,
    end: End,
    weekend: Weekend,
    /// The index of the next occurrence.
    n: u64,
    /// Months and years: the next period to look at.
    period: i64,
    /// Occurrences moved before this day are passed over.
    min_day: i64,
}

impl Iterator for Occurrences {
    type Item = Occurrence;

    fn next(&mut self) -> Option<Occurrence> {
        loop {
            let Some(o) = self.advance() else {
                self.plan = None;
                return None;
            };
            if o.day >= self.min_day {
                return Some(o);
            }
        }
    }
}

impl Occurrences {
    fn advance(&mut self) -> Option<Occurrence> {
        let nominal = match self.plan.as_ref()? {
            Plan::Step { start, step } => {
                start.checked_add(i64::try_from(self.n).ok()?.checked_mul(*step)?)?
            }
            Plan::Months(months) => {
                let p = months.next_hit(self.period)?;
                self.period = p + 1;
                months.day(p)?
            }
        };
        let n = u32::try_from(self.n).ok()?;
        let within = nominal <= LAST_DAY
            && match self.end {
                End::Never => true,
                End::After(count) => n < count,
                End::Until(until) => nominal <= until,
            };
        if !within {
            return None;
        }
        self.n += 1;
        Some(Occurrence { n, nominal_day: nominal, day: self.weekend.apply(nominal) })
    }
}

/// The nominal days of a rule.
#[derive(Debug, Clone)]
enum Plan {
    /// Occurrence n on `start + n * step`.
    Step { start: i64, step: i64 },
    /// At most one day in each period of months.
    Months(MonthPlan),
}

/// Which day of a month.
#[derive(Debug, Clone, Copy)]
enum Pick {
    Day(u32),
    Last,
    Nth(i8, Weekday),
}

/// Period `p` is the month `first + p * step` (months counted from January of year 0); it "hits"
/// when that month has the picked day. Whether it hits repeats every `cycle` periods, so counting
/// the hits before a period costs one table lookup per period up to one cycle, then whole cycles
/// at once: a window 30 years after a monthly start looks up 360 bytes, one 3000 years after it
/// at most two cycles' worth (9,600).
#[derive(Debug, Clone)]
struct MonthPlan {
    first: i64,
    step: i64,
    pick: Pick,
    /// Periods after which the hits repeat: 1 when every month has the day.
    cycle: i64,
    /// 1 when period 0's day falls before the start: a hit that is no occurrence.
    clip: i64,
}

impl MonthPlan {
    fn new(start: i64, step: i64, pick: Pick) -> MonthPlan {
        let cycle = match pick {
            Pick::Day(1..=28) | Pick::Last | Pick::Nth(1..=4 | -1, _) => 1,
            // Only the month of the year matters.
            Pick::Day(30 | 31) => 12 / gcd(step, 12),
            // Leap years or weekdays matter: the whole calendar cycle.
            Pick::Day(_) | Pick::Nth(..) => CYCLE_MONTHS / gcd(step, CYCLE_MONTHS),
        };
        let mut plan = MonthPlan { first: month_of(start), step, pick, cycle, clip: 0 };
        plan.clip = i64::from(plan.day(0).is_some_and(|d| d < start));
        plan
    }

    /// Whether period `p` (any p >= 0) has the picked day, from its place in the cycle.
    fn hit(&self, p: i64) -> bool {
        pick_dom(self.first + (p % self.cycle) * self.step, self.pick).is_some()
    }

    /// Hits among periods `0..p` of the first cycle (p <= cycle).
    fn hits_in(&self, p: i64) -> i64 {
        (0..p).filter(|&q| self.hit(q)).count() as i64
    }

    /// Hits among periods `0..p`.
    fn hits_before(&self, p: i64) -> i64 {
        if p <= self.cycle {
            return self.hits_in(p);
        }
        p / self.cycle * self.hits_in(self.cycle) + self.hits_in(p % self.cycle)
    }

    /// The period of the `k`th hit (0-based), None when the day never comes.
    fn kth_hit(&self, k: i64) -> Option<i64> {
        // Within the first cycle, found on the way; beyond it, whole cycles are skipped.
        let mut per_cycle = 0;
        for q in 0..self.cycle {
            if self.hit(q) {
                if per_cycle == k {
                    return Some(q);
                }
                per_cycle += 1;
            }
        }
        if per_cycle == 0 {
            return None;
        }
        let nth = usize::try_from(k % per_cycle).ok()?;
        let within = (0..self.cycle).filter(|&q| self.hit(q)).nth(nth)?;
        (k / per_cycle).checked_mul(self.cycle)?.checked_add(within)
    }

    /// The first hit at or after period `p`, None when the day never comes.
    fn next_hit(&self, p: i64) -> Option<i64> {
        (p..p.checked_add(self.cycle)?).find(|&q| self.hit(q))
    }

    /// The picked day of period `p`, None when that month lacks it or is past the calendar.
    fn day(&self, p: i64) -> Option<i64> {
        let month = self.first.checked_add(p.checked_mul(self.step)?)?;
        if month > LAST_MONTH {
            return None;
        }
        let dom = pick_dom(month, self.pick)?;
        Some(days_from_civil(month.div_euclid(12), month.rem_euclid(12) as u32 + 1, dom))
    }
}

/// Months in the 400-year cycle of the Gregorian calendar (146,097 days, a whole number of
/// weeks): a month and the one 4800 later have the same length and start on the same weekday.
const CYCLE_MONTHS: i64 = 4800;
/// December 9999, counted from January of year 0.
const LAST_MONTH: i64 = 9999 * 12 + 11;

/// Each month of the cycle from January of year 0: its length minus 28 (bits 3-4) and the
/// weekday of its 1st (bits 0-2, Monday = 0). Whether a month has a day is a lookup, so a
/// cycle's hits are counted without date arithmetic.
static CALENDAR: [u8; CYCLE_MONTHS as usize] = calendar();

const fn calendar() -> [u8; CYCLE_MONTHS as usize] {
    let mut table = [0u8; CYCLE_MONTHS as usize];
    // 0000-01-01 was a Saturday (as 2000-01-01, 400 years later).
    let mut weekday = 5;
    let mut i = 0;
    while i < CYCLE_MONTHS as usize {
        let len = days_in_month((i / 12) as i64, (i % 12) as u32 + 1);
        table[i] = (((len - 28) << 3) | weekday) as u8;
        weekday = (weekday + len) % 7;
        i += 1;
    }
    table
}

/// The day of the month `pick` gives in `month` (counted from January of year 0), if it has it.
fn pick_dom(month: i64, pick: Pick) -> Option<u32> {
    let cell = CALENDAR[month.rem_euclid(CYCLE_MONTHS) as usize];
    let len = 28 + u32::from(cell >> 3);
    let dom = match pick {
        Pick::Day(d) => d,
        Pick::Last => len,
        Pick::Nth(k, weekday) => {
            let first = 1 + (weekday as u32 + 7 - u32::from(cell & 7)) % 7;
            if k > 0 {
                first + 7 * (k as u32 - 1)
            } else {
                first + (len - first) / 7 * 7
            }
        }
    };
    (dom <= len).then_some(dom)
}

fn month_of(day: i64) -> i64 {
    let (y, m, _) = civil_from_days(day);
    y * 12 + i64::from(m) - 1
}

const fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// The same date `years` later (February 29 becomes the 28th in a common year).
fn years_later(day: i64, years: i64) -> i64 {
    let (y, m, d) = civil_from_days(day);
    days_from_civil(y + years, m, d.min(days_in_month(y + years, m)))
}

/// ceil(a / b) for b > 0, at least 0.
fn ceil_div(a: i64, b: i64) -> i64 {
    if a <= 0 {
        0
    } else {
        a / b + i64::from(a % b != 0)
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// 1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, ... 21st, ...
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// 10000 as "10,000".
fn thousands(n: u32) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::dates::{parse_date, DAY_SECS};
    use proptest::prelude::*;

    fn d(text: &str) -> i64 {
        parse_date(text).unwrap() / DAY_SECS
    }

    fn rule(start: &str, every: u32, unit: Unit) -> Recurrence {
        Recurrence {
            start_day: d(start),
            every,
            unit,
            month_day: None,
            nth_weekday: None,
            end: End::Never,
            weekend: Weekend::Keep,
        }
    }

    /// The first `k` moved days.
    fn first(r: &Recurrence, k: usize) -> Vec<String> {
        r.iter_from(i64::MIN).take(k).map(|o| fmt_day(o.day)).collect()
    }

    #[test]
    fn the_31st_skips_short_months_like_rrule() {
        let r = rule("2025-01-31", 1, Unit::Months);
        assert_eq!(
            first(&r, 8),
            [
                "2025-01-31",
                "2025-03-31",
                "2025-05-31",
                "2025-07-31",
                "2025-08-31",
                "2025-10-31",
                "2025-12-31",
                "2026-01-31"
            ]
        );
        let r = Recurrence { month_day: Some(MonthDay::Day(30)), ..rule("2024-01-15", 1, Unit::Months) };
        assert_eq!(first(&r, 3), ["2024-01-30", "2024-03-30", "2024-04-30"]);
    }

    #[test]
    fn last_is_the_end_of_every_month() {
        let r = Recurrence { month_day: Some(MonthDay::Last), ..rule("2024-01-10", 1, Unit::Months) };
        assert_eq!(first(&r, 4), ["2024-01-31", "2024-02-29", "2024-03-31", "2024-04-30"]);
        let r = Recurrence { month_day: Some(MonthDay::Last), ..rule("2025-02-01", 1, Unit::Years) };
        assert_eq!(first(&r, 4), ["2025-02-28", "2026-02-28", "2027-02-28", "2028-02-29"]);
    }

    #[test]
    fn february_29_yearly_falls_in_leap_years_only() {
        // 2100 is no leap year.
        let r = rule("2096-02-29", 1, Unit::Years);
        assert_eq!(first(&r, 3), ["2096-02-29", "2104-02-29", "2108-02-29"]);
        let r = rule("2024-02-29", 1, Unit::Months);
        let dates = first(&r, 14);
        assert_eq!(&dates[10..], ["2024-12-29", "2025-01-29", "2025-03-29", "2025-04-29"]);
    }

    #[test]
    fn nth_weekday_skips_months_without_it() {
        let fifth_monday =
            Recurrence { nth_weekday: Some((5, Weekday::Mon)), ..rule("2025-01-01", 1, Unit::Months) };
        assert_eq!(
            first(&fifth_monday, 5),
            ["2025-03-31", "2025-06-30", "2025-09-29", "2025-12-29", "2026-03-30"]
        );
        let last_friday =
            Recurrence { nth_weekday: Some((-1, Weekday::Fri)), ..rule("2025-01-01", 1, Unit::Months) };
        assert_eq!(first(&last_friday, 4), ["2025-01-31", "2025-02-28", "2025-03-28", "2025-04-25"]);
        let thanksgiving =
            Recurrence { nth_weekday: Some((4, Weekday::Thu)), ..rule("2025-11-01", 1, Unit::Years) };
        assert_eq!(first(&thanksgiving, 3), ["2025-11-27", "2026-11-26", "2027-11-25"]);
    }

    #[test]
    fn the_start_is_the_first_day_allowed_not_an_occurrence() {
        let r = Recurrence { month_day: Some(MonthDay::Day(5)), ..rule("2025-01-20", 1, Unit::Months) };
        assert_eq!(first(&r, 2), ["2025-02-05", "2025-03-05"]);
        // Every second month counts from the start's month.
        let r = Recurrence { every: 2, ..r };
        assert_eq!(first(&r, 2), ["2025-03-05", "2025-05-05"]);
    }

    #[test]
    fn weekend_moves_keep_the_index() {
        // 2025-01-25 is a Saturday, 2025-05-25 a Sunday.
        let salary = |weekend| Recurrence { weekend, ..rule("2025-01-25", 1, Unit::Months) };
        assert_eq!(first(&salary(Weekend::Keep), 1), ["2025-01-25"]);
        assert_eq!(
            first(&salary(Weekend::Before), 5)[..],
            ["2025-01-24", "2025-02-25", "2025-03-25", "2025-04-25", "2025-05-23"]
        );
        assert_eq!(
            first(&salary(Weekend::After), 5)[..],
            ["2025-01-27", "2025-02-25", "2025-03-25", "2025-04-25", "2025-05-26"]
        );
        let o = salary(Weekend::Before).occurrence(4).unwrap();
        assert_eq!((o.nominal_day, o.day), (d("2025-05-25"), d("2025-05-23")));

        // A daily series moved to Monday puts three occurrences on it, all kept.
        let daily = Recurrence { weekend: Weekend::After, ..rule("2025-01-24", 1, Unit::Days) };
        let monday = daily.occurrences_between(d("2025-01-27"), d("2025-01-27"));
        assert_eq!(monday.iter().map(|o| o.n).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(daily.next_from(d("2025-01-25")).unwrap().n, 1);
        let daily = Recurrence { weekend: Weekend::Before, ..daily };
        let friday = daily.occurrences_between(d("2025-01-31"), d("2025-01-31"));
        assert_eq!(friday.iter().map(|o| o.n).collect::<Vec<_>>(), [7, 8, 9]);

        // A move may leave the start behind; the window selects by the moved day.
        let r = Recurrence { weekend: Weekend::Before, ..rule("2025-01-25", 1, Unit::Weeks) };
        assert_eq!(r.occurrences_between(d("2025-01-24"), d("2025-01-24"))[0].n, 0);
        assert!(r.occurrences_between(d("2025-01-25"), d("2025-01-30")).is_empty());
        let r = Recurrence { weekend: Weekend::After, ..r };
        assert_eq!(r.next_from(d("2025-01-27")).unwrap().n, 0);
        assert_eq!(r.next_from(d("2025-01-28")).unwrap().n, 1);
    }

    #[test]
    fn count_and_until_end_the_series() {
        let r = Recurrence { end: End::After(3), ..rule("2025-01-01", 10, Unit::Days) };
        assert_eq!(first(&r, 10), ["2025-01-01", "2025-01-11", "2025-01-21"]);
        assert_eq!(r.occurrence(2).unwrap().nominal_day, d("2025-01-21"));
        assert_eq!(r.occurrence(3), None);
        // Until is inclusive.
        let r = Recurrence { end: End::Until(d("2025-01-21")), ..rule("2025-01-01", 10, Unit::Days) };
        assert_eq!(first(&r, 10), ["2025-01-01", "2025-01-11", "2025-01-21"]);
        let r = Recurrence { end: End::Until(d("2025-05-30")), ..rule("2025-01-31", 1, Unit::Months) };
        assert_eq!(first(&r, 10), ["2025-01-31", "2025-03-31"]);
        assert_eq!(r.next_from(d("2025-04-01")), None);
        // The end applies to the nominal day: a move may carry the last one past it.
        let r = Recurrence {
            end: End::Until(d("2025-01-25")),
            weekend: Weekend::After,
            ..rule("2024-12-25", 1, Unit::Months)
        };
        assert_eq!(first(&r, 10), ["2024-12-25", "2025-01-27"]);
    }

    #[test]
    fn the_calendar_ends_every_series() {
        let r = rule("9999-12-29", 1, Unit::Days);
        assert_eq!(first(&r, 10), ["9999-12-29", "9999-12-30", "9999-12-31"]);
        assert_eq!(r.occurrence(3), None);
        assert_eq!(r.occurrence(u32::MAX), None);
        let r = rule("9999-11-29", 1, Unit::Months);
        assert_eq!(first(&r, 10), ["9999-11-29", "9999-12-29"]);
        assert_eq!(r.occurrence(u32::MAX), None);
        assert_eq!(fmt_day(FIRST_DAY), "0000-01-01");
        assert_eq!(fmt_day(LAST_DAY), "9999-12-31");
    }

    #[test]
    fn check_explains_each_bad_rule() {
        let ok = rule("2025-01-31", 1, Unit::Months);
        assert_eq!(ok.check(), Ok(()));
        let err = |r: Recurrence| r.check().unwrap_err();
        assert_eq!(err(Recurrence { every: 0, ..ok.clone() }), "every must be at least 1");
        assert_eq!(
            err(Recurrence { end: End::Until(d("2025-01-30")), ..ok.clone() }),
            "the series ends before it starts"
        );
        assert_eq!(err(Recurrence { end: End::After(0), ..ok.clone() }), "the series ends before it starts");
        let feb = rule("2025-02-01", 1, Unit::Years);
        assert_eq!(
            err(Recurrence { month_day: Some(MonthDay::Day(31)), ..feb.clone() }),
            "the 31st of February never comes: choose another day or 'last'"
        );
        assert_eq!(
            err(Recurrence { month_day: Some(MonthDay::Day(30)), ..feb.clone() }),
            "the 30th of February never comes: choose another day or 'last'"
        );
        assert_eq!(
            err(Recurrence {
                month_day: Some(MonthDay::Day(31)),
                every: 12,
                ..rule("2025-04-01", 1, Unit::Months)
            }),
            "the 31st of April never comes: choose another day or 'last'"
        );
        assert_eq!(Recurrence { month_day: Some(MonthDay::Day(29)), ..feb.clone() }.check(), Ok(()));
        // Every 4 years from 2025 never meets a leap year.
        assert_eq!(
            err(Recurrence { month_day: Some(MonthDay::Day(29)), every: 4, ..feb.clone() }),
            "the series has no occurrence: no date between its start and its end fits the rule"
        );
        assert_eq!(
            err(Recurrence {
                month_day: Some(MonthDay::Day(31)),
                end: End::Until(d("2025-02-20")),
                ..rule("2025-02-01", 1, Unit::Months)
            }),
            "the series has no occurrence: no date between its start and its end fits the rule"
        );
        assert_eq!(
            err(Recurrence { month_day: Some(MonthDay::Day(0)), ..ok.clone() }),
            "month_day must be 1 to 31 or 'last'"
        );
        for k in [0, 6, -2] {
            assert_eq!(
                err(Recurrence { nth_weekday: Some((k, Weekday::Mon)), ..ok.clone() }),
                "nth_weekday must be 1 to 5 or -1"
            );
        }
        assert_eq!(
            err(Recurrence {
                month_day: Some(MonthDay::Last),
                nth_weekday: Some((1, Weekday::Mon)),
                ..ok.clone()
            }),
            "month_day and nth_weekday cannot both be set"
        );
        assert_eq!(
            err(Recurrence { month_day: Some(MonthDay::Day(1)), ..rule("2025-01-01", 1, Unit::Weeks) }),
            "month_day/nth_weekday need a unit of months or years"
        );
        assert_eq!(
            err(Recurrence { start_day: LAST_DAY + 1, ..ok.clone() }),
            "the start must be a date from 0000-01-01 to 9999-12-31"
        );

        // 10,000 years of daily occurrences: refused whichever way the end is written.
        let daily = rule("2025-01-01", 1, Unit::Days);
        assert_eq!(daily.check(), Ok(()));
        assert_eq!(
            err(Recurrence { end: End::Until(d("2025-01-01") + 3_652_425), ..daily.clone() }),
            "the series ends too far away: at most 100 years after its start (or no end)"
        );
        assert_eq!(
            err(Recurrence { end: End::After(3_652_425), ..daily.clone() }),
            "too many occurrences: a series may have at most 10,000 (or no end)"
        );
        assert_eq!(Recurrence { end: End::After(MAX_OCCURRENCES), ..daily.clone() }.check(), Ok(()));
        assert_eq!(Recurrence { end: End::Until(d("2125-01-01")), ..daily.clone() }.check(), Ok(()));
        assert!(Recurrence { end: End::Until(d("2125-01-02")), ..daily.clone() }.check().is_err());
        assert_eq!(
            err(Recurrence { end: End::Until(LAST_DAY + 1), ..rule("9990-01-01", 1, Unit::Days) }),
            "the series must end by 9999-12-31"
        );
    }

    #[test]
    fn a_refused_shape_has_no_occurrences() {
        for r in [
            Recurrence { every: 0, ..rule("2025-01-01", 1, Unit::Days) },
            Recurrence { start_day: i64::MAX, ..rule("2025-01-01", 1, Unit::Months) },
            Recurrence { start_day: i64::MIN, ..rule("2025-01-01", 1, Unit::Days) },
            Recurrence { month_day: Some(MonthDay::Day(40)), ..rule("2025-01-01", 1, Unit::Months) },
        ] {
            assert!(r.check().is_err());
            assert_eq!(r.occurrence(0), None);
            assert_eq!(r.next_from(i64::MIN), None);
            assert!(r.occurrences_between(i64::MIN, i64::MAX).is_empty());
        }
        // A day that never comes ends the series at once rather than searching forever.
        let never =
            Recurrence { month_day: Some(MonthDay::Day(29)), every: 4, ..rule("2025-02-01", 1, Unit::Years) };
        assert_eq!(never.next_from(i64::MIN), None);
        assert_eq!(never.occurrence(0), None);
        assert!(never.occurrences_between(FIRST_DAY, LAST_DAY).is_empty());
    }

    #[test]
    fn windows_far_from_the_start_have_their_true_indexes() {
        let today = d("2025-06-01");
        let daily = rule("1995-01-01", 1, Unit::Days);
        let week = daily.occurrences_between(today, today + 6);
        assert_eq!(week.len(), 7);
        assert_eq!(i64::from(week[0].n), today - d("1995-01-01"));
        let fortnightly = rule("1995-01-03", 2, Unit::Weeks);
        let o = fortnightly.next_from(today).unwrap();
        assert_eq!(i64::from(o.n), (o.day - d("1995-01-03")) / 14);

        // Skipping rules, counted by calendar cycles, against a walk from the start.
        let mut rules = vec![
            rule("1995-01-31", 1, Unit::Months),
            rule("1996-02-29", 1, Unit::Months),
            rule("1996-02-29", 1, Unit::Years),
            rule("1995-01-30", 7, Unit::Months),
        ];
        for (k, weekday) in [(5, Weekday::Mon), (5, Weekday::Sun), (-1, Weekday::Fri), (2, Weekday::Tue)] {
            for every in [1, 5] {
                rules.push(Recurrence {
                    nth_weekday: Some((k, weekday)),
                    ..rule("1900-01-01", every, Unit::Months)
                });
            }
        }
        for r in rules {
            for from in [d("2025-06-01"), d("2468-03-01")] {
                let walked: Vec<_> = r
                    .iter_from(i64::MIN)
                    .skip_while(|o| o.day < from)
                    .take_while(|o| o.day <= from + 1500)
                    .collect();
                assert_eq!(r.occurrences_between(from, from + 1500), walked, "{r:?}");
                assert!(!walked.is_empty());
            }
        }
    }

    #[test]
    fn occurrence_agrees_with_windows() {
        for r in [
            rule("2024-02-29", 1, Unit::Months),
            Recurrence { weekend: Weekend::After, ..rule("2025-01-31", 3, Unit::Months) },
            Recurrence { weekend: Weekend::Before, ..rule("2025-01-04", 3, Unit::Days) },
            Recurrence {
                nth_weekday: Some((5, Weekday::Wed)),
                end: End::After(20),
                ..rule("2025-01-01", 2, Unit::Months)
            },
        ] {
            let all = r.occurrences_between(d("2024-01-01"), d("2030-12-31"));
            assert!(all.len() > 10);
            for (i, o) in all.iter().enumerate() {
                assert_eq!(o.n as usize, i);
                assert_eq!(r.occurrence(o.n), Some(*o));
                assert_eq!(r.occurrences_between(o.day, o.day).iter().find(|x| x.n == o.n), Some(o));
            }
        }
    }

    #[test]
    fn the_calendar_table_matches_the_date_arithmetic() {
        for month in 0..CYCLE_MONTHS {
            let (y, m) = (month / 12, month as u32 % 12 + 1);
            let first = days_from_civil(y, m, 1);
            let len = days_from_civil(y + i64::from(m == 12), m % 12 + 1, 1) - first;
            let cell = CALENDAR[month as usize];
            assert_eq!(i64::from(28 + (cell >> 3)), len, "{y}-{m}");
            assert_eq!(Weekday::ALL[usize::from(cell & 7)], Weekday::of(first), "{y}-{m}");
        }
    }

    #[test]
    fn the_stored_encoding_keeps_its_layout() {
        // Records hold rules in bincode: field order and variant order are the format.
        let r = Recurrence {
            start_day: 20_000,
            every: 2,
            unit: Unit::Months,
            month_day: None,
            nth_weekday: Some((-1, Weekday::Fri)),
            end: End::Until(20_500),
            weekend: Weekend::Before,
        };
        let bytes = bincode::serde::encode_to_vec(&r, bincode::config::standard()).unwrap();
        assert_eq!(bytes, [251, 64, 156, 2, 2, 0, 1, 255, 4, 2, 251, 40, 160, 1]);
        let (back, _): (Recurrence, _) =
            bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
        assert_eq!(back, r);
    }

    fn weekday() -> impl Strategy<Value = Weekday> {
        (0usize..7).prop_map(|i| Weekday::ALL[i])
    }

    /// Rules of every shape check() accepts, and a few it refuses for their end.
    fn any_rule() -> impl Strategy<Value = Recurrence> {
        let unit = prop_oneof![Just(Unit::Days), Just(Unit::Weeks), Just(Unit::Months), Just(Unit::Years)];
        let day_choice = prop_oneof![
            2 => Just((None, None)),
            2 => (1u8..=31).prop_map(|d| (Some(MonthDay::Day(d)), None)),
            1 => Just((Some(MonthDay::Last), None)),
            2 => (prop_oneof![1i8..=5, Just(-1)], weekday()).prop_map(|nth| (None, Some(nth))),
        ];
        let end = prop_oneof![
            Just(End::Never),
            (1u32..300).prop_map(End::After),
            (0i64..20_000).prop_map(End::Until),
        ];
        let weekend = prop_oneof![Just(Weekend::Keep), Just(Weekend::Before), Just(Weekend::After)];
        // 1900-01-01 to 2199-12-31.
        (-25_567i64..83_217, 1u32..40, unit, day_choice, end, weekend).prop_map(
            |(start_day, every, unit, (month_day, nth_weekday), end, weekend)| {
                let by_month = matches!(unit, Unit::Months | Unit::Years);
                Recurrence {
                    start_day,
                    every,
                    unit,
                    month_day: month_day.filter(|_| by_month),
                    nth_weekday: nth_weekday.filter(|_| by_month),
                    end: match end {
                        End::Until(offset) => End::Until(start_day + offset),
                        other => other,
                    },
                    weekend,
                }
            },
        )
    }

    proptest! {
        #[test]
        fn occurrence_window_and_next_agree(r in any_rule(), offset in -100i64..40_000, len in 0i64..400) {
            let from = r.start_day + offset;
            let to = from + len;
            let window = r.occurrences_between(from, to);
            for (i, o) in window.iter().enumerate() {
                prop_assert!(from <= o.day && o.day <= to);
                prop_assert_eq!(o.day, r.weekend.apply(o.nominal_day));
                prop_assert_eq!(o.n, window[0].n + i as u32);
                prop_assert_eq!(r.occurrence(o.n), Some(*o));
            }
            let next = r.next_from(from);
            match window.first() {
                Some(o) => prop_assert_eq!(next, Some(*o)),
                None => prop_assert!(next.is_none_or(|o| o.day > to)),
            }
            // Nothing in the window was missed on either side.
            if let Some(o) = next {
                if o.n > 0 {
                    prop_assert!(r.occurrence(o.n - 1).unwrap().day < from);
                }
            }
            if let Some(last) = window.last() {
                prop_assert!(r.occurrence(last.n + 1).is_none_or(|o| o.day > to));
            }
            // The same window walked from the start.
            let walked: Vec<_> = r.iter_from(i64::MIN).skip_while(|o| o.day < from).take_while(|o| o.day <= to).collect();
            prop_assert_eq!(&window, &walked);
        }
    }
}
