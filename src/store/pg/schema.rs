//! Schema migrations (SQL files embedded in the binary, applied in order at start in one
//! transaction and recorded in `schema_migrations`) and the settings every node shares.

use std::collections::BTreeSet;

use super::connect::{Hosts, CONNECT_TIMEOUT};
use super::sql::{col, pg_err};
use crate::store::StoreError;

/// Migrations in order: (version, name, SQL). Append only; never edit an applied one.
pub(super) const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (2, "sync_and_keys", include_str!("../migrations/0002_sync_and_keys.sql")),
    (3, "notes_and_settings", include_str!("../migrations/0003_notes_and_settings.sql")),
    (4, "user_wake", include_str!("../migrations/0004_user_wake.sql")),
];
/// Serialises schema changes of nodes starting at the same time (any fixed number).
pub(super) const MIGRATION_LOCK: i64 = 0x7066_6d00;

/// Migrations and the shared secret, on one connection, under an advisory lock.
pub(super) async fn setup(hosts: &Hosts) -> Result<String, StoreError> {
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
