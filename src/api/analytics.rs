//! Read-only analytics (SPEC 8). Everything except the two log endpoints is answered from the
//! snapshot's precomputed aggregates.

use super::decl::{by_role, row, Endpoint, Kind as P, Msgs, Param, Row, Shape};
use super::endpoints::{Ep, NO_TREE, UUID_LOWER, UUID_UPPER};
use super::json::{array, Obj};
use super::logs::LogPlan;
use super::params::{PVal, Params};
use super::{find, snapshot, ApiError, Handled, Rq};
use crate::app::App;
use crate::domain::dates::{day_of, fmt_datetime, fmt_day, fmt_due, parse_date};
use crate::domain::engine::TxRecord;
use crate::domain::num::fmt_scaled;
use crate::domain::tree::{
    fmt_uuid, range_figures, utilization_text, AccountId, DaySums, Kind, RangeFigures, Tree,
};

/// Default range start: today minus this many days (D19).
const DEFAULT_SPAN_DAYS: i64 = 365_000;
/// Largest `days` / `n` (D31), in millionths.
const LOOKAHEAD_MAX_MICRO: i128 = 1_000_000_000_000;
/// Lookahead of /get_minimal_tree without `n`: 30 days, in millionths (SPEC 8.12).
const DEFAULT_LOOKAHEAD_MICRO: i128 = 30_000_000;
/// Longest time series (D21).
const SERIES_MAX_DAYS: i64 = 3660;
/// The members of a /get_minimal_tree node the reference writes as data frames (SPEC 10.18).
pub const TREE_NODE_FRAMES: [&str; 2] = ["transactions", "time_series"];
/// Longest `amt_type` label (SPEC 14.2).
const AMT_TYPE_MAX_CHARS: usize = 64;

const NOT_FOUND_BY_ROLE: Row = by_role("account not found", "`Account not found or unauthorized`");
const RANGE_ORDER: Row = row!(
    400,
    "`to` day before `from` day (after invalid bounds were replaced by defaults)",
    "`End date cannot be earlier than start date`"
);

static FROM: Param = Param::new(
    "from",
    P::Date,
    Msgs::invalid("Invalid date format"),
    "First day (SPEC 8.1); default today minus 365000 days.",
);
static TO: Param =
    Param::new("to", P::Date, Msgs::invalid("Invalid date format"), "Last day, inclusive; default today.");
static RANGE: [&Param; 3] = [&UUID_UPPER, &FROM, &TO];
const RANGE_FIELDS: [(&str, Shape); 3] = [("uuid", Shape::Str), ("from", Shape::Str), ("to", Shape::Str)];

pub static GET_BALANCE: Endpoint = Endpoint::read(
    "/get_balance",
    Ep::GetBalance,
    "Balance not retrieved",
    "An account's own balance",
    &[&UUID_LOWER],
    &[("uuid", Shape::Str), ("balance", Shape::Num)],
    &[NO_TREE, NOT_FOUND_BY_ROLE],
);

static LIMIT: Param = Param::new(
    "limit",
    P::Int { min: 1, max: PAGE_MAX },
    Msgs::invalid(BAD_LIMIT),
    "Page size. Without it the whole log is answered (streamed past STREAM_MIN_RECORDS records).",
);
static CURSOR: Param =
    Param::text("cursor", None, None, "next_cursor of the previous page (only with limit).");

pub static GET_TRANSACTIONS: Endpoint = Endpoint::read(
    "/get_transactions",
    Ep::GetTransactions,
    "Transaction retrieval failed",
    "An account's transaction log in recording order; paged when limit is given",
    &[&UUID_LOWER, &LIMIT, &CURSOR],
    &[
        ("uuid", Shape::Str),
        ("transaction_count", Shape::Int),
        ("transactions", Shape::Rows { schema: "Transaction", frame: true }),
        ("next_cursor", Shape::Optional(&Shape::NullableStr)),
    ],
    &[
        NO_TREE,
        NOT_FOUND_BY_ROLE,
        row!(
            400,
            "`limit` present and `cursor` not one the service issued for this account",
            "`Invalid cursor`"
        ),
    ],
);

pub static TOTAL_BALANCE: Endpoint = Endpoint::read(
    "/compute_total_balance",
    Ep::TotalBalance,
    "Failed to compute balance",
    "Total balance of an account's subtree",
    &[&UUID_UPPER],
    &[("uuid", Shape::Str), ("total_balance", Shape::Num)],
    &[NO_TREE, NOT_FOUND_BY_ROLE],
);

