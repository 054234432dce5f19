//! /add_sub_account, /set_child_allocation, /delete and the listing and finding endpoints
//! (SPEC 7).

use super::decl::{by_role, row, Endpoint, Kind as P, Msgs, Param, Row, Shape, Verb};
use super::endpoints::{Ep, NO_TREE, UUID_LOWER, UUID_UPPER};
use super::json::{array, Obj};
use super::{engine_err, find, mutate, mutate_locked, snapshot, Answer, ApiError, Locked, Rq};
use crate::app::App;
use crate::domain::frac::Frac;
use crate::domain::num::fmt_scaled;
use crate::domain::tree::{
    fmt_uuid, Account, Grand, Kind, Status, Text, Tree, ALLOC_ONE, MAX_ACCOUNTS, MAX_CHILDREN, MAX_DEPTH,
};

/// Largest priority, in millionths (1e9).
pub const PRIORITY_MAX_MICRO: i128 = 1_000_000_000_000_000;
/// Largest frequency in days (D17).
pub const FREQ_MAX_DAYS: i64 = 36_500;
/// Longest account name (SPEC 14.2): a label on a screen.
pub const NAME_MAX_CHARS: usize = 128;
/// Longest account type or status label (SPEC 14.2).
pub const LABEL_MAX_CHARS: usize = 64;

const PARENT_NOT_FOUND: Row = row!(404, "parent not found", "`Parent account not found`");

static PARENT_UUID: Param = Param::text("parent_uuid", Some("uuid is required"), None, "Parent account.");
static NAME: Param = Param::text(
    "name",
    Some("name is required"),
    Some(NAME_MAX_CHARS),
    "Unique among the parent's children.",
);
static ALLOCATION: Param = Param::new(
    "allocation",
    P::Millionths { max_millionths: ALLOC_ONE as i128, positive: false },
    Msgs::invalid("Invalid allocation: must be a number between 0 and 1"),
    "Share of the parent's deposits, 0..1; default 0.",
);
static PRIORITY: Param = Param::new(
    "priority",
    P::Millionths { max_millionths: PRIORITY_MAX_MICRO, positive: false },
    Msgs::invalid("Invalid priority: must be a non-negative integer"),
    "0..1e9; default 0.",
);
static FIXED_AMOUNT: Param = Param::new(
    "fixed_amount",
    P::Money { positive: false },
    Msgs::invalid("Invalid fixed amount: must be a non-negative number"),
    ">= 0 (grandchild accounts).",
);
static FREQ: Param = Param::new(
    "freq",
    P::Int { min: 0, max: FREQ_MAX_DAYS },
    Msgs::invalid("Invalid frequency: must be a non-negative integer"),
    "Days (grandchild accounts).",
);
static DUE_DATE: Param = Param::new(
    "due_date",
    P::Date,
    Msgs::invalid("Invalid due date: must be a valid date"),
    "Grandchild accounts.",
);
static ACCOUNT_TYPE: Param =
    Param::text("account_type", None, Some(LABEL_MAX_CHARS), "Grandchild accounts; default Expense.");
static STATUS: Param = Param::text(
    "status",
    None,
    Some(LABEL_MAX_CHARS),
    "active, inactive, closed or another label; default active.",
);

pub static ADD_SUB_ACCOUNT: Endpoint = Endpoint::write(
    "/add_sub_account",
    Ep::AddSubAccount,
    "Child account not added",
    "Create a child account under a parent",
    &[&PARENT_UUID, &NAME, &ALLOCATION, &PRIORITY, &FIXED_AMOUNT, &FREQ, &DUE_DATE, &ACCOUNT_TYPE, &STATUS],
    &[("message", Shape::Str), ("uuid", Shape::Str), ("child_type", Shape::Str), ("allocation", Shape::Num)],
    &[
        NO_TREE,
        PARENT_NOT_FOUND,
        row!(
            400,
            "a child with the same `name` exists under the parent",
            "`Account name already exists under this parent`"
        ),
        row!(400, "the new account would be deeper than `MAX_DEPTH`", "`Maximum account depth exceeded`"),
        row!(
            400,
            "the parent already has `MAX_CHILDREN` (100) children",
            "`Too many child accounts under this parent`"
        ),
        row!(400, "the tree already has `MAX_ACCOUNTS` (1000) accounts", "`Too many accounts in this tree`"),
        row!(
            400,
            "parent's current allocation sum + `allocation` > 1",
            "`Child account not added: Total allocation exceeds 100%. Please adjust the allocations.`"
        ),
    ],
);

