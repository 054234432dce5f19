//! /register, /login, /generate_access_token (SPEC 5).

use serde_json::{Map, Value};

use super::{number, Rq};
use crate::app::App;
use crate::auth::limits::Failure;
use crate::domain::dates::{fmt_millis, parse_date};
use crate::domain::num::Dec;
use crate::domain::tree::{Text, Tree};
use crate::http::json::Obj;
use crate::http::params::{check_len, money_cents, PVal};
use crate::http::response::ApiError;
use crate::store::UserRecord;

fn valid_user_id(s: &str) -> bool {
    (1..=128).contains(&s.len()) && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

pub async fn register(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let p = &rq.params;
    let password_mode = !rq.has_auth;
    let password = p.str("password")?;
    if password_mode && password.is_none() {
        return Err(ApiError::Bare(401, "Missing or invalid token".into()));
    }
    let user_id = p.req_str("user_id", "user_id is required")?;
    if !valid_user_id(&user_id) {
        return Err(ApiError::bad("Account creation Failed: Invalid user ID format"));
    }
    if !password_mode && rq.user_id()? != user_id {
        return Err(ApiError::new(403, "user_id does not match token"));
    }
    if let Some(pw) = &password {
        if !(8..=128).contains(&pw.chars().count()) {
            return Err(ApiError::bad("password must be between 8 and 128 characters"));
        }
    }
    let bad_balance = "initial_balance must be a non-negative number";
    let initial = match number(p, "initial_balance", None, bad_balance)? {
        None => 0,
        Some(d) if d.is_negative() => return Err(ApiError::bad(bad_balance)),
        Some(d) => money_cents("initial_balance", &d)?,
    };
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
    let user_id = p.req_str("user_id", "user_id is required")?;
    check_len("user_id", Some(&user_id), 128)?;
    let password = p.req_str("password", "password is required")?;
    check_len("password", Some(&password), 128)?;
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
    let bad = || ApiError::bad("Invalid NumericDate format");
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
    let user_id = p.req_str("user_id", "user_id is required")?;
    check_len("user_id", Some(&user_id), 256)?;
    let role = p.req_str("role", "role is required")?;
    let kind = p.str("type")?.unwrap_or_else(|| "Expiration".into());
    let session = kind == "session";
    let session_id = p.str("session_id")?;
    if session && session_id.is_none() {
        return Err(ApiError::bad("session_id is required for session tokens"));
    }
    let exp_given = !matches!(p.get("exp"), PVal::Missing | PVal::Empty);
    if !session && !exp_given {
        return Err(ApiError::bad("exp is required for expiry tokens"));
    }
    let exp = numeric_date(p.get("exp"))?;
    let nbf = numeric_date(p.get("nbf"))?;
    let iat = numeric_date(p.get("iat"))?.unwrap_or(rq.now());
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
    for k in ["iss", "sub", "aud", "jti"] {
        if let Some(v) = p.str(k)? {
            c.insert(k.into(), Value::String(v));
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