pub static TOTAL_DUE: Endpoint = Endpoint::read(
    "/compute_total_due",
    Ep::TotalDue,
    "Failed to compute amount due",
    "Total amount due of an account's subtree",
    &[&UUID_UPPER],
    &[("uuid", Shape::Str), ("total_due", Shape::Num)],
    &[NO_TREE, NOT_FOUND_BY_ROLE],
);

static DAYS: Param = Param::new(
    "days",
    P::Millionths { max_millionths: LOOKAHEAD_MAX_MICRO, positive: false },
    Msgs::required("Days parameter is required", "Days must be a non-negative number"),
    "Days, 0..1000000.",
);

pub static DUE_WITHIN_DAYS: Endpoint = Endpoint::read(
    "/compute_total_due_within_days",
    Ep::DueWithinDays,
    "Failed to compute total due",
    "Amount due within a number of days",
    &[&UUID_UPPER, &DAYS],
    &[("uuid", Shape::Str), ("total_due", Shape::Num), ("within_days", Shape::Num)],
    &[NO_TREE, row!(404, "account not found", "`Account not found`")],
);

pub static SPENDING: Endpoint = Endpoint::read(
    "/spending",
    Ep::Spending,
    "Failed to compute spending",
    "Spending over a day range",
    &RANGE,
    &[RANGE_FIELDS[0], RANGE_FIELDS[1], RANGE_FIELDS[2], ("total_spending", Shape::Num)],
    &[
        row!(400, "`to` day before `from` day", "`End date cannot be earlier than start date`"),
        NO_TREE,
        by_role("account not found", "`Account not found`"),
    ],
);

/// The range endpoints other than /spending read an invalid bound as absent (SPEC 8.8-8.10).
static LENIENT_FROM: Param = Param::new(
    "from",
    P::Date,
    Msgs::invalid(""),
    "First day (SPEC 8.1); default today minus 365000 days. An invalid date counts as absent.",
);
static LENIENT_TO: Param = Param::new(
    "to",
    P::Date,
    Msgs::invalid(""),
    "Last day, inclusive; default today. An invalid date counts as absent.",
);
static LENIENT_RANGE: [&Param; 3] = [&UUID_UPPER, &LENIENT_FROM, &LENIENT_TO];

pub static TOTAL_INCOME: Endpoint = Endpoint::read(
    "/total_income",
    Ep::TotalIncome,
    "Failed to compute total income",
    "Income over a day range",
    &LENIENT_RANGE,
    &[RANGE_FIELDS[0], RANGE_FIELDS[1], RANGE_FIELDS[2], ("total_income", Shape::Num)],
    &[RANGE_ORDER, NO_TREE, by_role("account not found", "`Account not found`")],
);

pub static ALLOCATED_AMOUNT: Endpoint = Endpoint::read(
    "/allocated_amount",
    Ep::AllocatedAmount,
    "Failed to compute allocated amount",
    "Allocated amount over a day range",
    &LENIENT_RANGE,
    &[RANGE_FIELDS[0], RANGE_FIELDS[1], RANGE_FIELDS[2], ("allocated_amount", Shape::Num)],
    &[RANGE_ORDER, NO_TREE, row!(404, "account not found", "`Account not found`")],
);

pub static INCOME_UTILIZATION: Endpoint = Endpoint::read(
    "/income_utilization",
    Ep::IncomeUtilization,
    "Failed to compute utilization",
    "Income utilization over a day range",
    &LENIENT_RANGE,
    &[RANGE_FIELDS[0], RANGE_FIELDS[1], RANGE_FIELDS[2], ("utilization", Shape::Num)],
    &[RANGE_ORDER, NO_TREE, row!(404, "account not found", "`Account not found`")],
);

static AMT_TYPE: Param = Param::text(
    "amt_type",
    None,
    Some(AMT_TYPE_MAX_CHARS),
    "amount_due (default) or anything else for balances.",
);

pub static WALKING_AMOUNT: Endpoint = Endpoint::read(
    "/walking_amount",
    Ep::WalkingAmount,
    "Failed to walking amount",
    "Walking amount over a day range",
    &[&UUID_UPPER, &AMT_TYPE, &LENIENT_FROM, &LENIENT_TO],
    &[
        ("uuid", Shape::Str),
        ("amt_type", Shape::Str),
        ("from", Shape::Str),
        ("to", Shape::Str),
        ("walking_amount", Shape::Num),
    ],
    &[RANGE_ORDER, NO_TREE, row!(403, "account not found", "`Account not found`")],
);

