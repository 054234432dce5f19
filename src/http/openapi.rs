//! The OpenAPI 3.1 description of the service, served at GET /openapi.json (docs/api.md).
//!
//! It is generated from the router's route table: every route becomes one operation, and
//! [`describe`] matches every endpoint exhaustively, so a new route cannot compile without its
//! description. Parameters may come from the query, a JSON body or a form body on every method
//! (SPEC 3.2), so each one is documented in all three places, none `required` in OpenAPI terms:
//! a required parameter may arrive in either source, which OpenAPI cannot express; its
//! description says "Required".

use std::sync::OnceLock;

use serde_json::{json, Map, Value};

use super::idem;
use crate::api::decl::{Access, Body, Endpoint, Kind, Param, Shape, Verb};
use crate::api::params::MONEY_MAX_CENTS;
use crate::api::{Ep, Op, ENDPOINTS};

/// Schema of a parameter's value in the query string: what a valid value looks like (the text
/// of any other value is read too, and answered with the parameter's 400).
fn query_schema(k: Kind) -> Value {
    match k {
        Kind::Text { .. } | Kind::Date | Kind::NumericDate => json!({"type": "string"}),
        Kind::Money { .. } | Kind::Millionths { .. } => json!({"type": "number"}),
        Kind::Int { .. } => json!({"type": "integer"}),
        Kind::Bool => json!({"type": "boolean"}),
    }
}

/// JSON Schema of a parameter's value in a JSON body (form values are strings).
fn body_schema(k: Kind) -> Value {
    match k {
        Kind::Text { .. } => json!({"type": "string"}),
        Kind::Money { .. } | Kind::Millionths { .. } => json!({"type": ["number", "string"]}),
        Kind::Int { .. } => json!({"type": ["integer", "number", "string"]}),
        Kind::Date => json!({"type": ["string", "null"]}),
        Kind::Bool => json!({"type": ["boolean", "string"]}),
        Kind::NumericDate => json!({"type": ["number", "string"]}),
    }
}

/// What the parameter's type accepts, limits included.
fn type_note(k: Kind) -> String {
    match k {
        Kind::Text { max_chars: None } => String::new(),
        Kind::Text { max_chars: Some(n) } => format!(" At most {n} characters."),
        Kind::Money { .. } => format!(
            " Money: a decimal (number or text), at most 2 decimals, at most {}.",
            MONEY_MAX_CENTS / 100
        ),
        Kind::Millionths { max_millionths, .. } => {
            format!(
                " A decimal number (JSON number or text) up to {}, kept to 6 decimals.",
                max_millionths / 1_000_000
            )
        }
        Kind::Int { min, max } => format!(" A whole number (30, 30.0, \"30\") from {min} to {max}."),
        Kind::Date => " Date: YYYY-MM-DD, YYYY-MM-DD[T ]HH:MM[:SS][Z|+HH:MM], or D/M/YYYY (SPEC 3.4).".into(),
        Kind::Bool => " true/false (also TRUE, False, T, F).".into(),
        Kind::NumericDate => " Seconds since the epoch (days when <= 1000000), or a date.".into(),
    }
}

fn description(p: &Param) -> String {
    let req = if p.required() { "Required (from the query or the body). " } else { "" };
    format!("{req}{}{}", p.doc, type_note(p.kind))
}

/// One documented failure: statuses, when, and the error text.
struct Failure {
    statuses: Vec<u16>,
    condition: String,
    error: String,
}

fn fail(status: u16, condition: String, error: String) -> Failure {
    Failure { statuses: vec![status], condition, error }
}

