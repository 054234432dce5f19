//! Webhooks (docs/webhooks.md): register, list, change, delete, read the delivery log,
//! redeliver; and the sending side of the waker, which takes the deliveries that are due under
//! the user's lock, sends them, and commits what became of each.

use std::sync::Arc;

use super::decl::{row, Endpoint, Kind as P, Msgs, Param, Row, Shape};
use super::endpoints::{Ep, NO_TREE};
use super::json::{array, Obj};
use super::{mutate, snapshot, Answer, ApiError, Rq};
use crate::app::App;
use crate::domain::dates::{day_of, fmt_datetime, fmt_day};
use crate::domain::docs::Doc;
use crate::domain::engine::Ctx;
use crate::domain::events::{
    self as ev, Attempt, Data, Delivery, Event, Kind, State, Webhook, DEFAULT_BILL_DAYS, GIVE_UP_SECS,
    MAX_HOOKS,
};
use crate::domain::text::Text;
use crate::domain::tree::{fmt_uuid, Account, AccountId};

/// Longest webhook URL.
pub const URL_MAX_CHARS: usize = 2048;
/// How long a node that took a delivery has to send it before another may (a send waits at most
/// 10 s; the rest is margin for the commit of its outcome).
pub const LEASE_SECS: i64 = 60;
/// Deliveries one user's visit takes at most.
const TAKE_BATCH: usize = 200;

static ID: Param = Param::new(
    "id",
    P::Int { min: 1, max: i64::MAX },
    Msgs::required("id is required", "id must be a positive whole number"),
    "The webhook's id (from /webhooks).",
);
static URL: Param = Param::text(
    "url",
    Some("url is required"),
    Some(URL_MAX_CHARS),
    "Where events are POSTed: an http or https URL on a public address.",
);
static URL_OPT: Param = Param::text("url", None, Some(URL_MAX_CHARS), "A new URL.");
static EVENTS: Param = Param::text(
    "events",
    Some("events is required"),
    Some(400),
    "Comma-separated event types (transaction.recorded, account.created, account.changed, account.deleted, envelope.funded, bill.due), or all.",
);
static EVENTS_OPT: Param = Param::text("events", None, Some(400), "New event types, replacing the old.");
static DESCRIPTION: Param = Param::text("description", None, Some(200), "What the webhook is for.");
static BILL_DAYS: Param = Param::new(
    "bill_days",
    P::Int { min: 0, max: 366 },
    Msgs::invalid("bill_days must be a whole number from 0 to 366"),
    "bill.due is sent this many days before a Bill's due date; default 3.",
);
static ENABLED: Param = Param::new(
    "enabled",
    P::Bool,
    Msgs::invalid("enabled must be a boolean"),
    "false stops deliveries; true starts them again (after the webhook was disabled for failing, too).",
);
static EVENT_ID: Param = Param::text(
    "event_id",
    Some("event_id is required"),
    Some(64),
    "The event to send again (from /webhook_deliveries).",
);
static STATE: Param =
    Param::text("state", None, Some(16), "Only deliveries in this state: waiting, delivered or failed.");

const NO_HOOK: Row = row!(404, "no webhook has this id", "`Webhook not found`");
const BAD_URL: Row =
    row!(400, "the URL is not one pfm may send to", "`<why> (e.g. url must be http or https)`");
const BAD_EVENTS: Row = row!(400, "an event type is unknown, or none is named", "`<why>`");
const TOO_MANY: Row = row!(400, "the user keeps 20 webhooks already", "`A user keeps at most 20 webhooks`");
const NO_EVENT: Row = row!(404, "the webhook has no delivery of this event", "`Delivery not found`");
const DISABLED: Row = row!(400, "the webhook is disabled", "`The webhook is disabled; enable it first`");

const HOOK_FIELD: (&str, Shape) = ("webhook", Shape::Object { schema: "Webhook" });

pub static CREATE: Endpoint = Endpoint::write(
    "/create_webhook",
    Ep::CreateWebhook,
    "Failed to create webhook",
    "Register a URL to receive signed events; the answer holds the signing secret, shown only this once",
    &[&URL, &EVENTS, &DESCRIPTION, &BILL_DAYS],
    &[HOOK_FIELD, ("secret", Shape::Str)],
    &[NO_TREE, BAD_URL, BAD_EVENTS, TOO_MANY],
);

