//! Reaching the database: each host of the URL on its own, the primary first found, and
//! connections made before a failure never reused.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Connect;
use tokio_postgres::config::Host;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{Client, Connection, NoTls, Socket};

use super::sql::chain;
use crate::store::BoxFuture;

/// A connection attempt to one host gives up after this (start and reconnects alike), its TCP
/// connect, start-up and read-write check together: a host that accepts connections but never
/// answers (a hung server) must not keep pfm from the next host of the URL.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Unacknowledged bytes give a connection up after this, and an idle one is probed after
/// `KEEPALIVE_IDLE` (then every `KEEPALIVE_INTERVAL`, `KEEPALIVE_RETRIES` times): a database
/// machine that vanished without closing its connections is noticed in about 30 s, not hours.
pub(super) const TCP_USER_TIMEOUT: Duration = Duration::from_secs(20);
pub(super) const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
pub(super) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
pub(super) const KEEPALIVE_RETRIES: u32 = 3;
/// Longest wait for a pooled connection before the request answers 503.
pub(super) const POOL_WAIT: Duration = Duration::from_secs(10);

/// Where the database is, for messages (never the password): every host of the URL.
pub(super) fn describe(cfg: &tokio_postgres::Config) -> String {
    let ports = cfg.get_ports();
    let hosts: Vec<String> = cfg
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(s) => s.clone(),
                #[cfg(unix)]
                Host::Unix(p) => p.display().to_string(),
            };
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            format!("{host}:{port}")
        })
        .collect();
    let hosts = if hosts.is_empty() { "localhost:5432".to_string() } else { hosts.join(",") };
    format!("{hosts}/{}", cfg.get_dbname().unwrap_or("(default database)"))
}

/// The URL's settings for its `i`th host alone (tokio-postgres would try every host under one
/// connect timeout that covers only TCP, so a hung first host would keep it from the others).
fn one_host(cfg: &tokio_postgres::Config, i: usize) -> Option<tokio_postgres::Config> {
    let mut c = tokio_postgres::Config::new();
    match cfg.get_hosts().get(i)? {
        Host::Tcp(h) => c.host(h),
        #[cfg(unix)]
        Host::Unix(p) => c.host_path(p),
    };
    if let Some(a) = cfg.get_hostaddrs().get(i) {
        c.hostaddr(*a);
    }
    let ports = cfg.get_ports();
    if let Some(p) = ports.get(i).or(ports.first()) {
        c.port(*p);
    }
    if let Some(u) = cfg.get_user() {
        c.user(u);
    }
    if let Some(p) = cfg.get_password() {
        c.password(p);
    }
    if let Some(d) = cfg.get_dbname() {
        c.dbname(d);
    }
    if let Some(o) = cfg.get_options() {
        c.options(o);
    }
    if let Some(a) = cfg.get_application_name() {
        c.application_name(a);
    }
    if let Some(t) = cfg.get_connect_timeout() {
        c.connect_timeout(*t);
    }
    if let Some(t) = cfg.get_tcp_user_timeout() {
        c.tcp_user_timeout(*t);
    }
    if let Some(t) = cfg.get_keepalives_interval() {
        c.keepalives_interval(t);
    }
    if let Some(r) = cfg.get_keepalives_retries() {
        c.keepalives_retries(r);
    }
    c.ssl_mode(cfg.get_ssl_mode())
        .ssl_negotiation(cfg.get_ssl_negotiation())
        .keepalives(cfg.get_keepalives())
        .keepalives_idle(cfg.get_keepalives_idle())
        .channel_binding(cfg.get_channel_binding())
        .target_session_attrs(cfg.get_target_session_attrs());
    Some(c)
}

/// The database's hosts, one connection setting each, and which one answered as the primary
/// last: tried first, so that after a failover new connections go straight to the new primary
/// instead of waiting on the old one each time.
pub(super) struct Hosts {
    pub(super) each: Vec<tokio_postgres::Config>,
    last_good: AtomicUsize,
}

impl Hosts {
    pub(super) fn new(cfg: &tokio_postgres::Config) -> Hosts {
        let each = (0..cfg.get_hosts().len()).filter_map(|i| one_host(cfg, i)).collect();
        Hosts { each, last_good: AtomicUsize::new(0) }
    }

    /// The first host, from the last good one on, that accepts a read-write session within
    /// [`CONNECT_TIMEOUT`]. `Ok(None)`: every host timed out (tokio-postgres has no public error
    /// for that); `Err`: the last host's error.
    pub(super) async fn connect(
        &self,
    ) -> Result<Option<(Client, Connection<Socket, NoTlsStream>)>, tokio_postgres::Error> {
        let n = self.each.len();
        let first = self.last_good.load(Ordering::Relaxed);
        let mut last_err = None;
        for k in 0..n {
            let i = (first + k) % n;
            let Some(cfg) = self.each.get(i) else { continue };
            match tokio::time::timeout(CONNECT_TIMEOUT, cfg.connect(NoTls)).await {
                Ok(Ok(pair)) => {
                    let moved = i != first
                        && self
                            .last_good
                            .compare_exchange(first, i, Ordering::Relaxed, Ordering::Relaxed)
                            .is_ok();
                    if moved {
                        tracing::warn!(database = %describe(cfg), "the database's primary is now this host");
                    }
                    return Ok(Some(pair));
                }
                Ok(Err(e)) => {
                    tracing::debug!(database = %describe(cfg), error = %chain(&e), "database host refused");
                    last_err = Some(e);
                }
                Err(_) => tracing::debug!(database = %describe(cfg), "database host did not answer in time"),
            }
        }
        last_err.map_or(Ok(None), Err)
    }
}

/// How the pool opens connections: [`Hosts::connect`].
pub(super) struct ConnectHosts(pub(super) Arc<Hosts>);

impl Connect for ConnectHosts {
    fn connect(
        &self,
        _: &tokio_postgres::Config,
    ) -> BoxFuture<'_, Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>> {
        let hosts = self.0.clone();
        Box::pin(async move {
            let Some((client, connection)) = hosts.connect().await? else {
                // Every host timed out: the pool's create timeout, which covers every host's turn,
                // answers (503).
                return std::future::pending().await;
            };
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %chain(&e), "database connection ended");
                }
            });
            Ok((client, task))
        })
    }
}

/// Connections made before a failed storage call are not reused: the server they reach may be
/// dead without having closed them, hung, or now read-only (a primary demoted or fenced in a
/// failover). A pooled connection is checked against it when taken (no round trip); new ones
/// find the primary among the URL's hosts.
#[derive(Clone)]
pub(super) struct Stale(Arc<(Instant, AtomicU64)>);

impl Stale {
    pub(super) fn new() -> Stale {
        Stale(Arc::new((Instant::now(), AtomicU64::new(0))))
    }

    fn since_base(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.0 .0).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Every connection made until now is not to be used again. True when no mark came in the
    /// second before (a new failure, worth a log line; the requests log their own 503s).
    pub(super) fn mark(&self) -> bool {
        let now = self.since_base(Instant::now());
        let before = self.0 .1.fetch_max(now, Ordering::Relaxed);
        before == 0 || now.saturating_sub(before) > 1_000_000_000
    }

    pub(super) fn is_stale(&self, created: Instant) -> bool {
        self.since_base(created) < self.0 .1.load(Ordering::Relaxed)
    }
}
