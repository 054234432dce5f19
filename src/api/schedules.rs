//! Scheduled transactions (docs/schedules.md): create, list, change, delete, skip, post now;
//! what is coming (/upcoming); and the poster, which posts due occurrences by itself.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::decl::{row, Endpoint, Kind as P, Msgs, Param, Row, Shape};
use super::endpoints::{Ep, NO_TREE};
use super::json::{array, Obj};
use super::{mutate, snapshot, Answer, ApiError, Rq};
use crate::app::App;
use crate::domain::dates::{day_of, fmt_day, DAY_SECS};
use crate::domain::docs::Doc;
use crate::domain::engine::{Ctx, Mode, OpError, Origin, Posting};
use crate::domain::note::Note;
use crate::domain::recur::{End, MonthDay, Occurrence, Recurrence, Unit, Weekday, Weekend};
use crate::domain::schedule::{self as sch, Schedule, State, What, MAX_SCHEDULES};
use crate::domain::text::Text;
use crate::domain::tree::{fmt_uuid, AccountId, Tree};

/// Longest schedule name.
pub const NAME_MAX_CHARS: usize = 128;
/// Longest window of /upcoming, in days.
pub const UPCOMING_MAX_DAYS: i64 = 366;
/// Occurrences one schedule posts in one pass of the poster (catch-up after a long stop goes on
/// at the next pass).
const POST_BATCH: usize = 400;
/// Users the poster takes in one pass.
const POSTER_USERS: usize = 1000;

static ID: Param = Param::new(
    "id",
    P::Int { min: 1, max: i64::MAX },
    Msgs::required("id is required", "id must be a positive whole number"),
    "The schedule's id (from /schedules).",
);
static NAME: Param =
    Param::text("name", Some("name is required"), Some(NAME_MAX_CHARS), "What the schedule is for.");
static NAME_OPT: Param = Param::text("name", None, Some(NAME_MAX_CHARS), "What the schedule is for.");
static TYPE: Param = Param::text("type", Some("type is required"), Some(16), "deposit, withdraw or move.");
static TYPE_OPT: Param = Param::text("type", None, Some(16), "deposit, withdraw or move.");
static UUID: Param =
    Param::text("uuid", None, None, "deposit: the account deposited into; withdraw: the envelope paid from.");
static FROM: Param = Param::text("from_uuid", None, None, "move: the account the money leaves.");
static TO: Param = Param::text("to_uuid", None, None, "move: the account the money goes to.");
static AMOUNT: Param = Param::new(
    "amount",
    P::Money { positive: true },
    Msgs::required("amount is required", "amount must be an amount").out_of_range("amount must be positive"),
    "Amount of each occurrence, > 0.",
);
static AMOUNT_OPT: Param = Param::new(
    "amount",
    P::Money { positive: true },
    Msgs::invalid("amount must be an amount").out_of_range("amount must be positive"),
    "Amount of each occurrence, > 0.",
);
static APPROX: Param = Param::new(
    "approx_percent",
    P::Int { min: 0, max: 100 },
    Msgs::invalid("approx_percent must be a whole number from 0 to 100"),
    "How far an imported amount may differ and still be this schedule's; default 0.",
);
static START: Param =
    Param::new("start", P::Date, Msgs::invalid("Invalid start date"), "First possible day; default today.");
static EVERY: Param = Param::new(
    "every",
    P::Int { min: 1, max: 1000 },
    Msgs::invalid("every must be a whole number from 1 to 1000"),
    "The interval; default 1.",
);
static UNIT: Param = Param::text("unit", None, Some(16), "days, weeks, months or years; default months.");
static MONTH_DAY: Param = Param::text(
    "month_day",
    None,
    Some(8),
    "months/years: 1 to 31 or last; default the start's day. Months without that day are skipped.",
);
static NTH: Param = Param::new(
    "nth",
    P::Int { min: -1, max: 5 },
    Msgs::invalid("nth must be 1 to 5, or -1 for the last"),
    "months/years: the nth weekday of the month (with weekday).",
);
static WEEKDAY: Param =
    Param::text("weekday", None, Some(16), "With nth: mon, tue, wed, thu, fri, sat or sun.");
static END_AFTER: Param = Param::new(
    "end_after",
    P::Int { min: 1, max: crate::domain::recur::MAX_OCCURRENCES as i64 },
    Msgs::invalid("end_after must be a whole number from 1 to 10000"),
    "Ends after this many occurrences.",
);
static END_DATE: Param =
    Param::new("end_date", P::Date, Msgs::invalid("Invalid end date"), "Last day an occurrence may fall on.");
