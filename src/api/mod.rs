//! Endpoint handlers. Each has the same shape: read and check its parameters in the order of its
//! SPEC error table, then either read a snapshot or run a mutation under the user's lock, and
//! return its fields. The envelope, statuses of internal errors and timing are added by `http`.

mod analytics;
mod attrs;
mod auth;
pub mod logs;
mod money;
mod sync;
mod tree;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::app::App;
use crate::auth::jwt::Identity;
use crate::domain::engine::{Ctx, OpError};
use crate::domain::num::Dec;
use crate::domain::tree::{Account, Tree};
use crate::http::json::Obj;
use crate::http::params::{NumVal, Params};
use crate::http::response::{envelope, ApiError};
use crate::http::router::Ep;
use crate::store::users::{UserState, WriteGuard, IDEM_TTL_US};
use crate::store::{IdemRecord, StoreError};

/// One request as a handler sees it.
pub struct Rq {
    pub params: Params,
    pub ident: Option<std::sync::Arc<Identity>>,
    pub now_us: i64,
    pub has_auth: bool,
    /// The request's `Idempotency-Key`, when it carries one and writes (docs/api.md, idempotency keys).
    pub idem: Option<IdemReq>,
    /// Logs the answer names by marker, to be filled in by `http` (see [`logs`]).
    pub logs: std::sync::Mutex<Option<logs::LogPlan>>,
}

/// An `Idempotency-Key` being honoured: a mutation keeps its answer in its own commit.
pub struct IdemReq {
    pub key: String,
    /// Hash of the request (see `http::server`).
    pub fingerprint: Vec<u8>,
    /// The endpoint's 500 prefix, to render the envelope.
    pub prefix: &'static str,
    /// Set once a mutation committed the answer with its write: status and the exact body to
    /// send (rendered once, timing included, so a replay is byte for byte the same), and whether
    /// it is the replay of an answer kept before ([`idem_answered`]).
    pub kept: std::sync::Mutex<Option<(u16, String, bool)>>,
}

impl Rq {
    pub fn now(&self) -> i64 {
        self.now_us.div_euclid(1_000_000)
    }
    fn ident(&self) -> Result<&Identity, ApiError> {
        self.ident.as_deref().ok_or_else(|| ApiError::Internal("protected endpoint without identity".into()))
    }
    fn user_id(&self) -> Result<&str, ApiError> {
        self.ident().map(|i| i.user_id.as_str())
    }
    /// Hands the answer's logs over to be filled in (see [`logs`]).
    fn set_logs(&self, plan: logs::LogPlan) {
        if let Ok(mut p) = self.logs.lock() {
            *p = Some(plan);
        }
    }
    /// "Account not found" for endpoints whose status depends on the role (SPEC 3.6).
    fn role_not_found(&self, msg: &str) -> ApiError {
        let admin = self.ident.as_ref().is_some_and(|i| i.role == "admin");
        ApiError::new(if admin { 404 } else { 403 }, msg)
    }
}

/// A handler's future, boxed on its own: a request's future then holds the size of the handler
/// it runs, not of the largest one (moving several KB per request showed in profiles).
pub type Handling<'a> = Pin<Box<dyn Future<Output = Result<Obj, ApiError>> + Send + 'a>>;

