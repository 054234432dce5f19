//! /deposit, /withdraw, /distribute, /move_balance (SPEC 6).

use std::borrow::Cow;

use super::decl::{by_role, row, Endpoint, Kind, Msgs, Param, Row, Shape};
use super::endpoints::{Ep, NO_TREE, UUID_LOWER};
use super::json::Obj;
use super::params::Params;
use super::{engine_err, find, mutate, mutate_locked, no_tree, op_err, Answer, ApiError, Locked, Rq};
use crate::app::App;
use crate::domain::engine::{self, Mode, Origin};
use crate::domain::num::fmt_money;
use crate::domain::text::Text;

/// Longest `channel` (SPEC 14.2): a bank or wallet name with a reference, never a document.
pub const CHANNEL_MAX_CHARS: usize = 256;
/// Longest `initiated_by`: a person's or system's name.
pub const INITIATED_BY_MAX_CHARS: usize = 64;
/// Longest transaction id: bank references run to 35 characters (ISO 20022), UUIDs 36.
pub const TXID_MAX_CHARS: usize = 128;

static AMOUNT: Param = Param::new(
    "amount",
    Kind::Money { positive: true },
    Msgs::required("amount is required", "amount must be numeric").out_of_range("amount must be > 0"),
    "Amount, > 0.",
);
static CHANNEL: Param = Param::text(
    "channel",
    Some("channel is required"),
    Some(CHANNEL_MAX_CHARS),
    "Free text, e.g. ABSA, mpesa.",
);
static TXN_NUMBER: Param =
    Param::text("transaction_number", None, Some(TXID_MAX_CHARS), "Transaction id; generated when absent.");
static INITIATED_BY: Param = Param::text(
    "initiated_by",
    None,
    Some(INITIATED_BY_MAX_CHARS),
    "Recorded as the record's By; default User.",
);
static TXN_DATE: Param = Param::new(
    "transaction_date",
    Kind::Date,
    Msgs::invalid("Invalid transaction_date format"),
    "Recorded date; default now.",
);
static WITHDRAW_AMOUNT: Param = Param::new(
    "amount",
    Kind::Money { positive: true },
    Msgs::required("amount is required", "Invalid withdrawal amount"),
    "Amount, > 0.",
);
static TRANSACTION: Param =
    Param::text("transaction", None, Some(TXID_MAX_CHARS), "Id given to the children's deposit records.");
static DISTRIBUTE_BY: Param =
    Param::text("initiated_by", None, Some(INITIATED_BY_MAX_CHARS), "Recorded as By; default System.");
static FROM_UUID: Param =
    Param::text("from_uuid", Some("Source account (from_uuid) is required"), None, "Source account.");
static TO_UUID: Param =
    Param::text("to_uuid", Some("Destination account (to_uuid) is required"), None, "Destination account.");
static MOVE_AMOUNT: Param = Param::new(
    "amount",
    Kind::Money { positive: true },
    Msgs::required("Amount is required", "Amount must be a positive number"),
    "Amount, > 0.",
);

const NOT_FOUND: Row = by_role("account not found", "`Account not found or unauthorized`");
const SOURCE_NOT_FOUND: Row = row!(404, "source not found", "`Source account not found`");
const TARGET_NOT_FOUND: Row = row!(404, "destination not found", "`Target account not found`");
const INSUFFICIENT: Row = row!(
    400,
    "`amount` > the account's balance (any kind)",
    "`Failed: Insufficient balance! Your current balance is:<balance>`"
);

pub static DEPOSIT: Endpoint = Endpoint::write(
    "/deposit",
    Ep::Deposit,
    "Deposit failed",
    "Deposit external money into an account; it flows down the tree",
    &[&UUID_LOWER, &AMOUNT, &CHANNEL, &TXN_NUMBER, &INITIATED_BY, &TXN_DATE],
    &[("account_uuid", Shape::Str), ("amount", Shape::Num), ("balance", Shape::Num)],
    &[
        NO_TREE,
        NOT_FOUND,
        row!(
            409,
            "target is the main account, `transaction_number` was supplied, and a record with that `TransactionID` already exists in the main account's own log (D28)",
            "`Deposit failed: This deposit has already been made. Transaction ID:<transaction_number>`"
        ),
        row!(
            400,
            "target is child-kind and, after the rollover check (10.6), its status is not `active` (D9)",
            "`Deposit not allowed. Account is not active.`"
        ),
    ],
);