static WEEKEND: Param = Param::text(
    "weekend",
    None,
    Some(16),
    "An occurrence on a Saturday or Sunday: keep, before (the Friday) or after (the Monday); default keep.",
);
static AUTO: Param = Param::new(
    "auto",
    P::Bool,
    Msgs::invalid("auto must be a boolean"),
    "true (default): posts by itself when due; false: a due occurrence waits for /post_schedule.",
);
static DAYS: Param = Param::new(
    "days",
    P::Int { min: 1, max: UPCOMING_MAX_DAYS },
    Msgs::invalid("days must be a whole number from 1 to 366"),
    "The window, from today; default 30.",
);

const BAD_TYPE: Row = row!(400, "`type` not one of its values", "`type must be deposit, withdraw or move`");
const BAD_ACCOUNTS: Row = row!(
    400,
    "the accounts do not fit the type",
    "`deposit and withdraw need uuid; move needs from_uuid and to_uuid, two different accounts`"
);
const NO_ACCOUNT: Row = row!(404, "an account named is not in the tree", "`Account not found`");
const BAD_RULE: Row = row!(400, "the recurrence cannot be", "`<why> (e.g. every must be at least 1)`");
const TOO_MANY: Row =
    row!(400, "the user already keeps 200 schedules", "`A user keeps at most 200 schedules`");
const NO_SCHEDULE: Row = row!(404, "no schedule has this id", "`Schedule not found`");
const NOTHING_OPEN: Row = row!(400, "the series has ended", "`The schedule has no occurrence left`");

const SCHEDULE_FIELD: (&str, Shape) = ("schedule", Shape::Object { schema: "Schedule" });

pub static LIST: Endpoint = Endpoint::read(
    "/schedules",
    Ep::ListSchedules,
    "Failed to list schedules",
    "The caller's scheduled transactions, each with its next occurrence",
    &[],
    &[("schedules", Shape::Rows { schema: "Schedule", frame: false })],
    &[NO_TREE],
);

pub static GET: Endpoint = Endpoint::read(
    "/schedule",
    Ep::GetSchedule,
    "Failed to get schedule",
    "One schedule, with its next open occurrence",
    &[&ID],
    &[SCHEDULE_FIELD],
    &[NO_TREE, NO_SCHEDULE],
);

pub static CREATE: Endpoint = Endpoint::write(
    "/create_schedule",
    Ep::CreateSchedule,
    "Failed to create schedule",
    "Schedule a deposit, withdrawal or move that repeats",
    &[
        &NAME, &TYPE, &UUID, &FROM, &TO, &AMOUNT, &APPROX, &START, &EVERY, &UNIT, &MONTH_DAY, &NTH, &WEEKDAY,
        &END_AFTER, &END_DATE, &WEEKEND, &AUTO,
    ],
    &[SCHEDULE_FIELD],
    &[NO_TREE, BAD_TYPE, BAD_ACCOUNTS, BAD_RULE, NO_ACCOUNT, TOO_MANY],
);

pub static UPDATE: Endpoint = Endpoint::write(
    "/update_schedule",
    Ep::UpdateSchedule,
    "Failed to update schedule",
    "Change a schedule: the parameters sent replace the schedule's, the others stay",
    &[
        &ID,
        &NAME_OPT,
        &TYPE_OPT,
        &UUID,
        &FROM,
        &TO,
        &AMOUNT_OPT,
        &APPROX,
        &START,
        &EVERY,
        &UNIT,
        &MONTH_DAY,
        &NTH,
        &WEEKDAY,
        &END_AFTER,
        &END_DATE,
        &WEEKEND,
        &AUTO,
    ],
    &[SCHEDULE_FIELD],
    &[NO_TREE, BAD_TYPE, NO_SCHEDULE, BAD_ACCOUNTS, BAD_RULE, NO_ACCOUNT],
);

pub static DELETE: Endpoint = Endpoint::write(
    "/delete_schedule",
    Ep::DeleteSchedule,
    "Failed to delete schedule",
    "Delete a schedule (what it posted stays)",
    &[&ID],
    &[("deleted", Shape::Int)],
    &[NO_TREE, NO_SCHEDULE],
);

pub static SKIP: Endpoint = Endpoint::write(
    "/skip_schedule",
    Ep::SkipSchedule,
    "Failed to skip",
    "Skip the schedule's next open occurrence (the earliest due one, or the next to come)",
    &[&ID],
    &[SCHEDULE_FIELD, ("skipped", Shape::Object { schema: "Occurrence" })],
    &[NO_TREE, NO_SCHEDULE, NOTHING_OPEN],
);

pub static POST_NOW: Endpoint = Endpoint::write(
    "/post_schedule",
    Ep::PostSchedule,
    "Failed to post",
    "Post the schedule's next open occurrence now: approve a due one (dated on its day) or pay one ahead (dated today)",
    &[&ID],
    &[SCHEDULE_FIELD, ("posted", Shape::Object { schema: "Occurrence" })],
    &[
        NO_TREE,
        NO_SCHEDULE,
        NOTHING_OPEN,
        row!(400, "the engine refuses the posting (SPEC's rules)", "`<why> (e.g. not enough money in the account)`"),
    ],
);

