//! The PostgreSQL engine, for several stateless nodes sharing one database. The sled engine's
//! rows become tables whose primary keys start with `user_no` (Citus-ready); values keep the
//! sled engine's encoding (`codec`), so both engines store the same bytes.
//!
//! Correctness across nodes rests on the database: a write locks the user's row
//! (`SELECT ... FOR UPDATE`, bounded by `lock_timeout`) in the transaction that commits it and
//! bumps the row's version; readers compare that version with their cached snapshot (see
//! [`super::users`]); the main account's transaction ids have a unique key.
//!
//! Schema migrations are SQL files embedded in the binary, applied in order at start in one
//! transaction and recorded in `schema_migrations`.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{
    ClientWrapper, Connect, Hook, HookError, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime,
};
use tokio_postgres::config::{Host, TargetSessionAttrs};
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{Client, Connection, NoTls, Row, Socket};
use uuid::Uuid;

use crate::domain::engine::{Change, TxRecord};
use crate::domain::tree::{Account, AccountId, DaySums, Text, TrackRow, Tree};

use super::codec::{decode, decode_compat, encode};
use super::{
    BoxFuture, Loaded, Op, SharedStore, Store, StoreError, SyncRow, UserMeta, UserRecord, Version, WriteTxn,
};

/// Migrations in order: (version, name, SQL). Append only; never edit an applied one.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "init", include_str!("migrations/0001_init.sql")),
    (2, "sync_and_keys", include_str!("migrations/0002_sync_and_keys.sql")),
];
/// Serialises schema changes of nodes starting at the same time (any fixed number).
const MIGRATION_LOCK: i64 = 0x7066_6d00;
/// A connection attempt to one host gives up after this (start and reconnects alike), its TCP
/// connect, start-up and read-write check together: a host that accepts connections but never
/// answers (a hung server) must not keep pfm from the next host of the URL.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Unacknowledged bytes give a connection up after this, and an idle one is probed after
/// `KEEPALIVE_IDLE` (then every `KEEPALIVE_INTERVAL`, `KEEPALIVE_RETRIES` times): a database
/// machine that vanished without closing its connections is noticed in about 30 s, not hours.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(20);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 3;
/// Longest wait for a pooled connection before the request answers 503.
const POOL_WAIT: Duration = Duration::from_secs(10);
/// Connections per node.
pub const POOL_SIZE: usize = 16;

pub struct PgStore {
    pool: Pool,
    stale: Stale,
    jwt_secret: String,
}

