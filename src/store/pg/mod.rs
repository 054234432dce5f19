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
//!
//! One job per file: [`connect`] reaches the database, [`schema`] migrates it, [`txn`] bounds
//! calls and transactions and pipelines statements, [`read`] and [`write`] map rows, [`versions`]
//! batches the version reads of requests that come together, [`sql`] converts errors and values.

mod connect;
mod read;
mod schema;
mod sql;
mod txn;
mod versions;
mod write;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::TargetSessionAttrs;

use crate::domain::engine::TxRecord;
use crate::domain::tree::{AccountId, Tree};

use super::codec::{decode, decode_compat};
use super::{
    BoxFuture, Loaded, Op, SharedStore, Store, StoreError, SyncRow, UserMeta, UserRecord, Version, WriteTxn,
};
use connect::{
    describe, ConnectHosts, Hosts, Stale, CONNECT_TIMEOUT, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL,
    KEEPALIVE_RETRIES, POOL_WAIT, TCP_USER_TIMEOUT,
};
use read::{load, load_meta, next_user_no, txid_exists};
use schema::setup;
pub(super) use sql::chain;
use sql::{col, pg_err, pool_err, signed, uid, unsigned};
use txn::{bounded, first_within, Txn, LONG_WAIT, QUERY_WAIT};
use write::commit;

/// Connections per node.
pub const POOL_SIZE: usize = 16;

pub struct PgStore {
    pool: Pool,
    stale: Stale,
    versions: versions::Versions,
    jwt_secret: String,
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
        Ok(PgStore { pool, stale, versions: versions::Versions::new(), jwt_secret })
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

    fn main_txids_existing<'a>(
        &'a self,
        user_no: u64,
        ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<std::collections::HashSet<String>, StoreError>> {
        bounded(&self.stale, LONG_WAIT, async move {
            let c = self.txn.c()?;
            let st = c
                .prepare_cached("SELECT txid FROM main_txids WHERE user_no = $1 AND txid = ANY($2)")
                .await
                .map_err(pg_err)?;
            let rows = c.query(&st, &[&signed(user_no)?, &ids]).await.map_err(pg_err)?;
            rows.iter().map(|r| col(r, 0)).collect()
        })
    }

    fn new_user_no(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move { next_user_no(self.txn.c()?).await })
    }

    fn load_meta(&self, user_no: u64) -> BoxFuture<'_, Result<UserMeta, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move { load_meta(self.txn.c()?, user_no).await })
    }
}

impl PgWrite {
    /// Writes `op` in this transaction and commits it: [`Store::commit`] with this write held.
    fn commit(self: Box<Self>, op: Box<Op>) -> BoxFuture<'static, Result<u64, StoreError>> {
        let stale = self.stale.clone();
        bounded(&stale, LONG_WAIT, async move {
            let _timer = crate::metrics::CommitTimer::start(op.rows());
            let version = {
                // PostgreSQL makes the transaction durable at COMMIT (its own group commit),
                // sent with the rows.
                let _flush = crate::metrics::flush_timer();
                commit(self.txn, &op).await?
            };
            crate::metrics::flush_commits(1);
            Ok(version)
        })
    }
}

impl SharedStore for PgStore {
    fn version<'a>(&'a self, user_id: &'a str) -> BoxFuture<'a, Result<Option<Version>, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move {
            self.versions
                .read(user_id, |ids| async move {
                    let c = self.conn().await?;
                    let st = c.prepare_cached(versions::SQL).await.map_err(pg_err)?;
                    c.query(&st, &[&ids]).await.map_err(pg_err)
                })
                .await
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
            let begin = format!("BEGIN; SET LOCAL lock_timeout = '{ms}ms'");
            // The row lock may be held by another node for up to `lock_wait` (then PostgreSQL's
            // lock_timeout answers); past that, the database itself is not answering.
            // A connection and the statement (a round trip on a new connection) within the
            // bound of any first answer: past it the database is not answering.
            let (txn, st) = bounded(&self.stale, QUERY_WAIT, async {
                let txn = Txn { obj: Some(self.conn().await?) };
                let st = txn
                    .c()?
                    .prepare_cached("SELECT user_no, version FROM users WHERE user_id = $1 FOR UPDATE")
                    .await
                    .map_err(pg_err)?;
                Ok((txn, st))
            })
            .await?;
            let locked = bounded(&self.stale, lock_wait + QUERY_WAIT, async {
                let c = txn.c()?;
                // BEGIN and the row lock go out together, in this order: one round trip.
                let (began, row) = first_within(
                    QUERY_WAIT,
                    Box::pin(c.batch_execute(&begin)),
                    Box::pin(c.query_opt(&st, &[&user_id])),
                )
                .await?;
                began.map_err(pg_err)?;
                Ok(match row.map_err(pg_err)? {
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
                    "SELECT r.body, n.body FROM log_records r LEFT JOIN log_notes n USING (user_no, account, seq) \
                     WHERE r.user_no = $1 AND r.account = $2 AND r.seq >= $3 AND r.seq < $4 ORDER BY r.seq",
                )
                .await
                .map_err(pg_err)?;
            let rows = c
                .query(&st, &[&signed(user_no)?, &uid(acc), &signed(from)?, &signed(to)?])
                .await
                .map_err(pg_err)?;
            rows.iter()
                .map(|r| {
                    let mut rec: TxRecord = decode_compat(&col::<Vec<u8>>(r, 0)?)?;
                    if let Some(n) = col::<Option<Vec<u8>>>(r, 1)? {
                        rec.note = Some(Arc::new(decode(&n)?));
                    }
                    Ok(rec)
                })
                .collect()
        })
    }

    fn main_txid_exists<'a>(&'a self, user_no: u64, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move { txid_exists(&*self.conn().await?, user_no, id).await })
    }

    fn wake_users(&self, upto_secs: i64, max: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move {
            let c = self.conn().await?;
            let st = c
                .prepare_cached("SELECT user_id FROM user_wake WHERE at_secs <= $1 ORDER BY at_secs LIMIT $2")
                .await
                .map_err(pg_err)?;
            let limit = i64::try_from(max).unwrap_or(i64::MAX);
            let rows = c.query(&st, &[&upto_secs, &limit]).await.map_err(pg_err)?;
            rows.iter().map(|r| col(r, 0)).collect()
        })
    }

    fn new_user_no(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        bounded(&self.stale, QUERY_WAIT, async move { next_user_no(&*self.conn().await?).await })
    }

    /// Commits `op` in the transaction `held` (the service's writes, which lock the user's row
    /// first: [`SharedStore::begin_write`]), or else in one of its own. The database orders
    /// writes, so `basis` is not needed: each write reads its state under the row lock.
    fn commit(
        &self,
        op: Box<Op>,
        _basis: u64,
        held: Option<Box<dyn WriteTxn>>,
    ) -> BoxFuture<'static, Result<u64, StoreError>> {
        if let Some(held) = held {
            let held: Box<dyn std::any::Any> = held;
            return match held.downcast::<PgWrite>() {
                Ok(write) => write.commit(op),
                Err(_) => Box::pin(async { Err(StoreError::Bug("a write held by another engine")) }),
            };
        }
        let pool = self.pool.clone();
        // Not bounded: `pfm migrate` writes a whole user's history here in one commit.
        Box::pin(async move {
            let obj = pool.get().await.map_err(pool_err)?;
            let txn = Txn { obj: Some(obj) };
            txn.c()?.batch_execute("BEGIN").await.map_err(pg_err)?;
            commit(txn, &op).await
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
