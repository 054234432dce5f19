//! Endpoint handlers. Each has the same shape: read its parameters through their declarations
//! (`decl`, `endpoints`) in the order of its SPEC error table, then either read a snapshot or
//! run a mutation under the user's lock, and return its fields. This layer knows nothing of HTTP:
//! `http` routes to it, renders envelopes, replays idempotent answers and sends streamed logs.

mod analytics;
mod attrs;
mod auth;
pub mod decl;
pub mod endpoints;
mod error;
mod import;
mod import_settings;
mod schedules;
pub use schedules::{poster_pass, run_poster};
pub mod json;
pub mod logs;
mod money;
pub mod params;
mod sync;
pub mod tokens;
mod tree;
mod webhooks;
pub use webhooks::InFlight;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;

use crate::app::App;
use crate::auth::jwt::Identity;
use crate::config::ResponseStyle;
use crate::domain::engine::{Ctx, OpError};
use crate::domain::tree::{Account, Tree};
use crate::store::users::{UserState, WriteGuard, IDEM_TTL_US};
use crate::store::{IdemRecord, StoreError};
pub use endpoints::{Ep, Op, ENDPOINTS};
pub use error::{ApiError, CatchUnwind};
use json::Obj;
use logs::{Chunks, LogError, LogPlan};
use params::Params;

/// One request as a handler sees it.
pub struct Rq {
    pub params: Params,
    pub ident: Option<std::sync::Arc<Identity>>,
    pub now_us: i64,
    pub has_auth: bool,
    /// The request's `Idempotency-Key`, when it carries one and writes (docs/api.md, idempotency keys).
    pub idem: Option<IdemReq>,
    /// How the caller renders a success answer: an answer kept with its write, and the frame of a
    /// streamed one, are rendered here exactly as they will be sent.
    pub envelope: Envelope,
    /// The request body of an endpoint that reads it whole (`decl::Body::Raw`); empty otherwise.
    pub document: Bytes,
}