pub static LIST: Endpoint = Endpoint::read(
    "/webhooks",
    Ep::ListWebhooks,
    "Failed to list webhooks",
    "The caller's webhooks (never their secrets)",
    &[],
    &[("webhooks", Shape::Rows { schema: "Webhook", frame: false })],
    &[NO_TREE],
);

pub static UPDATE: Endpoint = Endpoint::write(
    "/update_webhook",
    Ep::UpdateWebhook,
    "Failed to update webhook",
    "Change a webhook: the parameters sent replace the webhook's, the others stay",
    &[&ID, &URL_OPT, &EVENTS_OPT, &DESCRIPTION, &BILL_DAYS, &ENABLED],
    &[HOOK_FIELD],
    &[NO_TREE, NO_HOOK, BAD_URL, BAD_EVENTS],
);

pub static DELETE: Endpoint = Endpoint::write(
    "/delete_webhook",
    Ep::DeleteWebhook,
    "Failed to delete webhook",
    "Delete a webhook and its deliveries, sent or not",
    &[&ID],
    &[("deleted", Shape::Int)],
    &[NO_TREE, NO_HOOK],
);

pub static DELIVERIES: Endpoint = Endpoint::read(
    "/webhook_deliveries",
    Ep::WebhookDeliveries,
    "Failed to list deliveries",
    "A webhook's deliveries, newest first: those waiting and the last 50 finished, each with its attempts (time, status code, latency, error)",
    &[&ID, &STATE],
    &[HOOK_FIELD, ("deliveries", Shape::Rows { schema: "Delivery", frame: false })],
    &[NO_TREE, NO_HOOK, row!(400, "`state` is not one of its values", "`state must be waiting, delivered or failed`")],
);

pub static REDELIVER: Endpoint = Endpoint::write(
    "/redeliver_webhook",
    Ep::RedeliverWebhook,
    "Failed to redeliver",
    "Send an event again, now: its delivery waits again, with three more days of retries",
    &[&ID, &EVENT_ID],
    &[("delivery", Shape::Object { schema: "Delivery" })],
    &[NO_TREE, NO_HOOK, NO_EVENT, DISABLED],
);

fn kinds(text: &str) -> Result<Vec<Kind>, ApiError> {
    let mut out = Vec::new();
    for t in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if t == "all" || t == "*" {
            return Ok(Kind::NAMES.iter().filter_map(|n| Kind::parse(n)).collect());
        }
        let k = Kind::parse(t).ok_or_else(|| {
            ApiError::bad(format!("unknown event type {t:?}; known: {}", Kind::NAMES.join(", ")))
        })?;
        if !out.contains(&k) {
            out.push(k);
        }
    }
    if out.is_empty() {
        return Err(ApiError::bad(format!("name at least one event type: {}", Kind::NAMES.join(", "))));
    }
    Ok(out)
}

async fn checked_url(app: &App, url: &str) -> Result<Text, ApiError> {
    if let Some(list) = &app.cfg.webhooks_allowed_hosts {
        let host = crate::webhook::host_of(url).map_err(ApiError::bad)?;
        if !list.split(',').map(str::trim).any(|h| h.eq_ignore_ascii_case(&host)) {
            return Err(ApiError::bad(format!(
                "the webhook URL's host {host:?} is not one this service may send to"
            )));
        }
    }
    crate::webhook::check_url(url, app.cfg.webhooks_allow_private).await.map_err(ApiError::bad)?;
    Ok(Text::from(url))
}

fn hook_of(ctx_docs: &crate::domain::docs::Docs, id: u64) -> Result<Webhook, ApiError> {
    match ctx_docs.get(ev::hook_key(id).as_str()).map(|d| &**d) {
        Some(Doc::Webhook(w)) => Ok(w.clone()),
        _ => Err(NO_HOOK.err()),
    }
}

fn hook_obj(w: &Webhook, docs: &crate::domain::docs::Docs) -> Obj {
    let names: Vec<&str> = w.kinds.iter().map(|k| k.name()).collect();
    let (mut waiting, mut failed) = (0i128, 0i128);
    for (_, d) in ev::deliveries(docs, Some(w.id)) {
        match d.state {
            State::Waiting => waiting += 1,
            State::Failed => failed += 1,
            State::Delivered => {}
        }
    }
    Obj::new()
        .int("id", w.id.into())
        .str("url", &w.url)
        .str_array("events", &names)
        .str("description", &w.description)
        .int("bill_days", w.bill_days.into())
        .str("created", &fmt_datetime(w.created_secs))
        .bool("enabled", w.live())
        .opt_str("disabled_reason", w.disabled.as_deref())
        .opt_str("failing_since", w.failing_since.map(fmt_datetime).as_deref())
        .int("waiting", waiting)
        .int("failed", failed)
}

