//! Attribute endpoints (SPEC 9): status, priority, due date, fixed amount, account type,
//! frequency and periods.

use super::tree::{normalise_status, FREQ_MAX_DAYS, PRIORITY_MAX_MICRO};
use super::{engine_err, find, integral, mutate, number, snapshot, Rq};
use crate::app::App;
use crate::domain::dates::{fmt_due, parse_date};
use crate::domain::engine::Ctx;
use crate::domain::frac::Frac;
use crate::domain::num::fmt_scaled;
use crate::domain::tree::{Account, AccountId, Grand, Kind, Text};
use crate::http::json::Obj;
use crate::http::params::{check_len, invalid, money_cents, PVal};
use crate::http::response::ApiError;

const CHILD_ONLY: &str = "This operation is only allowed on child or grandchild accounts";
const ENDPOINT_GRAND_ONLY: &str = "This endpoint is only applicable to grandchild accounts";
const METHOD_GRAND_ONLY: &str = "This method is only applicable to grandchild accounts";
/// Largest `periods` (D31).
const PERIODS_MAX: i64 = 1_000_000;

fn not_found() -> ApiError {
    ApiError::new(403, "Account not found")
}

/// A grandchild's fields, or 403 with the endpoint's kind error.
fn grand<'a>(a: &'a Account, kind_error: &str) -> Result<&'a Grand, ApiError> {
    a.grand.as_ref().filter(|_| a.kind == Kind::Grandchild).ok_or_else(|| ApiError::new(403, kind_error))
}

/// Finds a grandchild-kind account for a setter and returns its id.
fn grand_id(ctx: &Ctx, uuid: &str, kind_error: &str) -> Result<AccountId, ApiError> {
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

pub async fn change_status(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "UUID is required")?;
    let status = p.req_str("status", "Status is required")?;
    check_len("status", Some(&status), 64)?;
    let status = normalise_status(&status);
    mutate(app, rq, |ctx, _| {
        let a = find(ctx.tree, &uuid, || ApiError::new(404, "Account not found"))?;
        if !a.is_child_kind() {
            return Err(ApiError::new(403, CHILD_ONLY));
        }
        if status == "closed" && a.status == "closed" {
            return Err(ApiError::bad("This account is already closed"));
        }
        if status == "closed" && a.balance > 0 {
            return Err(ApiError::Client(
                400,
                "Withdraw from this account or move the balance before closure.".into(),
                Some(Obj::new().str("uuid", &uuid)),
            ));
        }
        let (id, name) = (a.uuid, a.name.clone());
        ctx.acc_mut(id).map_err(engine_err)?.status = Text::from(status.as_str());
        Ok(Obj::new()
            .str("uuid", &uuid)
            .str("new_status", &status)
            .str("message", &format!("Account {name} status updated to {status}")))
    })
    .await
}

pub async fn get_status(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_str("uuid", "UUID is required")?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, not_found)?;
    if !a.is_child_kind() {
        return Err(ApiError::new(403, CHILD_ONLY));
    }
    Ok(Obj::new().str("uuid", &uuid).str("account_status", &a.status))
}

pub async fn set_priority(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "UUID is required")?;
    let d = number(p, "priority", Some("Priority is required"), "Priority must be numeric")?
        .ok_or_else(|| ApiError::bad("Priority is required"))?;
    if d.is_negative() {
        return Err(ApiError::bad("Priority must be positive"));
    }
    if d.abs_gt(PRIORITY_MAX_MICRO, 6) {
        return Err(ApiError::bad("Priority is too large"));
    }
    let prio = d
        .rounded_abs(6)
        .and_then(|v| i64::try_from(v).ok())
        .ok_or_else(|| ApiError::bad("Priority is too large"))?;
    mutate(app, rq, |ctx, _| {
        let a = find(ctx.tree, &uuid, not_found)?;
        if !a.is_child_kind() {
            return Err(ApiError::new(403, CHILD_ONLY));
        }
        let id = a.uuid;
        ctx.acc_mut(id).map_err(engine_err)?.priority = prio;
        let text = fmt_scaled(prio.into(), 6);
        Ok(Obj::new()
            .str("message", &format!("Priority set to {text}"))
            .str("uuid", &uuid)
            .num("priority", &text))
    })
    .await
}

pub async fn get_priority(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_str("uuid", "UUID is required")?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, not_found)?;
    if !a.is_child_kind() {
        return Err(ApiError::new(403, "Priority only available for child or grandchild accounts"));
    }
    Ok(Obj::new().str("uuid", &uuid).num("priority", &fmt_scaled(a.priority.into(), 6)))
}

