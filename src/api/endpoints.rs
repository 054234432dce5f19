//! Every endpoint of the service (SPEC 1.1 and docs/api.md), each declared once beside its
//! handler; this table is what the router, the OpenAPI document and the metrics labels read.

use super::decl::{row, Access, Body, Endpoint, Param, Row, Shape, Verb};
use super::{
    analytics, attrs, auth, import, import_settings as settings, money, schedules, sync, tokens, tree,
    webhooks,
};

/// Which handler answers a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ep {
    Ping,
    Register,
    Login,
    GenerateToken,
    Deposit,
    Withdraw,
    Distribute,
    MoveBalance,
    AddSubAccount,
    SetChildAllocation,
    Delete,
    ListChildAccounts,
    ListAllAccounts,
    FindByName,
    FindByUuid,
    GetBalance,
    GetTransactions,
    TotalBalance,
    TotalDue,
    DueWithinDays,
    Spending,
    TotalIncome,
    AllocatedAmount,
    IncomeUtilization,
    WalkingAmount,
    MinimalTree,
    ChangeStatus,
    GetStatus,
    SetPriority,
    GetPriority,
    SetDueDate,
    GetDueDate,
    SetFixedAmount,
    GetFixedAmount,
    SetAccountType,
    GetAccountType,
    SetFreq,
    GetFreq,
    SetPeriods,
    GetPeriods,
    /// Delta sync (docs/api.md).
    Changes,
    /// Bank statement import and its settings (docs/import.md).
    Import,
    ListImportRules,
    AddImportRule,
    UpdateImportRule,
    ReorderImportRules,
    DeleteImportRule,
    ListCsvMappings,
    SaveCsvMapping,
    DeleteCsvMapping,
    /// Scheduled transactions (docs/schedules.md).
    ListSchedules,
    GetSchedule,
    CreateSchedule,
    UpdateSchedule,
    DeleteSchedule,
    SkipSchedule,
    PostSchedule,
    Upcoming,
    Forecast,
    /// Personal access tokens (docs/tokens.md).
    CreateToken,
    ListTokens,
    RevokeToken,
    /// Webhooks (docs/webhooks.md).
    CreateWebhook,
    ListWebhooks,
    UpdateWebhook,
    DeleteWebhook,
    WebhookDeliveries,
    RedeliverWebhook,
    /// Operational endpoints answered by `http` itself, never by a handler.
    Ops(Op),
}

/// The operational endpoints (docs/api.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Healthz,
    Readyz,
    Metrics,
    OpenApi,
}

/// The `uuid` of most endpoints, by the text of its "required" message (SPEC keeps the
/// reference's spellings).
pub static UUID_LOWER: Param = Param::text("uuid", Some("uuid is required"), None, "Account uuid.");
pub static UUID_UPPER: Param = Param::text("uuid", Some("UUID is required"), None, "Account uuid.");

/// SPEC 3.6: every bearer endpoint that reads the caller's tree.
pub const NO_TREE: Row = row!(404, "caller has no tree", "`User not found or unauthorized access`");

/// An endpoint answered by `http` itself: no parameters, no table.
const fn op(path: &'static str, op: Op, summary: &'static str) -> Endpoint {
    Endpoint {
        verb: Verb::Get,
        path,
        ep: Ep::Ops(op),
        prefix: "",
        summary,
        access: Access::Public,
        writes: false,
        body: Body::Params,
        params: &[],
        fields: &[],
        errors: &[],
    }
}

static PING: Endpoint = Endpoint {
    verb: Verb::Get,
    path: "/__ping__",
    ep: Ep::Ping,
    prefix: "",
    summary: "Liveness check of the SPEC (answers {\"status\":\"ok\"})",
    access: Access::Public,
    writes: false,
    body: Body::Params,
    params: &[],
    fields: &[("status", Shape::Str)],
    errors: &[],
};
static HEALTHZ: Endpoint = op("/healthz", Op::Healthz, "Liveness probe: the process answers");
static READYZ: Endpoint =
    op("/readyz", Op::Readyz, "Readiness probe: storage answers (503 when it does not)");
static METRICS: Endpoint = op("/metrics", Op::Metrics, "Prometheus metrics (404 when METRICS_ENABLED=false)");
static OPENAPI: Endpoint = op("/openapi.json", Op::OpenApi, "This document");

