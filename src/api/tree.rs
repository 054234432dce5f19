//! /add_sub_account, /set_child_allocation, /delete and the listing and finding endpoints
//! (SPEC 7).

use super::{engine_err, find, integral, millionths, mutate, mutate_locked, number, snapshot, Rq};
use crate::app::App;
use crate::domain::dates::parse_date;
use crate::domain::frac::Frac;
use crate::domain::num::fmt_scaled;
use crate::domain::tree::{
    fmt_uuid, Account, Grand, Kind, Text, Tree, ALLOC_ONE, MAX_ACCOUNTS, MAX_CHILDREN, MAX_DEPTH,
};
use crate::http::json::{array, Obj};
use crate::http::params::{check_len, money_cents};
use crate::http::response::ApiError;

/// Largest priority, in millionths (1e9).
pub const PRIORITY_MAX_MICRO: i128 = 1_000_000_000_000_000;
/// Largest frequency in days (D17).
pub const FREQ_MAX_DAYS: i64 = 36_500;

/// Canonical statuses are matched case-insensitively and stored lowercase; other labels verbatim.
pub fn normalise_status(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    if matches!(lower.as_str(), "active" | "inactive" | "closed") {
        lower
    } else {
        s.to_string()
    }
}

pub async fn add_sub_account(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let parent_uuid = p.req_str("parent_uuid", "uuid is required")?;
    let name = p.req_str("name", "name is required")?;
    let bad_alloc = "Invalid allocation: must be a number between 0 and 1";
    let allocation = number(p, "allocation", None, bad_alloc)?
        .map(|d| millionths(&d, ALLOC_ONE.into(), bad_alloc))
        .transpose()?
        .unwrap_or(0);
    let bad_prio = "Invalid priority: must be a non-negative integer";
    let priority = number(p, "priority", None, bad_prio)?
        .map(|d| millionths(&d, PRIORITY_MAX_MICRO, bad_prio))
        .transpose()?
        .unwrap_or(0);
    let bad_fixed = "Invalid fixed amount: must be a non-negative number";
    let fixed = match number(p, "fixed_amount", None, bad_fixed)? {
        None => 0,
        Some(d) if d.is_negative() => return Err(ApiError::bad(bad_fixed)),
        Some(d) => money_cents("fixed_amount", &d)?,
    };
    let bad_freq = "Invalid frequency: must be a non-negative integer";
    let freq =
        number(p, "freq", None, bad_freq)?.map(|d| integral(&d, 0, FREQ_MAX_DAYS, bad_freq)).transpose()?;
    let due = match p.str("due_date")? {
        None => None,
        Some(s) => {
            Some(parse_date(&s).ok_or_else(|| ApiError::bad("Invalid due date: must be a valid date"))?)
        }
    };
    let account_type = p.str("account_type")?;
    let status = p.str("status")?;
    check_len("name", Some(&name), 128)?;
    check_len("account_type", account_type.as_deref(), 64)?;
    check_len("status", status.as_deref(), 64)?;
    let status = if allocation == 0 {
        "inactive".to_string()
    } else {
        status.map_or_else(|| "active".into(), |s| normalise_status(&s))
    };
    mutate(app, rq, |ctx, _| {
        let parent = find(ctx.tree, &parent_uuid, || ApiError::new(404, "Parent account not found"))?;
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
            due_date: due,
            fixed_amount: fixed,
            amount_due: fixed,
            account_type: account_type.as_deref().map_or(Text::Static("Expense"), Text::from),
            freq: freq.map(|f| f as u32),
            periods: Frac::ONE,
        });
        let mut acc = Account::new(id, name.as_str().into(), kind, Some(pid), grand);
        acc.allocation = allocation;
        acc.priority = priority;
        acc.status = status.as_str().into();
        ctx.attach(acc).map_err(engine_err)?;
        Ok(Obj::new()
            .str("message", &format!("{name} added under {parent_name}"))
            .str("uuid", &fmt_uuid(id))
            .str("child_type", kind.wire())
            .num("allocation", &fmt_scaled(allocation.into(), 6)))
    })
    .await
}

pub async fn set_child_allocation(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let parent_uuid = p.req_str("parent_uuid", "parent uuid is required")?;
    let child_name = p.req_str("child_name", "child_name is required")?;
    check_len("child_name", Some(&child_name), 128)?;
    let bad = "Allocation must be a number between 0 and 1";
    let d = number(p, "allocation", Some("Allocation is required"), bad)?
        .ok_or_else(|| ApiError::bad("Allocation is required"))?;
    let allocation = millionths(&d, ALLOC_ONE.into(), bad)?;
    mutate(app, rq, |ctx, _| {
        let parent = find(ctx.tree, &parent_uuid, || ApiError::new(404, "Parent account not found"))?;
        let pid = parent.uuid;
        let child = parent
            .children
            .iter()
            .filter_map(|c| ctx.tree.get(*c))
            .find(|c| c.name == child_name)
            .ok_or_else(|| ApiError::new(404, "Child account not found under parent"))?;
        let cid = child.uuid;
        let others = ctx.tree.total_allocation(pid) - child.allocation;
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

pub async fn delete(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let uuid = rq.params.req_str("uuid", "Account UUID is required")?;
    let user_id = rq.user_id()?.to_string();
    let no_user = || ApiError::new(404, format!("Account for user_id '{user_id}' does not exist."));
    let not_found = || ApiError::new(404, format!("Account with uuid {uuid} not found"));
    // One lock hold: decide between the whole user and a sub-account, then commit.
    let Some((guard, cur)) = super::lock_tree(app, rq, no_user).await? else { return Ok(Obj::new()) };
    if find(&cur.tree, &uuid, not_found)?.uuid == cur.tree.root {
        guard.delete_user().await?;
        return Ok(Obj::new()
            .str("uuid", &uuid)
            .str("message", &format!("Account for user_id '{user_id}' deleted successfully.")));
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
    let uuid = rq.params.req_str("uuid", "uuid is required")?;
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
    let uuid = rq.params.req_str("uuid", "uuid is required")?;
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
    let name = rq.params.req_str("name", "name is required")?;
    check_len("name", Some(&name), 128)?;
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
    let uuid = rq.params.req_str("uuid", "UUID is required")?;
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
        .money("balance", a.balance.into())
        .money("total_balance", a.sub_balance);
    o = match &a.grand {
        Some(g) => o.money("amount_due", g.amount_due.into()),
        None => o.null("amount_due"),
    };
    o = o.money("total_amount_due", a.sub_due);
    o = if a.is_child_kind() {
        o.num("allocation", &fmt_scaled(a.allocation.into(), 6))
    } else {
        o.null("allocation")
    };
    o.opt_str("parent_uuid", a.parent.map(fmt_uuid).as_deref())
}