/// Where the database is, for messages (never the password): every host of the URL.
fn describe(cfg: &tokio_postgres::Config) -> String {
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
struct Hosts {
    each: Vec<tokio_postgres::Config>,
    last_good: AtomicUsize,
}

impl Hosts {
    fn new(cfg: &tokio_postgres::Config) -> Hosts {
        let each = (0..cfg.get_hosts().len()).filter_map(|i| one_host(cfg, i)).collect();
        Hosts { each, last_good: AtomicUsize::new(0) }
    }

    /// The first host, from the last good one on, that accepts a read-write session within
    /// [`CONNECT_TIMEOUT`]. `Ok(None)`: every host timed out (tokio-postgres has no public error
    /// for that); `Err`: the last host's error.
    async fn connect(
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
struct ConnectHosts(Arc<Hosts>);

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
struct Stale(Arc<(Instant, AtomicU64)>);

impl Stale {
    fn new() -> Stale {
        Stale(Arc::new((Instant::now(), AtomicU64::new(0))))
    }

    fn since_base(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.0 .0).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Every connection made until now is not to be used again. True when no mark came in the
    /// second before (a new failure, worth a log line; the requests log their own 503s).
    fn mark(&self) -> bool {
        let now = self.since_base(Instant::now());
        let before = self.0 .1.fetch_max(now, Ordering::Relaxed);
        before == 0 || now.saturating_sub(before) > 1_000_000_000
    }

    fn is_stale(&self, created: Instant) -> bool {
        self.since_base(created) < self.0 .1.load(Ordering::Relaxed)
    }
}

/// An error with its causes ("error connecting to server: Connection refused").
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.ends_with(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// Maps a database error: lock waits, lost connections and a server going away have their own
/// kinds; the rest is kept whole.
fn pg_err(e: tokio_postgres::Error) -> StoreError {
    let text = || chain(&e);
    match e.code() {
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => StoreError::LockTimeout,
        Some(c)
            if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || *c == SqlState::TOO_MANY_CONNECTIONS =>
        {
            StoreError::Unavailable(text())
        }
        // The server no longer takes writes (a standby, or a primary fenced during a failover):
        // no primary on this connection; the pool then drops its connections (see `Stale`).
        Some(c) if *c == SqlState::READ_ONLY_SQL_TRANSACTION => {
            StoreError::Unavailable(format!("the database is read-only: {}", text()))
        }
        Some(_) => StoreError::Pg { what: "database", source: e },
        // No SQLSTATE: the connection itself failed (closed, reset, timed out).
        None => StoreError::Unavailable(text()),
    }
}

fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_err(e),
        other => StoreError::Unavailable(format!("database connection pool: {other}")),
    }
}

fn is_unique(e: &tokio_postgres::Error, constraint: &str) -> bool {
    e.as_db_error()
        .is_some_and(|d| *d.code() == SqlState::UNIQUE_VIOLATION && d.constraint() == Some(constraint))
}

fn col<'r, T: tokio_postgres::types::FromSql<'r>>(row: &'r Row, i: usize) -> Result<T, StoreError> {
    row.try_get(i).map_err(|source| StoreError::Pg { what: "database row", source })
}

fn uid(id: AccountId) -> Uuid {
    Uuid::from_u128(id)
}

fn signed(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Codec(format!("{v} does not fit a bigint")))
}

fn unsigned(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative stored number {v}")))
}

impl PgStore {
    /// Connects, applies pending migrations and reads the shared settings. Fails with a clear
    /// message when the database cannot be reached (the binary then exits non-zero).
    pub fn open(url: &str) -> Result<PgStore, StoreError> {
        let mut cfg: tokio_postgres::Config =
            url.parse().map_err(|source| StoreError::Pg { what: "invalid database URL", source })?;
        cfg.connect_timeout(CONNECT_TIMEOUT);
        cfg.application_name("pfm");
        // pfm writes: with several hosts (a primary and its standbys) only the primary will do,
        // whatever the URL says.
        cfg.target_session_attrs(TargetSessionAttrs::ReadWrite);
        // Unless the URL sets them (tokio-postgres's idle default is 2 hours).
        if cfg.get_tcp_user_timeout().is_none() {
            cfg.tcp_user_timeout(TCP_USER_TIMEOUT);
        }
        if cfg.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            cfg.keepalives_idle(KEEPALIVE_IDLE);
        }
        if cfg.get_keepalives_interval().is_none() {
            cfg.keepalives_interval(KEEPALIVE_INTERVAL);
        }
        if cfg.get_keepalives_retries().is_none() {
            cfg.keepalives_retries(KEEPALIVE_RETRIES);
        }
        if cfg.get_hosts().is_empty() {
            cfg.host("localhost");
        }
        let where_ = describe(&cfg);
        let hosts = Arc::new(Hosts::new(&cfg));
        // The start-up work runs on a runtime of its own: `open` is called both inside and
        // outside a runtime, and the pool's connections belong to the serving one.
        let setup_hosts = hosts.clone();
        let jwt_secret = std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|source| StoreError::Spawn { what: "the database setup runtime", source })?;
                rt.block_on(setup(&setup_hosts))
            })
            .join()
            .unwrap_or_else(|_| Err(StoreError::Bug("database setup panicked")))
        })
        .map_err(|e| match e {
            StoreError::Unavailable(m) => {
                StoreError::Unavailable(format!("cannot reach the database at {where_}: {m}"))
            }
            // A newer schema or damaged data says what to do as it is; the rest names the database.
            e @ (StoreError::Pg { .. }
            | StoreError::Spawn { .. }
            | StoreError::Random(_)
            | StoreError::Bug(_)) => StoreError::PgSetup { at: where_.clone(), source: Box::new(e) },
            other => other,
        })?;
        let n_hosts = u32::try_from(hosts.each.len()).unwrap_or(u32::MAX).max(1);
        let mgr = Manager::from_connect(
            cfg,
            ConnectHosts(hosts),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let stale = Stale::new();
        let check = stale.clone();
        let pool = Pool::builder(mgr)
            .max_size(POOL_SIZE)
            .wait_timeout(Some(POOL_WAIT))
            // Each host has its turn (see `Hosts::connect`).
            .create_timeout(Some(CONNECT_TIMEOUT.saturating_mul(n_hosts) + Duration::from_secs(1)))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .pre_recycle(Hook::sync_fn(move |_, m| {
                if check.is_stale(m.created) {
                    Err(HookError::Message("made before a failed database call".into()))
                } else {
                    Ok(())
                }
            }))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(StoreError::PgPool)?;
        tracing::info!(database = %where_, "using PostgreSQL");
        Ok(PgStore { pool, stale, jwt_secret })
    }

    /// The service's token secret kept in the database, generated by the first node to start,
    /// so every node verifies every other node's tokens.
    pub fn jwt_secret(&self) -> &str {
        &self.jwt_secret
    }

    async fn conn(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(pool_err)
    }

    /// Opens a transaction on a pooled connection (`BEGIN` plus `extra` in one round trip).
    async fn begin(&self, extra: &str) -> Result<Txn, StoreError> {
        let obj = self.conn().await?;
        let txn = Txn { obj: Some(obj) };
        txn.c()?.batch_execute(&format!("BEGIN{extra}")).await.map_err(pg_err)?;
        Ok(txn)
    }

    /// Every user id, for `pfm migrate`.
    pub async fn user_ids(&self) -> Result<Vec<String>, StoreError> {
        let c = self.conn().await?;
        let rows = c.query("SELECT user_id FROM users ORDER BY user_no", &[]).await.map_err(pg_err)?;
        rows.iter().map(|r| col(r, 0)).collect()
    }
}

