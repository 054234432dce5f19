//! /deposit, /withdraw, /distribute, /move_balance (SPEC 6).

use std::borrow::Cow;

use super::{engine_err, find, mutate, mutate_locked, no_tree, number, op_err, Rq};
use crate::app::App;
use crate::domain::dates::parse_date;
use crate::domain::engine::{Mode, SYSTEM, USER};
use crate::domain::num::{fmt_money, Dec};
use crate::domain::text::Text;
use crate::http::json::Obj;
use crate::http::params::{check_len, money_cents, Params};
use crate::http::response::ApiError;

/// An amount that must be > 0: `required`, `not_numeric`, `not_positive` texts, then 3.4 steps 4-5.
fn positive_amount(
    p: &Params,
    name: &str,
    required: &str,
    not_numeric: &str,
    not_positive: &str,
) -> Result<i64, ApiError> {
    let d: Dec = number(p, name, Some(required), not_numeric)?.ok_or_else(|| ApiError::bad(required))?;
    if d.is_negative() || d.is_zero() {
        return Err(ApiError::bad(not_positive));
    }
    money_cents(name, &d)
}

/// The `amount` of /deposit and /distribute (same texts in both tables).
fn deposit_amount(p: &Params) -> Result<i64, ApiError> {
    positive_amount(p, "amount", "amount is required", "amount must be numeric", "amount must be > 0")
}

fn insufficient(prefix: &str, balance: i64) -> ApiError {
    ApiError::bad(format!(
        "{prefix}Insufficient balance! Your current balance is:{}",
        fmt_money(balance.into())
    ))
}

/// `transaction_date`: absent means now; present must parse (D20).
fn transaction_date(p: &Params, now: i64) -> Result<i64, ApiError> {
    match p.str("transaction_date")? {
        None => Ok(now),
        Some(s) => parse_date(&s).ok_or_else(|| ApiError::bad("Invalid transaction_date format")),
    }
}

/// The parameters /deposit and /withdraw share after their amount.
struct Posting {
    uuid: String,
    channel: Text,
    txn: Option<Text>,
    by: Text,
    date: i64,
}

/// A string parameter (as [`Params::str`]) made a `Text` straight from the request's bytes:
/// short ones are held inline, so a posting's channel, id and `initiated_by` allocate nothing.
fn text(p: &Params, name: &str) -> Result<Option<Text>, ApiError> {
    Ok(p.text(name)?.map(|s| match s {
        Cow::Borrowed(b) => Text::from(b),
        Cow::Owned(o) => Text::from(o),
    }))
}

fn posting(p: &Params, uuid: String, now: i64) -> Result<Posting, ApiError> {
    let channel = text(p, "channel")?.ok_or_else(|| ApiError::bad("channel is required"))?;
    let txn = text(p, "transaction_number")?;
    let by = text(p, "initiated_by")?;
    check_len("channel", Some(&channel), 256)?;
    check_len("initiated_by", by.as_deref(), 64)?;
    check_len("transaction_number", txn.as_deref(), 128)?;
    let date = transaction_date(p, now)?;
    Ok(Posting { uuid, channel, txn, by: by.unwrap_or(USER), date })
}

pub async fn deposit(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "uuid is required")?;
    let amount = deposit_amount(p)?;
    let post = posting(p, uuid, rq.now())?;
    let Some((guard, cur)) = super::lock_tree(app, rq, no_tree).await? else { return Ok(Obj::new()) };
    let not_found = || rq.role_not_found("Account not found or unauthorized");
    // The duplicate check reads storage, so it runs here, under the lock, before the mutation.
    if find(&cur.tree, &post.uuid, not_found)?.uuid == cur.tree.root {
        if let Some(id) = &post.txn {
            if guard.main_txid_exists(id.as_str()).await? {
                return Err(ApiError::new(
                    409,
                    format!("Deposit failed: This deposit has already been made. Transaction ID:{id}"),
                ));
            }
        }
    }
    mutate_locked(app, guard, cur, rq, |ctx, _| {
        let x = find(ctx.tree, &post.uuid, not_found)?.uuid;
        ctx.deposit(x, amount, post.txn.as_ref(), &post.by, &post.channel, post.date, Mode::External)
            .map_err(op_err("Deposit not allowed. Account is not active."))?;
        let balance = ctx.acc(x).map_err(engine_err)?.balance;
        Ok(Obj::new()
            .str("account_uuid", &post.uuid)
            .money("amount", amount.into())
            .money("balance", balance.into()))
    })
    .await
}

