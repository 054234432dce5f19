//! A year's forecast of a full tree: must answer in under 50 ms.
//!
//! Builds, through the engine, a 1,000-account tree (main, 30 children, 969 envelopes, every one
//! with a fixed amount, a due date and a period, most of them Bills) and 90 days of history (the
//! same salary and bill payments as the plan), then times `forecast` over 365 days with a salary
//! twice a month into main and 50 monthly bills paid from their envelopes on their due days.
//! Prints the median and the forecast's size.
//!
//! Run: `cargo bench --bench forecast`

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use pfm::domain::dates::{civil_from_days, days_from_civil, DAY_SECS};
use pfm::domain::engine::{Ctx, Mode, Origin, Posting};
use pfm::domain::forecast::{forecast, Movement, Planned};
use pfm::domain::frac::Frac;
use pfm::domain::text::Text;
use pfm::domain::tree::{Account, AccountId, Grand, Kind, Tree};

// The server's allocator (src/main.rs), so the figure is the one the service would see.
#[global_allocator]
static GLOBAL: pfm::alloc::Mimalloc = pfm::alloc::Mimalloc;

const CHILDREN: u64 = 30;
const ENVELOPES: u64 = 969;
const BILLS_PAID: usize = 50;
const HISTORY_DAYS: i64 = 90;
const DAYS: u32 = 365;

/// A fixed pseudo-random sequence (the fixture is the same every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

struct Fixture {
    tree: Tree,
    plan: Vec<Planned>,
    today: i64,
}

/// The salary and bill payments of `from ..= to`, in day order.
fn schedule(bills: &[(AccountId, i64, i64)], salary: i64, from: i64, to: i64) -> Vec<Planned> {
    let mut plan = Vec::new();
    for day in from..=to {
        let (_, _, d) = civil_from_days(day);
        if d == 1 || d == 15 {
            let movement = Movement::Deposit { to: 1 };
            plan.push(Planned { day, movement, amount_cents: salary, schedule: 0, n: plan.len() as u32 });
        }
        for (k, &(id, due_day, fixed)) in bills.iter().enumerate() {
            if (day - due_day).rem_euclid(30) == 0 {
                let movement = Movement::Withdraw { from: id };
                let n = ((day - due_day) / 30) as u32;
                plan.push(Planned { day, movement, amount_cents: fixed, schedule: 1 + k as u64, n });
            }
        }
    }
    plan
}

fn build() -> Fixture {
    let today = days_from_civil(2025, 7, 10);
    let start = today - HISTORY_DAYS;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut tree = Tree::new_user(1, 0);
    let mut ctx = Ctx::new(&mut tree, start * DAY_SECS);
    let mut next: AccountId = 1;
    let mut bills = Vec::new();
    // Envelopes: fixed 5.00 to 200.00, a weekly to yearly period; allocations, of children and
    // of envelopes, in proportion to what each needs a month.
    let specs: Vec<Vec<(i64, u32)>> = (0..CHILDREN)
        .map(|c| {
            let count = ENVELOPES / CHILDREN + u64::from(c < ENVELOPES % CHILDREN);
            (0..count)
                .map(|_| {
                    let freq = [7, 14, 30, 30, 30, 30, 90, 365][rng.next(8) as usize];
                    (500 + 100 * rng.next(196) as i64, freq)
                })
                .collect()
        })
        .collect();
    let monthly = |(fixed, freq): &(i64, u32)| fixed * 30 / i64::from(*freq);
    let child_needs: Vec<i64> = specs.iter().map(|s| s.iter().map(monthly).sum()).collect();
    let monthly_need: i64 = child_needs.iter().sum();
    for (c, (envelopes, child_need)) in specs.iter().zip(&child_needs).enumerate() {
        next += 1;
        let mut a = Account::new(next, format!("Child{c}").into(), Kind::Child, Some(1), None);
        a.allocation_ppm = child_need * 1_000_000 / monthly_need;
        a.priority_ppm = rng.next(4) as i64 * 1_000_000;
        let cid = ctx.attach(a).expect("attach child");
        for (g, spec) in envelopes.iter().enumerate() {
            let (fixed, freq) = *spec;
            next += 1;
            // Due within one period of the history's start.
            let due_day = start + 1 + rng.next(u64::from(freq)) as i64;
            let kind = if g % 8 == 7 { "FixedSaving" } else { "Bill" };
            let grand = Grand {
                due_date_secs: Some(due_day * DAY_SECS),
                fixed_amount_cents: fixed,
                amount_due_cents: fixed,
                account_type: kind.into(),
                freq_days: Some(freq),
                periods: Frac::ONE,
            };
            let name = format!("Env{c}_{g}");
            let mut a = Account::new(next, name.into(), Kind::Grandchild, Some(cid), Some(grand));
            a.allocation_ppm = monthly(spec) * 1_000_000 / child_need;
            a.priority_ppm = rng.next(3) as i64 * 1_000_000;
            let id = ctx.attach(a).expect("attach envelope");
            if kind == "Bill" && freq == 30 && bills.len() < BILLS_PAID {
                bills.push((id, due_day, fixed));
            }
        }
    }
    drop(ctx);
    assert_eq!(tree.accounts.len(), 1 + (CHILDREN + ENVELOPES) as usize);
    // Income a little above what the envelopes need, in two paychecks a month.
    let salary = monthly_need * 11 / 20;
    post_all(&mut tree, &schedule(&bills, salary, start, today - 1));
    let plan = schedule(&bills, salary, today, today + i64::from(DAYS));
    Fixture { tree, plan, today }
}