static TREE_UUID: Param = Param::text(
    "uuid",
    None,
    None,
    "Account; default the main account (an empty string is a 400 `UUID is required`).",
);
static N: Param = Param::new(
    "n",
    P::Millionths { max_millionths: LOOKAHEAD_MAX_MICRO, positive: true },
    Msgs::invalid("`n` must be a positive number"),
    "Lookahead days, > 0; default 30.",
);
static START_DATE: Param =
    Param::new("start_date", P::Date, Msgs::invalid("Invalid date format"), "Range start.");
static END_DATE: Param = Param::new("end_date", P::Date, Msgs::invalid("Invalid date format"), "Range end.");
static TS_DATA: Param = Param::new(
    "ts_data",
    P::Bool,
    Msgs::invalid("ts_data must be a boolean"),
    "Include a daily time series; default false.",
);
static WITH_LOGS: Param = Param::new(
    "transactions",
    P::Bool,
    Msgs::invalid("transactions must be a boolean"),
    "Include every node's log; default true. Not in SPEC: false leaves the `transactions` key out of every node.",
);

pub static MINIMAL_TREE: Endpoint = Endpoint::read(
    "/get_minimal_tree",
    Ep::MinimalTree,
    "Failed to get minimal tree",
    "Nested summary of an account and its descendants",
    &[&TREE_UUID, &N, &START_DATE, &END_DATE, &TS_DATA, &WITH_LOGS],
    &[("uuid", Shape::Str), ("minimal_tree", Shape::Object { schema: "TreeNode" })],
    &[
        row!(400, "`uuid` present as an empty string", "`UUID is required`"),
        row!(400, "end day before start day", "`End date cannot be earlier than start date`"),
        row!(
            400,
            "`ts_data` true and the range spans more than 3660 days",
            "`Date range too large for time series`"
        ),
        NO_TREE,
        row!(403, "account not found", "`Account not found`"),
    ],
);

/// A `[from_day, to_day]` range from two date parameters (10.14). `strict`: invalid dates are a
/// 400; otherwise they count as missing.
fn day_range(p: &Params, from: &Param, to: &Param, today: i64, strict: bool) -> Result<(i64, i64), ApiError> {
    let bound = |decl: &Param, default: i64| -> Result<i64, ApiError> {
        match p.text(decl.name)? {
            None => Ok(default),
            Some(s) => match parse_date(&s) {
                Some(t) => Ok(day_of(t)),
                None if strict => Err(ApiError::bad(decl.msgs.invalid)),
                None => Ok(default),
            },
        }
    };
    let f = bound(from, today - DEFAULT_SPAN_DAYS)?;
    let t = bound(to, today)?;
    if t < f {
        return Err(ApiError::bad("End date cannot be earlier than start date"));
    }
    Ok((f, t))
}

pub async fn get_balance(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_text_of(&UUID_LOWER)?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || rq.not_found_by_role(&NOT_FOUND_BY_ROLE))?;
    Ok(Obj::new().str("uuid", &uuid).money("balance", a.balance_cents.into()))
}

pub fn record_json(r: &TxRecord) -> String {
    record_obj(r).finish()
}

/// The fields of one record in the SPEC 8.3 shape; a record imported from a statement adds its
/// payee, memo and import id (docs/import.md), so no other record reads differently.
pub fn record_obj(r: &TxRecord) -> Obj {
    let o = Obj::new()
        .str("Type", if r.deposit { "Deposit" } else { "Withdrawal" })
        .str("By", r.by.as_str())
        .str("TransactionID", &r.id)
        .str("Channel", &r.channel)
        .money("Amount", r.amount_cents.into())
        .money("Balance", r.balance_cents.into())
        .money("amount_due", r.amount_due_cents)
        .money("overall_balance", r.overall_balance_cents)
        .str("Date", &fmt_datetime(r.date_secs));
    match &r.note {
        None => o,
        Some(n) => o
            .opt_str("Payee", n.payee.as_deref())
            .opt_str("Memo", n.memo.as_deref())
            .opt_str("ImportID", n.import_id.as_deref()),
    }
}