/// Every route, in the order of SPEC 1.1 and then the service's own.
pub static ENDPOINTS: &[&Endpoint] = &[
    &PING,
    &auth::REGISTER,
    &auth::LOGIN,
    &auth::GENERATE_TOKEN,
    &money::DEPOSIT,
    &money::WITHDRAW,
    &money::DISTRIBUTE,
    &money::MOVE_BALANCE,
    &tree::ADD_SUB_ACCOUNT,
    &tree::SET_CHILD_ALLOCATION,
    &tree::DELETE,
    &tree::LIST_CHILD_ACCOUNTS,
    &tree::LIST_ALL_ACCOUNTS,
    &tree::FIND_BY_NAME,
    &tree::FIND_BY_UUID,
    &analytics::GET_BALANCE,
    &analytics::GET_TRANSACTIONS,
    &analytics::TOTAL_BALANCE,
    &analytics::TOTAL_DUE,
    &analytics::DUE_WITHIN_DAYS,
    &analytics::SPENDING,
    &analytics::TOTAL_INCOME,
    &analytics::ALLOCATED_AMOUNT,
    &analytics::INCOME_UTILIZATION,
    &analytics::WALKING_AMOUNT,
    &analytics::MINIMAL_TREE,
    &attrs::CHANGE_STATUS,
    &attrs::GET_STATUS,
    &attrs::SET_PRIORITY,
    &attrs::GET_PRIORITY,
    &attrs::SET_DUE_DATE,
    &attrs::GET_DUE_DATE,
    &attrs::SET_FIXED_AMOUNT,
    &attrs::GET_FIXED_AMOUNT,
    &attrs::SET_ACCOUNT_TYPE,
    &attrs::GET_ACCOUNT_TYPE,
    &attrs::SET_FREQ,
    &attrs::GET_FREQ,
    &attrs::SET_PERIODS,
    &attrs::GET_PERIODS,
    &HEALTHZ,
    &READYZ,
    &METRICS,
    &OPENAPI,
    &sync::CHANGES,
    &import::IMPORT,
    &settings::LIST_RULES,
    &settings::ADD_RULE,
    &settings::UPDATE_RULE,
    &settings::REORDER_RULES,
    &settings::DELETE_RULE,
    &settings::LIST_MAPPINGS,
    &settings::SAVE_MAPPING,
    &settings::DELETE_MAPPING,
    &schedules::LIST,
    &schedules::GET,
    &schedules::CREATE,
    &schedules::UPDATE,
    &schedules::DELETE,
    &schedules::SKIP,
    &schedules::POST_NOW,
    &schedules::UPCOMING,
    &schedules::FORECAST,
    &tokens::CREATE,
    &tokens::LIST,
    &tokens::REVOKE,
    &webhooks::CREATE,
    &webhooks::LIST,
    &webhooks::UPDATE,
    &webhooks::DELETE,
    &webhooks::DELIVERIES,
    &webhooks::REDELIVER,
];

/// Members the reference writes as R data frames (rows of plain values, SPEC 8.3, 10.18): the
/// declared fields of that shape, and those of a /get_minimal_tree node.
pub fn data_frames() -> &'static [&'static str] {
    static FRAMES: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        let mut names: Vec<&'static str> = ENDPOINTS
            .iter()
            .flat_map(|e| e.fields.iter())
            .filter(|(_, shape)| matches!(shape, Shape::Rows { frame: true, .. }))
            .map(|(name, _)| *name)
            .chain(analytics::TREE_NODE_FRAMES)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    });
    &FRAMES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_has_one_path_and_its_own_handler() {
        for (i, a) in ENDPOINTS.iter().enumerate() {
            for b in &ENDPOINTS[i + 1..] {
                assert_ne!(a.path, b.path);
                assert_ne!(a.ep, b.ep, "{} and {}", a.path, b.path);
            }
            assert!(!a.summary.is_empty(), "{}", a.path);
            let mut names: Vec<&str> = a.params.iter().map(|p| p.name).collect();
            names.dedup();
            assert_eq!(names.len(), a.params.len(), "{}: a parameter declared twice", a.path);
        }
    }

    /// A row a handler answers with carries exactly one message between backticks.
    #[test]
    fn row_messages_are_what_the_table_shows() {
        assert_eq!(NO_TREE.message(), "User not found or unauthorized access");
        assert_eq!(NO_TREE.err().to_string_for_test(), (404, "User not found or unauthorized access".into()));
    }

    #[test]
    fn the_data_frames_are_the_logs_and_the_series() {
        assert_eq!(data_frames(), ["time_series", "transactions"]);
    }

    #[test]
    fn only_bearer_endpoints_write_and_only_ops_have_no_prefix() {
        for e in ENDPOINTS {
            assert!(!e.writes || e.access == Access::Bearer, "{}", e.path);
            assert_eq!(e.prefix.is_empty(), matches!(e.ep, Ep::Ops(_) | Ep::Ping), "{}", e.path);
        }
    }
}
