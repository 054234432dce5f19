//! Attribute endpoints (SPEC 9): status, priority, due date, fixed amount, account type,
//! frequency and periods.

use super::decl::{row, Endpoint, Kind as P, Msgs, Param, Row, Shape};
use super::endpoints::{Ep, NO_TREE, UUID_UPPER};
use super::json::Obj;
use super::params::PVal;
use super::tree::{FREQ_MAX_DAYS, LABEL_MAX_CHARS, PRIORITY_MAX_MICRO};
use super::{engine_err, find, mutate, snapshot, Answer, ApiError, Rq};
use crate::app::App;
use crate::domain::dates::{fmt_due, parse_date};
use crate::domain::engine::Ctx;
use crate::domain::frac::Frac;
use crate::domain::num::fmt_scaled;
use crate::domain::tree::{Account, AccountId, Grand, Kind, Status, Text};

/// Largest `periods` (D31).
const PERIODS_MAX: i64 = 1_000_000;

const NOT_FOUND: Row = row!(403, "account not found", "`Account not found`");
const MAIN: Row = row!(
    403,
    "account is the main account",
    "`This operation is only allowed on child or grandchild accounts`"
);
const NOT_GRAND: Row =
    row!(403, "not grandchild-kind", "`This endpoint is only applicable to grandchild accounts`");
const NOT_GRAND_METHOD: Row =
    row!(403, "not grandchild-kind", "`This method is only applicable to grandchild accounts`");
const STATUS_NOT_FOUND: Row = row!(404, "account not found", "`Account not found`");
const PRIORITY_MAIN: Row =
    row!(403, "main account", "`Priority only available for child or grandchild accounts`");
const FIXED_NOT_GRAND: Row =
    row!(403, "not grandchild-kind", "`Fixed amount only applicable to grandchild accounts`");
const DUE_NOT_GRAND: Row =
    row!(403, "not grandchild-kind", "`Due date only applicable to grandchild accounts`");

static STATUS: Param = Param::text(
    "status",
    Some("Status is required"),
    Some(LABEL_MAX_CHARS),
    "active, inactive, closed or another label.",
);

pub static CHANGE_STATUS: Endpoint = Endpoint::write(
    "/change_account_status",
    Ep::ChangeStatus,
    "Failed to change account status",
    "Change a child account's status",
    &[&UUID_UPPER, &STATUS],
    &[("uuid", Shape::Str), ("new_status", Shape::Str), ("message", Shape::Str)],
    &[
        NO_TREE,
        STATUS_NOT_FOUND,
        MAIN,
        row!(
            400,
            "current status is `closed` and requested status is `closed`",
            "`This account is already closed`"
        ),
        row!(
            400,
            "requested `closed` and the account's own balance > 0",
            "`Withdraw from this account or move the balance before closure.`"
        ),
    ],
);

pub static GET_STATUS: Endpoint = Endpoint::read(
    "/get_account_status",
    Ep::GetStatus,
    "Failed to get account status",
    "A child account's status",
    &[&UUID_UPPER],
    &[("uuid", Shape::Str), ("account_status", Shape::Str)],
    &[NO_TREE, NOT_FOUND, MAIN],
);

static PRIORITY: Param = Param::new(
    "priority",
    P::Millionths { max_millionths: PRIORITY_MAX_MICRO, positive: false },
    Msgs::required("Priority is required", "Priority must be numeric")
        .out_of_range("Priority must be positive")
        .too_large("Priority is too large"),
    "0..1e9.",
);

pub static SET_PRIORITY: Endpoint = Endpoint::write(
    "/set_priority",
    Ep::SetPriority,
    "Failed to set priority",
    "Set a child account's priority",
    &[&UUID_UPPER, &PRIORITY],
    &[("message", Shape::Str), ("uuid", Shape::Str), ("priority", Shape::Num)],
    &[NO_TREE, NOT_FOUND, MAIN],
);

pub static GET_PRIORITY: Endpoint = Endpoint::read(
    "/get_priority",
    Ep::GetPriority,
    "Failed to get priority",
    "A child account's priority",
    &[&UUID_UPPER],
    &[("uuid", Shape::Str), ("priority", Shape::Num)],
    &[NO_TREE, NOT_FOUND, PRIORITY_MAIN],
);

static DUE_DATE: Param = Param::new(
    "due_date",
    P::Date,
    Msgs::invalid("Invalid due date format"),
    "Missing or null clears it; an empty string is a 400.",
);

