//! The user cache's budget (`--cache-mb`, docs/storage.md, "The user cache"), over real HTTP:
//! under a budget far smaller than the users, every answer stays right (users dropped from the
//! cache load again from storage, writes included) and the cache's bytes stay near the budget;
//! under the default budget a user of a main account, one child and two deposits is counted
//! for at most 3 KB.

mod common;

use common::{Body, Srv};
use serde_json::json;

const USERS: usize = 300;

/// The value of an unlabelled sample in the metrics text.
fn metric(s: &Srv, name: &str) -> u64 {
    let m = s.raw("GET", "/metrics", &[], Body::None);
    m.text
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in {}", m.text))
}

/// `USERS` users of the benchmark's shape (scripts/bench/memory_bench.sh): 1,000.00 opening,
/// a child at half (the only child: every deposit flows to it), deposits of 12 and 6. Returns (token, main, child) for each.
fn users(s: &Srv) -> Vec<(String, String, String)> {
    (0..USERS)
        .map(|i| {
            let (tok, main) = s.user(&format!("cache{i}"), "1000");
            let child = s.child(&tok, &main, "Savings", json!({"allocation": 0.5}));
            s.deposit(&tok, &main, "12").ok();
            s.deposit(&tok, &main, "6").ok();
            (tok, main, child)
        })
        .collect()
}

#[test]
fn a_tiny_budget_keeps_answers_right_and_the_cache_near_it() {
    // 1 MiB: a quarter of it (256 KiB) for users, 4 KiB a shard, about two users each.
    let s = Srv::start_with(|c| c.cache_mb = 1);
    let budget = pfm::config::user_cache_bytes(1) as u64;
    let us = users(&s);
    let misses = metric(&s, "pfm_user_cache_misses_total");
    for round in 0..2 {
        for (tok, main, child) in &us {
            // A deposit into main flows whole to its only child (SPEC 10.4.1: shares of the
            // children's weights).
            let extra = if round == 0 { 0 } else { 100 };
            assert_eq!(s.balance(tok, main), "1000");
            assert_eq!(s.balance(tok, child), format!("{}", 18 + extra));
            let total = s.get(tok, "/compute_total_balance", &format!("uuid={main}"));
            assert_eq!(total.ok().n("total_balance"), format!("{}", 1018 + extra));
        }
        if round == 0 {
            // Writes on users loaded again build on what storage holds.
            for (tok, main, _) in &us {
                s.deposit(tok, main, "100").ok();
            }
        }
    }
    let cached = metric(&s, "pfm_user_cache_resident_users");
    let bytes = metric(&s, "pfm_user_cache_bytes");
    assert!(cached < USERS as u64 / 2, "{cached} users cached under a 256 KiB budget");
    // A shard goes over its share by at most the user loaded last, until its next lookup.
    assert!(bytes <= budget + 64 * 4096, "{bytes} bytes cached, budget {budget}");
    let reloaded = metric(&s, "pfm_user_cache_misses_total") - misses;
    assert!(reloaded > USERS as u64, "only {reloaded} loads from storage");
}

#[test]
fn under_the_default_budget_every_user_stays_cached_at_3_kb_at_most() {
    let s = Srv::start();
    let us = users(&s);
    for (tok, _, child) in &us {
        assert_eq!(s.balance(tok, child), "18");
    }
    assert_eq!(metric(&s, "pfm_user_cache_resident_users"), USERS as u64);
    let per_user = metric(&s, "pfm_user_cache_bytes") / USERS as u64;
    assert!(per_user <= 3072, "{per_user} bytes per cached user");
    assert!(per_user >= 1024, "{per_user} bytes per cached user: the estimate misses most of it");
}