/// Largest page of /get_transactions (docs/api.md).
pub const PAGE_MAX: i64 = 1000;
pub const BAD_LIMIT: &str = "limit must be an integer between 1 and 1000";
const BAD_CURSOR: &str = "Invalid cursor";

/// A page cursor: the sequence number of the page's first record and a tag of the account it
/// belongs to, as 24 hex digits. Opaque to clients; the tag makes a cursor of another account
/// an error instead of a silently wrong page.
fn cursor_text(acc: AccountId, seq: u64) -> String {
    format!("{seq:016x}{:08x}", acc as u32)
}

/// Parses a cursor's text; its account tag is checked once the account is known.
fn cursor_parse(text: &str) -> Result<(u64, u32), ApiError> {
    let hex = |t: &str| t.bytes().all(|b| b.is_ascii_hexdigit());
    if text.len() != 24 || !hex(text) {
        return Err(ApiError::bad(BAD_CURSOR));
    }
    let seq = u64::from_str_radix(&text[..16], 16).map_err(|_| ApiError::bad(BAD_CURSOR))?;
    let tag = u32::from_str_radix(&text[16..], 16).map_err(|_| ApiError::bad(BAD_CURSOR))?;
    Ok((seq, tag))
}

pub async fn get_transactions(app: &App, rq: &Rq) -> Result<Handled, ApiError> {
    let uuid = rq.params.req_text_of(&UUID_LOWER)?;
    // Without `limit` the answer is the whole log, exactly as SPEC 8.3 (a lone cursor is ignored
    // like any unknown parameter).
    let Some(limit) = rq.params.num_of(&LIMIT)? else {
        let st = snapshot(app, rq).await?;
        let a = find(&st.tree, &uuid, || rq.not_found_by_role(&NOT_FOUND_BY_ROLE))?;
        let (acc, count) = (a.uuid, a.log_len);
        let mut plan = LogPlan::new(st.clone());
        let obj = Obj::new()
            .str("uuid", &uuid)
            .int("transaction_count", count.into())
            .raw("transactions", &plan.marker(acc));
        return Ok(Handled::Logs(obj, plan));
    };
    let cursor = rq.params.text_of(&CURSOR)?.map(|c| cursor_parse(&c)).transpose()?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || rq.not_found_by_role(&NOT_FOUND_BY_ROLE))?;
    let start = match cursor {
        None => 0,
        // Logs only grow while the account exists, so a cursor past the end was never issued.
        Some((seq, tag)) if tag == a.uuid as u32 && seq <= a.log_len => seq,
        Some(_) => return Err(ApiError::bad(BAD_CURSOR)),
    };
    // Pages follow recording order, as the whole log does; the snapshot's log length bounds
    // the last page, so a page never shows a record of an uncommitted write.
    let end = a.log_len.min(start + limit as u64);
    let recs = app.users.read_log_range(&st, a.uuid, start, end).await?;
    let next = (end < a.log_len).then(|| cursor_text(a.uuid, end));
    Ok(Obj::new()
        .str("uuid", &uuid)
        .int("transaction_count", recs.len() as i128)
        .raw("transactions", &array(recs.iter().map(record_json)))
        .opt_str("next_cursor", next.as_deref())
        .into())
}

pub async fn total_balance(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_text_of(&UUID_UPPER)?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || rq.not_found_by_role(&NOT_FOUND_BY_ROLE))?;
    Ok(Obj::new().str("uuid", &uuid).money("total_balance", a.sub_balance_cents))
}

pub async fn total_due(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_text_of(&UUID_UPPER)?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || rq.not_found_by_role(&NOT_FOUND_BY_ROLE))?;
    Ok(Obj::new().str("uuid", &uuid).money("total_due", a.sub_due_cents))
}

pub async fn due_within_days(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_UPPER)?;
    let days = i128::from(p.req_num_of(&DAYS)?);
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || ApiError::new(404, "Account not found"))?;
    let due = st.tree.due_within(a.uuid, rq.now(), days);
    Ok(Obj::new().str("uuid", &uuid).money("total_due", due).num("within_days", &fmt_scaled(days, 6)))
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum RangeQ {
    Spending,
    Income,
    Allocated,
    Utilization,
}