/// The failures a parameter's declaration gives, in the order they are checked.
fn param_failures(p: &Param) -> Vec<Failure> {
    let (n, m) = (p.name, &p.msgs);
    let mut out = Vec::new();
    if let Some(msg) = m.missing {
        out.push(fail(400, format!("`{n}` absent"), format!("`{msg}`")));
    }
    let what = match p.kind {
        Kind::Text { .. } => "present and not of its form",
        Kind::Money { positive: true } if m.out_of_range.is_none() => "not numeric, or <= 0",
        Kind::Money { positive: false } if m.out_of_range.is_none() => "not numeric, or negative",
        Kind::Money { .. } => "not numeric",
        Kind::Millionths { .. } if m.out_of_range.is_some() => "not numeric",
        Kind::Millionths { positive: true, .. } => "not numeric, <= 0 or too large",
        Kind::Millionths { positive: false, .. } => "not numeric, negative or too large",
        Kind::Int { .. } => "not a whole number in range",
        Kind::Date => "present but not a date",
        Kind::Bool => "present but not a boolean",
        Kind::NumericDate => "not a valid NumericDate",
    };
    if !m.invalid.is_empty() {
        out.push(fail(400, format!("`{n}` {what}"), format!("`{}`", m.invalid)));
    }
    if let Some(msg) = m.out_of_range {
        let cond = if matches!(p.kind, Kind::Money { positive: true }) { "<= 0" } else { "negative" };
        out.push(fail(400, format!("`{n}` {cond}"), format!("`{msg}`")));
    }
    if let Some(msg) = m.too_large {
        out.push(fail(400, format!("`{n}` too large"), format!("`{msg}`")));
    }
    match p.kind {
        Kind::Money { .. } => out.push(fail(
            400,
            format!("`{n}` has more than 2 decimals / is too large"),
            format!("`{n} must have at most 2 decimal places` / `{n} is too large`"),
        )),
        Kind::Text { max_chars: Some(max) } => {
            out.push(fail(400, format!("`{n}` longer than {max} characters"), format!("`{n} is too long`")))
        }
        _ => {}
    }
    out
}

/// The endpoint's error table: its parameters' failures, then its own rows.
fn failures(e: &Endpoint) -> Vec<Failure> {
    let mut out: Vec<Failure> = e.params.iter().flat_map(|p| param_failures(p)).collect();
    out.extend(e.errors.iter().map(|r| Failure {
        statuses: r.statuses.to_vec(),
        condition: r.condition.to_string(),
        error: r.error.to_string(),
    }));
    out
}

/// JSON Schema of an answer's field.
fn field_schema(shape: &Shape) -> Value {
    match shape {
        Shape::Str => json!({"type": "string"}),
        Shape::Num => json!({"type": "number"}),
        Shape::Int => json!({"type": "integer"}),
        Shape::Bool => json!({"type": "boolean"}),
        Shape::NullableStr => json!({"type": ["string", "null"]}),
        Shape::NullableNum => json!({"type": ["number", "null"]}),
        Shape::NullableInt => json!({"type": ["integer", "null"]}),
        Shape::Strs => json!({"type": "array", "items": {"type": "string"}}),
        Shape::Rows { schema, .. } => {
            json!({"type": "array", "items": {"$ref": format!("#/components/schemas/{schema}")}})
        }
        Shape::Object { schema } => json!({"$ref": format!("#/components/schemas/{schema}")}),
        Shape::Records(names) => {
            let props: Map<String, Value> =
                names.iter().map(|n| (n.to_string(), json!({"type": "string"}))).collect();
            json!({"type": "array", "items": {"type": "object", "required": names, "properties": props}})
        }
        Shape::Optional(inner) => field_schema(inner),
    }
}

/// The standard headers of every answer.
fn common_headers(limited: bool) -> Value {
    let mut h = json!({"x-request-id": {"$ref": "#/components/headers/XRequestId"}});
    if limited {
        h["RateLimit-Policy"] = json!({"$ref": "#/components/headers/RateLimitPolicy"});
        h["RateLimit"] = json!({"$ref": "#/components/headers/RateLimit"});
    }
    h
}

