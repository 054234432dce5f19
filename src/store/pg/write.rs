//! Writes: the rows of one operation ([`row_writes`], the mapping both engines share), gathered
//! by table, one statement per table, sent with the COMMIT that ends their transaction in one
//! round trip ([`Txn::commit_with`]).

use deadpool_postgres::ClientWrapper;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::sql::{col, is_unique, pg_err, signed, uid, unsigned};
use super::txn::{Stmt, Txn};
use crate::store::codec::encode;
use crate::store::writes::{row_writes, RowWrite};
use crate::store::{Op, StoreError};

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

/// An operation's rows, by table, as the values its statements are sent with.
#[derive(Default)]
struct Tables<'a> {
    user_no: i64,
    user_id: &'a str,
    /// The encoded user record; `None`: the user is removed.
    user: Option<Vec<u8>>,
    removed: Vec<Uuid>,
    account_ids: Vec<Uuid>,
    account_bodies: Vec<Vec<u8>>,
    records: Keyed,
    notes: Keyed,
    days: Keyed,
    track: Keyed,
    /// Ids that must be new (a deposit's into the main account), and ids that may repeat.
    new_txids: Vec<&'a str>,
    txids: Vec<&'a str>,
    /// The change row: knowledge and body.
    change: Option<(i64, Vec<u8>)>,
    idem_removed: Vec<&'a str>,
    idem_put: Option<(&'a str, Vec<u8>)>,
    doc_keys: Vec<&'a str>,
    doc_bodies: Vec<Vec<u8>>,
    /// When the user next needs the service (seconds), when it changed (`Some(None)`: never).
    wake: Option<Option<i64>>,
    docs_removed: Vec<&'a str>,
}

impl<'a> Tables<'a> {
    fn of(op: &'a Op) -> Result<Tables<'a>, StoreError> {
        let mut t = Tables::default();
        let mut new_txids = std::collections::BTreeSet::new();
        let mut txids = std::collections::BTreeSet::new();
        // PostgreSQL derives no ids (its `Store::id_key` is `None`): every id is indexed.
        row_writes(op, None, |w| {
            match w {
                RowWrite::User(u) => t.user = Some(encode(u)?),
                RowWrite::Account { account, .. } => {
                    t.account_ids.push(uid(account.uuid));
                    t.account_bodies.push(encode(account)?);
                }
                RowWrite::Record { acc, seq, rec, .. } => t.records.push(acc, signed(seq)?, encode(rec)?),
                RowWrite::Txid { id, new: true } => _ = new_txids.insert(id),
                RowWrite::Txid { id, new: false } => _ = txids.insert(id),
                RowWrite::Day { acc, day, sums, .. } => t.days.push(acc, day, encode(sums)?),
                RowWrite::Track { acc, day, row, .. } => t.track.push(acc, day, encode(row)?),
                RowWrite::Note { acc, seq, note } => t.notes.push(acc, signed(seq)?, encode(note)?),
                RowWrite::Doc { key, doc: Some(doc) } => {
                    t.doc_keys.push(key);
                    t.doc_bodies.push(encode(doc)?);
                }
                RowWrite::Doc { key, doc: None } => t.docs_removed.push(key),
                RowWrite::Wake { at_secs, .. } => t.wake = Some(at_secs),
                RowWrite::RemoveAccount(acc) => t.removed.push(uid(acc)),
                RowWrite::Change(row) => t.change = Some((signed(row.knowledge)?, encode(row)?)),
                RowWrite::IdemRemove(k) => t.idem_removed.push(k),
                RowWrite::IdemPut(r) => t.idem_put = Some((r.key.as_str(), encode(r)?)),
                RowWrite::RemoveUser(_) => t.user = None,
            }
            Ok(())
        })?;
        let user = op.user();
        t.user_no = signed(user.user_no)?;
        t.user_id = user.user_id.as_str();
        // An id that must be new is not written again as one that may repeat.
        t.txids = txids.into_iter().filter(|id| !new_txids.contains(id)).collect();
        t.new_txids = new_txids.into_iter().collect();
        if matches!(op, Op::DeleteUser { .. }) {
            t.user = None;
        } else if t.user.is_none() {
            return Err(StoreError::Bug("a commit without its user record"));
        }
        Ok(t)
    }
}

/// How a statement's failure reads.
#[derive(Clone, Copy)]
enum Fails {
    Plain,
    /// The user row: its id's unique key means another node registered the id meanwhile.
    UserRow,
    /// Ids that must be new: their unique key means another node's deposit has the id.
    NewTxids,
}

/// The statements of one write, in order, each prepared once per connection.
struct Plan<'t> {
    stmts: Vec<Stmt<'t>>,
    fails: Vec<Fails>,
}