/// Migrations and the shared secret, on one connection, under an advisory lock.
async fn setup(hosts: &Hosts) -> Result<String, StoreError> {
    let (mut client, connection) = hosts.connect().await.map_err(pg_err)?.ok_or_else(|| {
        StoreError::Unavailable(format!("no host answered within {} s", CONNECT_TIMEOUT.as_secs()))
    })?;
    let driver = tokio::spawn(connection);
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await.map_err(pg_err)?;
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, \
             applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(pg_err)?;
    let tx = client.transaction().await.map_err(pg_err)?;
    let applied: BTreeSet<i32> = tx
        .query("SELECT version FROM schema_migrations", &[])
        .await
        .map_err(pg_err)?
        .iter()
        .map(|r| col(r, 0))
        .collect::<Result<_, _>>()?;
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if let Some(newest) = applied.iter().next_back().filter(|v| **v > known) {
        return Err(StoreError::NewerFormat(format!(
            "the database has schema migration {newest}, newer than this binary's {known}: upgrade pfm"
        )));
    }
    for (version, name, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        tx.batch_execute(sql).await.map_err(pg_err)?;
        tx.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", &[version, name])
            .await
            .map_err(pg_err)?;
        tracing::info!(version, name, "applied schema migration");
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(StoreError::Random)?;
    let fresh: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    tx.execute(
        "INSERT INTO settings (key, value) VALUES ('jwt_secret', $1) ON CONFLICT DO NOTHING",
        &[&fresh],
    )
    .await
    .map_err(pg_err)?;
    let row =
        tx.query_one("SELECT value FROM settings WHERE key = 'jwt_secret'", &[]).await.map_err(pg_err)?;
    let secret: String = col(&row, 0)?;
    tx.commit().await.map_err(pg_err)?;
    drop(client);
    let _ = driver.await;
    Ok(secret)
}

/// How long one storage call may wait for the database (its connection included): a database
/// that stops answering without closing connections (a hung server, a network black hole)
/// would otherwise hold a request, and its user's other writes, for as long as it lasts.
const QUERY_WAIT: Duration = Duration::from_secs(10);
/// The same for a call whose work grows with a user's history: reading a log range (a whole
/// long log, say) and committing (deleting a user deletes all of its records).
const LONG_WAIT: Duration = Duration::from_secs(60);

/// `f`, or 503 once `wait` has passed (a cancelled transaction rolls back or its connection is
/// closed, see [`Txn`]). A call that finds the database unavailable (gone, not answering,
/// read-only) marks the pool's connections stale: whatever server they reach, the next requests
/// look for the primary afresh.
fn bounded<'a, T: 'a>(
    stale: &Stale,
    wait: Duration,
    f: impl Future<Output = Result<T, StoreError>> + Send + 'a,
) -> BoxFuture<'a, Result<T, StoreError>> {
    let stale = stale.clone();
    Box::pin(async move {
        let r = match tokio::time::timeout(wait, f).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable(format!(
                "the database did not answer within {} s",
                wait.as_secs()
            ))),
        };
        if let Err(StoreError::Unavailable(m)) = &r {
            if stale.mark() {
                tracing::warn!(error = %m, "database unavailable; pooled connections will be replaced");
            }
        }
        r
    })
}