fn delivery_obj(d: &Delivery) -> Obj {
    let attempts = array(d.attempts.iter().rev().map(|a| {
        let o = Obj::new().str("at", &fmt_datetime(a.at_secs));
        let o = match a.status {
            Some(s) => o.int("status", s.into()),
            None => o.null("status"),
        };
        o.int("latency_ms", a.latency_ms.into()).opt_str("error", a.error.as_deref()).finish()
    }));
    let o = Obj::new()
        .str("event_id", &d.event.id)
        .str("type", d.event.kind.name())
        .str("created", &fmt_datetime(d.event.at_secs))
        .str("state", d.state.name())
        .int("attempts_made", d.tries.into());
    let o = if d.state == State::Waiting {
        o.str("next_attempt", &fmt_datetime(d.next_secs.max(d.lease_secs)))
    } else {
        o.null("next_attempt")
    };
    o.raw("attempts", &attempts)
}

pub async fn create(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    p.check_lengths(CREATE.params)?;
    let url = checked_url(app, &p.req_text_of(&URL)?).await?;
    let kinds = kinds(&p.req_text_of(&EVENTS)?)?;
    let description = Text::from(p.text_of(&DESCRIPTION)?.as_deref().unwrap_or(""));
    let bill_days = p.num_of(&BILL_DAYS)?.map_or(DEFAULT_BILL_DAYS, |d| d as u32);
    let secret = crate::webhook::new_secret();
    mutate(app, rq, |ctx, _| {
        if ev::webhooks(&ctx.tree.docs).count() >= MAX_HOOKS {
            return Err(TOO_MANY.err());
        }
        let id = ctx.next_id(ev::NEXT_ID_KEY);
        let w = Webhook {
            id,
            url,
            kinds,
            secret: Text::from(secret.as_str()),
            description,
            created_secs: ctx.now_secs,
            bill_days,
            disabled: None,
            failing_since: None,
            noticed: Default::default(),
        };
        let obj = Obj::new().obj("webhook", hook_obj(&w, &ctx.tree.docs)).str("secret", &secret);
        ctx.set_doc(ev::hook_key(id), Some(Doc::Webhook(w)));
        Ok(obj)
    })
    .await
}

pub async fn list(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let st = snapshot(app, rq).await?;
    let docs = &st.tree.docs;
    let rows = array(ev::webhooks(docs).map(|w| hook_obj(w, docs).finish()));
    Ok(Obj::new().raw("webhooks", &rows))
}

pub async fn update(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    p.check_lengths(UPDATE.params)?;
    let id = p.req_num_of(&ID)? as u64;
    let url = match p.text_of(&URL_OPT)? {
        Some(u) => Some(checked_url(app, &u).await?),
        None => None,
    };
    let kinds = p.text_of(&EVENTS_OPT)?.map(|t| kinds(&t)).transpose()?;
    let description = p.text_of(&DESCRIPTION)?.map(|d| Text::from(d.as_ref()));
    let bill_days = p.num_of(&BILL_DAYS)?;
    let enabled = match p.get(ENABLED.name) {
        super::params::PVal::Missing | super::params::PVal::Empty => None,
        _ => Some(p.flag_of(&ENABLED, true)?),
    };
    mutate(app, rq, |ctx, _| {
        let mut w = hook_of(&ctx.tree.docs, id)?;
        if let Some(u) = url {
            w.url = u;
        }
        if let Some(k) = kinds {
            w.kinds = k;
        }
        if let Some(d) = description {
            w.description = d;
        }
        if let Some(b) = bill_days {
            w.bill_days = b as u32;
        }
        match enabled {
            Some(true) => {
                w.disabled = None;
                w.failing_since = None;
            }
            Some(false) if w.live() => w.disabled = Some(Text::from("disabled by its owner")),
            _ => {}
        }
        ctx.set_doc(ev::hook_key(id), Some(Doc::Webhook(w.clone())));
        Ok(Obj::new().obj("webhook", hook_obj(&w, &ctx.tree.docs)))
    })
    .await
}

