//! Method + path -> endpoint (SPEC 1.1). Paths match exactly; each endpoint has one method.

use hyper::Method;

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

pub struct Route {
    pub path: &'static str,
    pub method: Method,
    pub ep: Ep,
    /// Prefix of the 500 message (SPEC 3.6).
    pub prefix: &'static str,
}

macro_rules! routes {
    ($( $m:ident $path:literal => $ep:ident $(($op:ident))?, $prefix:literal; )*) => {
        pub static ROUTES: &[Route] = &[ $( Route { path: $path, method: Method::$m, ep: Ep::$ep $((Op::$op))?, prefix: $prefix }, )* ];
    };
}

routes! {
    GET "/__ping__" => Ping, "";
    POST "/register" => Register, "Account creation Failed";
    POST "/login" => Login, "Login failed";
    POST "/generate_access_token" => GenerateToken, "Failed to issue token";
    POST "/deposit" => Deposit, "Deposit failed";
    POST "/withdraw" => Withdraw, "Failed";
    POST "/distribute" => Distribute, "Distribution failed";
    POST "/move_balance" => MoveBalance, "Failed";
    POST "/add_sub_account" => AddSubAccount, "Child account not added";
    POST "/set_child_allocation" => SetChildAllocation, "Allocation not set";
    DELETE "/delete" => Delete, "Failed to delete account";
    GET "/list_child_accounts" => ListChildAccounts, "Failed to list child accounts";
    GET "/list_all_accounts" => ListAllAccounts, "Failed to list accounts";
    GET "/find_account_by_name" => FindByName, "Failed to retrieve accounts";
    GET "/find_account_by_uuid" => FindByUuid, "Failed to retrieve account";
    GET "/get_balance" => GetBalance, "Balance not retrieved";
    GET "/get_transactions" => GetTransactions, "Transaction retrieval failed";
    GET "/compute_total_balance" => TotalBalance, "Failed to compute balance";
    GET "/compute_total_due" => TotalDue, "Failed to compute amount due";
    GET "/compute_total_due_within_days" => DueWithinDays, "Failed to compute total due";
    GET "/spending" => Spending, "Failed to compute spending";
    GET "/total_income" => TotalIncome, "Failed to compute total income";
    GET "/allocated_amount" => AllocatedAmount, "Failed to compute allocated amount";
    GET "/income_utilization" => IncomeUtilization, "Failed to compute utilization";
    GET "/walking_amount" => WalkingAmount, "Failed to walking amount";
    GET "/get_minimal_tree" => MinimalTree, "Failed to get minimal tree";
    POST "/change_account_status" => ChangeStatus, "Failed to change account status";
    GET "/get_account_status" => GetStatus, "Failed to get account status";
    POST "/set_priority" => SetPriority, "Failed to set priority";
    GET "/get_priority" => GetPriority, "Failed to get priority";
    POST "/set_due_date" => SetDueDate, "Failed to set due date";
    GET "/get_due_date" => GetDueDate, "Failed to get due date";
    POST "/set_fixed_amount" => SetFixedAmount, "Failed to set fixed amount";
    GET "/get_fixed_amount" => GetFixedAmount, "Failed to get fixed amount";
    POST "/set_account_type" => SetAccountType, "Failed to set account type";
    GET "/get_account_type" => GetAccountType, "Failed to get account type";
    POST "/set_account_freq" => SetFreq, "Failed to set frequency";
    GET "/get_account_freq" => GetFreq, "Failed to get frequency";
    POST "/set_account_periods" => SetPeriods, "Failed to set account periods";
    GET "/get_account_periods" => GetPeriods, "Failed to get account periods";
    GET "/healthz" => Ops(Healthz), "";
    GET "/readyz" => Ops(Readyz), "";
    GET "/metrics" => Ops(Metrics), "";
    GET "/openapi.json" => Ops(OpenApi), "";
    GET "/changes" => Changes, "Failed to list changes";
}

/// Outcome of routing.
pub enum Routed {
    Found(&'static Route),
    NotFound,
    /// Known path, wrong method: the one allowed method.
    WrongMethod(&'static Method),
}

pub fn route(method: &Method, path: &str) -> Routed {
    match ROUTES.iter().find(|r| r.path == path) {
        None => Routed::NotFound,
        Some(r) if r.method == *method => Routed::Found(r),
        Some(r) => Routed::WrongMethod(&r.method),
    }
}