static ALLOC_PARENT: Param =
    Param::text("parent_uuid", Some("parent uuid is required"), None, "Parent account.");
static CHILD_NAME: Param = Param::text(
    "child_name",
    Some("child_name is required"),
    Some(NAME_MAX_CHARS),
    "Name of a direct child.",
);
static NEW_ALLOCATION: Param = Param::new(
    "allocation",
    P::Millionths { max_millionths: ALLOC_ONE as i128, positive: false },
    Msgs::required("Allocation is required", "Allocation must be a number between 0 and 1"),
    "0..1.",
);

pub static SET_CHILD_ALLOCATION: Endpoint = Endpoint::write(
    "/set_child_allocation",
    Ep::SetChildAllocation,
    "Allocation not set",
    "Set a direct child's allocation",
    &[&ALLOC_PARENT, &CHILD_NAME, &NEW_ALLOCATION],
    &[("message", Shape::Str), ("total_allocation", Shape::Num)],
    &[
        NO_TREE,
        PARENT_NOT_FOUND,
        row!(404, "no direct child of that name (exact match)", "`Child account not found under parent`"),
        row!(
            400,
            "(sum of the other children's allocations) + `allocation` > 1",
            "`Allocation not set: Total allocation exceeds 100%. Please adjust the allocations.`"
        ),
    ],
);

static DELETE_UUID: Param = Param::text("uuid", Some("Account UUID is required"), None, "Account uuid.");

pub static DELETE: Endpoint = Endpoint {
    verb: Verb::Delete,
    ..Endpoint::write(
        "/delete",
        Ep::Delete,
        "Failed to delete account",
        "Delete an account and its subtree, or the whole user for the main account",
        &[&DELETE_UUID],
        &[("uuid", Shape::Str), ("message", Shape::Str)],
        &[
            row!(404, "caller has no tree", "`Account for user_id '<user_id>' does not exist.`"),
            row!(
                404,
                "`uuid` is neither the main account nor any account in the tree",
                "`Account with uuid <uuid> not found`"
            ),
        ],
    )
};

pub static LIST_CHILD_ACCOUNTS: Endpoint = Endpoint::read(
    "/list_child_accounts",
    Ep::ListChildAccounts,
    "Failed to list child accounts",
    "Names of an account's direct children",
    &[&UUID_LOWER],
    &[
        ("uuid", Shape::Str),
        ("account_name", Shape::Str),
        ("child_account_names", Shape::Strs),
        ("child_count", Shape::Int),
    ],
    &[NO_TREE, by_role("account not found", "`Parent account not found or unauthorized`")],
);

pub static LIST_ALL_ACCOUNTS: Endpoint = Endpoint::read(
    "/list_all_accounts",
    Ep::ListAllAccounts,
    "Failed to list accounts",
    "Names of every account, starting from one (SPEC 10.16)",
    &[&UUID_LOWER],
    &[("uuid", Shape::Str), ("total_accounts", Shape::Int), ("account_names", Shape::Strs)],
    &[NO_TREE, by_role("account not found", "`Account not found or unauthorized`")],
);

static FIND_NAME: Param =
    Param::text("name", Some("name is required"), Some(NAME_MAX_CHARS), "Exact, case-sensitive name.");

pub static FIND_BY_NAME: Endpoint = Endpoint::read(
    "/find_account_by_name",
    Ep::FindByName,
    "Failed to retrieve accounts",
    "Accounts with an exact name",
    &[&FIND_NAME],
    &[
        ("search_name", Shape::Str),
        ("matches", Shape::Records(&["uuid", "name", "path"])),
        ("total_matches", Shape::Int),
    ],
    &[NO_TREE],
);

pub static FIND_BY_UUID: Endpoint = Endpoint::read(
    "/find_account_by_uuid",
    Ep::FindByUuid,
    "Failed to retrieve account",
    "One account's summary",
    &[&UUID_UPPER],
    &[
        ("uuid", Shape::Str),
        ("name", Shape::Str),
        ("path", Shape::Str),
        ("type", Shape::Str),
        ("balance", Shape::Num),
        ("total_balance", Shape::Num),
        ("amount_due", Shape::NullableNum),
        ("total_amount_due", Shape::Num),
        ("allocation", Shape::NullableNum),
        ("parent_uuid", Shape::NullableStr),
    ],
    &[NO_TREE, by_role("account not found", "`Account not found or unauthorized`")],
);