pub async fn delete(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let id = rq.params.req_num_of(&ID)? as u64;
    mutate(app, rq, |ctx, _| {
        hook_of(&ctx.tree.docs, id)?;
        let keys: Vec<Text> = ev::deliveries(&ctx.tree.docs, Some(id)).map(|(k, _)| k.clone()).collect();
        for k in keys {
            ctx.set_doc(k, None);
        }
        ctx.set_doc(ev::hook_key(id), None);
        Ok(Obj::new().int("deleted", id.into()))
    })
    .await
}

pub async fn deliveries(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let id = p.req_num_of(&ID)? as u64;
    p.check_lengths(DELIVERIES.params)?;
    let only = match p.text_of(&STATE)? {
        Some(s) => Some(
            State::parse(&s).ok_or_else(|| ApiError::bad("state must be waiting, delivered or failed"))?,
        ),
        None => None,
    };
    let st = snapshot(app, rq).await?;
    let docs = &st.tree.docs;
    let w = hook_of(docs, id)?;
    let mut list: Vec<&Delivery> = ev::deliveries(docs, Some(id))
        .map(|(_, d)| d)
        .filter(|d| only.is_none_or(|s| d.state == s))
        .collect();
    list.reverse();
    let rows = array(list.into_iter().map(|d| delivery_obj(d).finish()));
    Ok(Obj::new().obj("webhook", hook_obj(&w, docs)).raw("deliveries", &rows))
}

pub async fn redeliver(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let id = p.req_num_of(&ID)? as u64;
    let event = p.req_text_of(&EVENT_ID)?;
    let answer = mutate(app, rq, |ctx, _| {
        let w = hook_of(&ctx.tree.docs, id)?;
        let (key, mut d) = ev::deliveries(&ctx.tree.docs, Some(id))
            .find(|(_, d)| d.event.id.as_str() == event)
            .map(|(k, d)| (k.clone(), d.clone()))
            .ok_or_else(|| NO_EVENT.err())?;
        if !w.live() {
            return Err(DISABLED.err());
        }
        d.state = State::Waiting;
        d.next_secs = ctx.now_secs;
        d.first_secs = None;
        d.lease_secs = 0;
        let obj = Obj::new().obj("delivery", delivery_obj(&d));
        ctx.set_doc(key, Some(Doc::Delivery(d)));
        Ok(obj)
    })
    .await;
    app.users.wake_hint.notify_one();
    answer
}

// ---- The event as sent ----

fn account_json(a: &Account) -> Obj {
    let o = Obj::new()
        .str("uuid", &fmt_uuid(a.uuid))
        .str("name", &a.name)
        .str("type", a.kind.wire())
        .str("status", a.status.as_str())
        .money("balance", a.balance_cents.into())
        .money("total_balance", a.sub_balance_cents)
        .opt_str("parent_uuid", a.parent.map(fmt_uuid).as_deref());
    match &a.grand {
        Some(g) => o
            .money("amount_due", g.amount_due_cents.into())
            .money("fixed_amount", g.fixed_amount_cents.into())
            .str("account_type", &g.account_type)
            .opt_str("due_date", g.due_date_secs.map(|s| fmt_day(day_of(s))).as_deref()),
        None => o,
    }
}

/// The body of an event: the same bytes at every attempt, as it is built from what was
/// committed with the write.
pub fn event_body(e: &Event) -> String {
    let data = match &e.data {
        Data::Records { list, total } => {
            let recs = array(list.iter().map(|r| {
                let mut rec = r.rec.clone();
                rec.note = r.note.clone().map(Arc::new);
                let o = Obj::new()
                    .str("uuid", &fmt_uuid(r.account))
                    .str("account_name", &r.account_name)
                    .int("seq", r.seq.into());
                Obj::from_members(format!("{},{}", o.members(), super::analytics::record_obj(&rec).members()))
                    .finish()
            }));
            Obj::new().raw("records", &recs).int("total", (*total).into())
        }
        Data::Account(a) => Obj::new().obj("account", account_json(a)),
        Data::Bill { account, due_secs } => Obj::new()
            .obj("account", account_json(account))
            .str("due_date", &fmt_day(day_of(*due_secs)))
            .money("amount_due", account.grand.as_ref().map_or(0, |g| g.amount_due_cents).into()),
    };
    Obj::new()
        .str("id", &e.id)
        .str("type", e.kind.name())
        .int("created", e.at_secs.into())
        .str("created_at", &fmt_datetime(e.at_secs))
        .obj("data", data)
        .finish()
}

