//! Personal access tokens (docs/tokens.md): /create_token, /tokens, /revoke_token, and the check
//! of a token the request filter hands over. Tokens are settings of their user
//! (`domain::token`), written like any change of the tree: atomically and durably, and on
//! PostgreSQL read through the same version check as every read, so a revocation is seen by
//! every node on the next request.

use std::sync::Arc;

use super::decl::{row, Endpoint, Kind as P, Msgs, Param, Row, Shape};
use super::endpoints::{Ep, NO_TREE};
use super::json::{array, Obj};
use super::{mutate, snapshot, Answer, ApiError, Rq};
use crate::app::App;
use crate::auth::jwt::{Identity, Scope};
use crate::auth::pat::{self, Parsed};
use crate::auth::role::Role;
use crate::domain::dates::fmt_millis;
use crate::domain::docs::Doc;
use crate::domain::engine::Ctx;
use crate::domain::text::Text;
use crate::domain::token::{token_key, AccessToken, KEY_PREFIX, MAX_TOKENS, NEXT_ID_KEY};

/// Longest token name.
pub const NAME_MAX_CHARS: usize = 100;
/// Longest lifetime `expires_in_days` may ask for.
const MAX_DAYS: i64 = 3650;
const DAY_SECS: i64 = 86_400;

static NAME: Param = Param::text(
    "name",
    Some("name is required"),
    Some(NAME_MAX_CHARS),
    "The token's name, unique among the caller's tokens.",
);
static SCOPE: Param = Param::text(
    "scope",
    Some("scope is required"),
    Some(16),
    "read (GET endpoints only) or write (everything the user may do; implies read).",
);
static EXPIRES: Param = Param::new(
    "expires",
    P::Date,
    Msgs::invalid("Invalid expires format"),
    "When the token stops working (a date is its midnight UTC); default: never. Not with expires_in_days.",
);
static EXPIRES_IN_DAYS: Param = Param::new(
    "expires_in_days",
    P::Int { min: 1, max: MAX_DAYS },
    Msgs::invalid("expires_in_days must be a whole number from 1 to 3650"),
    "The token stops working this many days from now. Not with expires.",
);
static ID: Param = Param::new(
    "id",
    P::Int { min: 1, max: i64::MAX },
    Msgs::required("id is required", "id must be a positive whole number"),
    "The token's id (from /tokens).",
);

const BY_TOKEN: Row = row!(
    403,
    "the request is authenticated by a personal access token (checked first)",
    "`A personal access token cannot create tokens`"
);
const BAD_SCOPE: Row = row!(400, "`scope` not one of its values", "`scope must be read or write`");
const BOTH_EXPIRIES: Row =
    row!(400, "both `expires` and `expires_in_days`", "`Give expires or expires_in_days, not both`");
const PAST: Row = row!(400, "`expires` is not in the future", "`expires must be in the future`");
const NAME_TAKEN: Row =
    row!(409, "the caller has a token of this name", "`An access token with this name already exists`");
const TOO_MANY: Row =
    row!(400, "the caller already keeps 50 tokens", "`A user keeps at most 50 access tokens`");
const NO_TOKEN: Row = row!(404, "the caller has no token of this id", "`Access token not found`");

/// Not `Endpoint::write`: that keeps a write's answer with its `Idempotency-Key`, and this
/// answer holds the token's text, which is never stored. A retry creates another token, or
/// meets the name already taken (409).
pub static CREATE: Endpoint = Endpoint {
    writes: false,
    ..Endpoint::write(
        "/create_token",
        Ep::CreateToken,
        "Failed to create token",
        "Create a personal access token; its text is in this answer only (Idempotency-Key is ignored)",
        &[&NAME, &SCOPE, &EXPIRES, &EXPIRES_IN_DAYS],
        &[
            ("id", Shape::Int),
            ("name", Shape::Str),
            ("scopes", Shape::Strs),
            ("created", Shape::Str),
            ("expires", Shape::NullableStr),
            ("token", Shape::Str),
        ],
        &[BY_TOKEN, NO_TREE, BAD_SCOPE, BOTH_EXPIRIES, PAST, NAME_TAKEN, TOO_MANY],
    )
};

pub static LIST: Endpoint = Endpoint::read(
    "/tokens",
    Ep::ListTokens,
    "Failed to list tokens",
    "The caller's personal access tokens (never their text)",
    &[],
    &[("tokens", Shape::Rows { schema: "AccessToken", frame: false })],
    &[NO_TREE],
);

pub static REVOKE: Endpoint = Endpoint::write(
    "/revoke_token",
    Ep::RevokeToken,
    "Failed to revoke token",
    "Revoke a personal access token: it stops working at once",
    &[&ID],
    &[("revoked", Shape::Int)],
    &[NO_TREE, NO_TOKEN],
);

fn time(secs: i64) -> String {
    fmt_millis(secs.saturating_mul(1000))
}

fn opt_time(o: Obj, k: &str, secs: Option<i64>) -> Obj {
    match secs {
        Some(s) => o.str(k, &time(s)),
        None => o.null(k),
    }
}

fn scopes(write: bool) -> &'static [&'static str] {
    if write {
        &["read", "write"]
    } else {
        &["read"]
    }
}

fn tokens_of(docs: &crate::domain::docs::Docs) -> impl Iterator<Item = &AccessToken> {
    crate::domain::docs::with_prefix(docs, KEY_PREFIX).filter_map(|(_, d)| match &**d {
        Doc::Token(t) => Some(t),
        _ => None,
    })
}