pub async fn add_sub_account(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let parent_uuid = p.req_text_of(&PARENT_UUID)?;
    let name = p.req_text_of(&NAME)?;
    let allocation = p.num_of(&ALLOCATION)?.unwrap_or(0);
    let priority = p.num_of(&PRIORITY)?.unwrap_or(0);
    let fixed = p.num_of(&FIXED_AMOUNT)?.unwrap_or(0);
    let freq = p.num_of(&FREQ)?;
    let due = p.date_of(&DUE_DATE)?;
    let account_type = p.text_of(&ACCOUNT_TYPE)?.map(|t| t.into_owned());
    let status = p.text_of(&STATUS)?.map(|t| t.into_owned());
    p.check_lengths(ADD_SUB_ACCOUNT.params)?;
    let status = if allocation == 0 {
        Status::Inactive
    } else {
        status.map_or(Status::Active, |s| Status::normalise(&s))
    };
    mutate(app, rq, |ctx, _| {
        let parent = find(ctx.tree, &parent_uuid, || PARENT_NOT_FOUND.err())?;
        let pid = parent.uuid;
        if parent.children.iter().filter_map(|c| ctx.tree.get(*c)).any(|c| c.name == name) {
            return Err(ApiError::bad("Account name already exists under this parent"));
        }
        if ctx.tree.depth(pid) + 1 > MAX_DEPTH {
            return Err(ApiError::bad("Maximum account depth exceeded"));
        }
        if parent.children.len() >= MAX_CHILDREN {
            return Err(ApiError::bad("Too many child accounts under this parent"));
        }
        if ctx.tree.accounts.len() >= MAX_ACCOUNTS {
            return Err(ApiError::bad("Too many accounts in this tree"));
        }
        if ctx.tree.total_allocation(pid) + allocation > ALLOC_ONE {
            return Err(ApiError::bad(
                "Child account not added: Total allocation exceeds 100%. Please adjust the allocations.",
            ));
        }
        let kind = if parent.kind == Kind::Main { Kind::Child } else { Kind::Grandchild };
        let parent_name = parent.name.clone();
        let id = uuid::Uuid::new_v4().as_u128();
        let grand = (kind == Kind::Grandchild).then(|| Grand {
            due_date_secs: due,
            fixed_amount_cents: fixed,
            amount_due_cents: fixed,
            account_type: account_type.as_deref().map_or(Text::Static("Expense"), Text::from),
            freq_days: freq.map(|f| f as u32),
            periods: Frac::ONE,
        });
        let mut acc = Account::new(id, name.as_str().into(), kind, Some(pid), grand);
        acc.allocation_ppm = allocation;
        acc.priority_ppm = priority;
        acc.status = status.clone();
        ctx.attach(acc).map_err(engine_err)?;
        Ok(Obj::new()
            .str("message", &format!("{name} added under {parent_name}"))
            .str("uuid", &fmt_uuid(id))
            .str("child_type", kind.wire())
            .num("allocation", &fmt_scaled(allocation.into(), 6)))
    })
    .await
}

pub async fn set_child_allocation(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let parent_uuid = p.req_text_of(&ALLOC_PARENT)?;
    let child_name = p.req_text_of(&CHILD_NAME)?;
    p.check_lengths(&[&CHILD_NAME])?;
    let allocation = p.req_num_of(&NEW_ALLOCATION)?;
    mutate(app, rq, |ctx, _| {
        let parent = find(ctx.tree, &parent_uuid, || PARENT_NOT_FOUND.err())?;
        let pid = parent.uuid;
        let child = parent
            .children
            .iter()
            .filter_map(|c| ctx.tree.get(*c))
            .find(|c| c.name == child_name)
            .ok_or_else(|| ApiError::new(404, "Child account not found under parent"))?;
        let cid = child.uuid;
        let others = ctx.tree.total_allocation(pid) - child.allocation_ppm;
        if others + allocation > ALLOC_ONE {
            return Err(ApiError::bad(
                "Allocation not set: Total allocation exceeds 100%. Please adjust the allocations.",
            ));
        }
        ctx.set_allocation(cid, allocation).map_err(engine_err)?;
        let total = ctx.tree.total_allocation(pid);
        Ok(Obj::new()
            .str(
                "message",
                &format!("Allocation for {child_name} updated to {}", fmt_scaled(allocation.into(), 6)),
            )
            .num("total_allocation", &fmt_scaled(total.into(), 6)))
    })
    .await
}