pub static UPCOMING: Endpoint = Endpoint::read(
    "/upcoming",
    Ep::Upcoming,
    "Failed to list upcoming",
    "Every occurrence within `days` days, and every earlier one still open, with its state",
    &[&DAYS],
    &[
        ("today", Shape::Str),
        ("days", Shape::Int),
        ("occurrences", Shape::Rows { schema: "Occurrence", frame: false }),
    ],
    &[NO_TREE],
);

static SCOPE: Param = Param::text("uuid", None, None, "The subtree to report on; default the whole tree.");

pub static FORECAST: Endpoint = Endpoint::read(
    "/forecast",
    Ep::Forecast,
    "Failed to forecast",
    "Each account's projected balance day by day, and every Bill's next due dates with its shortfall, from today's balances, the schedules and the allocations",
    &[&DAYS, &SCOPE],
    &[
        ("today", Shape::Str),
        ("days", Shape::Int),
        ("uuid", Shape::Str),
        ("accounts", Shape::Rows { schema: "ForecastAccount", frame: false }),
        ("bills", Shape::Rows { schema: "ForecastBill", frame: false }),
        ("unapplied", Shape::Rows { schema: "ForecastUnapplied", frame: false }),
        ("money", Shape::Object { schema: "ForecastMoney" }),
    ],
    &[NO_TREE, row!(404, "`uuid` is not an account of the tree", "`Account not found`")],
);

/// The user's schedules, in id order.
pub fn schedules_of(tree: &Tree) -> Vec<&Schedule> {
    crate::domain::docs::with_prefix(&tree.docs, sch::KEY_PREFIX)
        .filter_map(|(_, d)| match &**d {
            Doc::Schedule(s) => Some(s),
            _ => None,
        })
        .collect()
}

fn schedule_of(tree: &Tree, id: u64) -> Result<Schedule, ApiError> {
    match tree.docs.get(sch::key(id).as_str()).map(|d| &**d) {
        Some(Doc::Schedule(s)) => Ok(s.clone()),
        _ => Err(NO_SCHEDULE.err()),
    }
}

/// Stores `s` (the write of a schedule also writes the user's wake time, see `Ctx::finish`).
fn store(ctx: &mut Ctx, s: Schedule) {
    ctx.set_doc(sch::key(s.id), Some(Doc::Schedule(s)));
}

/// Marks occurrences `paid` (schedule id, occurrence) settled as posted by other means (the
/// statement lines an import took for them, docs/import.md), in the write that applies those
/// lines: their transaction ids go into the index too, so no poster on any node posts them.
pub(super) fn settle_paid(ctx: &mut Ctx, paid: &[(u64, u32)]) {
    for &(id, n) in paid {
        if let Ok(mut s) = schedule_of(ctx.tree, id) {
            ctx.claim_id(s.txid(n));
            s.settle(n, false);
            ctx.set_doc(sch::key(s.id), Some(Doc::Schedule(s)));
        }
    }
}

fn occurrence_obj(s: &Schedule, o: &Occurrence, today: i64, tree: &Tree) -> Obj {
    let state = s.state(o, today);
    let (acc, to) = match s.what {
        What::Deposit { to } => (to, None),
        What::Withdraw { from } => (from, None),
        What::Move { from, to } => (from, Some(to)),
    };
    let signed = if matches!(s.what, What::Withdraw { .. }) { -s.amount_cents } else { s.amount_cents };
    let mut obj = Obj::new()
        .int("schedule", s.id.into())
        .str("name", &s.name)
        .int("n", o.n.into())
        .str("date", &fmt_day(o.day))
        .str("type", s.what.name())
        .str("uuid", &fmt_uuid(acc))
        .opt_str("account_name", tree.get(acc).map(|a| a.name.as_str()));
    if let Some(to) = to {
        obj = obj.str("to_uuid", &fmt_uuid(to)).opt_str("to_name", tree.get(to).map(|a| a.name.as_str()));
    }
    obj = obj.money("amount", signed.into()).str("state", state.name()).str("transaction_id", &s.txid(o.n));
    if let State::Failed(why) = &state {
        obj = obj.str("reason", why);
    }
    obj
}

