//! /register, /login, /generate_access_token (SPEC 5).

use serde_json::{Map, Value};

use super::decl::{row, Access, Body, Endpoint, Kind as P, Msgs, Param, Shape, Verb};
use super::endpoints::Ep;
use super::json::Obj;
use super::params::PVal;
use super::{ApiError, Rq};
use crate::app::App;
use crate::auth::limits::Failure;
use crate::domain::dates::{fmt_millis, parse_date};
use crate::domain::num::Dec;
use crate::domain::tree::{Text, Tree};
use crate::store::UserRecord;

/// Longest user id (SPEC 5.2's pattern), everywhere a user id is read.
pub const USER_ID_MAX_CHARS: usize = 128;
/// Password length bounds (SPEC 5.2): long enough to resist guessing, short enough that
/// hashing it costs a bounded time.
const PASSWORD_MIN_CHARS: usize = 8;
const PASSWORD_MAX_CHARS: usize = 128;
/// Longest text claim copied into a minted token: claims travel in every request's header.
const CLAIM_MAX_CHARS: usize = 256;

static REG_USER_ID: Param = Param::new(
    "user_id",
    P::Text { max_chars: Some(USER_ID_MAX_CHARS) },
    Msgs::required("user_id is required", "Account creation Failed: Invalid user ID format"),
    "^[A-Za-z0-9_-]{1,128}$; in token mode equal to the token's user_id.",
);
static REG_PASSWORD: Param = Param::new(
    "password",
    P::Text { max_chars: Some(PASSWORD_MAX_CHARS) },
    Msgs::invalid("password must be between 8 and 128 characters"),
    "8 to 128 characters; required without a token.",
);
static INITIAL_BALANCE: Param = Param::new(
    "initial_balance",
    P::Money { positive: false },
    Msgs::invalid("initial_balance must be a non-negative number"),
    "Opening balance of Main, >= 0; default 0.",
);

pub static REGISTER: Endpoint = Endpoint {
    verb: Verb::Post,
    path: "/register",
    ep: Ep::Register,
    prefix: "Account creation Failed",
    summary: "Create a user and its tree (password mode without a token, token mode with one)",
    access: Access::Optional,
    writes: false,
    body: Body::Params,
    params: &[&REG_USER_ID, &REG_PASSWORD, &INITIAL_BALANCE],
    fields: &[("user_id", Shape::Str), ("uuid", Shape::Str)],
    errors: &[
        row!(
            401,
            "password mode and `password` absent (checked first)",
            "`Missing or invalid token` (filter-shaped body: only `success`, `status`, `error`)"
        ),
        row!(
            403,
            "token mode and `user_id` differs from the token's `user_id`",
            "`user_id does not match token`"
        ),
        row!(
            409,
            "a user record or tree already exists for `user_id`",
            "`Account creation Failed: User already exists`"
        ),
    ],
};

static LOGIN_USER_ID: Param =
    Param::text("user_id", Some("user_id is required"), Some(USER_ID_MAX_CHARS), "User id.");
static LOGIN_PASSWORD: Param =
    Param::text("password", Some("password is required"), Some(PASSWORD_MAX_CHARS), "Password.");

pub static LOGIN: Endpoint = Endpoint {
    verb: Verb::Post,
    path: "/login",
    ep: Ep::Login,
    prefix: "Login failed",
    summary: "Exchange user_id and password for a bearer token",
    access: Access::Public,
    writes: false,
    body: Body::Params,
    params: &[&LOGIN_USER_ID, &LOGIN_PASSWORD],
    fields: &[
        ("user_id", Shape::Str),
        ("role", Shape::Str),
        ("token", Shape::Str),
        ("token_type", Shape::Str),
        ("expires_in", Shape::Int),
    ],
    errors: &[
        row!(
            429,
            "login backoff wait running for this `user_id` (SPEC 4.6); Retry-After says when to retry",
            "`Too many failed attempts. Wait <X> seconds.`"
        ),
        row!(401, "unknown user, user without password, or wrong password", "`Invalid user_id or password`"),
    ],
};

static TOKEN_USER_ID: Param =
    Param::text("user_id", Some("user_id is required"), Some(USER_ID_MAX_CHARS), "user_id claim.");
static ROLE: Param = Param::text("role", Some("role is required"), Some(CLAIM_MAX_CHARS), "role claim.");
static TYPE: Param =
    Param::text("type", None, Some(CLAIM_MAX_CHARS), "session, or anything else for an expiry token.");
