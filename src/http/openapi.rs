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
use super::openapi_errors::{Row, TABLES};
use super::router::{Ep, Op, ROUTES};

/// How a parameter's value is read (SPEC 3.4).
#[derive(Clone, Copy)]
enum T {
    Str,
    /// Decimal with at most 2 fractional digits.
    Money,
    /// Any decimal number.
    Num,
    /// A whole number (`30`, `30.0`, `"30"`, `3e1`).
    Int,
    Date,
    Bool,
    /// Seconds (or days) since the epoch, or a date (SPEC 5.4).
    NumericDate,
}

/// One parameter: name, type, required, meaning.
type P = (&'static str, T, bool, &'static str);

/// A field of a success answer and its JSON Schema.
type F = (&'static str, Value);

/// Who may call an operation.
#[derive(Clone, Copy, PartialEq)]
enum Auth {
    Bearer,
    Public,
    /// /register: public without an `Authorization` header, bearer with one (SPEC 4.1).
    Optional,
}

struct Doc {
    summary: &'static str,
    params: Vec<P>,
    fields: Vec<F>,
    auth: Auth,
}

fn s() -> Value {
    json!({"type": "string"})
}
fn n() -> Value {
    json!({"type": "number"})
}
fn i() -> Value {
    json!({"type": "integer"})
}
fn ns() -> Value {
    json!({"type": ["string", "null"]})
}
fn nn() -> Value {
    json!({"type": ["number", "null"]})
}
fn ni() -> Value {
    json!({"type": ["integer", "null"]})
}
fn strs() -> Value {
    json!({"type": "array", "items": {"type": "string"}})
}

const UUID: P = ("uuid", T::Str, true, "Account uuid.");

fn doc(summary: &'static str, params: Vec<P>, fields: Vec<F>) -> Doc {
    Doc { summary, params, fields, auth: Auth::Bearer }
}

fn range_params() -> Vec<P> {
    vec![
        UUID,
        ("from", T::Date, false, "First day (SPEC 8.1); default today minus 365000 days."),
        ("to", T::Date, false, "Last day, inclusive; default today."),
    ]
}

fn range_fields(name: &'static str) -> Vec<F> {
    vec![("uuid", s()), ("from", s()), ("to", s()), (name, n())]
}

fn tx_params() -> Vec<P> {
    vec![
        UUID,
        ("amount", T::Money, true, "Amount, > 0, at most 2 decimals."),
        ("channel", T::Str, true, "Free text, e.g. ABSA, mpesa (at most 256 characters)."),
        ("transaction_number", T::Str, false, "Transaction id; generated when absent."),
        ("initiated_by", T::Str, false, "Recorded as the record's By; default User."),
        ("transaction_date", T::Date, false, "Recorded date; default now."),
    ]
}

fn describe(ep: Ep) -> Doc {
    match ep {
        Ep::Ping => Doc {
            summary: "Liveness check of the SPEC (answers {\"status\":\"ok\"})",
            params: vec![],
            fields: vec![],
            auth: Auth::Public,
        },
        Ep::Register => Doc {
            summary: "Create a user and its tree (password mode without a token, token mode with one)",
            params: vec![
                (
                    "user_id",
                    T::Str,
                    true,
                    "^[A-Za-z0-9_-]{1,128}$; in token mode equal to the token's user_id.",
                ),
                ("password", T::Str, false, "8 to 128 characters; required without a token."),
                ("initial_balance", T::Money, false, "Opening balance of Main, >= 0; default 0."),
            ],
            fields: vec![("user_id", s()), ("uuid", s())],
            auth: Auth::Optional,
        },
        Ep::Login => Doc {
            summary: "Exchange user_id and password for a bearer token",
            params: vec![("user_id", T::Str, true, "User id."), ("password", T::Str, true, "Password.")],
            fields: vec![
                ("user_id", s()),
                ("role", s()),
                ("token", s()),
                ("token_type", s()),
                ("expires_in", i()),
            ],
            auth: Auth::Public,
        },
        Ep::GenerateToken => Doc {
            summary: "Mint a token (test environments; 403 unless TOKEN_ENDPOINT_ENABLED=true)",
            params: vec![
                ("user_id", T::Str, true, "user_id claim."),
                ("role", T::Str, true, "role claim."),
                ("type", T::Str, false, "session, or anything else for an expiry token."),
                ("session_id", T::Str, false, "Required for session tokens."),
                ("exp", T::NumericDate, false, "Required for expiry tokens."),
                ("nbf", T::NumericDate, false, "Not-before."),
                ("iat", T::NumericDate, false, "Issued-at; default now."),
                ("iss", T::Str, false, "Copied into the token."),
                ("sub", T::Str, false, "Copied into the token."),
                ("aud", T::Str, false, "Copied into the token."),
                ("jti", T::Str, false, "Copied into the token."),
            ],
            fields: vec![("user_id", s()), ("token", s()), ("timestamp", s())],
            auth: Auth::Public,
        },
        Ep::Deposit => doc(
            "Deposit external money into an account; it flows down the tree",
            tx_params(),
            vec![("account_uuid", s()), ("amount", n()), ("balance", n())],
        ),
        Ep::Withdraw => {
            doc("Withdraw money from an account", tx_params(), vec![("account_uuid", s()), ("balance", n())])
        }
        Ep::Distribute => doc(
            "Move part of an account's balance down to its active children",
            vec![
                UUID,
                ("amount", T::Money, true, "Amount, > 0."),
                ("transaction", T::Str, false, "Id given to the children's deposit records."),
                ("initiated_by", T::Str, false, "Default System."),
            ],
            vec![("account_uuid", s()), ("message", s()), ("amount", n()), ("balance", n())],
        ),
        Ep::MoveBalance => doc(
            "Transfer money between two accounts of the tree",
            vec![
                ("from_uuid", T::Str, true, "Source account."),
                ("to_uuid", T::Str, true, "Destination account."),
                ("amount", T::Money, true, "Amount, > 0."),
            ],
            vec![("message", s()), ("from_uuid", s()), ("to_uuid", s()), ("amount", n())],
        ),
        Ep::AddSubAccount => doc(
            "Create a child account under a parent",
            vec![
                ("parent_uuid", T::Str, true, "Parent account."),
                ("name", T::Str, true, "Unique among the parent's children, at most 128 characters."),
                ("allocation", T::Num, false, "Share of the parent's deposits, 0..1; default 0."),
                ("priority", T::Num, false, "0..1e9; default 0."),
                ("fixed_amount", T::Money, false, ">= 0 (grandchild accounts)."),
                ("due_date", T::Date, false, "Grandchild accounts."),
                ("account_type", T::Str, false, "Grandchild accounts; default Expense."),
                ("freq", T::Int, false, "Days, 0..36500 (grandchild accounts)."),
                ("status", T::Str, false, "active, inactive, closed or another label; default active."),
            ],
            vec![("message", s()), ("uuid", s()), ("child_type", s()), ("allocation", n())],
        ),
        Ep::SetChildAllocation => doc(
            "Set a direct child's allocation",
            vec![
                ("parent_uuid", T::Str, true, "Parent account."),
                ("child_name", T::Str, true, "Name of a direct child."),
                ("allocation", T::Num, true, "0..1."),
            ],
            vec![("message", s()), ("total_allocation", n())],
        ),
        Ep::Delete => doc(
            "Delete an account and its subtree, or the whole user for the main account",
            vec![UUID],
            vec![("uuid", s()), ("message", s())],
        ),
        Ep::ListChildAccounts => doc(
            "Names of an account's direct children",
            vec![UUID],
            vec![("uuid", s()), ("account_name", s()), ("child_account_names", strs()), ("child_count", i())],
        ),
        Ep::ListAllAccounts => doc(
            "Names of every account, starting from one (SPEC 10.16)",
            vec![UUID],
            vec![("uuid", s()), ("total_accounts", i()), ("account_names", strs())],
        ),
        Ep::FindByName => doc(
            "Accounts with an exact name",
            vec![("name", T::Str, true, "Exact, case-sensitive name.")],
            vec![
                ("search_name", s()),
                (
                    "matches",
                    json!({"type": "array", "items": {"type": "object", "required": ["uuid", "name", "path"],
                        "properties": {"uuid": s(), "name": s(), "path": s()}}}),
                ),
                ("total_matches", i()),
            ],
        ),
        Ep::FindByUuid => doc(
            "One account's summary",
            vec![UUID],
            vec![
                ("uuid", s()),
                ("name", s()),
                ("path", s()),
                ("type", s()),
                ("balance", n()),
                ("total_balance", n()),
                ("amount_due", nn()),
                ("total_amount_due", n()),
                ("allocation", nn()),
                ("parent_uuid", ns()),
            ],
        ),
        Ep::GetBalance => doc("An account's own balance", vec![UUID], vec![("uuid", s()), ("balance", n())]),
        Ep::GetTransactions => doc(
            "An account's transaction log in recording order; paged when limit is given",
            vec![
                UUID,
                ("limit", T::Int, false, "Page size, 1..1000. Without it the whole log is answered (streamed past STREAM_MIN_RECORDS records)."),
                ("cursor", T::Str, false, "next_cursor of the previous page (only with limit)."),
            ],
            vec![
                ("uuid", s()),
                ("transaction_count", i()),
                (
                    "transactions",
                    json!({"type": "array", "items": {"$ref": "#/components/schemas/Transaction"}}),
                ),
            ],
        ),
        Ep::TotalBalance => doc(
            "Total balance of an account's subtree",
            vec![UUID],
            vec![("uuid", s()), ("total_balance", n())],
        ),
        Ep::TotalDue => doc(
            "Total amount due of an account's subtree",
            vec![UUID],
            vec![("uuid", s()), ("total_due", n())],
        ),
        Ep::DueWithinDays => doc(
            "Amount due within a number of days",
            vec![UUID, ("days", T::Num, true, "Days, 0..1000000.")],
            vec![("uuid", s()), ("total_due", n()), ("within_days", n())],
        ),
        Ep::Spending => doc("Spending over a day range", range_params(), range_fields("total_spending")),
        Ep::TotalIncome => doc("Income over a day range", range_params(), range_fields("total_income")),
        Ep::AllocatedAmount => {
            doc("Allocated amount over a day range", range_params(), range_fields("allocated_amount"))
        }
        Ep::IncomeUtilization => {
            doc("Income utilization over a day range", range_params(), range_fields("utilization"))
        }
        Ep::WalkingAmount => {
            let mut params = range_params();
            params.push(("amt_type", T::Str, false, "amount_due (default) or anything else for balances."));
            doc(
                "Walking amount over a day range",
                params,
                vec![("uuid", s()), ("amt_type", s()), ("from", s()), ("to", s()), ("walking_amount", n())],
            )
        }
        Ep::MinimalTree => doc(
            "Nested summary of an account and its descendants",
            vec![
                ("uuid", T::Str, false, "Account; default the main account (an empty string is a 400)."),
                ("n", T::Num, false, "Lookahead days, > 0; default 30."),
                ("start_date", T::Date, false, "Range start."),
                ("end_date", T::Date, false, "Range end."),
                ("ts_data", T::Bool, false, "Include a daily time series; default false."),
                ("transactions", T::Bool, false, "Include every node's log; default true. Not in SPEC: false leaves the `transactions` key out of every node."),
            ],
            vec![("uuid", s()), ("minimal_tree", json!({"$ref": "#/components/schemas/TreeNode"}))],
        ),
        Ep::ChangeStatus => doc(
            "Change a child account's status",
            vec![UUID, ("status", T::Str, true, "active, inactive, closed or another label.")],
            vec![("uuid", s()), ("new_status", s()), ("message", s())],
        ),
        Ep::GetStatus => {
            doc("A child account's status", vec![UUID], vec![("uuid", s()), ("account_status", s())])
        }
        Ep::SetPriority => doc(
            "Set a child account's priority",
            vec![UUID, ("priority", T::Num, true, "0..1e9.")],
            vec![("message", s()), ("uuid", s()), ("priority", n())],
        ),
        Ep::GetPriority => {
            doc("A child account's priority", vec![UUID], vec![("uuid", s()), ("priority", n())])
        }
        Ep::SetDueDate => doc(
            "Set or clear a grandchild account's due date",
            vec![UUID, ("due_date", T::Date, false, "Missing or null clears it; an empty string is a 400.")],
            vec![("message", s()), ("uuid", s()), ("due_date", ns())],
        ),
        Ep::GetDueDate => {
            doc("A grandchild account's due date", vec![UUID], vec![("uuid", s()), ("due_date", ns())])
        }
        Ep::SetFixedAmount => doc(
            "Set a grandchild account's fixed amount",
            vec![UUID, ("fixed_amount", T::Money, true, ">= 0.")],
            vec![("uuid", s()), ("fixed_amount", n()), ("amount_due", n())],
        ),
        Ep::GetFixedAmount => {
            doc("A grandchild account's fixed amount", vec![UUID], vec![("uuid", s()), ("fixed_amount", n())])
        }
        Ep::SetAccountType => doc(
            "Set a grandchild account's type label",
            vec![
                UUID,
                ("account_type", T::Str, true, "Free label, at most 64 characters (Bill rolls over)."),
            ],
            vec![("message", s()), ("uuid", s()), ("account_type", s())],
        ),
        Ep::GetAccountType => {
            doc("A grandchild account's type label", vec![UUID], vec![("uuid", s()), ("account_type", s())])
        }
        Ep::SetFreq => doc(
            "Set a grandchild account's period length in days",
            vec![UUID, ("account_freq", T::Int, true, "1..36500.")],
            vec![("message", s()), ("uuid", s()), ("freq", i())],
        ),
        Ep::GetFreq => {
            doc("A grandchild account's period length", vec![UUID], vec![("uuid", s()), ("freq", ni())])
        }
        Ep::SetPeriods => doc(
            "Set a grandchild account's number of periods",
            vec![UUID, ("periods", T::Int, true, "1..1000000.")],
            vec![("uuid", s()), ("periods", i()), ("message", s())],
        ),
        Ep::GetPeriods => {
            doc("A grandchild account's number of periods", vec![UUID], vec![("uuid", s()), ("periods", n())])
        }
        Ep::Changes => doc(
            "Delta sync: accounts changed and transactions appended since a server_knowledge, paged",
            vec![
                (
                    "since",
                    T::Int,
                    false,
                    "The server_knowledge of the client's last complete sync; 0 (default) lists everything.",
                ),
                ("limit", T::Int, false, "Page size (accounts plus transactions), 1..1000; default 1000."),
                ("cursor", T::Str, false, "next_cursor of the previous page, with the same since."),
            ],
            vec![
                ("since", i()),
                ("server_knowledge", i()),
                ("full_listing", json!({"type": "boolean"})),
                ("accounts", json!({"type": "array", "items": {"$ref": "#/components/schemas/SyncAccount"}})),
                (
                    "transactions",
                    json!({"type": "array", "items": {"$ref": "#/components/schemas/SyncTransaction"}}),
                ),
                ("next_cursor", ns()),
            ],
        ),
        Ep::Ops(op) => Doc {
            summary: match op {
                Op::Healthz => "Liveness probe: the process answers",
                Op::Readyz => "Readiness probe: storage answers (503 when it does not)",
                Op::Metrics => "Prometheus metrics (404 when METRICS_ENABLED=false)",
                Op::OpenApi => "This document",
            },
            params: vec![],
            fields: vec![],
            auth: Auth::Public,
        },
    }
}

/// Schema of a parameter's value in the query string: what a valid value looks like (the text
/// of any other value is read too, and answered with the parameter's 400).
fn query_schema(t: T) -> Value {
    match t {
        T::Str | T::Date | T::NumericDate => json!({"type": "string"}),
        T::Money | T::Num => json!({"type": "number"}),
        T::Int => json!({"type": "integer"}),
        T::Bool => json!({"type": "boolean"}),
    }
}

/// JSON Schema of a parameter's value in a JSON body (form values are strings).
fn body_schema(t: T) -> Value {
    match t {
        T::Str => json!({"type": "string"}),
        T::Money | T::Num => json!({"type": ["number", "string"]}),
        T::Int => json!({"type": ["integer", "number", "string"]}),
        T::Date => json!({"type": ["string", "null"]}),
        T::Bool => json!({"type": ["boolean", "string"]}),
        T::NumericDate => json!({"type": ["number", "string"]}),
    }
}

fn type_note(t: T) -> &'static str {
    match t {
        T::Str => "",
        T::Money => " Money: a decimal (number or text), at most 2 decimals, at most 1e12.",
        T::Num => " A decimal number (JSON number or text).",
        T::Int => " A whole number (30, 30.0, \"30\").",
        T::Date => " Date: YYYY-MM-DD, YYYY-MM-DD[T ]HH:MM[:SS][Z|+HH:MM], or D/M/YYYY (SPEC 3.4).",
        T::Bool => " true/false (also TRUE, False, T, F).",
        T::NumericDate => " Seconds since the epoch (days when <= 1000000), or a date.",
    }
}