pub async fn delete(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let uuid = rq.params.req_text_of(&DELETE_UUID)?;
    let user_id = rq.user_id()?.to_string();
    let no_user = || ApiError::new(404, format!("Account for user_id '{user_id}' does not exist."));
    let not_found = || ApiError::new(404, format!("Account with uuid {uuid} not found"));
    // One lock hold: decide between the whole user and a sub-account, then commit.
    let (guard, cur) = match super::lock_tree(app, rq, no_user).await? {
        Locked::Tree(guard, cur) => (guard, cur),
        Locked::Answered(a) => return Ok(a),
    };
    if find(&cur.tree, &uuid, not_found)?.uuid == cur.tree.root {
        guard.delete_user().await?;
        return Ok(Obj::new()
            .str("uuid", &uuid)
            .str("message", &format!("Account for user_id '{user_id}' deleted successfully."))
            .into());
    }
    mutate_locked(app, guard, cur, rq, |ctx, _| {
        let x = find(ctx.tree, &uuid, not_found)?.uuid;
        ctx.delete_sub(x).map_err(engine_err)?;
        Ok(Obj::new()
            .str("uuid", &uuid)
            .str("message", &format!("Account with UUID '{uuid}' deleted successfully.")))
    })
    .await
}

pub async fn list_child_accounts(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_text_of(&UUID_LOWER)?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || rq.role_not_found("Parent account not found or unauthorized"))?;
    let names = st.tree.names(&a.children);
    Ok(Obj::new()
        .str("uuid", &uuid)
        .str("account_name", &a.name)
        .str_array("child_account_names", &names)
        .int("child_count", names.len() as i128))
}

pub async fn list_all_accounts(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_text_of(&UUID_LOWER)?;
    let st = snapshot(app, rq).await?;
    let a = find(&st.tree, &uuid, || rq.role_not_found("Account not found or unauthorized"))?;
    let order = st.tree.list_all(a.uuid);
    let names = st.tree.names(&order);
    Ok(Obj::new()
        .str("uuid", &uuid)
        .int("total_accounts", names.len() as i128)
        .str_array("account_names", &names))
}

pub async fn find_by_name(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let name = rq.params.req_text_of(&FIND_NAME)?;
    rq.params.check_lengths(&[&FIND_NAME])?;
    let st = snapshot(app, rq).await?;
    let t = &st.tree;
    let matches: Vec<String> = t
        .preorder(t.root)
        .into_iter()
        .filter_map(|id| t.get(id))
        .filter(|a| a.name == name)
        .map(|a| {
            Obj::new()
                .str("uuid", &fmt_uuid(a.uuid))
                .str("name", &a.name)
                .str("path", &t.path(a.uuid))
                .finish()
        })
        .collect();
    let n = matches.len();
    Ok(Obj::new().str("search_name", &name).raw("matches", &array(matches)).int("total_matches", n as i128))
}

pub async fn find_by_uuid(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_text_of(&UUID_UPPER)?;
    let st = snapshot(app, rq).await?;
    let t = &st.tree;
    let a = find(t, &uuid, || rq.role_not_found("Account not found or unauthorized"))?;
    Ok(account_obj(t, a, &uuid))
}

/// An account in the shape of /find_account_by_uuid (`uuid` as the caller spelled it).
pub fn account_obj(t: &Tree, a: &Account, uuid: &str) -> Obj {
    let mut o = Obj::new()
        .str("uuid", uuid)
        .str("name", &a.name)
        .str("path", &t.path(a.uuid))
        .str("type", a.kind.wire())
        .money("balance", a.balance_cents.into())
        .money("total_balance", a.sub_balance_cents);
    o = match &a.grand {
        Some(g) => o.money("amount_due", g.amount_due_cents.into()),
        None => o.null("amount_due"),
    };
    o = o.money("total_amount_due", a.sub_due_cents);
    o = if a.is_child_kind() {
        o.num("allocation", &fmt_scaled(a.allocation_ppm.into(), 6))
    } else {
        o.null("allocation")
    };
    o.opt_str("parent_uuid", a.parent.map(fmt_uuid).as_deref())
}