/// `reads`: the endpoint's method is GET (a `read` access token may call it).
fn error_response(
    status: u16,
    rows: &[Failure],
    bearer: bool,
    reads: bool,
    prefix: &str,
    keyed: bool,
) -> Value {
    let what = match status {
        400 => "A parameter is missing or invalid. Besides the rows below: `Invalid request body` for a \
malformed JSON body or one that is not an object, and `Invalid value for parameter '<name>'` for an array \
of several values or a non-empty object as a value",
        401 if bearer => "Missing, malformed or invalid bearer token: `Missing or invalid token` or \
`Invalid or expired token` (filter-shaped: success, status, error only)",
        401 => "Unauthorized",
        403 if bearer && !reads => "Not allowed. Besides the rows below: \
`This token may only read: use a write token for this request` for a `read` personal access token \
(filter-shaped: success, status, error only)",
        403 => "Not allowed",
        404 => "Not found",
        409 => "Conflict with existing data",
        422 => "Unprocessable request",
        413 => "Request body larger than 1 MiB (success, status, error only)",
        415 => "Request body with a `Content-Encoding` other than `identity`: `Content-Encoding is not \
supported: send the body unencoded` (success, status, error only; `Accept-Encoding: identity`)",
        429 => "Rate limit (`Rate limit exceeded. Try later.`, per user; `Rate limit exceeded. Try again later.`, \
per IP on token-exempt paths) or failed-attempt backoff (`Too many failed attempts. Wait <X> seconds.`); \
Retry-After says when to retry",
        500 => "Storage failure or internal error",
        503 => "Storage does not answer",
        _ => "Error",
    };
    // The endpoint's own rows for this status, in the order they are checked.
    let mut text = what.to_string();
    if status == 500 {
        text.push_str(&format!(": `{prefix}: internal error`"));
    }
    for r in rows.iter().filter(|r| r.statuses.contains(&status)) {
        text.push_str("\n- ");
        text.push_str(&r.condition);
        text.push_str(": ");
        text.push_str(&r.error);
        if r.statuses.len() > 1 {
            text.push_str(" (404 if the caller is an admin, else 403)");
        }
    }
    if keyed {
        match status {
            400 => text.push_str(&format!("\n- `Idempotency-Key` header empty, longer than 255 or not visible ASCII: `{}`", idem::BAD_KEY)),
            409 => text.push_str(&format!("\n- a request with the same `Idempotency-Key` is still running: `{}`", idem::RUNNING)),
            422 => text.push_str(&format!(
                "\n- the `Idempotency-Key` was used within 24 h with another request (method, path, query, content type or body): `{}`",
                idem::MISMATCH
            )),
            _ => {}
        }
    }
    let mut headers = common_headers(status != 401);
    if keyed && status < 500 && ![401, 413, 415, 429].contains(&status) {
        headers["Idempotent-Replayed"] = json!({"$ref": "#/components/headers/IdempotentReplayed"});
    }
    if status == 429 {
        headers["Retry-After"] = json!({"$ref": "#/components/headers/RetryAfter"});
    }
    if status == 415 {
        headers["Accept-Encoding"] = json!({"$ref": "#/components/headers/AcceptEncoding"});
    }
    json!({
        "description": text,
        "headers": headers,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

fn success_schema(ep: Ep, fields: &[(&str, Shape)]) -> Value {
    match ep {
        Ep::Ping | Ep::Ops(Op::Healthz) => {
            return json!({"type": "object", "required": ["status"], "properties": {"status": {"const": "ok"}}})
        }
        Ep::Ops(Op::Readyz) => {
            return json!({"type": "object", "required": ["status"], "properties": {"status": {"const": "ready"}}})
        }
        Ep::Ops(Op::OpenApi) => return json!({"type": "object", "required": ["openapi", "paths"]}),
        _ => {}
    }
    let mut props = Map::new();
    props.insert("success".into(), json!({"const": true}));
    props.insert("status".into(), json!({"const": 200}));
    let mut required: Vec<&str> = vec!["success", "status"];
    for (name, shape) in fields {
        props.insert((*name).into(), field_schema(shape));
        if !matches!(shape, Shape::Optional(_)) {
            required.push(name);
        }
    }
    props.insert(
        "start_time".into(),
        json!({"type": "string", "description": "Handler start, YYYY-MM-DDTHH:MM:SS.mmmZ."}),
    );
    props.insert("end_time".into(), json!({"type": "string", "description": "Handler end, same format."}));
    props.insert(
        "execution_time".into(),
        json!({"type": "number", "description": "Seconds, up to 6 decimals."}),
    );
    required.extend(["start_time", "end_time", "execution_time"]);
    json!({"type": "object", "required": required, "properties": props})
}

fn operation(e: &Endpoint) -> Value {
    let (path, ep, prefix) = (e.path, e.ep, e.prefix);
    let mut op = Map::new();
    op.insert("operationId".into(), json!(path.trim_start_matches('/').replace(['.', '_'], "-")));
    op.insert("summary".into(), json!(e.summary));
    match e.access {
        Access::Bearer => {}
        Access::Public => {
            op.insert("security".into(), json!([]));
        }
        Access::Optional => {
            op.insert("security".into(), json!([{}, {"bearerAuth": []}]));
        }
    }
    let keyed = e.writes;
    if !e.params.is_empty() {
        let mut query: Vec<Value> = e
            .params
            .iter()
            .map(|p| {
                json!({"name": p.name, "in": "query", "required": false, "description": description(p),
                "schema": query_schema(p.kind)})
            })
            .collect();
        if keyed {
            query.push(idempotency_key_param());
        }
        op.insert("parameters".into(), json!(query));
        if let Body::Raw { max_bytes } = e.body {
            op.insert(
                "requestBody".into(),
                json!({
                    "required": true,
                    "description": format!("The document itself (at most {} MiB); parameters come from the query.", max_bytes >> 20),
                    "content": {
                        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                        "text/plain": {"schema": {"type": "string"}}
                    }
                }),
            );
        } else {
            let mut props = Map::new();
            for p in e.params {
                let mut sch = body_schema(p.kind);
                sch["description"] = json!(description(p));
                props.insert(p.name.into(), sch);
            }
            let body = json!({"type": "object", "properties": props});
            let form_props: Map<String, Value> =
                e.params.iter().map(|p| (p.name.to_string(), json!({"type": "string"}))).collect();
            op.insert(
                "requestBody".into(),
                json!({
                    "required": false,
                    "description": "The same parameters as a JSON object or a form; a name in the query wins (SPEC 3.2).",
                    "content": {
                        "application/json": {"schema": body},
                        "application/x-www-form-urlencoded": {"schema": {"type": "object", "properties": form_props}}
                    }
                }),
            );
        }
    }
    let mut responses = Map::new();
    let ok_content = if ep == Ep::Ops(Op::Metrics) {
        json!({"text/plain": {"schema": {"type": "string"}}})
    } else {
        json!({"application/json": {"schema": success_schema(ep, e.fields)}})
    };
    let mut ok_headers = common_headers(true);
    if keyed {
        ok_headers["Idempotent-Replayed"] = json!({"$ref": "#/components/headers/IdempotentReplayed"});
    }
    responses.insert(
        "200".into(),
        json!({"description": "Success", "headers": ok_headers, "content": ok_content}),
    );
    let rows = failures(e);
    let mut statuses: Vec<u16> = rows.iter().flat_map(|r| r.statuses.iter().copied()).collect();
    statuses.push(429);
    match ep {
        Ep::Ops(Op::Readyz) => statuses.push(503),
        Ep::Ops(Op::Metrics) => statuses.push(404),
        // Answered before the body is read: no 413, 415, 500 or 401.
        Ep::Ping | Ep::Ops(_) => {}
        _ => statuses.extend([413, 415, 500]),
    }
    if e.access != Access::Public {
        statuses.push(401);
        // A `read` personal access token on any other method (docs/tokens.md).
        if e.verb != Verb::Get {
            statuses.push(403);
        }
    }
    if keyed {
        statuses.extend([400, 409, 422]);
    }
    statuses.sort_unstable();
    statuses.dedup();
    for st in statuses {
        let bearer = e.access != Access::Public;
        responses
            .insert(st.to_string(), error_response(st, &rows, bearer, e.verb == Verb::Get, prefix, keyed));
    }
    op.insert("responses".into(), Value::Object(responses));
    Value::Object(op)
}

/// The `Idempotency-Key` header of the write operations (inline: tools that read parameters
/// by name, like the CI's schemathesis preparation, do not follow `$ref`s).
fn idempotency_key_param() -> Value {
    json!({"name": "Idempotency-Key", "in": "header", "required": false,
        "description": "1 to 255 visible ASCII characters, unique per intended write (e.g. a UUID). The same key with the same request (method, path, query, content type, body bytes) within 24 h replays the first answer (2xx or 4xx; never a 5xx, nor an error answer over 16 KiB, which a retry gets anew) with Idempotent-Replayed: true and writes nothing; with another request it is a 422; while the first runs, a 409. At most 1000 keys are kept per user, the oldest dropped first.",
        "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"}})
}

fn components() -> Value {
    json!({
        "securitySchemes": {
            "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT or pfm_pat_ token",
                "description": "HS256 JWT with a user_id claim, from /login (SPEC 4.3), or a personal access token from /create_token (`pfm_pat_...`, docs/tokens.md): a `read` token may call GET endpoints only (any other method: 403 `This token may only read: use a write token for this request`, filter-shaped); a revoked or expired one is a 401 like an expired JWT."}
        },
        "headers": {
            "XRequestId": {"description": "The client's x-request-id when valid, else a generated UUID.",
                "schema": {"type": "string"}},
            "RateLimitPolicy": {"description": "IETF httpapi ratelimit-headers: \"default\";q=<requests>;w=<window seconds>.",
                "schema": {"type": "string"}},
            "RateLimit": {"description": "IETF httpapi ratelimit-headers: \"default\";r=<remaining>;t=<seconds to reset>.",
                "schema": {"type": "string"}},
            "RetryAfter": {"description": "Whole seconds to wait.", "schema": {"type": "integer"}},
            "AcceptEncoding": {"description": "The content codings a request body may have: `identity` only.", "schema": {"type": "string"}},
            "IdempotentReplayed": {"description": "true when this answer is the kept answer of an earlier request with the same Idempotency-Key (nothing ran again).",
                "schema": {"const": "true"}}
        },
        "schemas": {
            "Error": {
                "type": "object",
                "description": "The error envelope (SPEC 3.5). Filter, routing and 413 answers carry only success, status and error.",
                "required": ["success", "status", "error"],
                "properties": {
                    "success": {"const": false},
                    "status": {"type": "integer"},
                    "error": {"type": "string"},
                    "start_time": {"type": "string"},
                    "end_time": {"type": "string"},
                    "execution_time": {"type": "number"}
                }
            },
            "Transaction": {
                "type": "object",
                "required": ["Type", "By", "TransactionID", "Channel", "Amount", "Balance", "amount_due", "overall_balance", "Date"],
                "properties": {
                    "Type": {"enum": ["Deposit", "Withdrawal"]},
                    "By": {"type": "string"},
                    "TransactionID": {"type": "string"},
                    "Channel": {"type": "string"},
                    "Amount": {"type": "number"},
                    "Balance": {"type": "number"},
                    "amount_due": {"type": "number"},
                    "overall_balance": {"type": "number"},
                    "Date": {"type": "string", "description": "YYYY-MM-DD HH:MM:SS, UTC."},
                    "Payee": {"type": ["string", "null"], "description": "Only on a record imported from a statement."},
                    "Memo": {"type": ["string", "null"], "description": "Only on a record imported from a statement."},
                    "ImportID": {"type": "string", "description": "Only on a record imported from a statement."}
                }
            },
            "SyncAccount": {
                "type": "object",
                "description": "An account changed since `since`: its current state in the shape of /find_account_by_uuid, or {uuid, deleted: true}.",
                "required": ["uuid"],
                "properties": {
                    "uuid": {"type": "string"},
                    "deleted": {"const": true},
                    "name": {"type": "string"},
                    "path": {"type": "string"},
                    "type": {"type": "string"},
                    "balance": {"type": "number"},
                    "total_balance": {"type": "number"},
                    "amount_due": {"type": ["number", "null"]},
                    "total_amount_due": {"type": "number"},
                    "allocation": {"type": ["number", "null"]},
                    "parent_uuid": {"type": ["string", "null"]}
                }
            },
            "SyncTransaction": {
                "type": "object",
                "description": "A transaction record (shape of /get_transactions) with its account and the knowledge of the write that appended it (null in full listings).",
                "required": ["Type", "By", "TransactionID", "Channel", "Amount", "Balance", "amount_due", "overall_balance", "Date", "account_uuid", "knowledge"],
                "properties": {
                    "Type": {"enum": ["Deposit", "Withdrawal"]},
                    "By": {"type": "string"},
                    "TransactionID": {"type": "string"},
                    "Channel": {"type": "string"},
                    "Amount": {"type": "number"},
                    "Balance": {"type": "number"},
                    "amount_due": {"type": "number"},
                    "overall_balance": {"type": "number"},
                    "Date": {"type": "string"},
                    "Payee": {"type": ["string", "null"]},
                    "Memo": {"type": ["string", "null"]},
                    "ImportID": {"type": "string"},
                    "account_uuid": {"type": "string"},
                    "knowledge": {"type": ["integer", "null"]}
                }
            },
            "ImportLine": {
                "type": "object",
                "description": "One line of an imported statement and what it does (docs/import.md).",
                "required": ["line", "account", "date", "amount", "payee", "memo", "bank_id", "import_id", "action"],
                "properties": {
                    "line": {"type": "integer"},
                    "account": {"type": ["string", "null"]},
                    "date": {"type": "string"},
                    "amount": {"type": "number"},
                    "payee": {"type": ["string", "null"]},
                    "memo": {"type": ["string", "null"]},
                    "bank_id": {"type": ["string", "null"]},
                    "import_id": {"type": "string"},
                    "action": {"enum": ["deposit", "withdraw", "duplicate", "matched", "needs_attention"]},
                    "reason": {"type": "string", "description": "With needs_attention: why the line is left out."},
                    "matched": {"type": "string", "description": "With matched: the transaction id of the existing transaction taken for this line, or of the scheduled occurrence it pays."},
                    "schedule": {"type": "integer", "description": "With matched, when the line pays an open occurrence of a schedule: the schedule's id (the line is applied and the occurrence marked posted)."},
                    "schedule_name": {"type": "string"},
                    "occurrence": {"type": "integer", "description": "The occurrence's number in the schedule's series."},
                    "occurrence_date": {"type": "string", "description": "The occurrence's day."},
                    "envelope": {"type": "string", "description": "The account the line goes to or comes from, when one is chosen."},
                    "envelope_name": {"type": "string"},
                    "rule": {"type": "integer", "description": "The import rule that chose the envelope, when one did."}
                }
            },
            "ImportRule": {
                "type": "object",
                "description": "An import rule (docs/import.md): a line that passes every condition it has goes to its envelope. The first matching rule chooses.",
                "required": ["id", "field", "match", "value", "min_amount", "max_amount", "applies_to", "envelope", "envelope_name"],
                "properties": {
                    "id": {"type": "integer"},
                    "field": {"enum": ["payee", "memo", "payee_or_memo", null]},
                    "match": {"enum": ["equals", "contains", "starts_with", null]},
                    "value": {"type": ["string", "null"]},
                    "min_amount": {"type": ["number", "null"]},
                    "max_amount": {"type": ["number", "null"]},
                    "applies_to": {"enum": ["withdrawals", "deposits", "both"]},
                    "envelope": {"type": "string"},
                    "envelope_name": {"type": ["string", "null"], "description": "null once the envelope was deleted (the rule then chooses nothing)."}
                }
            },
            "AccessToken": {
                "type": "object",
                "description": "A personal access token (docs/tokens.md); its text is never listed. Times are UTC, YYYY-MM-DDTHH:MM:SS.mmmZ.",
                "required": ["id", "name", "scopes", "created", "last_used", "expires", "expired"],
                "properties": {
                    "id": {"type": "integer"},
                    "name": {"type": "string"},
                    "scopes": {"type": "array", "items": {"enum": ["read", "write"]}},
                    "created": {"type": "string"},
                    "last_used": {"type": ["string", "null"], "description": "Within a minute on the node that answers; other nodes' uses once written (at most once a minute)."},
                    "expires": {"type": ["string", "null"]},
                    "expired": {"type": "boolean"}
                }
            },
            "CsvMapping": {
                "type": "object",
                "required": ["name", "mapping"],
                "properties": {
                    "name": {"type": "string"},
                    "mapping": {"$ref": "#/components/schemas/CsvMappingBody"}
                }
            },
            "CsvMappingBody": {
                "type": "object",
                "description": "A CSV column mapping (docs/import.md)."
            },
            "Schedule": {
                "type": "object",
                "description": "A scheduled transaction (docs/schedules.md).",
                "required": ["id", "name", "type", "amount", "approx_percent", "start", "every", "unit", "month_day", "nth", "weekday", "end_after", "end_date", "weekend", "auto", "next"],
                "properties": {
                    "id": {"type": "integer"},
                    "name": {"type": "string"},
                    "type": {"enum": ["deposit", "withdraw", "move"]},
                    "uuid": {"type": "string"},
                    "from_uuid": {"type": "string"},
                    "to_uuid": {"type": "string"},
                    "amount": {"type": "number"},
                    "approx_percent": {"type": "integer"},
                    "start": {"type": "string"},
                    "every": {"type": "integer"},
                    "unit": {"enum": ["days", "weeks", "months", "years"]},
                    "month_day": {"type": ["string", "null"]},
                    "nth": {"type": ["integer", "null"]},
                    "weekday": {"type": ["string", "null"]},
                    "end_after": {"type": ["integer", "null"]},
                    "end_date": {"type": ["string", "null"]},
                    "weekend": {"enum": ["keep", "before", "after"]},
                    "auto": {"type": "boolean"},
                    "next": {"oneOf": [{"$ref": "#/components/schemas/Occurrence"}, {"type": "null"}]}
                }
            },
            "Webhook": {
                "type": "object",
                "description": "A webhook (docs/webhooks.md); its secret is shown only by /create_webhook.",
                "required": ["id", "url", "events", "description", "bill_days", "created", "enabled", "disabled_reason", "failing_since", "waiting", "failed"],
                "properties": {
                    "id": {"type": "integer"},
                    "url": {"type": "string"},
                    "events": {"type": "array", "items": {"enum": ["transaction.recorded", "account.created", "account.changed", "account.deleted", "envelope.funded", "bill.due"]}},
                    "description": {"type": "string"},
                    "bill_days": {"type": "integer"},
                    "created": {"type": "string"},
                    "enabled": {"type": "boolean"},
                    "disabled_reason": {"type": ["string", "null"]},
                    "failing_since": {"type": ["string", "null"]},
                    "waiting": {"type": "integer", "description": "Deliveries waiting to be sent."},
                    "failed": {"type": "integer", "description": "Deliveries given up, among those kept."}
                }
            },
            "Delivery": {
                "type": "object",
                "description": "One event for one webhook, with its attempts, newest first.",
                "required": ["event_id", "type", "created", "state", "attempts_made", "next_attempt", "attempts"],
                "properties": {
                    "event_id": {"type": "string"},
                    "type": {"type": "string"},
                    "created": {"type": "string"},
                    "state": {"enum": ["waiting", "delivered", "failed"]},
                    "attempts_made": {"type": "integer"},
                    "next_attempt": {"type": ["string", "null"]},
                    "attempts": {"type": "array", "items": {
                        "type": "object",
                        "required": ["at", "status", "latency_ms", "error"],
                        "properties": {
                            "at": {"type": "string"},
                            "status": {"type": ["integer", "null"]},
                            "latency_ms": {"type": "integer"},
                            "error": {"type": ["string", "null"]}
                        }
                    }}
                }
            },
            "Occurrence": {
                "type": "object",
                "description": "One occurrence of a schedule and what became of it.",
                "required": ["schedule", "name", "n", "date", "type", "uuid", "account_name", "amount", "state", "transaction_id"],
                "properties": {
                    "schedule": {"type": "integer"},
                    "name": {"type": "string"},
                    "n": {"type": "integer", "description": "0-based place in the series."},
                    "date": {"type": "string"},
                    "type": {"enum": ["deposit", "withdraw", "move"]},
                    "uuid": {"type": "string"},
                    "account_name": {"type": ["string", "null"]},
                    "to_uuid": {"type": "string"},
                    "to_name": {"type": ["string", "null"]},
                    "amount": {"type": "number", "description": "Negative for a withdrawal."},
                    "state": {"enum": ["posted", "skipped", "due", "failed", "scheduled"]},
                    "reason": {"type": "string"},
                    "transaction_id": {"type": "string"}
                }
            },
            "ForecastAccount": {
                "type": "object",
                "required": ["uuid", "name", "balance_today", "balance_end", "points", "amount_due_today", "amount_due_end"],
                "properties": {
                    "uuid": {"type": "string"},
                    "name": {"type": ["string", "null"]},
                    "balance_today": {"type": "number"},
                    "balance_end": {"type": "number"},
                    "points": {"type": "array", "description": "The balance at the end of each day it changes.", "items": {"type": "object", "required": ["date", "balance"], "properties": {"date": {"type": "string"}, "balance": {"type": "number"}}}},
                    "amount_due_today": {"type": ["number", "null"]},
                    "amount_due_end": {"type": ["number", "null"]}
                }
            },
            "ForecastBill": {
                "type": "object",
                "required": ["uuid", "name", "due_date", "amount_due", "paid", "balance", "shortfall"],
                "properties": {
                    "uuid": {"type": "string"},
                    "name": {"type": ["string", "null"]},
                    "due_date": {"type": "string"},
                    "amount_due": {"type": "number"},
                    "paid": {"type": "number"},
                    "balance": {"type": "number"},
                    "shortfall": {"type": "number"}
                }
            },
            "ForecastUnapplied": {
                "type": "object",
                "required": ["schedule", "n", "date", "reason"],
                "properties": {
                    "schedule": {"type": "integer"},
                    "n": {"type": "integer"},
                    "date": {"type": "string"},
                    "reason": {"type": "string"}
                }
            },
            "ForecastMoney": {
                "type": "object",
                "required": ["start", "deposited", "withdrawn", "end"],
                "properties": {
                    "start": {"type": "number"},
                    "deposited": {"type": "number"},
                    "withdrawn": {"type": "number"},
                    "end": {"type": "number"}
                }
            },
            "ImportSummary": {
                "type": "object",
                "required": ["lines", "deposit", "withdraw", "duplicate", "matched", "needs_attention", "net_amount"],
                "properties": {
                    "lines": {"type": "integer"},
                    "deposit": {"type": "integer"},
                    "withdraw": {"type": "integer"},
                    "duplicate": {"type": "integer"},
                    "matched": {"type": "integer"},
                    "needs_attention": {"type": "integer"},
                    "net_amount": {"type": "number"}
                }
            },
            "TreeNode": {
                "type": "object",
                "description": "SPEC 10.18.",
                "required": ["name", "account_uuid", "account_class", "balance", "child_accounts_list", "child_accounts"],
                "properties": {
                    "name": {"type": "string"},
                    "account_uuid": {"type": "string"},
                    "account_class": {"type": "string"},
                    "balance": {"type": "number"},
                    "transactions": {"type": "array", "items": {"$ref": "#/components/schemas/Transaction"}, "description": "Absent when asked with transactions=false."},
                    "child_accounts_list": {"type": "object"},
                    "total_balance": {"type": "number"},
                    "total_due": {"type": "number"},
                    "child_accounts": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/TreeNode"}},
                    "time_series": {"type": "array", "items": {"type": "object"}}
                }
            }
        }
    })
}

/// The whole document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for e in ENDPOINTS {
        let mut item = Map::new();
        item.insert(e.verb.as_str().to_ascii_lowercase(), operation(e));
        paths.insert(e.path.to_string(), Value::Object(item));
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "pfm",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Personal finance manager: envelope-budget account trees over HTTP + JSON. \
    Every parameter may come from the query string, a JSON body or a form body, on every method; \
    a name in the query wins (SPEC 3.2). Every answer has Content-Type application/json except /metrics. \
    Whole-log answers (/get_transactions without limit, /get_minimal_tree) holding more than \
    STREAM_MIN_RECORDS records (default 4096) are streamed with chunked transfer encoding and no \
    Content-Length; one cut short (a storage failure, or the account deleted while it is sent) \
    ends without its last chunk."
        },
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": components()
    })
}