fn schedule_obj(s: &Schedule, today: i64, tree: &Tree) -> Obj {
    let r = &s.recur;
    let mut o = Obj::new().int("id", s.id.into()).str("name", &s.name).str("type", s.what.name());
    match s.what {
        What::Deposit { to } => o = o.str("uuid", &fmt_uuid(to)),
        What::Withdraw { from } => o = o.str("uuid", &fmt_uuid(from)),
        What::Move { from, to } => o = o.str("from_uuid", &fmt_uuid(from)).str("to_uuid", &fmt_uuid(to)),
    }
    o = o
        .money("amount", s.amount_cents.into())
        .int("approx_percent", s.approx_pct.into())
        .str("start", &fmt_day(r.start_day))
        .int("every", r.every.into())
        .str(
            "unit",
            match r.unit {
                Unit::Days => "days",
                Unit::Weeks => "weeks",
                Unit::Months => "months",
                Unit::Years => "years",
            },
        );
    o = match r.month_day {
        Some(MonthDay::Day(d)) => o.str("month_day", &d.to_string()),
        Some(MonthDay::Last) => o.str("month_day", "last"),
        None => o.null("month_day"),
    };
    o = match r.nth_weekday {
        Some((n, w)) => o.int("nth", n.into()).str("weekday", weekday_name(w)),
        None => o.null("nth").null("weekday"),
    };
    o = match r.end {
        End::Never => o.null("end_after").null("end_date"),
        End::After(n) => o.int("end_after", n.into()).null("end_date"),
        End::Until(d) => o.null("end_after").str("end_date", &fmt_day(d)),
    };
    o = o.str(
        "weekend",
        match r.weekend {
            Weekend::Keep => "keep",
            Weekend::Before => "before",
            Weekend::After => "after",
        },
    );
    o = o.bool("auto", s.auto);
    match s.first_open() {
        Some(next) => o.obj("next", occurrence_obj(s, &next, today, tree)),
        None => o.null("next"),
    }
}

const WEEKDAYS: [(&str, Weekday); 7] = [
    ("mon", Weekday::Mon),
    ("tue", Weekday::Tue),
    ("wed", Weekday::Wed),
    ("thu", Weekday::Thu),
    ("fri", Weekday::Fri),
    ("sat", Weekday::Sat),
    ("sun", Weekday::Sun),
];

fn weekday_name(w: Weekday) -> &'static str {
    WEEKDAYS.iter().find(|(_, x)| *x == w).map_or("mon", |(n, _)| n)
}

fn today(rq: &Rq) -> i64 {
    day_of(rq.now())
}

/// The schedule's terms as sent, applied over `base` (a new schedule's defaults, or the one
/// being changed).
fn read_terms(rq: &Rq, ep: &Endpoint, base: Option<&Schedule>, tree: &Tree) -> Result<Schedule, ApiError> {
    let p = &rq.params;
    let bad = |m: &str| ApiError::bad(m.to_string());
    let mut s = match base {
        Some(b) => b.clone(),
        None => Schedule {
            id: 0,
            name: Text::from(p.req_text_of(&NAME)?.as_str()),
            what: What::Deposit { to: tree.root },
            amount_cents: p.req_num_of(&AMOUNT)?,
            approx_pct: 0,
            recur: Recurrence {
                start_day: today(rq),
                every: 1,
                unit: Unit::Months,
                month_day: None,
                nth_weekday: None,
                end: End::Never,
                weekend: Weekend::Keep,
            },
            auto: true,
            next: 0,
            done: BTreeSet::new(),
            skipped: BTreeSet::new(),
            failed: BTreeMap::new(),
            rev: 0,
        },
    };
    p.check_lengths(ep.params)?;
    if let Some(n) = p.text_of(&NAME_OPT)? {
        s.name = Text::from(n.as_ref());
    }
    let account = |param: &Param| -> Result<Option<AccountId>, ApiError> {
        match p.text_of(param)? {
            Some(u) => Ok(Some(tree.by_uuid_str(&u).ok_or_else(|| NO_ACCOUNT.err())?.uuid)),
            None => Ok(None),
        }
    };
    let kind = match base {
        None => Some(p.req_text_of(&TYPE)?),
        Some(_) => p.text_of(&TYPE_OPT)?.map(|t| t.into_owned()),
    };
    let (uuid, from, to) = (account(&UUID)?, account(&FROM)?, account(&TO)?);
    let (old_one, old_from, old_to) = match s.what {
        What::Deposit { to } => (Some(to), None, None),
        What::Withdraw { from } => (Some(from), None, None),
        What::Move { from, to } => (None, Some(from), Some(to)),
    };
    let kind = kind.unwrap_or_else(|| s.what.name().to_string());
    s.what = match kind.as_str() {
        "deposit" => What::Deposit { to: uuid.or(old_one).ok_or_else(|| BAD_ACCOUNTS.err())? },
        "withdraw" => What::Withdraw { from: uuid.or(old_one).ok_or_else(|| BAD_ACCOUNTS.err())? },
        "move" => {
            let (f, t) = (from.or(old_from), to.or(old_to));
            match (f, t) {
                (Some(f), Some(t)) if f != t => What::Move { from: f, to: t },
                _ => return Err(BAD_ACCOUNTS.err()),
            }
        }
        _ => return Err(BAD_TYPE.err()),
    };
    if let Some(a) = p.num_of(&AMOUNT_OPT)? {
        s.amount_cents = a;
    }
    if let Some(a) = p.num_of(&APPROX)? {
        s.approx_pct = a as u8;
    }
    let r = &mut s.recur;
    if let Some(secs) = p.date_of(&START)? {
        r.start_day = day_of(secs);
    }
    if let Some(e) = p.num_of(&EVERY)? {
        r.every = e as u32;
    }
    if let Some(u) = p.text_of(&UNIT)? {
        r.unit = match u.as_ref() {
            "days" => Unit::Days,
            "weeks" => Unit::Weeks,
            "months" => Unit::Months,
            "years" => Unit::Years,
            _ => return Err(bad("unit must be days, weeks, months or years")),
        };
    }
    if let Some(d) = p.text_of(&MONTH_DAY)? {
        r.month_day = Some(match d.as_ref() {
            "last" => MonthDay::Last,
            n => MonthDay::Day(
                n.parse::<u8>()
                    .ok()
                    .filter(|d| (1..=31).contains(d))
                    .ok_or_else(|| bad("month_day must be 1 to 31 or last"))?,
            ),
        });
        r.nth_weekday = None;
    }
    match (p.num_of(&NTH)?, p.text_of(&WEEKDAY)?) {
        (Some(n), Some(w)) => {
            let w = WEEKDAYS
                .iter()
                .find(|(name, _)| *name == w.as_ref())
                .ok_or_else(|| bad("weekday must be mon, tue, wed, thu, fri, sat or sun"))?
                .1;
            if n == 0 {
                return Err(bad("nth must be 1 to 5, or -1 for the last"));
            }
            r.nth_weekday = Some((n as i8, w));
            r.month_day = None;
        }
        (None, None) => {}
        _ => return Err(bad("nth and weekday go together")),
    }
    match (p.num_of(&END_AFTER)?, p.date_of(&END_DATE)?) {
        (Some(_), Some(_)) => return Err(bad("end_after and end_date cannot both be set")),
        (Some(n), None) => r.end = End::After(n as u32),
        (None, Some(secs)) => r.end = End::Until(day_of(secs)),
        (None, None) => {}
    }
    if let Some(w) = p.text_of(&WEEKEND)? {
        r.weekend = match w.as_ref() {
            "keep" => Weekend::Keep,
            "before" => Weekend::Before,
            "after" => Weekend::After,
            _ => return Err(bad("weekend must be keep, before or after")),
        };
    }
    s.auto = p.flag_of(&AUTO, s.auto)?;
    s.recur.check().map_err(ApiError::bad)?;
    Ok(s)
}