pub static SET_DUE_DATE: Endpoint = Endpoint::write(
    "/set_due_date",
    Ep::SetDueDate,
    "Failed to set due date",
    "Set or clear a grandchild account's due date",
    &[&UUID_UPPER, &DUE_DATE],
    &[("message", Shape::Str), ("uuid", Shape::Str), ("due_date", Shape::NullableStr)],
    &[NO_TREE, NOT_FOUND, DUE_NOT_GRAND],
);

pub static GET_DUE_DATE: Endpoint = Endpoint::read(
    "/get_due_date",
    Ep::GetDueDate,
    "Failed to get due date",
    "A grandchild account's due date",
    &[&UUID_UPPER],
    &[("uuid", Shape::Str), ("due_date", Shape::NullableStr)],
    &[NO_TREE, NOT_FOUND, DUE_NOT_GRAND],
);

static FIXED_AMOUNT: Param = Param::new(
    "fixed_amount",
    P::Money { positive: false },
    Msgs::required("Fixed amount is required", "Fixed amount must be a non-negative number"),
    ">= 0.",
);

pub static SET_FIXED_AMOUNT: Endpoint = Endpoint::write(
    "/set_fixed_amount",
    Ep::SetFixedAmount,
    "Failed to set fixed amount",
    "Set a grandchild account's fixed amount",
    &[&UUID_UPPER, &FIXED_AMOUNT],
    &[("uuid", Shape::Str), ("fixed_amount", Shape::Num), ("amount_due", Shape::Num)],
    &[NO_TREE, NOT_FOUND, FIXED_NOT_GRAND],
);

pub static GET_FIXED_AMOUNT: Endpoint = Endpoint::read(
    "/get_fixed_amount",
    Ep::GetFixedAmount,
    "Failed to get fixed amount",
    "A grandchild account's fixed amount",
    &[&UUID_UPPER],
    &[("uuid", Shape::Str), ("fixed_amount", Shape::Num)],
    &[NO_TREE, NOT_FOUND, NOT_GRAND],
);

static ACCOUNT_TYPE: Param = Param::text(
    "account_type",
    Some("Account type is required"),
    Some(LABEL_MAX_CHARS),
    "Free label (Bill rolls over).",
);

pub static SET_ACCOUNT_TYPE: Endpoint = Endpoint::write(
    "/set_account_type",
    Ep::SetAccountType,
    "Failed to set account type",
    "Set a grandchild account's type label",
    &[&UUID_UPPER, &ACCOUNT_TYPE],
    &[("message", Shape::Str), ("uuid", Shape::Str), ("account_type", Shape::Str)],
    &[NO_TREE, NOT_FOUND, NOT_GRAND],
);

pub static GET_ACCOUNT_TYPE: Endpoint = Endpoint::read(
    "/get_account_type",
    Ep::GetAccountType,
    "Failed to get account type",
    "A grandchild account's type label",
    &[&UUID_UPPER],
    &[("uuid", Shape::Str), ("account_type", Shape::Str)],
    &[NO_TREE, NOT_FOUND, NOT_GRAND_METHOD],
);

static ACCOUNT_FREQ: Param = Param::new(
    "account_freq",
    P::Int { min: 1, max: FREQ_MAX_DAYS },
    Msgs::required("account_freq is required", "account_freq must be a positive number"),
    "Days.",
);

pub static SET_FREQ: Endpoint = Endpoint::write(
    "/set_account_freq",
    Ep::SetFreq,
    "Failed to set frequency",
    "Set a grandchild account's period length in days",
    &[&UUID_UPPER, &ACCOUNT_FREQ],
    &[("message", Shape::Str), ("uuid", Shape::Str), ("freq", Shape::Int)],
    &[NO_TREE, NOT_FOUND, NOT_GRAND],
);

pub static GET_FREQ: Endpoint = Endpoint::read(
    "/get_account_freq",
    Ep::GetFreq,
    "Failed to get frequency",
    "A grandchild account's period length",
    &[&UUID_UPPER],
    &[("uuid", Shape::Str), ("freq", Shape::NullableInt)],
    &[NO_TREE, NOT_FOUND, NOT_GRAND],
);

static PERIODS: Param = Param::new(
    "periods",
    P::Int { min: 1, max: PERIODS_MAX },
    Msgs::required("Periods is required", "Periods must be a positive integer"),
    "Number of periods.",
);

pub static SET_PERIODS: Endpoint = Endpoint::write(
    "/set_account_periods",
    Ep::SetPeriods,
    "Failed to set account periods",
    "Set a grandchild account's number of periods",
    &[&UUID_UPPER, &PERIODS],
    &[("uuid", Shape::Str), ("periods", Shape::Int), ("message", Shape::Str)],
    &[NO_TREE, NOT_FOUND, NOT_GRAND],
);