// ---- The waker's part ----

/// A delivery taken for sending: its key, the event and where it goes.
pub struct Send {
    key: Text,
    webhook: u64,
    url: Text,
    secret: Text,
    event: Arc<Event>,
    /// The lease written when it was taken (0: none): its outcome is recorded only while the
    /// delivery still holds it, not once another node took it after the lease ran out.
    lease: i64,
}

/// Deliveries this process is sending: (user, key). A delivery in it is not taken again until
/// its outcome is committed. On a shared engine a lease written with the take also keeps other
/// nodes off it; on the embedded engine no other process exists, and a lease would only delay
/// the sending after a restart.
#[derive(Default)]
pub struct InFlight(parking_lot::Mutex<std::collections::HashSet<(String, Text)>>);

/// What a visit took: the deliveries to send, and whether it changed anything else.
pub struct Taken {
    pub sends: Vec<Send>,
    /// Bill notices were made.
    pub noticed: bool,
    /// Due deliveries this process is sending already (the reason the user was due, when
    /// nothing else is).
    pub busy: usize,
}

/// Under the user's lock, in the visit's own write: the Bill notices that fell due, and the
/// deliveries to send now, taken by this process (and leased, when `lease`).
pub fn take_due(ctx: &mut Ctx, user: &str, in_flight: &InFlight, lease: bool) -> Taken {
    let now = ctx.now_secs;
    let notices = ev::bill_notices(ctx.tree, day_of(now));
    let noticed = !notices.is_empty();
    for (hook, acc, due) in notices {
        let Ok(mut w) = hook_of(&ctx.tree.docs, hook) else { continue };
        let Some(account) = ctx.tree.accounts.get(&acc).cloned() else { continue };
        w.noticed.insert(acc, due);
        let bills: Vec<AccountId> = w.noticed.keys().copied().collect();
        for b in bills {
            if !ctx.tree.accounts.contains_key(&b) {
                w.noticed.remove(&b);
            }
        }
        let e = Arc::new(Event {
            id: ev::new_id(),
            kind: Kind::BillDue,
            at_secs: now,
            data: Data::Bill { account, due_secs: due },
        });
        let d = Delivery {
            webhook: hook,
            event: e.clone(),
            state: State::Waiting,
            next_secs: now,
            first_secs: None,
            tries: 0,
            attempts: Vec::new(),
            lease_secs: 0,
        };
        ctx.set_doc(ev::out_key(hook, &e), Some(Doc::Delivery(d)));
        ctx.set_doc(ev::hook_key(hook), Some(Doc::Webhook(w)));
    }
    let mut out = Vec::new();
    let mut taken = Vec::new();
    let mut busy = 0;
    let mut sending = in_flight.0.lock();
    for (k, d) in ev::deliveries(&ctx.tree.docs, None) {
        if out.len() >= TAKE_BATCH {
            break;
        }
        if !d.due(now) {
            continue;
        }
        if !sending.insert((user.to_string(), k.clone())) {
            busy += 1;
            continue;
        }
        let w = match hook_of(&ctx.tree.docs, d.webhook) {
            Ok(w) if w.live() => w,
            _ => {
                sending.remove(&(user.to_string(), k.clone()));
                continue;
            }
        };
        let until = if lease { now + LEASE_SECS } else { 0 };
        out.push(Send {
            key: k.clone(),
            webhook: w.id,
            url: w.url.clone(),
            secret: w.secret.clone(),
            event: d.event.clone(),
            lease: until,
        });
        if lease {
            let mut d = d.clone();
            d.lease_secs = until;
            taken.push((k.clone(), d));
        }
    }
    drop(sending);
    for (k, d) in taken {
        ctx.set_doc(k, Some(Doc::Delivery(d)));
    }
    Taken { sends: out, noticed, busy }
}

/// Gives back what a visit took when its write failed.
pub fn untake(app: &App, user: &str, sends: &[Send]) {
    let mut sending = app.in_flight.0.lock();
    for s in sends {
        sending.remove(&(user.to_string(), s.key.clone()));
    }
}

