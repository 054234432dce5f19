//! The shared state of a running service: configuration, clock, storage, auth and limits.

use std::path::Path;
use std::sync::Arc;

use crate::auth::jwt::Jwt;
use crate::auth::limits::{Backoff, RateLimiter};
use crate::auth::password::Passwords;
use crate::auth::pat::Usage;
use crate::clock::Clock;
use crate::config::Config;
use crate::store::journal::{JournalOptions, JournalStore};
use crate::store::pg::PgStore;
use crate::store::users::Users;
use crate::store::Store;

pub struct App {
    pub cfg: Config,
    pub clock: Arc<dyn Clock>,
    pub users: Users,
    /// The embedded engine itself, also behind `users` (tests reach its hooks, feature
    /// `test-hooks`, through it); `None` on PostgreSQL.
    pub journal: Option<Arc<JournalStore>>,
    pub jwt: Jwt,
    pub passwords: Passwords,
    pub user_limiter: RateLimiter,
    pub ip_limiter: RateLimiter,
    pub auth_backoff: Backoff,
    pub login_backoff: Backoff,
    /// When each personal access token was last used on this node (docs/tokens.md).
    pub token_use: Usage,
    /// Sends webhook deliveries (docs/webhooks.md).
    pub sender: crate::webhook::Sender,
    /// Deliveries this process is sending.
    pub in_flight: crate::api::InFlight,
}

/// Reads `<dir>/jwt_secret`, creating it from 32 random bytes (hex, mode 0600) when missing.
fn stored_secret(dir: &Path) -> std::io::Result<String> {
    let path = dir.join("jwt_secret");
    if let Ok(s) = std::fs::read_to_string(&path) {
        let s = s.trim().to_string();
        if !s.is_empty() {
            return Ok(s);
        }
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    use std::io::Write;
    // Written aside and renamed, the rename synced: a power cut leaves the old secret or the
    // new one, never a torn one or none (which would void every token issued with it).
    let tmp = dir.join("jwt_secret.tmp");
    let mut f = opts.open(&tmp)?;
    f.write_all(hex.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    crate::store::sync_parent(&path)?;
    tracing::info!(path = %path.display(), "generated a new JWT secret");
    Ok(hex)
}

impl App {
    pub fn open(
        cfg: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<App>, Box<dyn std::error::Error + Send + Sync>> {
        // Several nodes share the PostgreSQL engine, and with it a generated token secret.
        let (store, journal, generated): (Arc<dyn Store>, _, Option<String>) = match &cfg.database_url {
            Some(url) => {
                let pg = PgStore::open(url)?;
                let secret = pg.jwt_secret().to_string();
                (Arc::new(pg), None, Some(secret))
            }
            None => {
                let opts = JournalOptions {
                    checkpoint_every: std::time::Duration::from_millis(cfg.checkpoint_interval_ms),
                    segment_bytes: cfg.journal_segment_bytes,
                    sled_cache: Some(crate::config::sled_cache_bytes(cfg.cache_mb)),
                };
                let j = Arc::new(JournalStore::open_with(&cfg.data_dir, opts)?);
                (j.clone(), Some(j), None)
            }
        };
        let secret = match (cfg.jwt_secret.as_deref(), generated) {
            (Some(s), _) if !s.is_empty() => {
                if s.len() < 32 {
                    tracing::warn!("JWT_SECRET is shorter than 32 bytes");
                }
                s.to_string()
            }
            (_, Some(g)) => g,
            _ => stored_secret(&cfg.data_dir)?,
        };
        Ok(Arc::new(App {
            users: Users::with_budget(store, crate::config::user_cache_bytes(cfg.cache_mb)),
            journal,
            jwt: Jwt::with_cache(secret.as_bytes(), cfg.max_tracked_keys),
            passwords: Passwords::default(),
            user_limiter: RateLimiter::with_capacity(cfg.max_requests, cfg.window_size, cfg.max_tracked_keys),
            ip_limiter: RateLimiter::with_capacity(cfg.max_requests, cfg.window_size, cfg.max_tracked_keys),
            auth_backoff: Backoff::with_capacity(cfg.max_tracked_keys),
            login_backoff: Backoff::with_capacity(cfg.max_tracked_keys),
            token_use: Usage::default(),
            sender: crate::webhook::Sender::new(cfg.webhooks_allow_private),
            in_flight: Default::default(),
            cfg,
            clock,
        }))
    }
}
