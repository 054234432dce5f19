//! Writes: the rows of one operation ([`row_writes`], the mapping both engines share), gathered
//! by table and written in the transaction that commits them, one statement per table.

use std::collections::BTreeSet;

use deadpool_postgres::ClientWrapper;
use uuid::Uuid;

use super::sql::{col, is_unique, pg_err, signed, uid, unsigned};
use crate::store::codec::encode;
use crate::store::writes::{row_writes, RowWrite};
use crate::store::{IdemRecord, Op, StoreError, SyncRow, UserRecord};

/// Rows keyed by account and a number (log records by sequence number, day and tracker rows by
/// day), as the arrays of one `unnest` insert.
#[derive(Default)]
struct Keyed {
    accounts: Vec<Uuid>,
    numbers: Vec<i64>,
    bodies: Vec<Vec<u8>>,
}

impl Keyed {
    fn push(&mut self, acc: u128, n: i64, body: Vec<u8>) {
        self.accounts.push(uid(acc));
        self.numbers.push(n);
        self.bodies.push(body);
    }
}

/// An operation's rows, by table.
#[derive(Default)]
struct Tables<'a> {
    user: Option<&'a UserRecord>,
    removed_user: Option<&'a UserRecord>,
    removed: Vec<Uuid>,
    account_ids: Vec<Uuid>,
    account_bodies: Vec<Vec<u8>>,
    records: Keyed,
    notes: Keyed,
    days: Keyed,
    track: Keyed,
    /// Ids that must be new (a deposit's into the main account), and ids that may repeat.
    new_txids: BTreeSet<&'a str>,
    txids: BTreeSet<&'a str>,
    change: Option<&'a SyncRow>,
    idem_removed: Vec<&'a str>,
    idem_put: Option<&'a IdemRecord>,
    docs_put: Vec<(&'a str, Vec<u8>)>,
    /// When the user next needs the service (seconds), when it changed (`Some(None)`: never).
    wake: Option<Option<i64>>,
    docs_removed: Vec<&'a str>,
}