pub async fn withdraw(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "uuid is required")?;
    let amount = positive_amount(
        p,
        "amount",
        "amount is required",
        "Invalid withdrawal amount",
        "Invalid withdrawal amount",
    )?;
    let post = posting(p, uuid, rq.now())?;
    mutate(app, rq, |ctx, _| {
        let acc = find(ctx.tree, &post.uuid, || rq.role_not_found("Account not found or unauthorized"))?;
        let x = acc.uuid;
        if amount > acc.balance {
            return Err(insufficient("Failed: ", acc.balance));
        }
        ctx.withdraw(x, amount, &post.by, &post.channel, post.txn.as_ref(), post.date).map_err(engine_err)?;
        let balance = ctx.acc(x).map_err(engine_err)?.balance;
        Ok(Obj::new().str("account_uuid", &post.uuid).money("balance", balance.into()))
    })
    .await
}

pub async fn distribute(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let uuid = p.req_str("uuid", "uuid is required")?;
    let amount = deposit_amount(p)?;
    let txn = p.str("transaction")?;
    let by = p.str("initiated_by")?;
    check_len("transaction", txn.as_deref(), 128)?;
    check_len("initiated_by", by.as_deref(), 64)?;
    let (txn, by) = (txn.map(Text::from), by.map_or(SYSTEM, Text::from));
    mutate(app, rq, |ctx, _| {
        let acc = find(ctx.tree, &uuid, || rq.role_not_found("Account not found or unauthorized"))?;
        let x = acc.uuid;
        if amount > acc.balance {
            return Err(insufficient("Distribution failed: ", acc.balance));
        }
        let internal = engine_err;
        // Errors 10 and 11 look at the statuses after the rollover of SPLIT step 2.
        ctx.rollover_children(x).map_err(internal)?;
        let active = ctx.active_children(x).map_err(internal)?;
        if active.is_empty() {
            return Err(ApiError::bad("Distribution failed: No active child accounts available."));
        }
        let weight: i64 = active.iter().filter_map(|c| ctx.tree.get(*c)).map(|c| c.allocation).sum();
        if amount >= 10 && weight == 0 {
            return Err(ApiError::bad(
                "Distribution failed: No active child accounts with a positive allocation.",
            ));
        }
        ctx.split(x, amount, txn.as_ref(), &by).map_err(internal)?;
        let balance = ctx.acc(x).map_err(internal)?.balance;
        Ok(Obj::new()
            .str("account_uuid", &uuid)
            .str("message", "Amount successifully distributed to children")
            .money("amount", amount.into())
            .money("balance", balance.into()))
    })
    .await
}

pub async fn move_balance(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let from = p.req_str("from_uuid", "Source account (from_uuid) is required")?;
    let to = p.req_str("to_uuid", "Destination account (to_uuid) is required")?;
    let amount = positive_amount(
        p,
        "amount",
        "Amount is required",
        "Amount must be a positive number",
        "Amount must be a positive number",
    )?;
    mutate(app, rq, |ctx, _| {
        let src = find(ctx.tree, &from, || ApiError::new(404, "Source account not found"))?;
        let dst = find(ctx.tree, &to, || ApiError::new(404, "Target account not found"))?;
        if src.uuid == dst.uuid {
            return Err(ApiError::bad("Failed: Source and destination accounts must differ"));
        }
        if amount > src.balance {
            return Err(insufficient("Failed: ", src.balance));
        }
        let message = format!("Moved {} from {} to {}", fmt_money(amount.into()), src.name, dst.name);
        let (s, d) = (src.uuid, dst.uuid);
        ctx.transfer(s, d, amount).map_err(op_err("Failed: Deposit not allowed. Account is not active."))?;
        Ok(Obj::new()
            .str("message", &message)
            .str("from_uuid", &from)
            .str("to_uuid", &to)
            .money("amount", amount.into()))
    })
    .await
}
