//! SPEC 3.6 / 3.7: with valid parameters, a caller without a tree gets 404 on every endpoint
//! that works on a tree, and parameter errors come before that check.

mod common;

use common::{Body, Srv};
use serde_json::json;

const U: &str = "acc2f1c7a9e-4b1d-4c3a-9d7e-0a1b2c3d4e5f";

#[test]
fn every_tree_endpoint_answers_404_without_a_tree() {
    let s = Srv::start();
    let tok = s.token("nobody", "user");
    let cases: Vec<(&str, &str, serde_json::Value)> = vec![
        ("POST", "/deposit", json!({"uuid": U, "amount": 1, "channel": "c"})),
        ("POST", "/withdraw", json!({"uuid": U, "amount": 1, "channel": "c"})),
        ("POST", "/distribute", json!({"uuid": U, "amount": 1})),
        ("POST", "/move_balance", json!({"from_uuid": U, "to_uuid": U, "amount": 1})),
        ("POST", "/add_sub_account", json!({"parent_uuid": U, "name": "x"})),
        ("POST", "/set_child_allocation", json!({"parent_uuid": U, "child_name": "x", "allocation": 0.1})),
        ("GET", "/list_child_accounts", json!({"uuid": U})),
        ("GET", "/list_all_accounts", json!({"uuid": U})),
        ("GET", "/find_account_by_name", json!({"name": "x"})),
        ("GET", "/find_account_by_uuid", json!({"uuid": U})),
        ("GET", "/get_balance", json!({"uuid": U})),
        ("GET", "/get_transactions", json!({"uuid": U})),
        ("GET", "/compute_total_balance", json!({"uuid": U})),
        ("GET", "/compute_total_due", json!({"uuid": U})),
        ("GET", "/compute_total_due_within_days", json!({"uuid": U, "days": 3})),
        ("GET", "/spending", json!({"uuid": U})),
        ("GET", "/total_income", json!({"uuid": U})),
        ("GET", "/allocated_amount", json!({"uuid": U})),
        ("GET", "/income_utilization", json!({"uuid": U})),
        ("GET", "/walking_amount", json!({"uuid": U})),
        ("GET", "/get_minimal_tree", json!({})),
        ("POST", "/change_account_status", json!({"uuid": U, "status": "active"})),
        ("GET", "/get_account_status", json!({"uuid": U})),
        ("POST", "/set_priority", json!({"uuid": U, "priority": 1})),
        ("GET", "/get_priority", json!({"uuid": U})),
        ("POST", "/set_due_date", json!({"uuid": U})),
        ("GET", "/get_due_date", json!({"uuid": U})),
        ("POST", "/set_fixed_amount", json!({"uuid": U, "fixed_amount": 1})),
        ("GET", "/get_fixed_amount", json!({"uuid": U})),
        ("POST", "/set_account_type", json!({"uuid": U, "account_type": "Bill"})),
        ("GET", "/get_account_type", json!({"uuid": U})),
        ("POST", "/set_account_freq", json!({"uuid": U, "account_freq": 30})),
        ("GET", "/get_account_freq", json!({"uuid": U})),
        ("POST", "/set_account_periods", json!({"uuid": U, "periods": 2})),
        ("GET", "/get_account_periods", json!({"uuid": U})),
    ];
    let auth = format!("Bearer {tok}");
    for (method, path, body) in cases {
        let r = s.raw(method, path, &[("Authorization", &auth)], Body::Json(body));
        assert_eq!((r.status, r.err().as_str()), (404, "User not found or unauthorized access"), "{path}");
        // Without parameters the parameter error wins (except the two with no required ones).
        if path != "/get_minimal_tree" {
            let r = s.raw(method, path, &[("Authorization", &auth)], Body::None);
            assert_eq!(r.status, 400, "{path}: {}", r.text);
        }
    }
    let r = s.raw("DELETE", &format!("/delete?uuid={U}"), &[("Authorization", &auth)], Body::None);
    r.fails(404, "Account for user_id 'nobody' does not exist.");
}