fn description(p: &P) -> String {
    let (_, t, required, what) = *p;
    let req = if required { "Required (from the query or the body). " } else { "" };
    format!("{req}{what}{}", type_note(t))
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

/// Failures the service adds to /get_transactions' SPEC table (pagination, docs/api.md).
static PAGING_ROWS: &[Row] = &[
    Row {
        statuses: &[400],
        status_note: "400",
        condition: "`limit` present and not a whole number from 1 to 1000 (checked after `uuid`)",
        error: "`limit must be an integer between 1 and 1000`",
    },
    Row {
        statuses: &[400],
        status_note: "400",
        condition: "`limit` present and `cursor` not one the service issued for this account",
        error: "`Invalid cursor`",
    },
];

/// The endpoint's error table (SPEC 5-9), with the rows the service adds.
fn error_rows(path: &str) -> Vec<&'static Row> {
    let mut rows: Vec<&Row> =
        TABLES.iter().filter(|(p, _, _)| *p == path).flat_map(|(_, _, rows)| rows.iter()).collect();
    if path == "/get_transactions" {
        rows.extend(PAGING_ROWS);
    }
    rows
}

fn error_response(status: u16, rows: &[&Row], bearer: bool, prefix: &str, keyed: bool) -> Value {
    let what = match status {
        400 => "A parameter is missing or invalid. Besides the rows below: `Invalid request body` for a \
malformed JSON body or one that is not an object, and `Invalid value for parameter '<name>'` for an array \
of several values or a non-empty object as a value",
        401 if bearer => "Missing, malformed or invalid bearer token: `Missing or invalid token` or \
`Invalid or expired token` (filter-shaped: success, status, error only)",
        401 => "Unauthorized",
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
        text.push_str(r.condition);
        text.push_str(": ");
        text.push_str(r.error);
        if r.statuses.len() > 1 {
            text.push_str(&format!(" ({})", r.status_note));
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

fn success_schema(ep: Ep, fields: &[F]) -> Value {
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
    for (name, schema) in fields {
        props.insert((*name).into(), schema.clone());
        required.push(name);
    }
    if ep == Ep::GetTransactions {
        props.insert(
            "next_cursor".into(),
            json!({"type": ["string", "null"], "description": "Present when limit was given; null on the last page."}),
        );
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

fn operation(path: &str, ep: Ep, prefix: &str) -> Value {
    let d = describe(ep);
    let mut op = Map::new();
    op.insert("operationId".into(), json!(path.trim_start_matches('/').replace(['.', '_'], "-")));
    op.insert("summary".into(), json!(d.summary));
    match d.auth {
        Auth::Bearer => {}
        Auth::Public => {
            op.insert("security".into(), json!([]));
        }
        Auth::Optional => {
            op.insert("security".into(), json!([{}, {"bearerAuth": []}]));
        }
    }
    let keyed = idem::honoured(ep);
    if !d.params.is_empty() {
        let mut query: Vec<Value> = d
            .params
            .iter()
            .map(|p| {
                json!({"name": p.0, "in": "query", "required": false, "description": description(p),
                "schema": query_schema(p.1)})
            })
            .collect();
        if keyed {
            query.push(idempotency_key_param());
        }
        op.insert("parameters".into(), json!(query));
        let mut props = Map::new();
        for p in &d.params {
            let mut sch = body_schema(p.1);
            sch["description"] = json!(description(p));
            props.insert(p.0.into(), sch);
        }
        let body = json!({"type": "object", "properties": props});
        let form_props: Map<String, Value> =
            d.params.iter().map(|p| (p.0.to_string(), json!({"type": "string"}))).collect();
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
    let mut responses = Map::new();
    let ok_content = if ep == Ep::Ops(Op::Metrics) {
        json!({"text/plain": {"schema": {"type": "string"}}})
    } else {
        json!({"application/json": {"schema": success_schema(ep, &d.fields)}})
    };
    let mut ok_headers = common_headers(true);
    if keyed {
        ok_headers["Idempotent-Replayed"] = json!({"$ref": "#/components/headers/IdempotentReplayed"});
    }
    responses.insert(
        "200".into(),
        json!({"description": "Success", "headers": ok_headers, "content": ok_content}),
    );
    let rows = error_rows(path);
    let mut statuses: Vec<u16> = rows.iter().flat_map(|r| r.statuses.iter().copied()).collect();
    statuses.push(429);
    match ep {
        Ep::Ops(Op::Readyz) => statuses.push(503),
        Ep::Ops(Op::Metrics) => statuses.push(404),
        // Answered before the body is read: no 413, 415, 500 or 401.
        Ep::Ping | Ep::Ops(_) => {}
        _ => statuses.extend([413, 415, 500]),
    }
    if d.auth != Auth::Public || ep == Ep::Register {
        statuses.push(401);
    }
    if keyed {
        statuses.extend([400, 409, 422]);
    }
    statuses.sort_unstable();
    statuses.dedup();
    for st in statuses {
        let bearer = d.auth != Auth::Public;
        responses.insert(st.to_string(), error_response(st, &rows, bearer, prefix, keyed));
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
            "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": "HS256 JWT with a user_id claim, from /login (SPEC 4.3)."}
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
                    "Date": {"type": "string", "description": "YYYY-MM-DD HH:MM:SS, UTC."}
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
                    "account_uuid": {"type": "string"},
                    "knowledge": {"type": ["integer", "null"]}
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
    for r in ROUTES {
        let mut item = Map::new();
        item.insert(r.method.as_str().to_ascii_lowercase(), operation(r.path, r.ep, r.prefix));
        paths.insert(r.path.to_string(), Value::Object(item));
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
        for r in ROUTES {
            let item = paths.get(r.path).unwrap_or_else(|| panic!("{} undocumented", r.path));
            let ops: Vec<&String> = item.as_object().unwrap().keys().collect();
            assert_eq!(ops, [&r.method.as_str().to_ascii_lowercase()], "{}", r.path);
            let op = &item[r.method.as_str().to_ascii_lowercase()];
            assert!(op["responses"]["200"].is_object(), "{}", r.path);
            assert!(op["summary"].as_str().is_some_and(|s| !s.is_empty()));
        }
        for p in paths.keys() {
            assert!(ROUTES.iter().any(|r| r.path == p), "{p} documented but not routed");
        }
        assert_eq!(paths.len(), ROUTES.len());
    }

    #[test]
    fn every_spec_route_has_its_error_table_and_no_table_is_orphaned() {
        for r in ROUTES.iter().filter(|r| !matches!(r.ep, Ep::Ops(_))) {
            assert!(TABLES.iter().any(|(p, _, _)| *p == r.path), "{} has no error table", r.path);
        }
        for (p, _, rows) in TABLES {
            assert!(ROUTES.iter().any(|r| r.path == *p), "{p} is not routed");
            assert!(rows.iter().all(|r| !r.statuses.is_empty() && !r.error.is_empty()), "{p}");
        }
        // A status of the table is a documented response, with the row's message.
        let doc = document();
        let dep = &doc["paths"]["/deposit"]["post"]["responses"];
        assert!(dep["409"]["description"].as_str().unwrap().contains("This deposit has already been made"));
        let bal = &doc["paths"]["/get_balance"]["get"]["responses"];
        assert!(bal["403"]["description"].as_str().unwrap().contains("Account not found or unauthorized"));
        assert!(bal["404"]["description"]
            .as_str()
            .unwrap()
            .contains("User not found or unauthorized access"));
    }
}
