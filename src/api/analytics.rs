//! Read-only analytics (SPEC 8). Everything except the two log endpoints is answered from the
//! snapshot's precomputed aggregates.

use super::logs::LogPlan;
use super::{find, integral, millionths, number, snapshot, Rq};
use crate::app::App;
use crate::domain::dates::{day_of, fmt_datetime, fmt_day, fmt_due, parse_date};
use crate::domain::engine::TxRecord;
use crate::domain::num::fmt_scaled;
use crate::domain::tree::{
    fmt_uuid, range_figures, utilization_text, AccountId, DaySums, Kind, RangeFigures, Tree,
};
use crate::http::json::{array, Obj};
use crate::http::params::{check_len, PVal, Params};
use crate::http::response::ApiError;

/// Default range start: today minus this many days (D19).
const DEFAULT_SPAN_DAYS: i64 = 365_000;
/// Largest `days` / `n` (D31), in millionths.
const LOOKAHEAD_MAX_MICRO: i128 = 1_000_000_000_000;
/// Longest time series (D21).
const SERIES_MAX_DAYS: i64 = 3660;

/// A `[from_day, to_day]` range from two date parameters (10.14). `strict`: invalid dates are a
/// 400; otherwise they count as missing.
fn day_range(p: &Params, from: &str, to: &str, today: i64, strict: bool) -> Result<(i64, i64), ApiError> {
    let bound = |name: &str, default: i64| -> Result<i64, ApiError> {
        match p.str(name)? {
            None => Ok(default),
            Some(s) => match parse_date(&s) {
                Some(t) => Ok(day_of(t)),
                None if strict => Err(ApiError::bad("Invalid date format")),
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
    let uuid = rq.params.req_str("uuid", "uuid is required")?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || rq.role_not_found("Account not found or unauthorized"))?;
    Ok(Obj::new().str("uuid", &uuid).money("balance", a.balance.into()))
}

pub fn record_json(r: &TxRecord) -> String {
    record_obj(r).finish()
}

/// The fields of one record in the SPEC 8.3 shape.
pub fn record_obj(r: &TxRecord) -> Obj {
    Obj::new()
        .str("Type", if r.deposit { "Deposit" } else { "Withdrawal" })
        .str("By", &r.by)
        .str("TransactionID", &r.id)
        .str("Channel", &r.channel)
        .money("Amount", r.amount.into())
        .money("Balance", r.balance.into())
        .money("amount_due", r.amount_due)
        .money("overall_balance", r.overall_balance)
        .str("Date", &fmt_datetime(r.date))
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

pub async fn get_transactions(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_str("uuid", "uuid is required")?;
    // Without `limit` the answer is the whole log, exactly as SPEC 8.3 (a lone cursor is ignored
    // like any unknown parameter).
    let limit = number(&rq.params, "limit", None, BAD_LIMIT)?.map(|d| integral(&d, 1, PAGE_MAX, BAD_LIMIT));
    let Some(limit) = limit.transpose()? else {
        let st = snapshot(app, rq).await?;
        let a = find(&st.tree, &uuid, || rq.role_not_found("Account not found or unauthorized"))?;
        let (acc, count) = (a.uuid, a.log_len);
        let mut plan = LogPlan::new(st.clone());
        let obj = Obj::new()
            .str("uuid", &uuid)
            .int("transaction_count", count.into())
            .raw("transactions", &plan.marker(acc));
        rq.set_logs(plan);
        return Ok(obj);
    };
    let cursor = rq.params.str("cursor")?.map(|c| cursor_parse(&c)).transpose()?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || rq.role_not_found("Account not found or unauthorized"))?;
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
        .opt_str("next_cursor", next.as_deref()))
}

pub async fn total_balance(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_str("uuid", "UUID is required")?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || rq.role_not_found("Account not found or unauthorized"))?;
    Ok(Obj::new().str("uuid", &uuid).money("total_balance", a.sub_balance))
}

pub async fn total_due(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_str("uuid", "UUID is required")?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || rq.role_not_found("Account not found or unauthorized"))?;
    Ok(Obj::new().str("uuid", &uuid).money("total_due", a.sub_due))
}

/// A lookahead window in millionths of a day.
fn lookahead(
    p: &Params,
    name: &str,
    required: Option<&str>,
    bad: &str,
    allow_zero: bool,
) -> Result<Option<i128>, ApiError> {
    let Some(d) = number(p, name, required, bad)? else {
        return Ok(None);
    };
    // Zero, where refused, is refused as sent: like every range check (SPEC 3.6a) it looks at
    // the exact value, so 0.0000004 passes "> 0" and is then kept rounded, as 0.
    if !allow_zero && d.is_zero() {
        return Err(ApiError::bad(bad));
    }
    Ok(Some(i128::from(millionths(&d, LOOKAHEAD_MAX_MICRO, bad)?)))
}