/// A pooled connection inside a transaction. Dropped without [`Txn::commit`], it rolls back
/// (or, outside a runtime, closes the connection, which rolls back too): a handler that fails
/// or is cancelled never leaves a lock or a half-written change behind.
struct Txn {
    obj: Option<Object>,
}

impl Txn {
    fn c(&self) -> Result<&ClientWrapper, StoreError> {
        self.obj.as_deref().ok_or(StoreError::Bug("transaction already finished"))
    }

    async fn commit(mut self) -> Result<(), StoreError> {
        let obj = self.obj.take().ok_or(StoreError::Bug("transaction already finished"))?;
        // Until COMMIT answers, the connection's state is unknown: if it fails, or this wait is
        // cancelled (the database did not answer in time), it is closed, never reused.
        Dirty(Some(obj)).settle("COMMIT").await.map_err(pg_err)
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        let Some(obj) = self.obj.take() else { return };
        let dirty = Dirty(Some(obj));
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                let _ = dirty.settle("ROLLBACK").await;
            });
        }
    }
}

/// A connection that may still be inside a transaction: unless taken back out, it is closed
/// when dropped (never returned to the pool), even if its rollback task never ran.
struct Dirty(Option<Object>);

impl Dirty {
    /// Runs `sql` (COMMIT, ROLLBACK); once it succeeds the connection is clean again and goes
    /// back to the pool. Failed, or cancelled while it waits, the connection is closed.
    async fn settle(mut self, sql: &str) -> Result<(), tokio_postgres::Error> {
        if let Some(c) = self.0.as_deref() {
            c.batch_execute(sql).await?;
        }
        drop(self.0.take());
        Ok(())
    }
}

impl Drop for Dirty {
    fn drop(&mut self) {
        if let Some(obj) = self.0.take() {
            drop(Object::take(obj));
        }
    }
}

async fn load(c: &ClientWrapper, user_id: &str) -> Result<Option<Loaded>, StoreError> {
    let st =
        c.prepare_cached("SELECT version, record FROM users WHERE user_id = $1").await.map_err(pg_err)?;
    let Some(row) = c.query_opt(&st, &[&user_id]).await.map_err(pg_err)? else {
        return Ok(None);
    };
    let version = unsigned(col(&row, 0)?)?;
    let user: UserRecord = decode_compat(&col::<Vec<u8>>(&row, 1)?)?;
    let no = signed(user.user_no)?;
    let st = c.prepare_cached("SELECT body FROM accounts WHERE user_no = $1").await.map_err(pg_err)?;
    let mut accounts: HashMap<AccountId, Account> = HashMap::new();
    for row in c.query(&st, &[&no]).await.map_err(pg_err)? {
        let a: Account = decode(&col::<Vec<u8>>(&row, 0)?)?;
        accounts.insert(a.uuid, a);
    }
    let st = c
        .prepare_cached("SELECT account, day, body FROM day_rows WHERE user_no = $1 ORDER BY account, day")
        .await
        .map_err(pg_err)?;
    for row in c.query(&st, &[&no]).await.map_err(pg_err)? {
        let acc = col::<Uuid>(&row, 0)?.as_u128();
        let sums: DaySums = decode(&col::<Vec<u8>>(&row, 2)?)?;
        if let Some(a) = accounts.get_mut(&acc) {
            a.days.add(col(&row, 1)?, &sums);
        }
    }
    let st = c
        .prepare_cached(
            "SELECT account, day, body FROM tracker_rows WHERE user_no = $1 ORDER BY account, day",
        )
        .await
        .map_err(pg_err)?;
    for row in c.query(&st, &[&no]).await.map_err(pg_err)? {
        let acc = col::<Uuid>(&row, 0)?.as_u128();
        let r: TrackRow = decode(&col::<Vec<u8>>(&row, 2)?)?;
        if let Some(a) = accounts.get_mut(&acc) {
            a.track.insert(col(&row, 1)?, r);
        }
    }
    let tree = Tree {
        root: user.root,
        accounts: accounts.into_iter().map(|(id, a)| (id, Arc::new(a))).collect(),
        ledger: user.ledger.clone(),
        id_key: None,
    };
    Ok(Some((user, tree, version)))
}