pub async fn list(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let st = snapshot(app, rq).await?;
    let day = today(rq);
    let rows = schedules_of(&st.tree).into_iter().map(|s| schedule_obj(s, day, &st.tree).finish());
    Ok(Obj::new().raw("schedules", &array(rows.collect::<Vec<_>>())))
}

pub async fn get(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let id = rq.params.req_num_of(&ID)? as u64;
    let st = snapshot(app, rq).await?;
    let s = schedule_of(&st.tree, id)?;
    Ok(Obj::new().obj("schedule", schedule_obj(&s, today(rq), &st.tree)))
}

pub async fn create(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let day = today(rq);
    mutate(app, rq, |ctx, _| {
        let mut s = read_terms(rq, &CREATE, None, ctx.tree)?;
        if schedules_of(ctx.tree).len() >= MAX_SCHEDULES {
            return Err(TOO_MANY.err());
        }
        s.id = ctx.next_id(sch::NEXT_ID_KEY);
        // Occurrences before today are not owed: a schedule starting in the past posts from
        // today on (its earlier dates are history the person recorded already, if at all).
        if s.recur.start_day < day {
            s.next = s.recur.next_from(day).map_or(u32::MAX, |o| o.n);
        }
        let obj = schedule_obj(&s, day, ctx.tree);
        store(ctx, s);
        Ok(Obj::new().obj("schedule", obj))
    })
    .await
}

pub async fn update(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let id = rq.params.req_num_of(&ID)? as u64;
    let day = today(rq);
    mutate(app, rq, |ctx, _| {
        let old = schedule_of(ctx.tree, id)?;
        let mut s = read_terms(rq, &UPDATE, Some(&old), ctx.tree)?;
        if s.recur != old.recur {
            s.renumber(day);
        }
        let obj = schedule_obj(&s, day, ctx.tree);
        store(ctx, s);
        Ok(Obj::new().obj("schedule", obj))
    })
    .await
}

pub async fn delete(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let id = rq.params.req_num_of(&ID)? as u64;
    mutate(app, rq, |ctx, _| {
        schedule_of(ctx.tree, id)?;
        ctx.set_doc(sch::key(id), None);
        Ok(Obj::new().int("deleted", id.into()))
    })
    .await
}

pub async fn skip(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let id = rq.params.req_num_of(&ID)? as u64;
    let day = today(rq);
    mutate(app, rq, |ctx, _| {
        let mut s = schedule_of(ctx.tree, id)?;
        let o = s.first_open().ok_or_else(|| NOTHING_OPEN.err())?;
        s.settle(o.n, true);
        let skipped = occurrence_obj(&s, &o, day, ctx.tree);
        let obj = schedule_obj(&s, day, ctx.tree);
        store(ctx, s);
        Ok(Obj::new().obj("schedule", obj).obj("skipped", skipped))
    })
    .await
}