pub async fn range_query(app: &App, rq: &Rq, q: RangeQ) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_UPPER)?;
    let (from, to) = match q {
        RangeQ::Spending => day_range(p, &FROM, &TO, day_of(rq.now()), true)?,
        _ => day_range(p, &LENIENT_FROM, &LENIENT_TO, day_of(rq.now()), false)?,
    };
    let st = snapshot(app, rq).await?;
    let a = match q {
        RangeQ::Spending | RangeQ::Income => {
            find(&st.tree, &uuid, || rq.role_not_found("Account not found"))?
        }
        RangeQ::Allocated | RangeQ::Utilization => {
            find(&st.tree, &uuid, || ApiError::new(404, "Account not found"))?
        }
    };
    let f = range_figures(&st.tree, a.uuid, from, to);
    let o = Obj::new().str("uuid", &uuid).str("from", &fmt_day(from)).str("to", &fmt_day(to));
    Ok(match q {
        RangeQ::Spending => o.money("total_spending", f.spending_cents),
        RangeQ::Income => o.money("total_income", f.income_cents),
        RangeQ::Allocated => o.money("allocated_amount", f.allocated_cents),
        RangeQ::Utilization => o.num("utilization", &utilization_text(f.spending_cents, f.allocated_cents)),
    })
}

pub async fn walking_amount(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_UPPER)?;
    let amt_type = p.text_of(&AMT_TYPE)?.map_or_else(|| "amount_due".into(), |t| t.into_owned());
    p.check_lengths(&[&AMT_TYPE])?;
    let (from, to) = day_range(p, &LENIENT_FROM, &LENIENT_TO, day_of(rq.now()), false)?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || ApiError::new(403, "Account not found"))?;
    let w = st.tree.walking(a.uuid, amt_type == "amount_due", from, to);
    Ok(Obj::new()
        .str("uuid", &uuid)
        .str("amt_type", &amt_type)
        .str("from", &fmt_day(from))
        .str("to", &fmt_day(to))
        .money("walking_amount", w))
}

struct TreeQuery<'a> {
    /// Where each account's log goes, filled in after the tree is rendered; `None`: no logs.
    logs: Option<&'a std::cell::RefCell<LogPlan>>,
    tree: &'a Tree,
    now: i64,
    n_micro: i128,
    range: (i64, i64),
    prev: (i64, i64),
}