/// The user's delta-sync knowledge and kept idempotent answers, read on `c`.
async fn load_meta(c: &ClientWrapper, user_no: u64) -> Result<UserMeta, StoreError> {
    let no = signed(user_no)?;
    let st = c
        .prepare_cached("SELECT max(knowledge) FROM change_rows WHERE user_no = $1")
        .await
        .map_err(pg_err)?;
    let row = c.query_one(&st, &[&no]).await.map_err(pg_err)?;
    let knowledge = match row.try_get::<_, Option<i64>>(0).map_err(pg_err)? {
        Some(k) => unsigned(k)?,
        None => 0,
    };
    let st = c.prepare_cached("SELECT body FROM idem_keys WHERE user_no = $1").await.map_err(pg_err)?;
    let mut idem = Vec::new();
    for row in c.query(&st, &[&no]).await.map_err(pg_err)? {
        let body: Vec<u8> = row.try_get(0).map_err(pg_err)?;
        idem.push(decode(&body)?);
    }
    Ok(UserMeta { knowledge, idem })
}

async fn txid_exists(c: &ClientWrapper, user_no: u64, id: &str) -> Result<bool, StoreError> {
    let st = c
        .prepare_cached("SELECT 1 FROM main_txids WHERE user_no = $1 AND txid = $2")
        .await
        .map_err(pg_err)?;
    Ok(c.query_opt(&st, &[&signed(user_no)?, &id]).await.map_err(pg_err)?.is_some())
}

/// Sequences are not transactional: a number taken by a write that rolls back is never reused.
async fn next_user_no(c: &ClientWrapper) -> Result<u64, StoreError> {
    let st = c.prepare_cached("SELECT nextval('user_nos')").await.map_err(pg_err)?;
    unsigned(col(&c.query_one(&st, &[]).await.map_err(pg_err)?, 0)?)
}

/// Writes the rows of `op` in the current transaction; returns the user's new version.
async fn apply(c: &ClientWrapper, op: &Op) -> Result<u64, StoreError> {
    match op {
        Op::Commit { user, change, sync, idem } => {
            let no = signed(user.user_no)?;
            let st = c
                .prepare_cached(
                    "INSERT INTO users (user_no, user_id, version, record) VALUES ($1, $2, 1, $3) \
                     ON CONFLICT (user_no) DO UPDATE SET record = EXCLUDED.record, version = users.version + 1 \
                     RETURNING version",
                )
                .await
                .map_err(pg_err)?;
            let row =
                c.query_one(&st, &[&no, &user.user_id.as_str(), &encode(user)?]).await.map_err(|e| {
                    if is_unique(&e, "users_user_id_key") {
                        StoreError::UserExists
                    } else {
                        pg_err(e)
                    }
                })?;
            let version = unsigned(col(&row, 0)?)?;
            change_rows(c, no, user.root, change).await?;
            if let Some(row) = sync {
                let st = c
                    .prepare_cached("INSERT INTO change_rows (user_no, knowledge, body) VALUES ($1, $2, $3)")
                    .await
                    .map_err(pg_err)?;
                c.execute(&st, &[&no, &signed(row.knowledge)?, &encode(row)?]).await.map_err(pg_err)?;
            }
            if let Some(w) = idem {
                if !w.remove.is_empty() {
                    let st = c
                        .prepare_cached("DELETE FROM idem_keys WHERE user_no = $1 AND key = ANY($2)")
                        .await
                        .map_err(pg_err)?;
                    c.execute(&st, &[&no, &w.remove]).await.map_err(pg_err)?;
                }
                if let Some(r) = &w.put {
                    let st = c
                        .prepare_cached(
                            "INSERT INTO idem_keys (user_no, key, body) VALUES ($1, $2, $3) \
                             ON CONFLICT (user_no, key) DO UPDATE SET body = EXCLUDED.body",
                        )
                        .await
                        .map_err(pg_err)?;
                    c.execute(&st, &[&no, &r.key, &encode(r)?]).await.map_err(pg_err)?;
                }
            }
            Ok(version)
        }
        Op::DeleteUser { user } => {
            let no = signed(user.user_no)?;
            for table in [
                "accounts",
                "log_records",
                "day_rows",
                "tracker_rows",
                "main_txids",
                "change_rows",
                "idem_keys",
                "users",
            ] {
                let st = c
                    .prepare_cached(&format!("DELETE FROM {table} WHERE user_no = $1"))
                    .await
                    .map_err(pg_err)?;
                c.execute(&st, &[&no]).await.map_err(pg_err)?;
            }
            Ok(0)
        }
    }
}