pub async fn post_now(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let id = rq.params.req_num_of(&ID)? as u64;
    let day = today(rq);
    let st = snapshot(app, rq).await?;
    let snap = schedule_of(&st.tree, id)?;
    let open = snap.first_open().ok_or_else(|| NOTHING_OPEN.err())?;
    let open_id = snap.txid(open.n);
    drop(st);
    let (guard, cur) = match super::lock_tree(app, rq, super::no_tree).await? {
        super::Locked::Tree(g, c) => (g, c),
        super::Locked::Answered(a) => return Ok(a),
    };
    let posted_before = guard.main_txid_exists(&open_id).await?;
    super::mutate_locked(app, guard, cur, rq, |ctx, _| {
        let mut s = schedule_of(ctx.tree, id)?;
        let o = s.first_open().ok_or_else(|| NOTHING_OPEN.err())?;
        if s.txid(o.n) != open_id {
            return Err(ApiError::new(409, "Failed to post: the schedule changed meanwhile; try again"));
        }
        if !posted_before {
            // A due occurrence is dated on its day; one paid ahead, today.
            post(ctx, &s, &o, o.day.min(day)).map_err(ApiError::bad)?;
        }
        s.settle(o.n, false);
        let posted = occurrence_obj(&s, &o, day, ctx.tree);
        let obj = schedule_obj(&s, day, ctx.tree);
        store(ctx, s);
        Ok(Obj::new().obj("schedule", obj).obj("posted", posted))
    })
    .await
}

pub async fn upcoming(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let days = rq.params.num_of(&DAYS)?.unwrap_or(30);
    let st = snapshot(app, rq).await?;
    let day = today(rq);
    let mut rows: Vec<(i64, u64, u32, String)> = Vec::new();
    for s in schedules_of(&st.tree) {
        for o in s.open_and_coming(day, day + days, 100) {
            rows.push((o.day, s.id, o.n, occurrence_obj(s, &o, day, &st.tree).finish()));
        }
    }
    rows.sort_by_key(|r| (r.0, r.1, r.2));
    Ok(Obj::new()
        .str("today", &fmt_day(day))
        .int("days", days.into())
        .raw("occurrences", &array(rows.into_iter().map(|r| r.3))))
}

/// Posts occurrence `o` of `s` on `ctx`, dated `day`; why not, when SPEC's rules refuse it.
fn post(ctx: &mut Ctx, s: &Schedule, o: &Occurrence, day: i64) -> Result<(), String> {
    let id = s.txid(o.n);
    let note =
        Arc::new(Note { payee: Some(s.name.clone()), memo: None, import_id: None, schedule: Some(s.id) });
    let channel = Text::from(format!("schedule:{}", s.name));
    let terms = Posting {
        amount_cents: s.amount_cents,
        by: &Origin::User,
        channel: &channel,
        txid: Some(&id),
        date_secs: day * DAY_SECS,
        note: Some(&note),
    };
    let gone = "an account of the schedule no longer exists".to_string();
    for a in s.what.accounts() {
        if ctx.tree.get(a).is_none() {
            return Err(gone);
        }
    }
    let short = |ctx: &Ctx, a: AccountId| ctx.tree.get(a).is_none_or(|x| x.balance_cents < s.amount_cents);
    let refused = |e: OpError| match e {
        OpError::NotActive => "the account is not active".to_string(),
        OpError::TooLarge => "the amount would make a balance too large".to_string(),
        OpError::Internal => "the engine refused the posting".to_string(),
    };
    match s.what {
        What::Deposit { to } => ctx.deposit(to, terms, Mode::External).map_err(refused)?,
        What::Withdraw { from } => {
            if short(ctx, from) {
                return Err("not enough money in the account".into());
            }
            ctx.withdraw(from, terms).map_err(refused)?;
        }
        What::Move { from, to } => {
            if short(ctx, from) {
                return Err("not enough money in the account".into());
            }
            // A failed move leaves nothing half done: it runs on a copy first.
            let mut copy = ctx.tree.clone();
            Ctx::new(&mut copy, ctx.now_secs).transfer(from, to, s.amount_cents).map_err(refused)?;
            ctx.transfer(from, to, s.amount_cents).map_err(refused)?;
            // Its records are the transfer's own; the occurrence's id is indexed beside them.
            ctx.claim_id(id);
        }
    }
    Ok(())
}

/// Passes woken by writes start at least this long apart: a busy user's deliveries then go out
/// and are recorded a few at a time, instead of one visit, one write and one outcome write each.
const GATHER: Duration = Duration::from_millis(100);