/// The document's text, built once.
pub fn text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| document().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_documented_and_nothing_else() {
        let doc = document();
        let paths = doc["paths"].as_object().unwrap();
        for e in ENDPOINTS {
            let verb = e.verb.as_str().to_ascii_lowercase();
            let item = paths.get(e.path).unwrap_or_else(|| panic!("{} undocumented", e.path));
            let ops: Vec<&String> = item.as_object().unwrap().keys().collect();
            assert_eq!(ops, [&verb], "{}", e.path);
            let op = &item[&verb];
            assert!(op["responses"]["200"].is_object(), "{}", e.path);
            assert!(op["summary"].as_str().is_some_and(|s| !s.is_empty()));
        }
        assert_eq!(paths.len(), ENDPOINTS.len());
    }

    /// The messages a handler answers come from the declarations the document is built from.
    #[test]
    fn declared_messages_and_limits_reach_the_document() {
        let doc = document();
        let text = |path: &str, verb: &str, status: &str| {
            doc["paths"][path][verb]["responses"][status]["description"].as_str().unwrap().to_string()
        };
        let dep = text("/deposit", "post", "400");
        for msg in [
            "`uuid is required`",
            "`amount must be > 0`",
            "`channel is required`",
            "`channel is too long`",
            "`Invalid transaction_date format`",
        ] {
            assert!(dep.contains(msg), "{msg} in {dep}");
        }
        assert!(text("/deposit", "post", "409").contains("This deposit has already been made"));
        assert!(text("/get_balance", "get", "403").contains("Account not found or unauthorized"));
        assert!(text("/get_balance", "get", "404").contains("User not found or unauthorized access"));
        assert!(text("/set_priority", "post", "400").contains("`Priority is too large`"));
        let channel = &doc["paths"]["/deposit"]["post"]["parameters"][2];
        assert_eq!(channel["name"], "channel");
        assert!(channel["description"].as_str().unwrap().contains("At most 256 characters"));
    }
}