pub fn call<'a>(app: &'a App, ep: Ep, rq: &'a Rq) -> Handling<'a> {
    match ep {
        Ep::Ping | Ep::Ops(_) => Box::pin(async { Ok(Obj::new()) }),
        Ep::Register => Box::pin(auth::register(app, rq)),
        Ep::Login => Box::pin(auth::login(app, rq)),
        Ep::GenerateToken => Box::pin(async move { auth::generate_token(app, rq) }),
        Ep::Deposit => Box::pin(money::deposit(app, rq)),
        Ep::Withdraw => Box::pin(money::withdraw(app, rq)),
        Ep::Distribute => Box::pin(money::distribute(app, rq)),
        Ep::MoveBalance => Box::pin(money::move_balance(app, rq)),
        Ep::AddSubAccount => Box::pin(tree::add_sub_account(app, rq)),
        Ep::SetChildAllocation => Box::pin(tree::set_child_allocation(app, rq)),
        Ep::Delete => Box::pin(tree::delete(app, rq)),
        Ep::ListChildAccounts => Box::pin(tree::list_child_accounts(app, rq)),
        Ep::ListAllAccounts => Box::pin(tree::list_all_accounts(app, rq)),
        Ep::FindByName => Box::pin(tree::find_by_name(app, rq)),
        Ep::FindByUuid => Box::pin(tree::find_by_uuid(app, rq)),
        Ep::GetBalance => Box::pin(analytics::get_balance(app, rq)),
        Ep::GetTransactions => Box::pin(analytics::get_transactions(app, rq)),
        Ep::TotalBalance => Box::pin(analytics::total_balance(app, rq)),
        Ep::TotalDue => Box::pin(analytics::total_due(app, rq)),
        Ep::DueWithinDays => Box::pin(analytics::due_within_days(app, rq)),
        Ep::Spending => Box::pin(analytics::range_query(app, rq, analytics::RangeQ::Spending)),
        Ep::TotalIncome => Box::pin(analytics::range_query(app, rq, analytics::RangeQ::Income)),
        Ep::AllocatedAmount => Box::pin(analytics::range_query(app, rq, analytics::RangeQ::Allocated)),
        Ep::IncomeUtilization => Box::pin(analytics::range_query(app, rq, analytics::RangeQ::Utilization)),
        Ep::WalkingAmount => Box::pin(analytics::walking_amount(app, rq)),
        Ep::MinimalTree => Box::pin(analytics::minimal_tree(app, rq)),
        Ep::ChangeStatus => Box::pin(attrs::change_status(app, rq)),
        Ep::GetStatus => Box::pin(attrs::get_status(app, rq)),
        Ep::SetPriority => Box::pin(attrs::set_priority(app, rq)),
        Ep::GetPriority => Box::pin(attrs::get_priority(app, rq)),
        Ep::SetDueDate => Box::pin(attrs::set_due_date(app, rq)),
        Ep::GetDueDate => Box::pin(attrs::get_due_date(app, rq)),
        Ep::SetFixedAmount => Box::pin(attrs::set_fixed_amount(app, rq)),
        Ep::GetFixedAmount => Box::pin(attrs::get_fixed_amount(app, rq)),
        Ep::SetAccountType => Box::pin(attrs::set_account_type(app, rq)),
        Ep::GetAccountType => Box::pin(attrs::get_account_type(app, rq)),
        Ep::SetFreq => Box::pin(attrs::set_freq(app, rq)),
        Ep::GetFreq => Box::pin(attrs::get_freq(app, rq)),
        Ep::SetPeriods => Box::pin(attrs::set_periods(app, rq)),
        Ep::GetPeriods => Box::pin(attrs::get_periods(app, rq)),
        Ep::Changes => Box::pin(sync::changes(app, rq)),
    }
}

fn no_tree() -> ApiError {
    ApiError::new(404, "User not found or unauthorized access")
}

/// The caller's committed state, or 404 when the caller has no tree.
async fn snapshot(app: &App, rq: &Rq) -> Result<Arc<UserState>, ApiError> {
    app.users.snapshot(rq.user_id()?).await?.ok_or_else(no_tree)
}

fn find<'t>(
    tree: &'t Tree,
    uuid: &str,
    not_found: impl FnOnce() -> ApiError,
) -> Result<&'t Account, ApiError> {
    tree.by_uuid_str(uuid).ok_or_else(not_found)
}

/// Maps engine failures; `not_active` is the endpoint's text for a non-active target.
fn op_err(not_active: &str) -> impl Fn(OpError) -> ApiError + '_ {
    move |e| match e {
        OpError::NotActive => ApiError::bad(not_active),
        other => engine_err(other),
    }
}

/// Maps engine failures of operations that never meet a non-active target.
fn engine_err(e: OpError) -> ApiError {
    match e {
        OpError::TooLarge => ApiError::bad("amount is too large"),
        OpError::NotActive | OpError::Internal => {
            ApiError::Internal(format!("engine reached an impossible state: {e:?}"))
        }
    }
}

/// Runs `f` on a working copy of the caller's tree under the caller's lock; on success commits
/// every change atomically and durably, then publishes the new state. On error nothing changes.
async fn mutate<F>(app: &App, rq: &Rq, f: F) -> Result<Obj, ApiError>
where
    F: FnOnce(&mut Ctx, &UserState) -> Result<Obj, ApiError>,
{
    let Some((guard, cur)) = lock_tree(app, rq, no_tree).await? else { return Ok(Obj::new()) };
    mutate_locked(app, guard, cur, rq, f).await
}