/// Renders the envelope of a success answer (SPEC 3.5) for the endpoint with this 500 prefix and
/// start time, ending at the time given.
#[derive(Clone, Copy)]
pub struct Envelope {
    pub render: fn(&Obj, &'static str, i64, i64) -> String,
    pub prefix: &'static str,
    pub start_us: i64,
}

impl Envelope {
    fn render(&self, fields: &Obj, end_us: i64) -> String {
        (self.render)(fields, self.prefix, self.start_us, end_us)
    }
}

/// An `Idempotency-Key` being honoured: a mutation keeps its answer in its own commit.
pub struct IdemReq {
    pub key: String,
    /// Hash of the request (see `http::idem`).
    pub fingerprint: Vec<u8>,
}

/// What a request answers.
pub enum Answer {
    /// Fields for the success envelope.
    Fields(Obj),
    /// An answer rendered whole already: the one a keyed mutation committed with its write, or
    /// (`replayed`) the answer kept for the same key by a request that ran first.
    Kept { status: u16, body: String, replayed: bool },
    /// The key was used meanwhile with another request (docs/api.md, idempotency keys).
    KeyMismatch,
    /// An answer written while it is sent (see [`logs`]): its first chunk and the rest.
    Streamed { first: Bytes, rest: Chunks },
}

impl From<Obj> for Answer {
    fn from(o: Obj) -> Answer {
        Answer::Fields(o)
    }
}

/// What a handler returns: fields, or fields with logs still to be filled in (see [`logs`]).
pub enum Handled {
    Answer(Answer),
    Logs(Obj, LogPlan),
}

impl From<Obj> for Handled {
    fn from(o: Obj) -> Handled {
        Handled::Answer(Answer::Fields(o))
    }
}

impl From<Answer> for Handled {
    fn from(a: Answer) -> Handled {
        Handled::Answer(a)
    }
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
    /// A "not found" row whose status depends on the role (SPEC 3.6): 404 for an admin, else 403.
    fn not_found_by_role(&self, row: &decl::Row) -> ApiError {
        self.role_not_found(row.message())
    }
    /// "Account not found" for endpoints whose status depends on the role (SPEC 3.6).
    fn role_not_found(&self, msg: &str) -> ApiError {
        let admin = self.ident.as_ref().is_some_and(|i| i.role.is_admin());
        ApiError::new(if admin { 404 } else { 403 }, msg)
    }
}

/// A handler's future, boxed on its own: a request's future then holds the size of the handler
/// it runs, not of the largest one (moving several KB per request showed in profiles).
type Handling<'a> = Pin<Box<dyn Future<Output = Result<Handled, ApiError>> + Send + 'a>>;

/// A handler whose answer is plain fields.
fn fields<'a, F>(f: F) -> Handling<'a>
where
    F: Future<Output = Result<Obj, ApiError>> + Send + 'a,
{
    Box::pin(async move { f.await.map(Handled::from) })
}

/// A handler that writes (its answer may be kept with the write).
fn writes<'a, F>(f: F) -> Handling<'a>
where
    F: Future<Output = Result<Answer, ApiError>> + Send + 'a,
{
    Box::pin(async move { f.await.map(Handled::from) })
}

fn call<'a>(app: &'a App, ep: Ep, rq: &'a Rq) -> Handling<'a> {
    match ep {
        Ep::Ping | Ep::Ops(_) => fields(async { Ok(Obj::new()) }),
        Ep::Register => fields(auth::register(app, rq)),
        Ep::Login => fields(auth::login(app, rq)),
        Ep::GenerateToken => fields(async move { auth::generate_token(app, rq) }),
        Ep::Deposit => writes(money::deposit(app, rq)),
        Ep::Withdraw => writes(money::withdraw(app, rq)),
        Ep::Distribute => writes(money::distribute(app, rq)),
        Ep::MoveBalance => writes(money::move_balance(app, rq)),
        Ep::AddSubAccount => writes(tree::add_sub_account(app, rq)),
        Ep::SetChildAllocation => writes(tree::set_child_allocation(app, rq)),
        Ep::Delete => writes(tree::delete(app, rq)),
        Ep::ListChildAccounts => fields(tree::list_child_accounts(app, rq)),
        Ep::ListAllAccounts => fields(tree::list_all_accounts(app, rq)),
        Ep::FindByName => fields(tree::find_by_name(app, rq)),
        Ep::FindByUuid => fields(tree::find_by_uuid(app, rq)),
        Ep::GetBalance => fields(analytics::get_balance(app, rq)),
        Ep::GetTransactions => Box::pin(analytics::get_transactions(app, rq)),
        Ep::TotalBalance => fields(analytics::total_balance(app, rq)),
        Ep::TotalDue => fields(analytics::total_due(app, rq)),
        Ep::DueWithinDays => fields(analytics::due_within_days(app, rq)),
        Ep::Spending => fields(analytics::range_query(app, rq, analytics::RangeQ::Spending)),
        Ep::TotalIncome => fields(analytics::range_query(app, rq, analytics::RangeQ::Income)),
        Ep::AllocatedAmount => fields(analytics::range_query(app, rq, analytics::RangeQ::Allocated)),
        Ep::IncomeUtilization => fields(analytics::range_query(app, rq, analytics::RangeQ::Utilization)),
        Ep::WalkingAmount => fields(analytics::walking_amount(app, rq)),
        Ep::MinimalTree => Box::pin(analytics::minimal_tree(app, rq)),
        Ep::ChangeStatus => writes(attrs::change_status(app, rq)),
        Ep::GetStatus => fields(attrs::get_status(app, rq)),
        Ep::SetPriority => writes(attrs::set_priority(app, rq)),
        Ep::GetPriority => fields(attrs::get_priority(app, rq)),
        Ep::SetDueDate => writes(attrs::set_due_date(app, rq)),
        Ep::GetDueDate => fields(attrs::get_due_date(app, rq)),
        Ep::SetFixedAmount => writes(attrs::set_fixed_amount(app, rq)),
        Ep::GetFixedAmount => fields(attrs::get_fixed_amount(app, rq)),
        Ep::SetAccountType => writes(attrs::set_account_type(app, rq)),
        Ep::GetAccountType => fields(attrs::get_account_type(app, rq)),
        Ep::SetFreq => writes(attrs::set_freq(app, rq)),
        Ep::GetFreq => fields(attrs::get_freq(app, rq)),
        Ep::SetPeriods => writes(attrs::set_periods(app, rq)),
        Ep::GetPeriods => fields(attrs::get_periods(app, rq)),
        Ep::Changes => fields(sync::changes(app, rq)),
        Ep::Import => writes(import::import(app, rq)),
        Ep::ListImportRules => fields(import_settings::list_rules(app, rq)),
        Ep::AddImportRule => writes(import_settings::add_rule(app, rq)),
        Ep::UpdateImportRule => writes(import_settings::update_rule(app, rq)),
        Ep::ReorderImportRules => writes(import_settings::reorder_rules(app, rq)),
        Ep::DeleteImportRule => writes(import_settings::delete_rule(app, rq)),
        Ep::ListCsvMappings => fields(import_settings::list_mappings(app, rq)),
        Ep::SaveCsvMapping => writes(import_settings::save_mapping(app, rq)),
        Ep::DeleteCsvMapping => writes(import_settings::delete_mapping(app, rq)),
        Ep::ListSchedules => fields(schedules::list(app, rq)),
        Ep::GetSchedule => fields(schedules::get(app, rq)),
        Ep::CreateSchedule => writes(schedules::create(app, rq)),
        Ep::UpdateSchedule => writes(schedules::update(app, rq)),
        Ep::DeleteSchedule => writes(schedules::delete(app, rq)),
        Ep::SkipSchedule => writes(schedules::skip(app, rq)),
        Ep::PostSchedule => writes(schedules::post_now(app, rq)),
        Ep::Upcoming => fields(schedules::upcoming(app, rq)),
        Ep::Forecast => fields(schedules::forecast(app, rq)),
        Ep::CreateToken => writes(tokens::create(app, rq)),
        Ep::ListTokens => fields(tokens::list(app, rq)),
        Ep::RevokeToken => writes(tokens::revoke(app, rq)),
        Ep::CreateWebhook => writes(webhooks::create(app, rq)),
        Ep::ListWebhooks => fields(webhooks::list(app, rq)),
        Ep::UpdateWebhook => writes(webhooks::update(app, rq)),
        Ep::DeleteWebhook => writes(webhooks::delete(app, rq)),
        Ep::WebhookDeliveries => fields(webhooks::deliveries(app, rq)),
        Ep::RedeliverWebhook => writes(webhooks::redeliver(app, rq)),
    }
}

/// Runs the endpoint's handler and fills in the logs its answer names (see [`logs`]): whole, or
/// past `STREAM_MIN_RECORDS` records in the plain style as a stream. A log deleted under the
/// answer before any of it was sent runs the handler once more, on the state after the deletion.
/// `request_id` names the request in a stream's failure, logged after the answer has started.
pub async fn respond(app: &Arc<App>, ep: Ep, rq: &Rq, request_id: &str) -> Result<Answer, ApiError> {
    let mut stale = 0;
    loop {
        let handled = match CatchUnwind(call(app, ep, rq)).await {
            Ok(res) => res?,
            Err(()) => return Err(ApiError::Internal("handler panicked".into())),
        };
        let (obj, plan) = match handled {
            Handled::Answer(a) => return Ok(a),
            Handled::Logs(obj, plan) => (obj, plan),
        };
        let failed = if plan.records() > app.cfg.stream_min_records
            && app.cfg.response_style == ResponseStyle::Plain
        {
            let skeleton = rq.envelope.render(&obj, app.clock.now_micros());
            match logs::stream(app.clone(), plan, skeleton, request_id).await {
                Ok((first, rest)) => return Ok(Answer::Streamed { first, rest }),
                Err(e) => e,
            }
        } else {
            match logs::fill(app, &plan, obj).await {
                Ok(obj) => return Ok(Answer::Fields(obj)),
                Err(e) => e,
            }
        };
        match failed {
            LogError::Stale if stale == 0 => stale += 1,
            LogError::Stale => {
                return Err(ApiError::Internal("logs kept changing under their answer".into()))
            }
            LogError::Failed(e) => return Err(e),
        }
    }
}

fn no_tree() -> ApiError {
    endpoints::NO_TREE.err()
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

/// Largest answer a write keeps with its `Idempotency-Key` (docs/api.md): every SPEC write
/// answers in well under 1 KiB.
const MAX_KEPT_WRITE_ANSWER_BYTES: usize = 64 << 10;

/// Runs `f` on a working copy of the caller's tree under the caller's lock; on success commits
/// every change atomically and durably, then publishes the new state. On error nothing changes.
async fn mutate<F>(app: &App, rq: &Rq, f: F) -> Result<Answer, ApiError>
where
    F: FnOnce(&mut Ctx, &UserState) -> Result<Obj, ApiError>,
{
    match lock_tree(app, rq, no_tree).await? {
        Locked::Tree(guard, cur) => mutate_locked(app, guard, cur, rq, f).await,
        Locked::Answered(a) => Ok(a),
    }
}

/// The caller's lock and committed state, or the answer when the request's `Idempotency-Key`
/// was answered meanwhile (see [`idem_answered`]).
enum Locked<'a> {
    Tree(WriteGuard<'a>, Arc<UserState>),
    Answered(Answer),
}

/// The caller's lock and committed state (`missing` when the caller has no tree), unless the
/// request's `Idempotency-Key` was answered meanwhile.
async fn lock_tree<'a>(
    app: &'a App,
    rq: &Rq,
    missing: impl FnOnce() -> ApiError,
) -> Result<Locked<'a>, ApiError> {
    let guard = app.users.lock(rq.user_id()?).await?;
    let cur = guard.current.clone().ok_or_else(missing)?;
    Ok(match idem_answered(rq, &cur) {
        Some(a) => Locked::Answered(a),
        None => Locked::Tree(guard, cur),
    })
}