/// Posts `plan` with the engine as the service would (a payment the envelope cannot cover is
/// refused); returns the number of records written.
fn post_all(tree: &mut Tree, plan: &[Planned]) -> usize {
    let channel = Text::from("bench");
    let mut records = 0;
    for p in plan {
        let now = p.day * DAY_SECS;
        let mut ctx = Ctx::new(tree, now);
        let terms = Posting {
            amount_cents: p.amount_cents,
            by: &Origin::User,
            channel: &channel,
            txid: None,
            date_secs: now,
            note: None,
        };
        match p.movement {
            Movement::Deposit { to } => ctx.deposit(to, terms, Mode::External).expect("deposit"),
            Movement::Withdraw { from } => {
                if ctx.acc(from).expect("bill").balance_cents >= p.amount_cents {
                    ctx.withdraw(from, terms).expect("withdraw");
                }
            }
            Movement::Move { .. } => unreachable!(),
        }
        records += ctx.records.len();
    }
    records
}

fn run(f: &Fixture) -> pfm::domain::forecast::Forecast {
    forecast(black_box(&f.tree), black_box(&f.plan), f.today, DAYS, None)
}

fn bench(c: &mut Criterion) {
    let f = build();
    let out = run(&f);
    let deposits = f.plan.iter().filter(|p| matches!(p.movement, Movement::Deposit { .. })).count();
    let points: usize = out.accounts.iter().map(|a| a.points.len()).sum();
    let short = out.bills.iter().filter(|b| b.shortfall_cents > 0).count();
    println!(
        "{} accounts, {} planned ({deposits} salaries), {} not applied, {points} balance points, \
         {} bill due dates ({short} short)",
        out.accounts.len(),
        f.plan.len(),
        out.unapplied.len(),
        out.bills.len(),
    );
    let mut g = c.benchmark_group("forecast");
    g.sample_size(20)
        .measurement_time(std::time::Duration::from_secs(3))
        .warm_up_time(std::time::Duration::from_millis(500));
    g.bench_function("1000_accounts_365_days", |b| b.iter(|| run(&f)));
    g.finish();
    // Wall time, and the thread's CPU time, which a busy machine disturbs less.
    let ms = |what: &dyn Fn()| {
        let mut wall = Vec::new();
        let mut cpu = Vec::new();
        for _ in 0..31 {
            let (t, c) = (Instant::now(), thread_cpu_ms());
            what();
            cpu.push(thread_cpu_ms() - c);
            wall.push(t.elapsed().as_secs_f64() * 1e3);
        }
        wall.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        format!(
            "median {:.2} ms (min {:.2}, max {:.2}), CPU median {:.2} ms",
            wall[15], wall[0], wall[30], cpu[15]
        )
    };
    println!("forecast, 1000 accounts, 365 days: {}", ms(&|| _ = black_box(run(&f))));
    // The floor: the same movements posted by the engine alone on a copy, nothing reported.
    let records = post_all(&mut f.tree.clone(), &f.plan);
    let engine = ms(&|| _ = black_box(post_all(&mut f.tree.clone(), &f.plan)));
    println!("the engine alone, {records} records: {engine}");
}

/// CPU time of the calling thread.
fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write; this clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

criterion_group!(benches, bench);
criterion_main!(benches);