static SESSION_ID: Param = Param::text(
    "session_id",
    None,
    Some(CLAIM_MAX_CHARS),
    "Required for session tokens (`session_id is required for session tokens`).",
);
const BAD_DATE: &str = "Invalid NumericDate format";
static EXP: Param = Param::new(
    "exp",
    P::NumericDate,
    Msgs::invalid(BAD_DATE),
    "Required for expiry tokens (`exp is required for expiry tokens`).",
);
static NBF: Param = Param::new("nbf", P::NumericDate, Msgs::invalid(BAD_DATE), "Not-before.");
static IAT: Param = Param::new("iat", P::NumericDate, Msgs::invalid(BAD_DATE), "Issued-at; default now.");
static ISS: Param = Param::text("iss", None, Some(CLAIM_MAX_CHARS), "Copied into the token.");
static SUB: Param = Param::text("sub", None, Some(CLAIM_MAX_CHARS), "Copied into the token.");
static AUD: Param = Param::text("aud", None, Some(CLAIM_MAX_CHARS), "Copied into the token.");
static JTI: Param = Param::text("jti", None, Some(CLAIM_MAX_CHARS), "Copied into the token.");

pub static GENERATE_TOKEN: Endpoint = Endpoint {
    verb: Verb::Post,
    path: "/generate_access_token",
    ep: Ep::GenerateToken,
    prefix: "Failed to issue token",
    summary: "Mint a token (test environments; 403 unless TOKEN_ENDPOINT_ENABLED=true)",
    access: Access::Public,
    writes: false,
    body: Body::Params,
    params: &[&TOKEN_USER_ID, &ROLE, &TYPE, &SESSION_ID, &EXP, &NBF, &IAT, &ISS, &SUB, &AUD, &JTI],
    fields: &[("user_id", Shape::Str), ("token", Shape::Str), ("timestamp", Shape::Str)],
    errors: &[
        row!(403, "endpoint disabled (checked first)", "`Token generation endpoint is disabled`"),
        row!(
            400,
            "`type` is `session` and `session_id` absent",
            "`session_id is required for session tokens`"
        ),
        row!(400, "`type` is not `session` and `exp` absent", "`exp is required for expiry tokens`"),
    ],
};