/// Under the user's lock, an `Idempotency-Key` that is already kept: another node ran the same
/// key while this request waited for the lock (the check before the lock could not see it).
/// Nothing runs; the answer is the kept one, or the 422 of other parameters.
fn idem_answered(rq: &Rq, cur: &UserState) -> Option<Answer> {
    let i = rq.idem.as_ref()?;
    let r = cur.idem.get(&i.key).filter(|r| rq.now_us - r.created_us < IDEM_TTL_US)?;
    Some(if r.fingerprint == i.fingerprint {
        Answer::Kept { status: r.status, body: r.body.clone(), replayed: true }
    } else {
        Answer::KeyMismatch
    })
}

/// [`mutate`] for a caller that already holds the user's lock and has checked the tree exists.
/// With an `Idempotency-Key`, the answer is rendered here and committed with the write.
async fn mutate_locked<F>(
    app: &App,
    guard: WriteGuard<'_>,
    cur: Arc<UserState>,
    rq: &Rq,
    f: F,
) -> Result<Answer, ApiError>
where
    F: FnOnce(&mut Ctx, &UserState) -> Result<Obj, ApiError>,
{
    let mut tree = cur.tree.clone();
    let mut ctx = Ctx::new(&mut tree, rq.now());
    let fields = f(&mut ctx, &cur)?;
    // The invariants are checked where every write passes, before it is queued
    // (`WriteGuard::commit_keyed`).
    let change = ctx.finish();
    let rec = rq.idem.as_ref().and_then(|i| {
        let now = app.clock.now_micros();
        let body = rq.envelope.render(&fields, now);
        // A large answer (an import's every line) is not kept: a user's kept keys stay small, and
        // a retry of such a write finds what it applied by other means (import ids).
        (body.len() <= MAX_KEPT_WRITE_ANSWER_BYTES).then(|| IdemRecord {
            key: i.key.clone(),
            fingerprint: i.fingerprint.clone(),
            created_us: now,
            status: 200,
            body,
        })
    });
    guard.commit_keyed(change, tree, rec.clone()).await.map_err(|e| match e {
        // Only a shared engine refuses here: another node's deposit with this id won the race.
        StoreError::DuplicateTxid(id) => ApiError::new(
            409,
            format!("Deposit failed: This deposit has already been made. Transaction ID:{id}"),
        ),
        e => e.into(),
    })?;
    Ok(match rec {
        Some(r) => Answer::Kept { status: r.status, body: r.body, replayed: false },
        None => Answer::Fields(fields),
    })
}
