//! Configuration (SPEC 14.1, 14.4): every environment variable has a flag; a flag wins.

use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug, Clone)]
#[command(name = "pfm", version, about = "pfm: personal finance manager service (HTTP + JSON)")]
pub struct Config {
    /// Listening address (0.0.0.0 for all interfaces)
    #[arg(long, env = "HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Listening port
    #[arg(long, env = "PORT", default_value_t = 8000)]
    pub port: u16,
    /// Data directory (created when missing)
    #[arg(long = "data-dir", env = "ACCOUNT_BASE_DIR", default_value = "user_accounts")]
    pub data_dir: PathBuf,
    /// HMAC secret for tokens; when unset, one is generated in <data dir>/jwt_secret
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// Requests allowed per key per window
    #[arg(long, env = "MAX_REQUESTS", default_value_t = 180_000)]
    pub max_requests: u64,
    /// Rate-limit window in seconds
    #[arg(long, env = "WINDOW_SIZE", default_value_t = 3600)]
    pub window_size: u64,
    /// Lifetime of tokens issued by /login, in seconds
    #[arg(long, env = "TOKEN_TTL_SECONDS", default_value_t = 3600)]
    pub token_ttl_seconds: u64,
    /// Enable /generate_access_token (test and benchmark environments only)
    #[arg(long, env = "TOKEN_ENDPOINT_ENABLED", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub token_endpoint_enabled: bool,
    /// Use the first X-Forwarded-For address as the client IP
    #[arg(long, env = "TRUST_PROXY", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub trust_proxy: bool,
    /// Enable CORS for this origin (or *)
    #[arg(long, env = "CORS_ALLOW_ORIGIN")]
    pub cors_allow_origin: Option<String>,
    /// Keys each rate-limit, backoff and token-cache table remembers at most
    #[arg(long, env = "MAX_TRACKED_KEYS", default_value_t = crate::auth::limits::DEFAULT_TRACKED_KEYS,
          value_parser = clap::value_parser!(usize))]
    pub max_tracked_keys: usize,
    /// Seconds a request body may take to arrive in full before the answer is 408
    #[arg(long = "body-timeout-secs", env = "BODY_TIMEOUT_SECS", default_value_t = 30)]
    pub body_timeout_secs: u64,
    /// Seconds a connection may go without completing a request head (an idle keep-alive
    /// connection included) before it is closed
    #[arg(long = "header-timeout-secs", env = "HEADER_TIMEOUT_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub header_timeout_secs: u64,
    /// `plain` (SPEC 3.5) or `reference`: answers shaped as the reference's serializer writes them
    #[arg(long, env = "RESPONSE_STYLE", value_enum, default_value_t = ResponseStyle::Plain)]
    pub response_style: ResponseStyle,
    /// Serve Prometheus metrics at GET /metrics (token-exempt); false makes it an unknown path
    #[arg(long, env = "METRICS_ENABLED", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub metrics_enabled: bool,
    /// Log line format: text, or json for one JSON object per line
    #[arg(long, env = "LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// PostgreSQL database shared by every node (postgres://user@host:port/db; with a standby,
    /// postgres://user@host1:port,host2:port/db, docs/failover.md); when unset, the embedded
    /// engine under the data directory
    #[arg(long = "database-url", env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Async worker threads serving HTTP; 0 (the default) means every core but one (at least
    /// one), leaving a core to the storage threads and the kernel (docs/storage.md)
    #[arg(long = "worker-threads", env = "WORKER_THREADS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=1024))]
    pub worker_threads: u64,
    /// Milliseconds between checkpoints of the embedded engine at most, while writes arrive (a
    /// checkpoint writes recent rows into sled, flushes it and deletes the journal it covers)
    #[arg(long = "checkpoint-interval-ms", env = "CHECKPOINT_INTERVAL_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_interval_ms: u64,
    /// Bytes per journal segment of the embedded engine. Under sustained writes each new
    /// segment is zero-filled to this size ahead of use, so an append's fdatasync writes data
    /// only, never the file's size or block map
    #[arg(long = "journal-segment-bytes", env = "JOURNAL_SEGMENT_BYTES",
          default_value_t = crate::store::journal::SEGMENT_BYTES,
          value_parser = clap::value_parser!(u64).range(65536..=(1 << 32)))]
    pub journal_segment_bytes: u64,
    /// Whole-log answers (/get_transactions without `limit`, /get_minimal_tree) holding more
    /// records than this are streamed in chunks as they are read, without a Content-Length;
    /// shorter ones are sent whole
    #[arg(long = "stream-min-records", env = "STREAM_MIN_RECORDS", default_value_t = 4096)]
    pub stream_min_records: u64,
    /// Milliseconds between passes of the poster, which posts the scheduled transactions that
    /// fell due (docs/schedules.md); each pass posts everything due up to today
    #[arg(long = "schedule-poll-ms", env = "SCHEDULE_POLL_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(10..))]
    pub schedule_poll_ms: u64,
    /// Lets webhooks send to loopback, private, link-local and cloud metadata addresses, which
    /// are refused by default (a webhook could otherwise reach services behind the firewall)
    #[arg(long = "webhooks-allow-private", env = "WEBHOOKS_ALLOW_PRIVATE", default_value = "false",
          num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub webhooks_allow_private: bool,
    /// When set, the only hosts webhooks may name (comma-separated, as written in their URLs):
    /// an operator's allow-list, checked before any other
    #[arg(long = "webhooks-allowed-hosts", env = "WEBHOOKS_ALLOWED_HOSTS")]
    pub webhooks_allowed_hosts: Option<String>,
    /// Memory for caches, MiB: a quarter for the users held in memory (idle ones are dropped
    /// past it and loaded again on their next request), the rest for the embedded engine's page
    /// cache (sled's)
    #[arg(long = "cache-mb", env = "CACHE_MB", default_value_t = DEFAULT_CACHE_MB,
          value_parser = clap::value_parser!(u64).range(1..=(1 << 22)))]
    pub cache_mb: u64,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The default `--cache-mb`: 256 MiB of users (about 100,000 of a few accounts, what the
/// cache held before it had a budget) and 768 MiB for sled, near sled's own default of 1 GiB
/// with which the write benchmarks were measured (a 128 MiB one cost more CPU per deposit,
/// docs/storage.md, "Tried and not kept").
pub const DEFAULT_CACHE_MB: u64 = 1024;

/// The user cache's share of `cache_mb`, in bytes.
pub fn user_cache_bytes(cache_mb: u64) -> usize {
    usize::try_from(cache_mb.saturating_mul(1 << 20) / 4).unwrap_or(usize::MAX)
}

/// sled's share of `cache_mb`, in bytes.
pub fn sled_cache_bytes(cache_mb: u64) -> u64 {
    let all = cache_mb.saturating_mul(1 << 20);
    all - all / 4
}

/// How answers are rendered.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseStyle {
    /// SPEC 3.5: plain scalars, `null` for absent values.
    Plain,
    /// The reference's jsonlite output: scalars boxed in one-element arrays, `{}` for absent values.
    Reference,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Copy every user, tree and log from one engine to another, then compare both sides
    Migrate {
        /// Source: a data directory or a postgres:// URL
        #[arg(long)]
        from: String,
        /// Target (must hold no user): a data directory or a postgres:// URL
        #[arg(long)]
        to: String,
    },
}