pub async fn create(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let ident = rq.ident()?;
    // A leaked token must not mint others that outlive its revocation.
    if matches!(ident.scope, Scope::Token { .. }) {
        return Err(BY_TOKEN.err());
    }
    let p = &rq.params;
    let name = p.req_text_of(&NAME)?;
    let scope = p.req_text_of(&SCOPE)?;
    let on = p.date_of(&EXPIRES)?;
    let days = p.num_of(&EXPIRES_IN_DAYS)?;
    p.check_lengths(CREATE.params)?;
    let write = match scope.as_str() {
        "read" => false,
        "write" => true,
        _ => return Err(BAD_SCOPE.err()),
    };
    let now = rq.now();
    let expires = match (on, days) {
        (Some(_), Some(_)) => return Err(BOTH_EXPIRIES.err()),
        (Some(at), None) if at <= now => return Err(PAST.err()),
        (Some(at), None) => Some(at),
        (None, Some(d)) => Some(now + d * DAY_SECS),
        (None, None) => None,
    };
    let secret = pat::new_secret().map_err(|e| ApiError::Internal(format!("no random bytes: {e}")))?;
    let user_id = ident.user_id.clone();
    mutate(app, rq, |ctx, _| {
        let mine: Vec<&AccessToken> = tokens_of(&ctx.tree.docs).collect();
        if mine.iter().any(|t| *t.name == *name) {
            return Err(NAME_TAKEN.err());
        }
        if mine.len() >= MAX_TOKENS {
            return Err(TOO_MANY.err());
        }
        let id = ctx.next_id(NEXT_ID_KEY);
        let t = AccessToken {
            id,
            name: Text::from(name.as_str()),
            write,
            hash: pat::hash(&secret),
            created: now,
            expires,
            last_used: None,
        };
        let o = Obj::new()
            .int("id", id.into())
            .str("name", &name)
            .str_array("scopes", scopes(write))
            .str("created", &time(now));
        let o = opt_time(o, "expires", expires).str("token", &pat::format(&user_id, id, &secret));
        ctx.set_doc(token_key(id), Some(Doc::Token(t)));
        Ok(o)
    })
    .await
}

pub async fn list(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let st = snapshot(app, rq).await?;
    let user_id = rq.user_id()?;
    let mut mine: Vec<&AccessToken> = tokens_of(&st.tree.docs).collect();
    mine.sort_by_key(|t| t.id);
    let rows = mine.iter().map(|t| {
        let used = app.token_use.last(user_id, t.id, t.created).max(t.last_used);
        let o = Obj::new()
            .int("id", t.id.into())
            .str("name", &t.name)
            .str_array("scopes", scopes(t.write))
            .str("created", &time(t.created));
        let o = opt_time(o, "last_used", used);
        opt_time(o, "expires", t.expires).bool("expired", !t.live_at(rq.now())).finish()
    });
    Ok(Obj::new().raw("tokens", &array(rows.collect::<Vec<_>>())))
}

pub async fn revoke(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let id = rq.params.req_num_of(&ID)? as u64;
    mutate(app, rq, |ctx, _| {
        let key = token_key(id);
        if !matches!(ctx.tree.docs.get(key.as_str()).map(|d| &**d), Some(Doc::Token(_))) {
            return Err(NO_TOKEN.err());
        }
        ctx.set_doc(key, None);
        Ok(Obj::new().int("revoked", id.into()))
    })
    .await
}

/// The identity a token stands for, `None` when it stands for nothing (no such user or token,
/// another secret, expired). Reads the owner's committed settings: on PostgreSQL checked
/// against the stored version, so another node's revocation counts at once.
pub async fn verify(app: &Arc<App>, p: &Parsed, now_us: i64) -> Result<Option<Arc<Identity>>, ApiError> {
    let Some(st) = app.users.snapshot(&p.user_id).await? else {
        return Ok(None);
    };
    let Some(Doc::Token(t)) = st.tree.docs.get(token_key(p.id).as_str()).map(|d| &**d) else {
        return Ok(None);
    };
    let now = now_us.div_euclid(1_000_000);
    if !pat::same(&pat::hash(&p.secret), &t.hash) || !t.live_at(now) {
        return Ok(None);
    }
    if app.token_use.touch(&p.user_id, t.id, t.created, now, t.last_used) {
        // Off the request's path: the request never waits for this write, nor fails with it.
        tokio::spawn(record_use(app.clone(), p.user_id.clone(), t.id, t.created, now));
    }
    Ok(Some(Arc::new(Identity {
        user_id: p.user_id.clone(),
        role: Role::from(st.user.role.as_str()),
        scope: Scope::Token { id: t.id, write: t.write },
    })))
}

/// Writes a token's last use, unless the token is gone (revoked meanwhile: never brought back)
/// or already carries a later use.
async fn record_use(app: Arc<App>, user_id: String, id: u64, created: i64, at: i64) {
    let res = async {
        let guard = app.users.lock(&user_id).await?;
        let Some(cur) = guard.current.clone() else { return Ok(()) };
        let key = token_key(id);
        let Some(Doc::Token(t)) = cur.tree.docs.get(key.as_str()).map(|d| &**d) else {
            return Ok(());
        };
        if t.created != created || t.last_used.is_some_and(|u| u >= at) {
            return Ok(());
        }
        let t = AccessToken { last_used: Some(at), ..t.clone() };
        let mut tree = cur.tree.clone();
        let mut ctx = Ctx::new(&mut tree, at);
        ctx.set_doc(key, Some(Doc::Token(t)));
        let change = ctx.finish();
        guard.commit(change, tree).await
    }
    .await;
    if let Err(e) = res {
        tracing::warn!(error = %e, token_id = id, "could not record a token's last use");
    }
}