pub async fn due_within_days(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "UUID is required")?;
    let bad = "Days must be a non-negative number";
    let days = lookahead(p, "days", Some("Days parameter is required"), bad, true)?
        .ok_or_else(|| ApiError::bad("Days parameter is required"))?;
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
    let uuid = p.req_str("uuid", "UUID is required")?;
    let (from, to) = day_range(p, "from", "to", day_of(rq.now()), q == RangeQ::Spending)?;
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
        RangeQ::Spending => o.money("total_spending", f.spending),
        RangeQ::Income => o.money("total_income", f.income),
        RangeQ::Allocated => o.money("allocated_amount", f.allocated),
        RangeQ::Utilization => o.num("utilization", &utilization_text(f.spending, f.allocated)),
    })
}

pub async fn walking_amount(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "UUID is required")?;
    let amt_type = p.str("amt_type")?.unwrap_or_else(|| "amount_due".into());
    check_len("amt_type", Some(&amt_type), 64)?;
    let (from, to) = day_range(p, "from", "to", day_of(rq.now()), false)?;
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

/// A boolean parameter (SPEC 3.4's booleans), `default` when absent.
fn flag(p: &Params, name: &str, default: bool) -> Result<bool, ApiError> {
    let bad = || ApiError::bad(format!("{name} must be a boolean"));
    match p.get(name) {
        PVal::Missing | PVal::Empty => Ok(default),
        PVal::Bool(b) => Ok(b),
        PVal::Str(s) => match s.as_ref() {
            "true" | "TRUE" | "True" | "T" => Ok(true),
            "false" | "FALSE" | "False" | "F" => Ok(false),
            _ => Err(bad()),
        },
        PVal::Num(_) | PVal::Invalid => Err(bad()),
    }
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
            .money("balance", a.balance.into());
        if let Some(logs) = &logs {
            o = o.raw("transactions", logs);
        }
        o = o
            .obj("child_accounts_list", children)
            .money("total_balance", a.sub_balance)
            .money("total_due", a.sub_due)
            .money("compute_total_due_within_n_days", t.due_within(id, self.now, self.n_micro))
            .money("spending", cur.spending)
            .money("previous_spending", prev.spending)
            .money("total_income", cur.income)
            .money("previous_total_income", prev.income)
            .money("allocated_amount", cur.allocated)
            .money("previous_allocated_amount", prev.allocated)
            .num("income_utilization", &utilization_text(cur.spending, cur.allocated))
            .num("previous_income_utilization", &utilization_text(prev.spending, prev.allocated))
            .money("walking_amount_due", t.walking(id, true, self.range.0, self.range.1))
            .money("previous_walking_amount_due", t.walking(id, true, self.prev.0, self.prev.1))
            .money("walking_balance", t.walking(id, false, self.range.0, self.range.1))
            .money("previous_walking_balance", t.walking(id, false, self.prev.0, self.prev.1));
        if a.is_child_kind() {
            let parent = a.parent.and_then(|p| t.get(p));
            o = o
                .opt_str("parent_uuid", a.parent.map(fmt_uuid).as_deref())
                .opt_str("parent_name", parent.map(|p| p.name.as_str()))
                .num("allocation", &fmt_scaled(a.allocation.into(), 6))
                .str("account_status", &a.status)
                .num("priority", &fmt_scaled(a.priority.into(), 6));
        }
        if let (Kind::Grandchild, Some(g)) = (a.kind, &a.grand) {
            o = o
                .opt_str("due_date", g.due_date.map(fmt_due).as_deref())
                .money("fixed_amount", g.fixed_amount.into())
                .str("account_type", &g.account_type);
            o = match g.freq {
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
                    debt[(day - from) as usize] += i128::from(r.amount_due);
                }
            }
        }
        array((0..span).map(|i| {
            let f = RangeFigures::from_sums(&own[i], &desc[i]);
            Obj::new()
                .str("Date", &fmt_day(from + i as i64))
                .money("Income", f.income)
                .money("Spending", f.spending)
                .money("Allocated", f.allocated)
                .money("Overall_Debt", debt[i])
                .finish()
        }))
    }
}

pub async fn minimal_tree(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = match p.get("uuid") {
        PVal::Empty => return Err(ApiError::bad("UUID is required")),
        _ => p.str("uuid")?,
    };
    let n_micro = lookahead(p, "n", None, "`n` must be a positive number", false)?.unwrap_or(30_000_000);
    let (from, to) = day_range(p, "start_date", "end_date", day_of(rq.now()), true)?;
    let series = flag(p, "ts_data", false)?;
    // Not in SPEC: `transactions=false` leaves every node's log out (the key is absent), for a
    // client that wants the tree and its figures without the whole history (the web page).
    let with_logs = flag(p, "transactions", true)?;
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
    rq.set_logs(plan.into_inner());
    Ok(Obj::new().str("uuid", &uuid.unwrap_or_else(|| fmt_uuid(id))).raw("minimal_tree", &node))
}