/// The caller's lock and committed state (`missing` when the caller has no tree), or `None`
/// when the request's `Idempotency-Key` was answered meanwhile (see [`idem_answered`]): the
/// handler then returns at once, and what it returns is not sent.
async fn lock_tree<'a>(
    app: &'a App,
    rq: &Rq,
    missing: impl FnOnce() -> ApiError,
) -> Result<Option<(WriteGuard<'a>, Arc<UserState>)>, ApiError> {
    let guard = app.users.lock(rq.user_id()?).await?;
    let cur = guard.current.clone().ok_or_else(missing)?;
    if idem_answered(app, rq, &cur) {
        return Ok(None);
    }
    Ok(Some((guard, cur)))
}

/// Under the user's lock, an `Idempotency-Key` that is already kept: another node ran the same
/// key while this request waited for the lock (the check before the lock could not see it).
/// Its answer is set as the request's (a replay, or the 422 of other parameters) and nothing
/// runs; `true` then, and whatever the handler returns is not sent.
fn idem_answered(app: &App, rq: &Rq, cur: &UserState) -> bool {
    let Some(i) = &rq.idem else { return false };
    let Some(r) = cur.idem.get(&i.key).filter(|r| rq.now_us - r.created_us < IDEM_TTL_US) else {
        return false;
    };
    let answer = if r.fingerprint == i.fingerprint {
        (r.status, r.body.clone(), true)
    } else {
        let err = ApiError::new(422, crate::http::idem::MISMATCH);
        (422, envelope(Err(err), i.prefix, rq.now_us, app.clock.now_micros()).body, false)
    };
    if let Ok(mut k) = i.kept.lock() {
        *k = Some(answer);
    }
    true
}

/// [`mutate`] for a caller that already holds the user's lock and has checked the tree exists.
/// With an `Idempotency-Key`, the answer is rendered here and committed with the write.
async fn mutate_locked<F>(
    app: &App,
    guard: WriteGuard<'_>,
    cur: Arc<UserState>,
    rq: &Rq,
    f: F,
) -> Result<Obj, ApiError>
where
    F: FnOnce(&mut Ctx, &UserState) -> Result<Obj, ApiError>,
{
    let mut tree = cur.tree.clone();
    let mut ctx = Ctx::new(&mut tree, rq.now());
    let fields = f(&mut ctx, &cur)?;
    // The invariants are checked where every write passes, before it is queued
    // (`WriteGuard::commit_keyed`).
    let change = ctx.finish();
    let rec = rq.idem.as_ref().map(|i| {
        let now = app.clock.now_micros();
        let body = envelope(Ok(fields.clone()), i.prefix, rq.now_us, now).body;
        IdemRecord {
            key: i.key.clone(),
            fingerprint: i.fingerprint.clone(),
            created_us: now,
            status: 200,
            body,
        }
    });
    guard.commit_keyed(change, tree, rec.clone()).await.map_err(|e| match e {
        // Only a shared engine refuses here: another node's deposit with this id won the race.
        StoreError::DuplicateTxid(id) => ApiError::new(
            409,
            format!("Deposit failed: This deposit has already been made. Transaction ID:{id}"),
        ),
        e => e.into(),
    })?;
    if let (Some(i), Some(r)) = (&rq.idem, rec) {
        if let Ok(mut k) = i.kept.lock() {
            *k = Some((r.status, r.body, false));
        }
    }
    Ok(fields)
}

/// A number parameter read through its own messages.
fn number(p: &Params, name: &str, required: Option<&str>, invalid: &str) -> Result<Option<Dec>, ApiError> {
    match p.num(name)? {
        NumVal::Missing => match required {
            Some(msg) => Err(ApiError::bad(msg)),
            None => Ok(None),
        },
        NumVal::NotNumeric => Err(ApiError::bad(invalid)),
        NumVal::Num(d) => Ok(Some(d)),
    }
}

/// A whole number in `[min, max]`, else `invalid`.
fn integral(d: &Dec, min: i64, max: i64, invalid: &str) -> Result<i64, ApiError> {
    let v = if d.is_integral() && !d.abs_gt(i128::from(max.max(min.abs())), 0) {
        d.rounded_abs(0).and_then(|v| i64::try_from(v).ok()).map(|v| if d.is_negative() { -v } else { v })
    } else {
        None
    };
    v.filter(|v| (min..=max).contains(v)).ok_or_else(|| ApiError::bad(invalid))
}

/// A value in `[0, max]` (millionths) rounded to 6 decimals; the range check is exact.
fn millionths(d: &Dec, max_millionths: i128, invalid: &str) -> Result<i64, ApiError> {
    if d.is_negative() || d.abs_gt(max_millionths, 6) {
        return Err(ApiError::bad(invalid));
    }
    d.rounded_abs(6).and_then(|v| i64::try_from(v).ok()).ok_or_else(|| ApiError::bad(invalid))
}