impl<'t> Plan<'t> {
    async fn push(
        &mut self,
        c: &ClientWrapper,
        sql: &str,
        params: Vec<&'t (dyn ToSql + Sync)>,
        fails: Fails,
    ) -> Result<(), StoreError> {
        let st = c.prepare_cached(sql).await.map_err(pg_err)?;
        self.stmts.push(Stmt { st, params });
        self.fails.push(fails);
        Ok(())
    }
}

/// Writes the rows of `op` in `txn` and commits it, statements and COMMIT sent together;
/// returns the user's new version (0 once removed). A statement that fails aborts the
/// transaction (COMMIT then rolls it back), and its error is the answer.
pub(super) async fn commit(txn: Txn, op: &Op) -> Result<u64, StoreError> {
    let t = Tables::of(op)?;
    let plan = plan(txn.c()?, &t).await?;
    let answers = txn.commit_with(&plan.stmts).await?;
    let mut version = 0;
    for (i, (answer, fails)) in answers.into_iter().zip(plan.fails).enumerate() {
        let rows = answer.map_err(|e| match fails {
            Fails::UserRow if is_unique(&e, "users_user_id_key") => StoreError::UserExists,
            Fails::NewTxids if is_unique(&e, "main_txids_pkey") => {
                StoreError::DuplicateTxid(t.new_txids.first().map(|s| s.to_string()).unwrap_or_default())
            }
            _ => pg_err(e),
        })?;
        if i == 0 && t.user.is_some() {
            let row = rows.first().ok_or(StoreError::Bug("the user row answered no version"))?;
            version = unsigned(col(row, 0)?)?;
        }
    }
    Ok(version)
}