impl TreeQuery<'_> {
    /// NODE(X, n, R, with_series) of SPEC 10.18.
    fn node(&self, id: AccountId, with_series: bool) -> Result<String, ApiError> {
        let t = self.tree;
        let a = t.get(id).ok_or_else(|| ApiError::Internal("dangling child".into()))?;
        let logs = self.logs.map(|l| l.borrow_mut().marker(id));
        let mut children = Obj::new();
        for c in a.children.iter().filter_map(|c| t.get(*c)) {
            children = children.obj(&c.name, Obj::new().str("name", &c.name).str("uuid", &fmt_uuid(c.uuid)));
        }
        let (cur, prev) = (
            range_figures(t, id, self.range.0, self.range.1),
            range_figures(t, id, self.prev.0, self.prev.1),
        );
        let mut o = Obj::new()
            .str("name", &a.name)
            .str("account_uuid", &fmt_uuid(id))
            .str("account_class", a.kind.wire())
            .money("balance", a.balance_cents.into());
        if let Some(logs) = &logs {
            o = o.raw("transactions", logs);
        }
        o = o
            .obj("child_accounts_list", children)
            .money("total_balance", a.sub_balance_cents)
            .money("total_due", a.sub_due_cents)
            .money("compute_total_due_within_n_days", t.due_within(id, self.now, self.n_micro))
            .money("spending", cur.spending_cents)
            .money("previous_spending", prev.spending_cents)
            .money("total_income", cur.income_cents)
            .money("previous_total_income", prev.income_cents)
            .money("allocated_amount", cur.allocated_cents)
            .money("previous_allocated_amount", prev.allocated_cents)
            .num("income_utilization", &utilization_text(cur.spending_cents, cur.allocated_cents))
            .num("previous_income_utilization", &utilization_text(prev.spending_cents, prev.allocated_cents))
            .money("walking_amount_due", t.walking(id, true, self.range.0, self.range.1))
            .money("previous_walking_amount_due", t.walking(id, true, self.prev.0, self.prev.1))
            .money("walking_balance", t.walking(id, false, self.range.0, self.range.1))
            .money("previous_walking_balance", t.walking(id, false, self.prev.0, self.prev.1));
        if a.is_child_kind() {
            let parent = a.parent.and_then(|p| t.get(p));
            o = o
                .opt_str("parent_uuid", a.parent.map(fmt_uuid).as_deref())
                .opt_str("parent_name", parent.map(|p| p.name.as_str()))
                .num("allocation", &fmt_scaled(a.allocation_ppm.into(), 6))
                .str("account_status", a.status.as_str())
                .num("priority", &fmt_scaled(a.priority_ppm.into(), 6));
        }
        if let (Kind::Grandchild, Some(g)) = (a.kind, &a.grand) {
            o = o
                .opt_str("due_date", g.due_date_secs.map(fmt_due).as_deref())
                .money("fixed_amount", g.fixed_amount_cents.into())
                .str("account_type", &g.account_type);
            o = match g.freq_days {
                Some(f) => o.int("account_freq", f.into()),
                None => o.null("account_freq"),
            };
            o = o.num("account_periods", &g.periods.display());
        }
        let mut kids = Obj::new();
        for c in a.children.iter().filter_map(|c| t.get(*c)) {
            kids = kids.raw(&c.name, &self.node(c.uuid, false)?);
        }
        o = o.obj("child_accounts", kids);
        if with_series {
            o = o.raw("time_series", &self.series(id));
        }
        Ok(o.finish())
    }

    fn series(&self, id: AccountId) -> String {
        let t = self.tree;
        let (from, to) = self.range;
        let span = (to - from + 1) as usize;
        // Per day: the account's own sums and its descendants' sums, as range_figures splits them.
        let mut own = vec![DaySums::default(); span];
        let mut desc = vec![DaySums::default(); span];
        let mut debt = vec![0i128; span];
        for a in t.preorder(id).into_iter().filter_map(|x| t.get(x)) {
            let target = if a.uuid == id { &mut own } else { &mut desc };
            for (day, s) in a.days.daily(from, to) {
                target[(day - from) as usize].add(&s);
            }
            if a.kind == Kind::Grandchild {
                for (day, r) in a.track.range(from, to) {
                    debt[(day - from) as usize] += i128::from(r.amount_due_cents);
                }
            }
        }
        array((0..span).map(|i| {
            let f = RangeFigures::from_sums(&own[i], &desc[i]);
            Obj::new()
                .str("Date", &fmt_day(from + i as i64))
                .money("Income", f.income_cents)
                .money("Spending", f.spending_cents)
                .money("Allocated", f.allocated_cents)
                .money("Overall_Debt", debt[i])
                .finish()
        }))
    }
}

pub async fn minimal_tree(app: &App, rq: &Rq) -> Result<Handled, ApiError> {
    let p = &rq.params;
    let uuid = match p.get(TREE_UUID.name) {
        PVal::Empty => return Err(ApiError::bad("UUID is required")),
        _ => p.text_of(&TREE_UUID)?.map(|u| u.into_owned()),
    };
    let n_micro = p.num_of(&N)?.map_or(DEFAULT_LOOKAHEAD_MICRO, i128::from);
    let (from, to) = day_range(p, &START_DATE, &END_DATE, day_of(rq.now()), true)?;
    let series = p.flag_of(&TS_DATA, false)?;
    // Not in SPEC: `transactions=false` leaves every node's log out (the key is absent), for a
    // client that wants the tree and its figures without the whole history (the web page).
    let with_logs = p.flag_of(&WITH_LOGS, true)?;
    if series && to - from + 1 > SERIES_MAX_DAYS {
        return Err(ApiError::bad("Date range too large for time series"));
    }
    let st = snapshot(app, rq).await?;
    let id = match &uuid {
        None => st.tree.root,
        Some(u) => find(&st.tree, u, || ApiError::new(403, "Account not found"))?.uuid,
    };
    let len = to - from + 1;
    let plan = std::cell::RefCell::new(LogPlan::new(st.clone()));
    let q = TreeQuery {
        logs: with_logs.then_some(&plan),
        tree: &st.tree,
        now: rq.now(),
        n_micro,
        range: (from, to),
        prev: (from - len, from - 1),
    };
    let node = q.node(id, series)?;
    let obj = Obj::new().str("uuid", &uuid.unwrap_or_else(|| fmt_uuid(id))).raw("minimal_tree", &node);
    Ok(Handled::Logs(obj, plan.into_inner()))
}
