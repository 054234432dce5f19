//! Analytics query cost versus history size: a query's cost must be flat in history.
//!
//! Builds a tree of 1 main, 10 children and 50 grandchildren, records 1,000 and then 100,000
//! deposits (spread over one year of transaction dates), persists it, and measures every
//! analytics endpoint of SPEC 8 except the two that return logs, through the real handler path
//! (parameters, snapshot, aggregates, JSON) without the socket. Prints the ratio of the medians.
//!
//! Run: `cargo bench --bench analytics`

use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use pfm::api::params::Params;
use pfm::api::{respond, Envelope, Ep, Rq};
use pfm::app::App;
use pfm::auth::jwt::Identity;
use pfm::clock::ManualClock;
use pfm::config::Config;
use pfm::domain::engine::{Ctx, Mode, Origin, Posting};
use pfm::domain::frac::Frac;
use pfm::domain::tree::{fmt_uuid, Account, AccountId, Grand, Kind, Tree};
use pfm::http::response::render_success;
use pfm::store::UserRecord;

const NOW: i64 = 1_752_137_415;

struct Fixture {
    app: Arc<App>,
    rt: tokio::runtime::Runtime,
    main: String,
    child: String,
    _dir: tempfile::TempDir,
}

fn build(deposits: usize) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = Config::for_dir(dir.path());
    cfg.jwt_secret = Some("bench-secret-bench-secret-bench-secret".into());
    let app = App::open(cfg, Arc::new(ManualClock::at_secs(NOW))).expect("app");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let root: AccountId = 1;
    let mut tree = Tree::new_user(root, 0);
    let mut ctx = Ctx::new(&mut tree, NOW);
    let mut next: AccountId = 1;
    let mut leaves = Vec::new();
    let mut children = Vec::new();
    for c in 0..10 {
        next += 1;
        let mut a = Account::new(next, format!("Child{c}").into(), Kind::Child, Some(root), None);
        a.allocation_ppm = 100_000;
        let cid = ctx.attach(a).expect("attach child");
        children.push(cid);
        for g in 0..5 {
            next += 1;
            // One grandchild per child carries a bill with a due date, the rest are open envelopes.
            let bill = g == 0;
            let grand = Grand {
                due_date_secs: bill.then_some(NOW + (c as i64 + 1) * 86_400),
                fixed_amount_cents: if bill { 50_000 } else { 0 },
                amount_due_cents: if bill { 50_000 } else { 0 },
                account_type: if bill { "Bill".into() } else { "Expense".into() },
                freq_days: bill.then_some(30),
                periods: Frac::ONE,
            };
            let mut a =
                Account::new(next, format!("G{c}_{g}").into(), Kind::Grandchild, Some(cid), Some(grand));
            a.allocation_ppm = 200_000;
            let gid = ctx.attach(a).expect("attach grandchild");
            if !bill {
                leaves.push(gid);
            }
        }
    }
    let channel = "bench".into();
    for i in 0..deposits {
        let date_secs = NOW - (i as i64 % 365) * 86_400;
        let terms = Posting {
            amount_cents: 1_234,
            by: &Origin::User,
            channel: &channel,
            txid: None,
            date_secs,
            note: None,
        };
        ctx.deposit(leaves[i % leaves.len()], terms, Mode::External).expect("deposit");
    }
    let change = ctx.finish();
    rt.block_on(async {
        // The user as /register writes it, then the whole history as one committed mutation.
        let user = UserRecord {
            user_id: "bench".into(),
            user_no: app.users.store.new_user_no().await.expect("user no"),
            password_hash: None,
            role: "user".into(),
            created_at: NOW,
            root,
            ledger: Tree::new_user(root, 0).ledger,
        };
        let guard = app.users.lock("bench").await.expect("lock");
        guard.create(user, Tree::new_user(root, 0)).await.expect("create");
        let guard = app.users.lock("bench").await.expect("lock");
        guard.commit(change, tree).await.expect("commit");
    });
    Fixture { main: fmt_uuid(root), child: fmt_uuid(children[0]), app, rt, _dir: dir }
}

fn queries(f: &Fixture) -> Vec<(&'static str, Ep, String)> {
    let m = &f.main;
    vec![
        ("get_balance", Ep::GetBalance, format!("uuid={m}")),
        ("compute_total_balance", Ep::TotalBalance, format!("uuid={m}")),
        ("compute_total_due", Ep::TotalDue, format!("uuid={m}")),
        ("compute_total_due_within_days", Ep::DueWithinDays, format!("uuid={m}&days=30")),
        ("spending", Ep::Spending, format!("uuid={m}")),
        ("total_income", Ep::TotalIncome, format!("uuid={m}")),
        ("allocated_amount", Ep::AllocatedAmount, format!("uuid={}", f.child)),
        ("income_utilization", Ep::IncomeUtilization, format!("uuid={m}&from=2025-01-01")),
        ("walking_amount", Ep::WalkingAmount, format!("uuid={m}&amt_type=balance")),
    ]
}

fn run_once(f: &Fixture, ep: Ep, query: &str) {
    let params = Params::parse(Some(query), None, b"").expect("params");
    let rq = Rq {
        params,
        ident: Some(std::sync::Arc::new(Identity {
            user_id: "bench".into(),
            role: "user".into(),
            scope: pfm::auth::jwt::Scope::Full,
        })),
        now_us: NOW * 1_000_000,
        has_auth: true,
        idem: None,
        envelope: Envelope { render: render_success, prefix: "", start_us: NOW * 1_000_000 },
        document: bytes::Bytes::new(),
    };
    let out = f.rt.block_on(respond(&f.app, ep, &rq, "bench"));
    assert!(out.is_ok(), "{query}");
}

/// Median time of one call in nanoseconds, over 31 batches.
fn median_ns(f: &Fixture, ep: Ep, query: &str) -> f64 {
    let batch = 200;
    let mut samples: Vec<f64> = (0..31)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..batch {
                run_once(f, ep, query);
            }
            t.elapsed().as_nanos() as f64 / batch as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn bench(c: &mut Criterion) {
    let small = build(1_000);
    let large = build(100_000);
    let mut g = c.benchmark_group("analytics");
    g.sample_size(20)
        .measurement_time(std::time::Duration::from_secs(1))
        .warm_up_time(std::time::Duration::from_millis(300));
    for (size, f) in [("1k", &small), ("100k", &large)] {
        for (name, ep, q) in queries(f) {
            g.bench_function(format!("{name}/{size}"), |b| b.iter(|| run_once(f, ep, &q)));
        }
    }
    g.finish();
    println!("\n{:<32} {:>12} {:>12} {:>8}", "endpoint", "1k (us)", "100k (us)", "ratio");
    for ((name, ep, qs), (_, _, ql)) in queries(&small).into_iter().zip(queries(&large)) {
        let a = median_ns(&small, ep, &qs);
        let b = median_ns(&large, ep, &ql);
        println!("{name:<32} {:>12.2} {:>12.2} {:>8.2}", a / 1e3, b / 1e3, b / a);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