pub static GET_PERIODS: Endpoint = Endpoint::read(
    "/get_account_periods",
    Ep::GetPeriods,
    "Failed to get account periods",
    "A grandchild account's number of periods",
    &[&UUID_UPPER],
    &[("uuid", Shape::Str), ("periods", Shape::Num)],
    &[NO_TREE, NOT_FOUND, NOT_GRAND_METHOD],
);

fn not_found() -> ApiError {
    NOT_FOUND.err()
}

/// A grandchild's fields, or the endpoint's kind error.
fn grand<'a>(a: &'a Account, kind_error: &Row) -> Result<&'a Grand, ApiError> {
    a.grand.as_ref().filter(|_| a.kind == Kind::Grandchild).ok_or_else(|| kind_error.err())
}

/// Finds a grandchild-kind account for a setter and returns its id.
fn grand_id(ctx: &Ctx, uuid: &str, kind_error: &Row) -> Result<AccountId, ApiError> {
    let a = find(ctx.tree, uuid, not_found)?;
    grand(a, kind_error)?;
    Ok(a.uuid)
}

/// amount_due = target(periods, fixed) - balance (9.7, 9.13).
fn recompute_due(ctx: &mut Ctx, id: AccountId) -> Result<i64, ApiError> {
    let need = ctx.need(id).map_err(engine_err)?;
    ctx.set_amount_due(id, need).map_err(engine_err)?;
    Ok(need)
}

fn grand_mut<'a>(ctx: &'a mut Ctx, id: AccountId) -> Result<&'a mut Grand, ApiError> {
    ctx.acc_mut(id)
        .map_err(engine_err)?
        .grand
        .as_mut()
        .ok_or_else(|| ApiError::Internal("grandchild without fields".into()))
}

pub async fn change_status(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_UPPER)?;
    let status = p.req_text_of(&STATUS)?;
    p.check_lengths(&[&STATUS])?;
    let status = Status::normalise(&status);
    mutate(app, rq, |ctx, _| {
        let a = find(ctx.tree, &uuid, || STATUS_NOT_FOUND.err())?;
        if !a.is_child_kind() {
            return Err(MAIN.err());
        }
        if status == Status::Closed && a.status == Status::Closed {
            return Err(ApiError::bad("This account is already closed"));
        }
        if status == Status::Closed && a.balance_cents > 0 {
            return Err(ApiError::Client(
                400,
                "Withdraw from this account or move the balance before closure.".into(),
                Some(Obj::new().str("uuid", &uuid)),
            ));
        }
        let (id, name) = (a.uuid, a.name.clone());
        ctx.acc_mut(id).map_err(engine_err)?.status = status.clone();
        Ok(Obj::new()
            .str("uuid", &uuid)
            .str("new_status", status.as_str())
            .str("message", &format!("Account {name} status updated to {status}")))
    })
    .await
}

pub async fn get_status(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_text_of(&UUID_UPPER)?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, not_found)?;
    if !a.is_child_kind() {
        return Err(MAIN.err());
    }
    Ok(Obj::new().str("uuid", &uuid).str("account_status", a.status.as_str()))
}

pub async fn set_priority(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_UPPER)?;
    let prio = p.req_num_of(&PRIORITY)?;
    mutate(app, rq, |ctx, _| {
        let a = find(ctx.tree, &uuid, not_found)?;
        if !a.is_child_kind() {
            return Err(MAIN.err());
        }
        let id = a.uuid;
        ctx.acc_mut(id).map_err(engine_err)?.priority_ppm = prio;
        let text = fmt_scaled(prio.into(), 6);
        Ok(Obj::new()
            .str("message", &format!("Priority set to {text}"))
            .str("uuid", &uuid)
            .num("priority", &text))
    })
    .await
}

pub async fn get_priority(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_text_of(&UUID_UPPER)?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, not_found)?;
    if !a.is_child_kind() {
        return Err(PRIORITY_MAIN.err());
    }
    Ok(Obj::new().str("uuid", &uuid).num("priority", &fmt_scaled(a.priority_ppm.into(), 6)))
}

