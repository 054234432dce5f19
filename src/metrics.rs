//! Prometheus metrics (docs/api.md): every metric is defined here, and the rest of the crate records
//! through the small functions below, so instrumenting a layer is one line.
//!
//! The metrics are process-wide (one process is one scrape target). Per-route handles are
//! resolved once at first use, indexed by the route labels `http` passes, so recording a request
//! costs a few atomic adds and no allocation.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use prometheus::{
    exponential_buckets, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, Opts, Registry, TextEncoder,
};

/// Route label of requests whose path is not in the route table (bounds the label set).
pub const OTHER_ROUTE: &str = "other";

/// Latency buckets in seconds: from 100 us (a cached read) to 10 s (a stalled flush).
const LATENCY_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    /// Latency by route label.
    latency: HistogramVec,
    commit_seconds: Histogram,
    commit_rows: Histogram,
    flush_seconds: Histogram,
    flush_commits: Histogram,
    cache_hits: IntCounter,
    cache_misses: IntCounter,
    cache_users: IntGauge,
    cache_bytes: IntGauge,
    rate_limited: IntCounterVec,
    auth_failures: IntCounterVec,
    imported_lines: IntCounterVec,
    poster_passes: IntCounter,
    webhook_attempts: IntCounterVec,
    scheduled_postings: IntCounter,
}

/// Definitions never fail (names and labels are fixed literals); `expect` documents that.
fn build() -> Metrics {
    const FIXED: &str = "metric definitions are valid literals";
    let registry = Registry::new_custom(Some("pfm".into()), None).expect(FIXED);
    let requests = IntCounterVec::new(
        Opts::new("http_requests_total", "HTTP requests answered, by route and status"),
        &["route", "status"],
    )
    .expect(FIXED);
    let latency_vec = HistogramVec::new(
        HistogramOpts::new("http_request_duration_seconds", "Time from request head to answer, by route")
            .buckets(LATENCY_BUCKETS.to_vec()),
        &["route"],
    )
    .expect(FIXED);
    let commit_seconds = Histogram::with_opts(
        HistogramOpts::new("store_commit_duration_seconds", "Atomic commit: apply plus the (shared) flush")
            .buckets(LATENCY_BUCKETS.to_vec()),
    )
    .expect(FIXED);
    let commit_rows = Histogram::with_opts(
        HistogramOpts::new("store_commit_rows", "Rows written by one atomic commit")
            .buckets(exponential_buckets(1.0, 2.0, 14).expect(FIXED)),
    )
    .expect(FIXED);
    let flush_seconds = Histogram::with_opts(
        HistogramOpts::new("store_flush_duration_seconds", "One flush to stable storage (group commit)")
            .buckets(LATENCY_BUCKETS.to_vec()),
    )
    .expect(FIXED);
    let flush_commits = Histogram::with_opts(
        HistogramOpts::new("store_flush_commits", "Commits made durable by one flush (group commit batch)")
            .buckets(exponential_buckets(1.0, 2.0, 12).expect(FIXED)),
    )
    .expect(FIXED);
    let cache_hits = IntCounter::new("user_cache_hits_total", "User state found in the cache").expect(FIXED);
    let cache_misses =
        IntCounter::new("user_cache_misses_total", "User state loaded from storage").expect(FIXED);
    let cache_users = IntGauge::new("user_cache_resident_users", "Users held in the cache").expect(FIXED);
    let cache_bytes =
        IntGauge::new("user_cache_bytes", "Bytes the cached users are counted for (an estimate)")
            .expect(FIXED);
    let rate_limited = IntCounterVec::new(
        Opts::new("rate_limit_rejections_total", "Requests refused by a rate limiter (429)"),
        &["limiter"],
    )
    .expect(FIXED);
    let auth_failures = IntCounterVec::new(
        Opts::new("auth_failures_total", "Requests refused for bad credentials: a bearer token or a login"),
        &["kind", "answer"],
    )
    .expect(FIXED);
    let imported_lines = IntCounterVec::new(
        Opts::new("import_lines_total", "Statement lines of committed imports, by what they did"),
        &["action"],
    )
    .expect(FIXED);
    let poster_passes =
        IntCounter::new("schedule_passes_total", "Passes of the poster of scheduled transactions")
            .expect(FIXED);
    let scheduled_postings =
        IntCounter::new("scheduled_postings_total", "Occurrences of schedules the poster posted")
            .expect(FIXED);
    let webhook_attempts = IntCounterVec::new(
        Opts::new("webhook_attempts_total", "Webhook delivery attempts, by outcome"),
        &["outcome"],
    )
    .expect(FIXED);
    let all: [Box<dyn prometheus::core::Collector>; 16] = [
        Box::new(webhook_attempts.clone()),
        Box::new(poster_passes.clone()),
        Box::new(scheduled_postings.clone()),
        Box::new(requests.clone()),
        Box::new(latency_vec.clone()),
        Box::new(commit_seconds.clone()),
        Box::new(commit_rows.clone()),
        Box::new(flush_seconds.clone()),
        Box::new(flush_commits.clone()),
        Box::new(cache_hits.clone()),
        Box::new(cache_misses.clone()),
        Box::new(cache_users.clone()),
        Box::new(cache_bytes.clone()),
        Box::new(rate_limited.clone()),
        Box::new(auth_failures.clone()),
        Box::new(imported_lines.clone()),
    ];
    for c in all {
        registry.register(c).expect(FIXED);
    }
    Metrics {
        registry,
        requests,
        latency: latency_vec,
        commit_seconds,
        commit_rows,
        flush_seconds,
        flush_commits,
        cache_hits,
        cache_misses,
        cache_users,
        cache_bytes,
        rate_limited,
        auth_failures,
        imported_lines,
        poster_passes,
        webhook_attempts,
        scheduled_postings,
    }
}