async fn change_rows(c: &ClientWrapper, no: i64, root: AccountId, ch: &Change) -> Result<(), StoreError> {
    if !ch.removed.is_empty() {
        let ids: Vec<Uuid> = ch.removed.iter().map(|(id, _)| uid(*id)).collect();
        for table in ["accounts", "log_records", "day_rows", "tracker_rows"] {
            let st = c
                .prepare_cached(&format!("DELETE FROM {table} WHERE user_no = $1 AND account = ANY($2)"))
                .await
                .map_err(pg_err)?;
            c.execute(&st, &[&no, &ids]).await.map_err(pg_err)?;
        }
    }
    if !ch.accounts.is_empty() {
        let ids: Vec<Uuid> = ch.accounts.iter().map(|a| uid(a.uuid)).collect();
        let bodies = ch.accounts.iter().map(|a| encode(&**a)).collect::<Result<Vec<_>, _>>()?;
        let st = c
            .prepare_cached(
                "INSERT INTO accounts (user_no, account, body) SELECT $1, a, b FROM unnest($2::uuid[], $3::bytea[]) AS t(a, b) \
                 ON CONFLICT (user_no, account) DO UPDATE SET body = EXCLUDED.body",
            )
            .await
            .map_err(pg_err)?;
        c.execute(&st, &[&no, &ids, &bodies]).await.map_err(pg_err)?;
    }
    if !ch.records.is_empty() {
        let ids: Vec<Uuid> = ch.records.iter().map(|(a, _, _)| uid(*a)).collect();
        let seqs = ch.records.iter().map(|(_, s, _)| signed(*s)).collect::<Result<Vec<_>, _>>()?;
        let bodies = ch.records.iter().map(|(_, _, r)| encode(r)).collect::<Result<Vec<_>, _>>()?;
        let st = c
            .prepare_cached(
                "INSERT INTO log_records (user_no, account, seq, body) \
                 SELECT $1, a, s, b FROM unnest($2::uuid[], $3::int8[], $4::bytea[]) AS t(a, s, b) \
                 ON CONFLICT (user_no, account, seq) DO UPDATE SET body = EXCLUDED.body",
            )
            .await
            .map_err(pg_err)?;
        c.execute(&st, &[&no, &ids, &seqs, &bodies]).await.map_err(pg_err)?;
    }
    for (table, rows) in [
        (
            "day_rows",
            ch.days
                .iter()
                .map(|(a, d, s)| Ok((uid(*a), *d, encode(s)?)))
                .collect::<Result<Vec<_>, StoreError>>()?,
        ),
        (
            "tracker_rows",
            ch.track
                .iter()
                .map(|(a, d, r)| Ok((uid(*a), *d, encode(r)?)))
                .collect::<Result<Vec<_>, StoreError>>()?,
        ),
    ] {
        if rows.is_empty() {
            continue;
        }
        let ids: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
        let days: Vec<i64> = rows.iter().map(|r| r.1).collect();
        let bodies: Vec<Vec<u8>> = rows.into_iter().map(|r| r.2).collect();
        let st = c
            .prepare_cached(&format!(
                "INSERT INTO {table} (user_no, account, day, body) \
                 SELECT $1, a, d, b FROM unnest($2::uuid[], $3::int8[], $4::bytea[]) AS t(a, d, b) \
                 ON CONFLICT (user_no, account, day) DO UPDATE SET body = EXCLUDED.body"
            ))
            .await
            .map_err(pg_err)?;
        c.execute(&st, &[&no, &ids, &days, &bodies]).await.map_err(pg_err)?;
    }
    if !ch.main_txids.is_empty() {
        // A deposit into the main account posts its credit there first; that id must be new:
        // the unique key refuses a second deposit with the same id, whichever node sends it.
        // Other ids of the main log (splits and surplus returns reusing a deposit's id, ids of
        // withdrawals) may repeat, as on the embedded engine.
        let credited: BTreeSet<&str> = ch
            .records
            .first()
            .filter(|(a, _, r)| *a == root && r.deposit)
            .map(|(_, _, r)| r.id.as_str())
            .into_iter()
            .collect();
        let others: BTreeSet<&str> =
            ch.main_txids.iter().map(Text::as_str).filter(|id| !credited.contains(id)).collect();
        if !credited.is_empty() {
            let ids: Vec<&str> = credited.iter().copied().collect();
            let st = c
                .prepare_cached("INSERT INTO main_txids (user_no, txid) SELECT $1, unnest($2::text[])")
                .await
                .map_err(pg_err)?;
            c.execute(&st, &[&no, &ids]).await.map_err(|e| {
                if is_unique(&e, "main_txids_pkey") {
                    StoreError::DuplicateTxid(ids.first().map(|s| s.to_string()).unwrap_or_default())
                } else {
                    pg_err(e)
                }
            })?;
        }
        if !others.is_empty() {
            let ids: Vec<&str> = others.into_iter().collect();
            let st = c
                .prepare_cached(
                    "INSERT INTO main_txids (user_no, txid) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING",
                )
                .await
                .map_err(pg_err)?;
            c.execute(&st, &[&no, &ids]).await.map_err(pg_err)?;
        }
    }
    Ok(())
}