fn valid_user_id(s: &str) -> bool {
    (1..=USER_ID_MAX_CHARS).contains(&s.len())
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

pub async fn register(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let password_mode = !rq.has_auth;
    let password = p.text_of(&REG_PASSWORD)?.map(|t| t.into_owned());
    if password_mode && password.is_none() {
        return Err(ApiError::Bare(401, "Missing or invalid token".into()));
    }
    let user_id = p.req_text_of(&REG_USER_ID)?;
    if !valid_user_id(&user_id) {
        return Err(ApiError::bad(REG_USER_ID.msgs.invalid));
    }
    if !password_mode && rq.user_id()? != user_id {
        return Err(ApiError::new(403, "user_id does not match token"));
    }
    if let Some(pw) = &password {
        if !(PASSWORD_MIN_CHARS..=PASSWORD_MAX_CHARS).contains(&pw.chars().count()) {
            return Err(ApiError::bad(REG_PASSWORD.msgs.invalid));
        }
    }
    let initial = p.num_of(&INITIAL_BALANCE)?.unwrap_or(0);
    let guard = app.users.lock(&user_id).await?;
    if guard.current.is_some() {
        return Err(ApiError::new(409, "Account creation Failed: User already exists"));
    }
    let password_hash = match password {
        Some(pw) => Some(app.passwords.hash(pw).await.map_err(ApiError::Internal)?),
        None => None,
    };
    let root = uuid::Uuid::new_v4().as_u128();
    let tree = Tree::new_user(root, initial);
    let user = UserRecord {
        user_id: user_id.as_str().into(),
        user_no: guard.new_user_no().await?,
        password_hash: password_hash.map(Text::from),
        role: Text::Static("user"),
        created_at: rq.now(),
        root,
        ledger: tree.ledger.clone(),
    };
    guard.create(user, tree).await.map_err(|e| match e {
        // Only a shared engine refuses here: another node registered this id meanwhile.
        crate::store::StoreError::UserExists => {
            ApiError::new(409, "Account creation Failed: User already exists")
        }
        e => e.into(),
    })?;
    Ok(Obj::new().str("user_id", &user_id).str("uuid", &crate::domain::tree::fmt_uuid(root)))
}

pub async fn login(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let user_id = p.req_text_of(&LOGIN_USER_ID)?;
    p.check_lengths(&[&LOGIN_USER_ID])?;
    let password = p.req_text_of(&LOGIN_PASSWORD)?;
    p.check_lengths(&[&LOGIN_PASSWORD])?;
    let t = rq.now_us as f64 / 1e6;
    if let Some(Failure::Wait(msg, secs)) = app.login_backoff.pending(&user_id, t) {
        crate::metrics::auth_failed("login", "429");
        return Err(ApiError::TooMany(msg, secs));
    }
    // Through the cache: it holds every acknowledged write, storage may still be applying some.
    let record = app.users.snapshot(&user_id).await?.map(|s| s.user.clone());
    let hash = record.as_ref().and_then(|r| r.password_hash.as_ref()).map(|h| h.to_string());
    let ok = app.passwords.verify(password, hash).await.map_err(ApiError::Internal)?;
    let Some(record) = record.filter(|_| ok) else {
        return Err(match app.login_backoff.fail(&user_id, t) {
            Failure::Wait(msg, secs) => {
                crate::metrics::auth_failed("login", "429");
                ApiError::TooMany(msg, secs)
            }
            Failure::Reject => {
                crate::metrics::auth_failed("login", "401");
                ApiError::new(401, "Invalid user_id or password")
            }
        });
    };
    app.login_backoff.clear(&user_id);
    let iat = rq.now();
    let ttl = app.cfg.token_ttl_seconds;
    let mut claims = Map::new();
    claims.insert("user_id".into(), Value::String(record.user_id.to_string()));
    claims.insert("role".into(), Value::String(record.role.to_string()));
    claims.insert("iat".into(), Value::from(iat));
    claims.insert("exp".into(), Value::from(iat.saturating_add(ttl as i64)));
    let token = app.jwt.sign(&claims).map_err(ApiError::Internal)?;
    Ok(Obj::new()
        .str("user_id", &record.user_id)
        .str("role", &record.role)
        .str("token", &token)
        .str("token_type", "Bearer")
        .int("expires_in", i128::from(ttl)))
}

/// NumericDate of SPEC 5.4: seconds (> 1e6) or days, or a date of the 3.4 grammar.
fn numeric_date(v: PVal) -> Result<Option<i64>, ApiError> {
    let bad = || ApiError::bad(BAD_DATE);
    let (text, numeric) = match v {
        PVal::Missing | PVal::Empty => return Ok(None),
        PVal::Num(s) => (s.into_owned(), true),
        PVal::Str(s) => {
            let digits = !s.trim().is_empty() && s.trim().bytes().all(|c| c.is_ascii_digit());
            (s.into_owned(), digits)
        }
        PVal::Bool(_) | PVal::Invalid => return Err(bad()),
    };
    let trimmed = text.trim();
    if numeric {
        let d = Dec::parse(trimmed).ok_or_else(bad)?;
        // Seconds above 1,000,000, days otherwise (a negative number too); the fraction is
        // dropped from the seconds, after the conversion: 1.5 days is 129600 s.
        let secs = if d.is_negative() || !d.abs_gt(1_000_000, 0) { d.abs_times(86_400) } else { d.clone() };
        let whole = secs.scaled(0).trunc.and_then(|v| i64::try_from(v).ok()).ok_or_else(bad)?;
        return Ok(Some(if d.is_negative() { -whole } else { whole }));
    }
    parse_date(trimmed).map(Some).ok_or_else(bad)
}

pub fn generate_token(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    if !app.cfg.token_endpoint_enabled {
        return Err(ApiError::new(403, "Token generation endpoint is disabled"));
    }
    let p = &rq.params;
    let user_id = p.req_text_of(&TOKEN_USER_ID)?;
    p.check_lengths(&[&TOKEN_USER_ID])?;
    let role = p.req_text_of(&ROLE)?;
    let kind = p.text_of(&TYPE)?.map_or_else(|| "Expiration".into(), |t| t.into_owned());
    let session = kind == "session";
    let session_id = p.text_of(&SESSION_ID)?.map(|t| t.into_owned());
    if session && session_id.is_none() {
        return Err(ApiError::bad("session_id is required for session tokens"));
    }
    let exp_given = !matches!(p.get(EXP.name), PVal::Missing | PVal::Empty);
    if !session && !exp_given {
        return Err(ApiError::bad("exp is required for expiry tokens"));
    }
    let exp = numeric_date(p.get(EXP.name))?;
    let nbf = numeric_date(p.get(NBF.name))?;
    let iat = numeric_date(p.get(IAT.name))?.unwrap_or(rq.now());
    p.check_lengths(GENERATE_TOKEN.params)?;
    let mut c = Map::new();
    c.insert("user_id".into(), Value::String(user_id.clone()));
    c.insert("role".into(), Value::String(role));
    c.insert("iat".into(), Value::from(iat));
    if let Some(e) = exp {
        c.insert("exp".into(), Value::from(e));
    }
    if let Some(n) = nbf {
        c.insert("nbf".into(), Value::from(n));
    }
    for claim in [&ISS, &SUB, &AUD, &JTI] {
        if let Some(v) = p.text_of(claim)? {
            c.insert(claim.name.into(), Value::String(v.into_owned()));
        }
    }
    c.insert("token_type".into(), Value::String(if session { "session" } else { "expiry" }.into()));
    if let (true, Some(sid)) = (session, session_id) {
        c.insert("session_id".into(), Value::String(sid));
    }
    let token = app.jwt.sign(&c).map_err(ApiError::Internal)?;
    Ok(Obj::new()
        .str("user_id", &user_id)
        .str("token", &token)
        .str("timestamp", &fmt_millis(rq.now_us.div_euclid(1000))))
}
