//! Reads: a user's record and tree, its delta-sync position and kept answers, the transaction-id
//! index, new user numbers.

use std::collections::HashMap;
use std::sync::Arc;

use deadpool_postgres::ClientWrapper;
use uuid::Uuid;

use tokio_postgres::types::ToSql;

use super::sql::{col, pg_err, signed, unsigned};
use super::txn::{in_order, next};
use crate::domain::tree::{Account, AccountId, DaySums, TrackRow, Tree};
use crate::store::codec::{decode, decode_compat};
use crate::store::{BoxFuture, Loaded, StoreError, UserMeta, UserRecord};

pub(super) async fn load(c: &ClientWrapper, user_id: &str) -> Result<Option<Loaded>, StoreError> {
    let st =
        c.prepare_cached("SELECT version, record FROM users WHERE user_id = $1").await.map_err(pg_err)?;
    let Some(row) = c.query_opt(&st, &[&user_id]).await.map_err(pg_err)? else {
        return Ok(None);
    };
    let version = unsigned(col(&row, 0)?)?;
    let user: UserRecord = decode_compat(&col::<Vec<u8>>(&row, 1)?)?;
    let no = signed(user.user_no)?;
    let mut stmts = Vec::with_capacity(4);
    for sql in [
        "SELECT body FROM accounts WHERE user_no = $1",
        "SELECT account, day, body FROM day_rows WHERE user_no = $1 ORDER BY account, day",
        "SELECT account, day, body FROM tracker_rows WHERE user_no = $1 ORDER BY account, day",
        "SELECT key, body FROM user_settings WHERE user_no = $1",
    ] {
        stmts.push(c.prepare_cached(sql).await.map_err(pg_err)?);
    }
    // The tree's four tables in one round trip.
    let params: [&(dyn ToSql + Sync); 1] = [&no];
    let mut answers =
        in_order(stmts.iter().map(|st| Box::pin(c.query(st, &params)) as BoxFuture<'_, _>).collect())
            .await
            .into_iter();
    let a = &mut answers;
    let (accounts_rows, day_rows, track_rows, doc_rows) = (next(a)?, next(a)?, next(a)?, next(a)?);
    let mut accounts: HashMap<AccountId, Account> = HashMap::new();
    for row in accounts_rows {
        let a: Account = decode(&col::<Vec<u8>>(&row, 0)?)?;
        accounts.insert(a.uuid, a);
    }
    for row in day_rows {
        let acc = col::<Uuid>(&row, 0)?.as_u128();
        let sums: DaySums = decode(&col::<Vec<u8>>(&row, 2)?)?;
        if let Some(a) = accounts.get_mut(&acc) {
            a.days.add(col(&row, 1)?, &sums);
        }
    }
    for row in track_rows {
        let acc = col::<Uuid>(&row, 0)?.as_u128();
        let r: TrackRow = decode(&col::<Vec<u8>>(&row, 2)?)?;
        if let Some(a) = accounts.get_mut(&acc) {
            a.track.insert(col(&row, 1)?, r);
        }
    }
    let mut docs = crate::domain::docs::Docs::new();
    for row in doc_rows {
        docs.insert(col::<String>(&row, 0)?.into(), Arc::new(decode(&col::<Vec<u8>>(&row, 1)?)?));
    }
    let tree = Tree {
        root: user.root,
        accounts: accounts.into_iter().map(|(id, a)| (id, Arc::new(a))).collect(),
        ledger: user.ledger.clone(),
        id_key: None,
        docs: Arc::new(docs),
    };
    Ok(Some((user, tree, version)))
}

/// The user's delta-sync knowledge and kept idempotent answers, read on `c` in one round trip.
pub(super) async fn load_meta(c: &ClientWrapper, user_no: u64) -> Result<UserMeta, StoreError> {
    let no = signed(user_no)?;
    let knowledge_st = c
        .prepare_cached("SELECT max(knowledge) FROM change_rows WHERE user_no = $1")
        .await
        .map_err(pg_err)?;
    let idem_st = c.prepare_cached("SELECT body FROM idem_keys WHERE user_no = $1").await.map_err(pg_err)?;
    let params: [&(dyn ToSql + Sync); 1] = [&no];
    let mut answers = in_order(vec![
        Box::pin(c.query(&knowledge_st, &params)) as BoxFuture<'_, _>,
        Box::pin(c.query(&idem_st, &params)),
    ])
    .await
    .into_iter();
    let (knowledge_rows, idem_rows) = (next(&mut answers)?, next(&mut answers)?);
    let knowledge = match knowledge_rows
        .first()
        .map(|r| r.try_get::<_, Option<i64>>(0))
        .transpose()
        .map_err(pg_err)?
        .flatten()
    {
        Some(k) => unsigned(k)?,
        None => 0,
    };
    let mut idem = Vec::new();
    for row in idem_rows {
        let body: Vec<u8> = row.try_get(0).map_err(pg_err)?;
        idem.push(decode(&body)?);
    }
    Ok(UserMeta { knowledge, idem })
}

pub(super) async fn txid_exists(c: &ClientWrapper, user_no: u64, id: &str) -> Result<bool, StoreError> {
    let st = c
        .prepare_cached("SELECT 1 FROM main_txids WHERE user_no = $1 AND txid = $2")
        .await
        .map_err(pg_err)?;
    Ok(c.query_opt(&st, &[&signed(user_no)?, &id]).await.map_err(pg_err)?.is_some())
}

/// Sequences are not transactional: a number taken by a write that rolls back is never reused.
pub(super) async fn next_user_no(c: &ClientWrapper) -> Result<u64, StoreError> {
    let st = c.prepare_cached("SELECT nextval('user_nos')").await.map_err(pg_err)?;
    unsigned(col(&c.query_one(&st, &[]).await.map_err(pg_err)?, 0)?)
}
