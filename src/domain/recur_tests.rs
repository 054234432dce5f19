//! Tests of `domain::recur`.

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
    let end =
        prop_oneof![Just(End::Never), (1u32..300).prop_map(End::After), (0i64..20_000).prop_map(End::Until),];
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