pub async fn set_due_date(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_UPPER)?;
    let bad = || ApiError::bad("Invalid due date format");
    let due = match p.get("due_date") {
        PVal::Missing => None,
        // Two or more elements, or a non-empty object: the shape error of SPEC 3.3, as for
        // every other parameter; a boolean is the text "true"/"false", no date.
        PVal::Invalid => return Err(super::params::invalid(DUE_DATE.name)),
        PVal::Empty | PVal::Bool(_) => return Err(bad()),
        PVal::Str(s) | PVal::Num(s) => Some(parse_date(&s).ok_or_else(bad)?),
    };
    mutate(app, rq, |ctx, _| {
        let id = grand_id(ctx, &uuid, &DUE_NOT_GRAND)?;
        grand_mut(ctx, id)?.due_date_secs = due;
        let name = ctx.acc(id).map_err(engine_err)?.name.clone();
        Ok(Obj::new()
            .str("message", &format!("Due date set for {name}"))
            .str("uuid", &uuid)
            .opt_str("due_date", due.map(fmt_due).as_deref()))
    })
    .await
}

/// The shared shape of the attribute getters: find, kind check, one field.
async fn get_grand_attr(
    app: &App,
    rq: &Rq,
    kind_error: &Row,
    field: impl FnOnce(Obj, &Grand) -> Obj,
) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_text_of(&UUID_UPPER)?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, not_found)?;
    let g = grand(a, kind_error)?;
    Ok(field(Obj::new().str("uuid", &uuid), g))
}

pub async fn get_due_date(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    get_grand_attr(app, rq, &DUE_NOT_GRAND, |o, g| {
        o.opt_str("due_date", g.due_date_secs.map(fmt_due).as_deref())
    })
    .await
}

pub async fn set_fixed_amount(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_UPPER)?;
    let fixed = p.req_num_of(&FIXED_AMOUNT)?;
    mutate(app, rq, |ctx, _| {
        let id = grand_id(ctx, &uuid, &FIXED_NOT_GRAND)?;
        grand_mut(ctx, id)?.fixed_amount_cents = fixed;
        let due = recompute_due(ctx, id)?;
        Ok(Obj::new().str("uuid", &uuid).money("fixed_amount", fixed.into()).money("amount_due", due.into()))
    })
    .await
}

pub async fn get_fixed_amount(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    get_grand_attr(app, rq, &NOT_GRAND, |o, g| o.money("fixed_amount", g.fixed_amount_cents.into())).await
}

pub async fn set_account_type(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_UPPER)?;
    let t = p.req_text_of(&ACCOUNT_TYPE)?;
    p.check_lengths(&[&ACCOUNT_TYPE])?;
    mutate(app, rq, |ctx, _| {
        let id = grand_id(ctx, &uuid, &NOT_GRAND)?;
        grand_mut(ctx, id)?.account_type = Text::from(t.as_str());
        Ok(Obj::new()
            .str("message", &format!("Account type updated to {t}"))
            .str("uuid", &uuid)
            .str("account_type", &t))
    })
    .await
}

pub async fn get_account_type(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    get_grand_attr(app, rq, &NOT_GRAND_METHOD, |o, g| o.str("account_type", &g.account_type)).await
}

pub async fn set_freq(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_UPPER)?;
    let freq = p.req_num_of(&ACCOUNT_FREQ)?;
    mutate(app, rq, |ctx, _| {
        let id = grand_id(ctx, &uuid, &NOT_GRAND)?;
        grand_mut(ctx, id)?.freq_days = Some(freq as u32);
        let name = ctx.acc(id).map_err(engine_err)?.name.clone();
        Ok(Obj::new()
            .str("message", &format!("Frequency for {name} set to {freq}"))
            .str("uuid", &uuid)
            .int("freq", freq.into()))
    })
    .await
}

pub async fn get_freq(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    get_grand_attr(app, rq, &NOT_GRAND, |o, g| match g.freq_days {
        Some(f) => o.int("freq", f.into()),
        None => o.null("freq"),
    })
    .await
}

pub async fn set_periods(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_UPPER)?;
    let n = p.req_num_of(&PERIODS)?;
    mutate(app, rq, |ctx, _| {
        let id = grand_id(ctx, &uuid, &NOT_GRAND)?;
        let g = grand_mut(ctx, id)?;
        g.periods = Frac::int(n);
        if g.fixed_amount_cents > 0 {
            recompute_due(ctx, id)?;
        }
        Ok(Obj::new()
            .str("uuid", &uuid)
            .int("periods", n.into())
            .str("message", &format!("Number of periods set to {n}")))
    })
    .await
}

pub async fn get_periods(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    get_grand_attr(app, rq, &NOT_GRAND_METHOD, |o, g| o.num("periods", &g.periods.display())).await
}
