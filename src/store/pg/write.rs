//! Writes: the rows of one operation, in the transaction that commits it.

use std::collections::BTreeSet;

use deadpool_postgres::ClientWrapper;
use uuid::Uuid;

use super::sql::{col, is_unique, pg_err, signed, uid, unsigned};
use crate::domain::engine::Change;
use crate::domain::tree::{AccountId, Text};
use crate::store::codec::encode;
use crate::store::{Op, StoreError};

/// Writes the rows of `op` in the current transaction; returns the user's new version.
pub(super) async fn apply(c: &ClientWrapper, op: &Op) -> Result<u64, StoreError> {
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