/// The statements that write `t`, the user row first (its answer is the new version).
async fn plan<'t>(c: &ClientWrapper, t: &'t Tables<'_>) -> Result<Plan<'t>, StoreError> {
    let mut p = Plan { stmts: Vec::new(), fails: Vec::new() };
    let no: &'t (dyn ToSql + Sync) = &t.user_no;
    let Some(user) = &t.user else {
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
            p.push(c, &format!("DELETE FROM {table} WHERE user_no = $1"), vec![no], Fails::Plain).await?;
        }
        return Ok(p);
    };
    p.push(
        c,
        "INSERT INTO users (user_no, user_id, version, record) VALUES ($1, $2, 1, $3) \
         ON CONFLICT (user_no) DO UPDATE SET record = EXCLUDED.record, version = users.version + 1 \
         RETURNING version",
        vec![no, &t.user_id, user],
        Fails::UserRow,
    )
    .await?;
    tree_rows(c, &mut p, t).await?;
    if let Some((knowledge, body)) = &t.change {
        p.push(
            c,
            "INSERT INTO change_rows (user_no, knowledge, body) VALUES ($1, $2, $3)",
            vec![no, knowledge, body],
            Fails::Plain,
        )
        .await?;
    }
    if !t.idem_removed.is_empty() {
        p.push(
            c,
            "DELETE FROM idem_keys WHERE user_no = $1 AND key = ANY($2)",
            vec![no, &t.idem_removed],
            Fails::Plain,
        )
        .await?;
    }
    if let Some((key, body)) = &t.idem_put {
        p.push(
            c,
            "INSERT INTO idem_keys (user_no, key, body) VALUES ($1, $2, $3) \
             ON CONFLICT (user_no, key) DO UPDATE SET body = EXCLUDED.body",
            vec![no, key, body],
            Fails::Plain,
        )
        .await?;
    }
    if !t.docs_removed.is_empty() {
        p.push(
            c,
            "DELETE FROM user_settings WHERE user_no = $1 AND key = ANY($2)",
            vec![no, &t.docs_removed],
            Fails::Plain,
        )
        .await?;
    }
    if !t.doc_keys.is_empty() {
        p.push(
            c,
            "INSERT INTO user_settings (user_no, key, body) SELECT $1, k, b FROM unnest($2::text[], $3::bytea[]) AS t(k, b) \
             ON CONFLICT (user_no, key) DO UPDATE SET body = EXCLUDED.body",
            vec![no, &t.doc_keys, &t.doc_bodies],
            Fails::Plain,
        )
        .await?;
    }
    match &t.wake {
        None => {}
        Some(None) => p.push(c, "DELETE FROM user_wake WHERE user_no = $1", vec![no], Fails::Plain).await?,
        Some(Some(at)) => {
            p.push(
                c,
                "INSERT INTO user_wake (user_no, user_id, at_secs) VALUES ($1, $2, $3) \
                 ON CONFLICT (user_no) DO UPDATE SET at_secs = EXCLUDED.at_secs",
                vec![no, &t.user_id, at],
                Fails::Plain,
            )
            .await?
        }
    }
    Ok(p)
}

/// The tree's rows and the transaction-id index.
async fn tree_rows<'t>(c: &ClientWrapper, p: &mut Plan<'t>, t: &'t Tables<'_>) -> Result<(), StoreError> {
    let no: &'t (dyn ToSql + Sync) = &t.user_no;
    if !t.removed.is_empty() {
        for table in ["accounts", "log_records", "log_notes", "day_rows", "tracker_rows"] {
            p.push(
                c,
                &format!("DELETE FROM {table} WHERE user_no = $1 AND account = ANY($2)"),
                vec![no, &t.removed],
                Fails::Plain,
            )
            .await?;
        }
    }
    if !t.account_ids.is_empty() {
        p.push(
            c,
            "INSERT INTO accounts (user_no, account, body) SELECT $1, a, b FROM unnest($2::uuid[], $3::bytea[]) AS t(a, b) \
             ON CONFLICT (user_no, account) DO UPDATE SET body = EXCLUDED.body",
            vec![no, &t.account_ids, &t.account_bodies],
            Fails::Plain,
        )
        .await?;
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
        p.push(
            c,
            &format!(
                "INSERT INTO {table} (user_no, account, {column}, body) \
                 SELECT $1, a, n, b FROM unnest($2::uuid[], $3::int8[], $4::bytea[]) AS t(a, n, b) \
                 ON CONFLICT (user_no, account, {column}) DO UPDATE SET body = EXCLUDED.body"
            ),
            vec![no, &rows.accounts, &rows.numbers, &rows.bodies],
            Fails::Plain,
        )
        .await?;
    }
    if !t.new_txids.is_empty() {
        // The unique key refuses a second deposit with the same id, whichever node sends it
        // (SPEC D28): the check under one node's lock cannot see another node's write.
        p.push(
            c,
            "INSERT INTO main_txids (user_no, txid) SELECT $1, unnest($2::text[])",
            vec![no, &t.new_txids],
            Fails::NewTxids,
        )
        .await?;
    }
    if !t.txids.is_empty() {
        p.push(
            c,
            "INSERT INTO main_txids (user_no, txid) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING",
            vec![no, &t.txids],
            Fails::Plain,
        )
        .await?;
    }
    Ok(())
}