/// One user's write: its row is locked from [`SharedStore::begin_write`] to the commit.
struct PgWrite {
    txn: Txn,
    locked: Option<Version>,
    stale: Stale,
}

impl WriteTxn for PgWrite {
    fn locked(&self) -> Option<Version> {
        self.locked
    }

    fn load_user<'a>(&'a self, user_id: &'a str) -> BoxFuture<'a, Result<Option<Loaded>, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move { load(self.txn.c()?, user_id).await })
    }

    fn main_txid_exists<'a>(&'a self, user_no: u64, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move { txid_exists(self.txn.c()?, user_no, id).await })
    }

    fn new_user_no(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move { next_user_no(self.txn.c()?).await })
    }

    fn load_meta(&self, user_no: u64) -> BoxFuture<'_, Result<UserMeta, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move { load_meta(self.txn.c()?, user_no).await })
    }

    fn commit(self: Box<Self>, op: Box<Op>) -> BoxFuture<'static, Result<u64, StoreError>> {
        let stale = self.stale.clone();
        bounded(&stale, LONG_WAIT, async move {
            let _timer = crate::metrics::CommitTimer::start(op.rows());
            let version = apply(self.txn.c()?, &op).await?;
            {
                // PostgreSQL makes the transaction durable at COMMIT (its own group commit).
                let _flush = crate::metrics::flush_timer();
                self.txn.commit().await?;
            }
            crate::metrics::flush_commits(1);
            Ok(version)
        })
    }
}

impl SharedStore for PgStore {
    fn version<'a>(&'a self, user_id: &'a str) -> BoxFuture<'a, Result<Option<Version>, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move {
            let c = self.conn().await?;
            let st = c
                .prepare_cached("SELECT user_no, version FROM users WHERE user_id = $1")
                .await
                .map_err(pg_err)?;
            match c.query_opt(&st, &[&user_id]).await.map_err(pg_err)? {
                Some(row) => Ok(Some((unsigned(col(&row, 0)?)?, unsigned(col(&row, 1)?)?))),
                None => Ok(None),
            }
        })
    }

    fn load_versioned<'a>(&'a self, user_id: &'a str) -> BoxFuture<'a, Result<Option<Loaded>, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move {
            // One snapshot for the user row and every tree row.
            let txn = self.begin(" ISOLATION LEVEL REPEATABLE READ READ ONLY").await?;
            let loaded = load(txn.c()?, user_id).await?;
            txn.commit().await?;
            Ok(loaded)
        })
    }

    fn begin_write<'a>(
        &'a self,
        user_id: &'a str,
        lock_wait: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn WriteTxn>, StoreError>> {
        Box::pin(async move {
            let ms = lock_wait.as_millis().max(1);
            let txn =
                bounded(&self.stale, QUERY_WAIT, self.begin(&format!("; SET LOCAL lock_timeout = '{ms}ms'")))
                    .await?;
            // The row lock may be held by another node for up to `lock_wait` (then PostgreSQL's
            // lock_timeout answers); past that, the database itself is not answering.
            let locked = bounded(&self.stale, lock_wait + QUERY_WAIT, async {
                let c = txn.c()?;
                let st = c
                    .prepare_cached("SELECT user_no, version FROM users WHERE user_id = $1 FOR UPDATE")
                    .await
                    .map_err(pg_err)?;
                Ok(match c.query_opt(&st, &[&user_id]).await.map_err(pg_err)? {
                    Some(row) => Some((unsigned(col(&row, 0)?)?, unsigned(col(&row, 1)?)?)),
                    None => None,
                })
            })
            .await?;
            Ok(Box::new(PgWrite { txn, locked, stale: self.stale.clone() }) as Box<dyn WriteTxn>)
        })
    }
}