impl Config {
    /// Defaults for in-process use (tests, benchmarks): port 0 on loopback.
    pub fn for_dir(dir: impl Into<PathBuf>) -> Config {
        Config {
            host: "127.0.0.1".into(),
            port: 0,
            data_dir: dir.into(),
            jwt_secret: None,
            max_requests: 180_000,
            window_size: 3600,
            token_ttl_seconds: 3600,
            token_endpoint_enabled: false,
            trust_proxy: false,
            cors_allow_origin: None,
            max_tracked_keys: crate::auth::limits::DEFAULT_TRACKED_KEYS,
            body_timeout_secs: 30,
            header_timeout_secs: 30,
            response_style: ResponseStyle::Plain,
            metrics_enabled: true,
            log_format: "text".into(),
            database_url: None,
            checkpoint_interval_ms: 5000,
            schedule_poll_ms: 30_000,
            webhooks_allow_private: false,
            webhooks_allowed_hosts: None,
            worker_threads: 0,
            journal_segment_bytes: crate::store::journal::SEGMENT_BYTES,
            stream_min_records: 4096,
            cache_mb: DEFAULT_CACHE_MB,
            command: None,
        }
    }
}

/// Async workers for `configured` (0: automatic, every core but one, at least one) on a machine
/// with `cores` cores. The core left over is for the storage threads (journal, applier,
/// checkpoint) and the kernel's network work; two workers on two cores also wake and steal from
/// each other across the cores. Measured on 2 cores with the load generator on one of them
/// (docs/storage.md, "Threads and cores"): one worker served GET /get_balance at 0.83-1.13x of
/// bare hyper where two gave 0.65-0.80x, and deposits at 128 connections at the same rate
/// (twelve alternating pairs: 0.56x of the raw baseline on average either way). A dedicated
/// node with more cores than load may set one per core.
pub fn worker_threads(configured: u64, cores: usize) -> usize {
    match configured {
        0 => cores.saturating_sub(1).max(1),
        n => n as usize,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn automatic_workers_leave_one_core_to_storage() {
        assert_eq!(super::worker_threads(0, 1), 1);
        assert_eq!(super::worker_threads(0, 2), 1);
        assert_eq!(super::worker_threads(0, 8), 7);
        assert_eq!(super::worker_threads(1, 2), 1);
    }

    #[test]
    fn the_cache_budget_is_split_between_users_and_sled_and_never_zero() {
        use clap::Parser;
        for mb in [1, 7, 1024, 1 << 22] {
            let all = mb << 20;
            assert_eq!(super::user_cache_bytes(mb) as u64 + super::sled_cache_bytes(mb), all);
            assert_eq!(super::user_cache_bytes(mb) as u64, all / 4);
        }
        assert_eq!(super::Config::parse_from(["pfm"]).cache_mb, 1024);
        assert_eq!(super::Config::parse_from(["pfm", "--cache-mb", "64"]).cache_mb, 64);
        assert!(super::Config::try_parse_from(["pfm", "--cache-mb", "0"]).is_err());
    }
}
