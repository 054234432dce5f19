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
#[path = "recur_tests.rs"]
mod tests;