impl Store for PgStore {
    fn load_meta(&self, user_no: u64) -> BoxFuture<'_, Result<UserMeta, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move { load_meta(&*self.conn().await?, user_no).await })
    }

    fn read_changes(
        &self,
        user_no: u64,
        after: u64,
        upto: u64,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<SyncRow>, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move {
            if after >= upto {
                return Ok(Vec::new());
            }
            let c = self.conn().await?;
            let st = c
                .prepare_cached(
                    "SELECT body FROM change_rows WHERE user_no = $1 AND knowledge > $2 AND knowledge <= $3 \
                     ORDER BY knowledge LIMIT $4",
                )
                .await
                .map_err(pg_err)?;
            let limit = i64::try_from(max).unwrap_or(i64::MAX);
            let rows = c
                .query(&st, &[&signed(user_no)?, &signed(after)?, &signed(upto)?, &limit])
                .await
                .map_err(pg_err)?;
            rows.iter().map(|r| r.try_get::<_, Vec<u8>>(0).map_err(pg_err).and_then(|b| decode(&b))).collect()
        })
    }

    fn load_user<'a>(
        &'a self,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<(UserRecord, Tree)>, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move {
            Ok(self.load_versioned(user_id).await?.map(|(u, t, _)| (u, t)))
        })
    }

    fn read_log(
        &self,
        user_no: u64,
        acc: AccountId,
        from: u64,
        to: u64,
    ) -> BoxFuture<'_, Result<Vec<TxRecord>, StoreError>> {
        bounded(&self.stale, LONG_WAIT, async move {
            let c = self.conn().await?;
            let st = c
                .prepare_cached(
                    "SELECT body FROM log_records WHERE user_no = $1 AND account = $2 AND seq >= $3 AND seq < $4 ORDER BY seq",
                )
                .await
                .map_err(pg_err)?;
            let rows = c
                .query(&st, &[&signed(user_no)?, &uid(acc), &signed(from)?, &signed(to)?])
                .await
                .map_err(pg_err)?;
            rows.iter().map(|r| decode_compat(&col::<Vec<u8>>(r, 0)?)).collect()
        })
    }

    fn main_txid_exists<'a>(&'a self, user_no: u64, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move { txid_exists(&*self.conn().await?, user_no, id).await })
    }

    fn new_user_no(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move { next_user_no(&*self.conn().await?).await })
    }

    /// Commits `op` in a transaction of its own (writes of the service go through
    /// [`SharedStore::begin_write`] instead, which also locks the user's row first).
    fn commit(&self, op: Box<Op>, _basis: u64) -> BoxFuture<'static, Result<(), StoreError>> {
        let pool = self.pool.clone();
        // Not bounded: `pfm migrate` writes a whole user's history here in one commit.
        Box::pin(async move {
            let obj = pool.get().await.map_err(pool_err)?;
            let txn = Txn { obj: Some(obj) };
            txn.c()?.batch_execute("BEGIN").await.map_err(pg_err)?;
            apply(txn.c()?, &op).await?;
            txn.commit().await
        })
    }

    fn healthy(&self) -> bool {
        !self.pool.is_closed()
    }

    /// Every commit is durable when acknowledged; nothing to flush.
    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn shared(&self) -> Option<&dyn SharedStore> {
        Some(self)
    }
}