/// The waker: every `every`, and at once when a write leaves it work (a new webhook delivery;
/// no sooner than [`GATHER`] after the last pass began), visits each user the index names as due, on this node: posts the scheduled occurrences that
/// fell due, makes the Bill notices owed, and sends the webhook deliveries that are due (on
/// PostgreSQL every node runs one; the user's row lock, the occurrences' transaction ids and the
/// deliveries' leases make each posting happen once and each delivery go from one node).
pub async fn run_poster(app: Arc<App>, every: Duration) {
    loop {
        let began = tokio::time::Instant::now();
        if let Err(e) = poster_pass(&app).await {
            tracing::warn!(error = ?e, "waker: pass failed; retrying");
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = app.users.wake_hint.notified() => tokio::time::sleep_until(began + GATHER).await,
        }
    }
}

/// A visit's user and what it posted.
type Visit = (String, Result<usize, ApiError>);

/// Users one pass visits at once (each visit waits for its own commit).
const VISITS_AT_ONCE: usize = 16;

/// One pass: every user with something due now or earlier.
pub async fn poster_pass(app: &Arc<App>) -> Result<usize, ApiError> {
    let now_secs = app.clock.now_micros().div_euclid(1_000_000);
    let day = day_of(now_secs);
    let mut users = app.users.store.wake_users(now_secs, POSTER_USERS).await?;
    // Each pass starts at a random user: the wakers of several nodes then work on different
    // users at once and share a catch-up, instead of one queueing behind the other's row locks
    // through the same list.
    if !users.is_empty() {
        let start = getrandom::u64().unwrap_or(0) % users.len() as u64;
        users.rotate_left(start as usize);
    }
    let mut posted = 0;
    let mut visits = tokio::task::JoinSet::new();
    let mut ended = |r: Option<Result<Visit, tokio::task::JoinError>>| match r {
        Some(Ok((_, Ok(n)))) => posted += n,
        Some(Ok((user, Err(e)))) => tracing::warn!(user = %user, error = ?e, "waker: user skipped this pass"),
        Some(Err(e)) => tracing::error!(error = %e, "waker: a visit failed"),
        None => {}
    };
    for user in users {
        if visits.len() >= VISITS_AT_ONCE {
            ended(visits.join_next().await);
        }
        let app = app.clone();
        visits.spawn(async move {
            let r = post_due(&app, &user, day).await;
            (user, r)
        });
    }
    while let Some(r) = visits.join_next().await {
        ended(Some(r));
    }
    crate::metrics::poster_pass(posted as u64);
    Ok(posted)
}

/// Posts every due occurrence of `user`'s automatic schedules and takes the webhook deliveries
/// due, in one atomic write with the schedules' new state and the user's next wake time; then
/// sends what it took, apart.
async fn post_due(app: &Arc<App>, user: &str, day: i64) -> Result<usize, ApiError> {
    let guard = app.users.lock(user).await?;
    let Some(cur) = guard.current.clone() else { return Ok(0) };
    let mut due: Vec<(u64, Occurrence, Text)> = Vec::new();
    for s in schedules_of(&cur.tree).into_iter().filter(|s| s.auto) {
        due.extend(s.due(day, POST_BATCH).into_iter().map(|o| (s.id, o, s.txid(o.n))));
    }
    // Posted already (the index holds its id): one round trip for them all on a shared engine.
    let ids: Vec<&str> = due.iter().map(|(_, _, id)| id.as_str()).collect();
    let posted_before = guard.main_txids_exist(&ids).await?;
    let now_secs = app.clock.now_micros().div_euclid(1_000_000);
    let mut tree = cur.tree.clone();
    let mut ctx = Ctx::new(&mut tree, now_secs);
    let mut posted = 0;
    for ((id, o, _), there) in due.iter().zip(&posted_before) {
        let mut s = schedule_of(ctx.tree, *id)?;
        if *there {
            s.settle(o.n, false);
        } else {
            match post(&mut ctx, &s, o, o.day) {
                Ok(()) => {
                    s.settle(o.n, false);
                    posted += 1;
                }
                Err(why) => {
                    s.failed.insert(o.n, Text::from(why.as_str()));
                    while s.failed.len() > sch::MAX_FAILED {
                        s.failed.pop_first();
                    }
                }
            }
        }
        ctx.set_doc(sch::key(s.id), Some(Doc::Schedule(s)));
    }
    let shared = app.users.store.shared().is_some();
    let taken = super::webhooks::take_due(&mut ctx, user, &app.in_flight, shared);
    let sends = taken.sends;
    if due.is_empty() && sends.is_empty() && !taken.noticed && taken.busy > 0 {
        // Here only for deliveries this process is sending: their outcome's write moves the
        // wake time; a write now would change nothing.
        return Ok(0);
    }
    ctx.refresh_wake();
    let change = ctx.finish();
    if let Err(e) = guard.commit_keyed(change, tree, None).await {
        super::webhooks::untake(app, user, &sends);
        return Err(e.into());
    }
    if posted > 0 {
        tracing::info!(user = %user, posted, "scheduled postings");
    }
    if !sends.is_empty() {
        tokio::spawn(super::webhooks::send_all(app.clone(), user.to_string(), sends));
    }
    Ok(posted)
}