pub static WITHDRAW: Endpoint = Endpoint::write(
    "/withdraw",
    Ep::Withdraw,
    "Failed",
    "Withdraw money from an account",
    &[&UUID_LOWER, &WITHDRAW_AMOUNT, &CHANNEL, &TXN_NUMBER, &INITIATED_BY, &TXN_DATE],
    &[("account_uuid", Shape::Str), ("balance", Shape::Num)],
    &[NO_TREE, NOT_FOUND, INSUFFICIENT],
);

pub static DISTRIBUTE: Endpoint = Endpoint::write(
    "/distribute",
    Ep::Distribute,
    "Distribution failed",
    "Move part of an account's balance down to its active children",
    &[&UUID_LOWER, &AMOUNT, &TRANSACTION, &DISTRIBUTE_BY],
    &[("account_uuid", Shape::Str), ("message", Shape::Str), ("amount", Shape::Num), ("balance", Shape::Num)],
    &[
        NO_TREE,
        NOT_FOUND,
        row!(
            400,
            "`amount` > the account's balance",
            "`Distribution failed: Insufficient balance! Your current balance is:<balance>`"
        ),
        row!(
            400,
            "no child is `active` (after the rollover check of 10.4 step 2)",
            "`Distribution failed: No active child accounts available.`"
        ),
        row!(
            400,
            "`amount` >= 0.10, and every active child has allocation 0",
            "`Distribution failed: No active child accounts with a positive allocation.`"
        ),
    ],
);

pub static MOVE_BALANCE: Endpoint = Endpoint::write(
    "/move_balance",
    Ep::MoveBalance,
    "Failed",
    "Transfer money between two accounts of the tree",
    &[&FROM_UUID, &TO_UUID, &MOVE_AMOUNT],
    &[("message", Shape::Str), ("from_uuid", Shape::Str), ("to_uuid", Shape::Str), ("amount", Shape::Num)],
    &[
        NO_TREE,
        SOURCE_NOT_FOUND,
        TARGET_NOT_FOUND,
        row!(
            400,
            "source and destination are the same account",
            "`Failed: Source and destination accounts must differ`"
        ),
        INSUFFICIENT,
        row!(
            400,
            "destination is child-kind and, after its rollover check, not `active`",
            "`Failed: Deposit not allowed. Account is not active.`"
        ),
    ],
);

fn insufficient(prefix: &str, balance: i64) -> ApiError {
    ApiError::bad(format!(
        "{prefix}Insufficient balance! Your current balance is:{}",
        fmt_money(balance.into())
    ))
}

/// The parameters /deposit and /withdraw share after their amount.
struct Posting {
    uuid: String,
    channel: Text,
    txn: Option<Text>,
    by: Origin,
    date: i64,
}

impl Posting {
    /// The engine's terms of this posting for `amount_cents`.
    fn terms(&self, amount_cents: i64) -> engine::Posting<'_> {
        engine::Posting {
            amount_cents,
            by: &self.by,
            channel: &self.channel,
            txid: self.txn.as_ref(),
            date_secs: self.date,
            note: None,
        }
    }
}

/// A text parameter made a `Text` straight from the request's bytes: short ones are held
/// inline, so a posting's channel, id and `initiated_by` allocate nothing.
fn text(p: &Params, decl: &Param) -> Result<Option<Text>, ApiError> {
    Ok(p.text_of(decl)?.map(|s| match s {
        Cow::Borrowed(b) => Text::from(b),
        Cow::Owned(o) => Text::from(o),
    }))
}

fn posting(p: &Params, uuid: String, now: i64) -> Result<Posting, ApiError> {
    let channel = text(p, &CHANNEL)?.ok_or_else(|| ApiError::bad("channel is required"))?;
    let txn = text(p, &TXN_NUMBER)?;
    let by = text(p, &INITIATED_BY)?;
    p.check_lengths(&[&CHANNEL, &INITIATED_BY, &TXN_NUMBER])?;
    let date = p.date_of(&TXN_DATE)?.unwrap_or(now);
    Ok(Posting { uuid, channel, txn, by: by.map_or(Origin::User, Origin::from), date })
}