impl<'a> Tables<'a> {
    fn of(op: &'a Op) -> Result<Tables<'a>, StoreError> {
        let mut t = Tables::default();
        // PostgreSQL derives no ids (its `Store::id_key` is `None`): every id is indexed.
        row_writes(op, None, |w| {
            match w {
                RowWrite::User(u) => t.user = Some(u),
                RowWrite::Account { account, .. } => {
                    t.account_ids.push(uid(account.uuid));
                    t.account_bodies.push(encode(account)?);
                }
                RowWrite::Record { acc, seq, rec, .. } => t.records.push(acc, signed(seq)?, encode(rec)?),
                RowWrite::Txid { id, new: true } => _ = t.new_txids.insert(id),
                RowWrite::Txid { id, new: false } => _ = t.txids.insert(id),
                RowWrite::Day { acc, day, sums, .. } => t.days.push(acc, day, encode(sums)?),
                RowWrite::Track { acc, day, row, .. } => t.track.push(acc, day, encode(row)?),
                RowWrite::Note { acc, seq, note } => t.notes.push(acc, signed(seq)?, encode(note)?),
                RowWrite::Doc { key, doc: Some(doc) } => t.docs_put.push((key, encode(doc)?)),
                RowWrite::Doc { key, doc: None } => t.docs_removed.push(key),
                RowWrite::Wake { at_secs, .. } => t.wake = Some(at_secs),
                RowWrite::RemoveAccount(acc) => t.removed.push(uid(acc)),
                RowWrite::Change(row) => t.change = Some(row),
                RowWrite::IdemRemove(k) => t.idem_removed.push(k),
                RowWrite::IdemPut(r) => t.idem_put = Some(r),
                RowWrite::RemoveUser(u) => t.removed_user = Some(u),
            }
            Ok(())
        })?;
        // An id that must be new is not written again as one that may repeat.
        t.txids.retain(|id| !t.new_txids.contains(id));
        Ok(t)
    }
}

/// Writes the rows of `op` in the current transaction; returns the user's new version (0 once
/// removed).
pub(super) async fn apply(c: &ClientWrapper, op: &Op) -> Result<u64, StoreError> {
    let t = Tables::of(op)?;
    if let Some(user) = t.removed_user {
        delete_user(c, signed(user.user_no)?).await?;
        return Ok(0);
    }
    let user = t.user.ok_or(StoreError::Bug("a commit without its user record"))?;
    let no = signed(user.user_no)?;
    let st = c
        .prepare_cached(
            "INSERT INTO users (user_no, user_id, version, record) VALUES ($1, $2, 1, $3) \
             ON CONFLICT (user_no) DO UPDATE SET record = EXCLUDED.record, version = users.version + 1 \
             RETURNING version",
        )
        .await
        .map_err(pg_err)?;
    let row = c.query_one(&st, &[&no, &user.user_id.as_str(), &encode(user)?]).await.map_err(|e| {
        if is_unique(&e, "users_user_id_key") {
            StoreError::UserExists
        } else {
            pg_err(e)
        }
    })?;
    let version = unsigned(col(&row, 0)?)?;
    tree_rows(c, no, &t).await?;
    if let Some(row) = t.change {
        let st = c
            .prepare_cached("INSERT INTO change_rows (user_no, knowledge, body) VALUES ($1, $2, $3)")
            .await
            .map_err(pg_err)?;
        c.execute(&st, &[&no, &signed(row.knowledge)?, &encode(row)?]).await.map_err(pg_err)?;
    }
    if !t.idem_removed.is_empty() {
        let st = c
            .prepare_cached("DELETE FROM idem_keys WHERE user_no = $1 AND key = ANY($2)")
            .await
            .map_err(pg_err)?;
        c.execute(&st, &[&no, &t.idem_removed]).await.map_err(pg_err)?;
    }
    if let Some(r) = t.idem_put {
        let st = c
            .prepare_cached(
                "INSERT INTO idem_keys (user_no, key, body) VALUES ($1, $2, $3) \
                 ON CONFLICT (user_no, key) DO UPDATE SET body = EXCLUDED.body",
            )
            .await
            .map_err(pg_err)?;
        c.execute(&st, &[&no, &r.key, &encode(r)?]).await.map_err(pg_err)?;
    }
    if !t.docs_removed.is_empty() {
        let st = c
            .prepare_cached("DELETE FROM user_settings WHERE user_no = $1 AND key = ANY($2)")
            .await
            .map_err(pg_err)?;
        c.execute(&st, &[&no, &t.docs_removed]).await.map_err(pg_err)?;
    }
    if !t.docs_put.is_empty() {
        let (keys, bodies): (Vec<&str>, Vec<Vec<u8>>) = t.docs_put.iter().cloned().unzip();
        let st = c
            .prepare_cached(
                "INSERT INTO user_settings (user_no, key, body) SELECT $1, k, b FROM unnest($2::text[], $3::bytea[]) AS t(k, b) \
                 ON CONFLICT (user_no, key) DO UPDATE SET body = EXCLUDED.body",
            )
            .await
            .map_err(pg_err)?;
        c.execute(&st, &[&no, &keys, &bodies]).await.map_err(pg_err)?;
    }
    match t.wake {
        None => {}
        Some(None) => {
            let st = c.prepare_cached("DELETE FROM user_wake WHERE user_no = $1").await.map_err(pg_err)?;
            c.execute(&st, &[&no]).await.map_err(pg_err)?;
        }
        Some(Some(at)) => {
            let st = c
                .prepare_cached(
                    "INSERT INTO user_wake (user_no, user_id, at_secs) VALUES ($1, $2, $3) \
                     ON CONFLICT (user_no) DO UPDATE SET at_secs = EXCLUDED.at_secs",
                )
                .await
                .map_err(pg_err)?;
            c.execute(&st, &[&no, &user.user_id.as_str(), &at]).await.map_err(pg_err)?;
        }
    }
    Ok(version)
}

async fn delete_user(c: &ClientWrapper, no: i64) -> Result<(), StoreError> {
    for table in [
        "accounts",
        "log_records",
        "log_notes",
        "user_settings",
        "user_wake",
        "day_rows",
        "tracker_rows",
        "main_txids",
        "change_rows",
        "idem_keys",
        "users",
    ] {
        let st =
            c.prepare_cached(&format!("DELETE FROM {table} WHERE user_no = $1")).await.map_err(pg_err)?;
        c.execute(&st, &[&no]).await.map_err(pg_err)?;
    }
    Ok(())
}

/// The tree's rows and the transaction-id index.
async fn tree_rows(c: &ClientWrapper, no: i64, t: &Tables<'_>) -> Result<(), StoreError> {
    if !t.removed.is_empty() {
        for table in ["accounts", "log_records", "log_notes", "day_rows", "tracker_rows"] {
            let st = c
                .prepare_cached(&format!("DELETE FROM {table} WHERE user_no = $1 AND account = ANY($2)"))
                .await
                .map_err(pg_err)?;
            c.execute(&st, &[&no, &t.removed]).await.map_err(pg_err)?;
        }
    }
    if !t.account_ids.is_empty() {
        let st = c
            .prepare_cached(
                "INSERT INTO accounts (user_no, account, body) SELECT $1, a, b FROM unnest($2::uuid[], $3::bytea[]) AS t(a, b) \
                 ON CONFLICT (user_no, account) DO UPDATE SET body = EXCLUDED.body",
            )
            .await
            .map_err(pg_err)?;
        c.execute(&st, &[&no, &t.account_ids, &t.account_bodies]).await.map_err(pg_err)?;
    }
    for (table, column, rows) in [
        ("log_records", "seq", &t.records),
        ("log_notes", "seq", &t.notes),
        ("day_rows", "day", &t.days),
        ("tracker_rows", "day", &t.track),
    ] {
        if rows.accounts.is_empty() {
            continue;
        }
        let st = c
            .prepare_cached(&format!(
                "INSERT INTO {table} (user_no, account, {column}, body) \
                 SELECT $1, a, n, b FROM unnest($2::uuid[], $3::int8[], $4::bytea[]) AS t(a, n, b) \
                 ON CONFLICT (user_no, account, {column}) DO UPDATE SET body = EXCLUDED.body"
            ))
            .await
            .map_err(pg_err)?;
        c.execute(&st, &[&no, &rows.accounts, &rows.numbers, &rows.bodies]).await.map_err(pg_err)?;
    }
    if !t.new_txids.is_empty() {
        // The unique key refuses a second deposit with the same id, whichever node sends it
        // (SPEC D28): the check under one node's lock cannot see another node's write.
        let ids: Vec<&str> = t.new_txids.iter().copied().collect();
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
    if !t.txids.is_empty() {
        let ids: Vec<&str> = t.txids.iter().copied().collect();
        let st = c
            .prepare_cached(
                "INSERT INTO main_txids (user_no, txid) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING",
            )
            .await
            .map_err(pg_err)?;
        c.execute(&st, &[&no, &ids]).await.map_err(pg_err)?;
    }
    Ok(())
}