static M: LazyLock<Metrics> = LazyLock::new(build);

/// Statuses whose counters are cached per route (the rest are looked up by label).
const CACHED_STATUSES: [u16; 8] = [200, 400, 401, 403, 404, 409, 429, 500];

/// Per route: its latency histogram and the counters of [`CACHED_STATUSES`]. A label lookup
/// hashes and locks, and every request counts once, so these are resolved once.
static ROUTE_HANDLES: std::sync::OnceLock<Vec<(Histogram, [IntCounter; 8])>> = std::sync::OnceLock::new();

/// One answered request, on the route `labels[route]` (`labels`: every route's label, the same
/// list on every call).
pub fn request_observed(labels: &'static [&'static str], route: usize, status: u16, elapsed: Duration) {
    let m = &*M;
    let handles = ROUTE_HANDLES.get_or_init(|| {
        labels
            .iter()
            .map(|l| {
                let counters =
                    CACHED_STATUSES.map(|s| m.requests.with_label_values(&[*l, s.to_string().as_str()]));
                (m.latency.with_label_values(&[l]), counters)
            })
            .collect()
    });
    let Some((latency, counters)) = handles.get(route) else { return };
    match CACHED_STATUSES.iter().position(|s| *s == status) {
        Some(i) => counters[i].inc(),
        None => {
            let label = labels.get(route).copied().unwrap_or(OTHER_ROUTE);
            let code =
                hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
            m.requests.with_label_values(&[label, code.as_str()]).inc();
        }
    }
    latency.observe(elapsed.as_secs_f64());
}

/// Times a store commit of `rows` writes; observes when dropped (success or error).
pub struct CommitTimer {
    start: Instant,
    rows: usize,
}

impl CommitTimer {
    pub fn start(rows: usize) -> CommitTimer {
        CommitTimer { start: Instant::now(), rows }
    }
}

impl Drop for CommitTimer {
    fn drop(&mut self) {
        commit_observed(self.rows, self.start.elapsed());
    }
}

pub fn commit_observed(rows: usize, elapsed: Duration) {
    M.commit_rows.observe(rows as f64);
    M.commit_seconds.observe(elapsed.as_secs_f64());
}

/// Times one flush to stable storage; observes when dropped.
pub struct FlushTimer(Instant);

pub fn flush_timer() -> FlushTimer {
    FlushTimer(Instant::now())
}

impl Drop for FlushTimer {
    fn drop(&mut self) {
        M.flush_seconds.observe(self.0.elapsed().as_secs_f64());
    }
}

/// One flush made `commits` commits durable (0 when an earlier flush already covered them all).
pub fn flush_commits(commits: u64) {
    M.flush_commits.observe(commits as f64);
}

pub fn user_cache_hit() {
    M.cache_hits.inc();
}

/// [`user_cache_hit`] as an expression (keeps the call site a one-line change).
pub fn user_cache_hit_then<T>(v: T) -> T {
    user_cache_hit();
    v
}

pub fn user_cache_miss() {
    M.cache_misses.inc();
}

/// A limiter refused a request; `limiter` is `ip` or `user`.
pub fn rate_limited(limiter: &'static str) {
    M.rate_limited.with_label_values(&[limiter]).inc();
}

/// Credentials were refused: `kind` is `token` (bearer verification) or `login`; `answer` is
/// `401`, or `429` while a failed-attempt backoff runs.
pub fn auth_failed(kind: &'static str, answer: &'static str) {
    M.auth_failures.with_label_values(&[kind, answer]).inc();
}

/// A committed import's lines: `action` is deposit, withdraw, duplicate or needs_attention.
pub fn imported(action: &'static str, lines: u64) {
    M.imported_lines.with_label_values(&[action]).inc_by(lines);
}

/// A webhook delivery attempt ended.
pub fn webhook_attempt(ok: bool) {
    M.webhook_attempts.with_label_values(&[if ok { "delivered" } else { "failed" }]).inc();
}

/// A pass of the poster ended, having posted `posted` occurrences.
pub fn poster_pass(posted: u64) {
    M.poster_passes.inc();
    M.scheduled_postings.inc_by(posted);
}

/// The text exposition format of every metric; `resident_users` is sampled now (cheaper than
/// tracking every cache insert and eviction).
pub fn render(resident_users: usize, resident_bytes: usize) -> String {
    M.cache_users.set(i64::try_from(resident_users).unwrap_or(i64::MAX));
    M.cache_bytes.set(i64::try_from(resident_bytes).unwrap_or(i64::MAX));
    let mut out = Vec::with_capacity(16 * 1024);
    if let Err(e) = TextEncoder::new().encode(&M.registry.gather(), &mut out) {
        tracing::error!(error = %e, "metrics encoding failed");
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