pub async fn set_due_date(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "UUID is required")?;
    let bad = || ApiError::bad("Invalid due date format");
    let due = match p.get("due_date") {
        PVal::Missing => None,
        // Two or more elements, or a non-empty object: the shape error of SPEC 3.3, as for
        // every other parameter; a boolean is the text "true"/"false", no date.
        PVal::Invalid => return Err(invalid("due_date")),
        PVal::Empty | PVal::Bool(_) => return Err(bad()),
        PVal::Str(s) | PVal::Num(s) => Some(parse_date(&s).ok_or_else(bad)?),
    };
    mutate(app, rq, |ctx, _| {
        let id = grand_id(ctx, &uuid, "Due date only applicable to grandchild accounts")?;
        grand_mut(ctx, id)?.due_date = due;
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
    kind_error: &str,
    field: impl FnOnce(Obj, &Grand) -> Obj,
) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_str("uuid", "UUID is required")?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, not_found)?;
    let g = grand(a, kind_error)?;
    Ok(field(Obj::new().str("uuid", &uuid), g))
}

pub async fn get_due_date(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    get_grand_attr(app, rq, "Due date only applicable to grandchild accounts", |o, g| {
        o.opt_str("due_date", g.due_date.map(fmt_due).as_deref())
    })
    .await
}

pub async fn set_fixed_amount(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "UUID is required")?;
    let bad = "Fixed amount must be a non-negative number";
    let d = number(p, "fixed_amount", Some("Fixed amount is required"), bad)?
        .ok_or_else(|| ApiError::bad("Fixed amount is required"))?;
    if d.is_negative() {
        return Err(ApiError::bad(bad));
    }
    let fixed = money_cents("fixed_amount", &d)?;
    mutate(app, rq, |ctx, _| {
        let id = grand_id(ctx, &uuid, "Fixed amount only applicable to grandchild accounts")?;
        grand_mut(ctx, id)?.fixed_amount = fixed;
        let due = recompute_due(ctx, id)?;
        Ok(Obj::new().str("uuid", &uuid).money("fixed_amount", fixed.into()).money("amount_due", due.into()))
    })
    .await
}

pub async fn get_fixed_amount(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    get_grand_attr(app, rq, ENDPOINT_GRAND_ONLY, |o, g| o.money("fixed_amount", g.fixed_amount.into())).await
}

pub async fn set_account_type(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "UUID is required")?;
    let t = p.req_str("account_type", "Account type is required")?;
    check_len("account_type", Some(&t), 64)?;
    mutate(app, rq, |ctx, _| {
        let id = grand_id(ctx, &uuid, ENDPOINT_GRAND_ONLY)?;
        grand_mut(ctx, id)?.account_type = Text::from(t.as_str());
        Ok(Obj::new()
            .str("message", &format!("Account type updated to {t}"))
            .str("uuid", &uuid)
            .str("account_type", &t))
    })
    .await
}

pub async fn get_account_type(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    get_grand_attr(app, rq, METHOD_GRAND_ONLY, |o, g| o.str("account_type", &g.account_type)).await
}

pub async fn set_freq(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "UUID is required")?;
    let bad = "account_freq must be a positive number";
    let d = number(p, "account_freq", Some("account_freq is required"), bad)?
        .ok_or_else(|| ApiError::bad("account_freq is required"))?;
    let freq = integral(&d, 1, FREQ_MAX_DAYS, bad)?;
    mutate(app, rq, |ctx, _| {
        let id = grand_id(ctx, &uuid, ENDPOINT_GRAND_ONLY)?;
        grand_mut(ctx, id)?.freq = Some(freq as u32);
        let name = ctx.acc(id).map_err(engine_err)?.name.clone();
        Ok(Obj::new()
            .str("message", &format!("Frequency for {name} set to {freq}"))
            .str("uuid", &uuid)
            .int("freq", freq.into()))
    })
    .await
}

pub async fn get_freq(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    get_grand_attr(app, rq, ENDPOINT_GRAND_ONLY, |o, g| match g.freq {
        Some(f) => o.int("freq", f.into()),
        None => o.null("freq"),
    })
    .await
}

pub async fn set_periods(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "UUID is required")?;
    let bad = "Periods must be a positive integer";
    let d = number(p, "periods", Some("Periods is required"), bad)?
        .ok_or_else(|| ApiError::bad("Periods is required"))?;
    let n = integral(&d, 1, PERIODS_MAX, bad)?;
    mutate(app, rq, |ctx, _| {
        let id = grand_id(ctx, &uuid, ENDPOINT_GRAND_ONLY)?;
        let g = grand_mut(ctx, id)?;
        g.periods = Frac::int(n);
        if g.fixed_amount > 0 {
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
    get_grand_attr(app, rq, METHOD_GRAND_ONLY, |o, g| o.num("periods", &g.periods.display())).await
}