/// The movements the schedules will make over `today ..= last`: every open occurrence, those
/// already due (waiting, failed) planned for today.
fn planned(tree: &Tree, today: i64, last: i64) -> Vec<crate::domain::forecast::Planned> {
    use crate::domain::forecast::{Movement, Planned};
    let mut out = Vec::new();
    for s in schedules_of(tree) {
        let movement = match s.what {
            What::Deposit { to } => Movement::Deposit { to },
            What::Withdraw { from } => Movement::Withdraw { from },
            What::Move { from, to } => Movement::Move { from, to },
        };
        for o in s.open_and_coming(today, last, POST_BATCH) {
            if s.settled(o.n) || s.skipped.contains(&o.n) {
                continue;
            }
            out.push(Planned {
                day: o.day.max(today),
                movement,
                amount_cents: s.amount_cents,
                schedule: s.id,
                n: o.n,
            });
        }
    }
    // Each day's movements in the order the poster posts them: by schedule, then occurrence.
    out.sort_by_key(|p| (p.day, p.schedule, p.n));
    out
}

pub async fn forecast(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    use crate::domain::forecast::Refusal;
    let days = rq.params.num_of(&DAYS)?.unwrap_or(30);
    let scope = rq.params.text_of(&SCOPE)?.map(|u| u.into_owned());
    let st = snapshot(app, rq).await?;
    let tree = &st.tree;
    let root = match &scope {
        Some(u) => tree.by_uuid_str(u).ok_or_else(|| ApiError::new(404, "Account not found"))?.uuid,
        None => tree.root,
    };
    let day = today(rq);
    let plan = planned(tree, day, day + days);
    let f = crate::domain::forecast::forecast(tree, &plan, day, days as u32, Some(root));
    let name = |id: AccountId| tree.get(id).map(|a| a.name.as_str());
    let accounts = f.accounts.iter().map(|a| {
        let points = a
            .points
            .iter()
            .map(|(d, b)| Obj::new().str("date", &fmt_day(*d)).money("balance", (*b).into()).finish());
        let mut o = Obj::new()
            .str("uuid", &fmt_uuid(a.id))
            .opt_str("name", name(a.id))
            .money("balance_today", a.balance_today_cents.into())
            .money("balance_end", a.balance_end_cents().into())
            .raw("points", &array(points.collect::<Vec<_>>()));
        o = match (a.amount_due_today_cents, a.amount_due_end_cents) {
            (Some(t), Some(e)) => o.money("amount_due_today", t.into()).money("amount_due_end", e.into()),
            _ => o.null("amount_due_today").null("amount_due_end"),
        };
        o.finish()
    });
    let bills = f.bills.iter().map(|b| {
        Obj::new()
            .str("uuid", &fmt_uuid(b.id))
            .opt_str("name", name(b.id))
            .str("due_date", &fmt_day(b.day))
            .money("amount_due", b.amount_due_cents)
            .money("paid", b.paid_cents.into())
            .money("balance", b.balance_cents.into())
            .money("shortfall", b.shortfall_cents)
            .finish()
    });
    let unapplied = f.unapplied.iter().map(|u| {
        let why = match u.reason {
            Refusal::OutsideWindow => "outside the window".to_string(),
            Refusal::NotPositive => "the amount is not positive".to_string(),
            Refusal::TooLarge => "the amount is larger than the service takes".to_string(),
            Refusal::UnknownAccount(_) => "an account of the schedule no longer exists".to_string(),
            Refusal::SameAccount => "a move to the same account".to_string(),
            Refusal::NotCovered { shortfall_cents, .. } => format!(
                "not enough money in the account: {} short",
                crate::domain::num::fmt_scaled(shortfall_cents.into(), 2)
            ),
            Refusal::NotActive(_) => "the account is not active".to_string(),
            Refusal::Engine(_) => "the engine would refuse it".to_string(),
        };
        Obj::new()
            .int("schedule", u.schedule.into())
            .int("n", u.n.into())
            .str("date", &fmt_day(u.day))
            .str("reason", &why)
            .finish()
    });
    let m = f.money;
    Ok(Obj::new()
        .str("today", &fmt_day(day))
        .int("days", days.into())
        .str("uuid", &fmt_uuid(root))
        .raw("accounts", &array(accounts.collect::<Vec<_>>()))
        .raw("bills", &array(bills.collect::<Vec<_>>()))
        .raw("unapplied", &array(unapplied.collect::<Vec<_>>()))
        .obj(
            "money",
            Obj::new()
                .money("start", m.start_cents)
                .money("deposited", m.deposited_cents)
                .money("withdrawn", m.withdrawn_cents)
                .money("end", m.end_cents),
        ))
}