/// Sends what a visit took, each at once and concurrently, then commits every outcome in one
/// write under the user's lock.
pub async fn send_all(app: Arc<App>, user: String, sends: Vec<Send>) {
    let mut set = tokio::task::JoinSet::new();
    for s in sends {
        let app = app.clone();
        set.spawn(async move {
            let body = event_body(&s.event);
            let now = app.clock.now_micros().div_euclid(1_000_000);
            let a = app
                .sender
                .send(&s.url, s.secret.as_bytes(), &s.event.id, s.event.kind.name(), body.as_bytes(), now)
                .await;
            (s, now, a)
        });
    }
    let mut results = Vec::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(r) => results.push(r),
            Err(e) => tracing::error!(error = %e, "webhook send task failed"),
        }
    }
    let keys: Vec<Text> = results.iter().map(|(s, _, _)| s.key.clone()).collect();
    if let Err(e) = record(&app, &user, results).await {
        // They stay waiting (leased, on a shared engine) and are sent again: at least once.
        tracing::warn!(user = %user, error = ?e, "webhook outcomes not recorded; they will be sent again");
    }
    let mut sending = app.in_flight.0.lock();
    for k in keys {
        sending.remove(&(user.clone(), k));
    }
}

async fn record(
    app: &App,
    user: &str,
    results: Vec<(Send, i64, crate::webhook::Attempt)>,
) -> Result<(), ApiError> {
    if results.is_empty() {
        return Ok(());
    }
    let guard = app.users.lock(user).await?;
    let Some(cur) = guard.current.clone() else { return Ok(()) };
    let now = app.clock.now_micros().div_euclid(1_000_000);
    let mut tree = cur.tree.clone();
    let mut ctx = Ctx::new(&mut tree, now);
    let mut hooks = std::collections::BTreeSet::new();
    for (s, at, a) in results {
        crate::metrics::webhook_attempt(a.ok());
        let Some(Doc::Delivery(d)) = ctx.tree.docs.get(s.key.as_str()).map(|d| (**d).clone()) else {
            continue;
        };
        let mut d = d;
        if d.event.id != s.event.id || d.lease_secs != s.lease {
            continue;
        }
        let attempt = Attempt {
            at_secs: at,
            status: a.status,
            latency_ms: u32::try_from(a.latency_ms).unwrap_or(u32::MAX),
            error: a.error.as_deref().map(Text::from),
        };
        let retry_in =
            a.retry.then(|| crate::webhook::backoff(d.tries + 1, rand_unit()).as_secs().max(1) as i64);
        d.attempted(attempt, a.ok(), retry_in);
        if let Ok(mut w) = hook_of(&ctx.tree.docs, s.webhook) {
            let before = (w.failing_since, w.disabled.clone());
            if a.ok() {
                w.failing_since = None;
            } else {
                let since = *w.failing_since.get_or_insert(at);
                // Failing for three days: an attempt that long after the first failure, or a
                // delivery that used up its three days with no success of the webhook meanwhile.
                let exhausted = d.state == State::Failed && d.first_secs.is_some_and(|f| since <= f);
                if (at - since >= GIVE_UP_SECS || exhausted) && w.live() {
                    w.disabled = Some(Text::from(format!(
                        "disabled: every delivery failed for three days (last: {})",
                        a.error.as_deref().unwrap_or("no answer")
                    )));
                    tracing::warn!(user = %user, webhook = w.id, "webhook disabled after failing for three days");
                }
            }
            if (w.failing_since, w.disabled.clone()) != before {
                ctx.set_doc(ev::hook_key(w.id), Some(Doc::Webhook(w)));
            }
        }
        ctx.set_doc(s.key.clone(), Some(Doc::Delivery(d)));
        hooks.insert(s.webhook);
    }
    for h in hooks {
        for k in ev::evicted(&ctx.tree.docs, h) {
            ctx.set_doc(k, None);
        }
    }
    let change = ctx.finish();
    guard.commit(change, tree).await?;
    Ok(())
}

/// A number in [0, 1) for the backoff's jitter.
fn rand_unit() -> f64 {
    let r = uuid::Uuid::new_v4().as_u128() as u64;
    (r >> 11) as f64 / (1u64 << 53) as f64
}