pub async fn deposit(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_LOWER)?;
    let amount = p.req_num_of(&AMOUNT)?;
    let post = posting(p, uuid, rq.now())?;
    let (guard, cur) = match super::lock_tree(app, rq, no_tree).await? {
        Locked::Tree(guard, cur) => (guard, cur),
        Locked::Answered(a) => return Ok(a),
    };
    let not_found = || rq.not_found_by_role(&NOT_FOUND);
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
        ctx.deposit(x, post.terms(amount), Mode::External)
            .map_err(op_err("Deposit not allowed. Account is not active."))?;
        let balance = ctx.acc(x).map_err(engine_err)?.balance_cents;
        Ok(Obj::new()
            .str("account_uuid", &post.uuid)
            .money("amount", amount.into())
            .money("balance", balance.into()))
    })
    .await
}

pub async fn withdraw(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_LOWER)?;
    let amount = p.req_num_of(&WITHDRAW_AMOUNT)?;
    let post = posting(p, uuid, rq.now())?;
    mutate(app, rq, |ctx, _| {
        let acc = find(ctx.tree, &post.uuid, || rq.not_found_by_role(&NOT_FOUND))?;
        let x = acc.uuid;
        if amount > acc.balance_cents {
            return Err(insufficient("Failed: ", acc.balance_cents));
        }
        ctx.withdraw(x, post.terms(amount)).map_err(engine_err)?;
        let balance = ctx.acc(x).map_err(engine_err)?.balance_cents;
        Ok(Obj::new().str("account_uuid", &post.uuid).money("balance", balance.into()))
    })
    .await
}

pub async fn distribute(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let uuid = p.req_text_of(&UUID_LOWER)?;
    let amount = p.req_num_of(&AMOUNT)?;
    let txn = text(p, &TRANSACTION)?;
    let by = text(p, &DISTRIBUTE_BY)?.map_or(Origin::System, Origin::from);
    p.check_lengths(DISTRIBUTE.params)?;
    mutate(app, rq, |ctx, _| {
        let acc = find(ctx.tree, &uuid, || rq.not_found_by_role(&NOT_FOUND))?;
        let x = acc.uuid;
        if amount > acc.balance_cents {
            return Err(insufficient("Distribution failed: ", acc.balance_cents));
        }
        let internal = engine_err;
        // Errors 10 and 11 look at the statuses after the rollover of SPLIT step 2.
        ctx.rollover_children(x).map_err(internal)?;
        let active = ctx.active_children(x).map_err(internal)?;
        if active.is_empty() {
            return Err(ApiError::bad("Distribution failed: No active child accounts available."));
        }
        let weight: i64 = active.iter().filter_map(|c| ctx.tree.get(*c)).map(|c| c.allocation_ppm).sum();
        if amount >= 10 && weight == 0 {
            return Err(ApiError::bad(
                "Distribution failed: No active child accounts with a positive allocation.",
            ));
        }
        ctx.split(x, amount, txn.as_ref(), &by).map_err(internal)?;
        let balance = ctx.acc(x).map_err(internal)?.balance_cents;
        Ok(Obj::new()
            .str("account_uuid", &uuid)
            .str("message", "Amount successifully distributed to children")
            .money("amount", amount.into())
            .money("balance", balance.into()))
    })
    .await
}

pub async fn move_balance(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let from = p.req_text_of(&FROM_UUID)?;
    let to = p.req_text_of(&TO_UUID)?;
    let amount = p.req_num_of(&MOVE_AMOUNT)?;
    mutate(app, rq, |ctx, _| {
        let src = find(ctx.tree, &from, || SOURCE_NOT_FOUND.err())?;
        let dst = find(ctx.tree, &to, || TARGET_NOT_FOUND.err())?;
        if src.uuid == dst.uuid {
            return Err(ApiError::bad("Failed: Source and destination accounts must differ"));
        }
        if amount > src.balance_cents {
            return Err(insufficient("Failed: ", src.balance_cents));
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
