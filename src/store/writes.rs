//! What one operation writes, as rows both engines store: the one mapping from an [`Op`] to
//! row writes, which the sled engine turns into keys and values and the PostgreSQL engine into
//! statements. Through it both treat transaction ids alike: an id the user's key derives from
//! the main-account record carrying it gets no index row (`domain::txid`), and the id of a
//! deposit into the main account is marked as one that must be new (SPEC D28).

use crate::domain::docs::Doc;
use crate::domain::engine::{Change, TxRecord};
use crate::domain::note::Note;
use crate::domain::tree::{Account, AccountId, DaySums, TrackRow};
use crate::domain::txid::IdKey;

use super::{IdemRecord, Op, StoreError, SyncRow, UserRecord};

/// One row an operation writes or removes, borrowed from the operation. `i` is a value's place
/// in its list of the change (accounts, records, day rows, tracker rows), where the journal
/// finds its encoded bytes (`sled_store::ValueSpans`).
#[derive(Clone, Copy)]
pub enum RowWrite<'a> {
    /// The user record, with the ledger after the change.
    User(&'a UserRecord),
    Account {
        i: usize,
        account: &'a Account,
    },
    Record {
        i: usize,
        acc: AccountId,
        seq: u64,
        rec: &'a TxRecord,
    },
    /// An entry of the main account's transaction-id index (the /deposit 409 check). `new`:
    /// the id of a deposit into the main account, which must not be there yet; an engine that
    /// other nodes write to refuses it if it is ([`StoreError::DuplicateTxid`]). Other ids
    /// (splits and surplus returns reusing a deposit's id, withdrawals) may repeat.
    Txid {
        id: &'a str,
        new: bool,
    },
    Day {
        i: usize,
        acc: AccountId,
        day: i64,
        sums: &'a DaySums,
    },
    Track {
        i: usize,
        acc: AccountId,
        day: i64,
        row: &'a TrackRow,
    },
    /// The note of a new record (payee, memo, import id).
    Note {
        acc: AccountId,
        seq: u64,
        note: &'a Note,
    },
    /// When the user next needs the service, in seconds (`None`: nothing to do), by user id.
    Wake {
        user_id: &'a str,
        at_secs: Option<i64>,
    },
    /// A setting written (`None`: removed).
    Doc {
        key: &'a str,
        doc: Option<&'a Doc>,
    },
    /// An account removed: its row and every log, note, day and tracker row of it.
    RemoveAccount(AccountId),
    /// The delta-sync row of the change.
    Change(&'a SyncRow),
    IdemRemove(&'a str),
    IdemPut(&'a IdemRecord),
    /// The user removed: its record and every row of its tree, index, changes and keys.
    RemoveUser(&'a UserRecord),
}

/// Calls `f` with every row `op` writes, in one order for both engines. `id_key`: the key the
/// engine derives the user's generated ids under (`Store::id_key`), if any. No allocation:
/// this runs on every write.
pub fn row_writes<'a>(
    op: &'a Op,
    id_key: Option<&IdKey>,
    mut f: impl FnMut(RowWrite<'a>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let (user, change, sync, idem) = match op {
        Op::Commit { user, change, sync, idem } => (user, change, sync, idem),
        Op::DeleteUser { user } => return f(RowWrite::RemoveUser(user)),
    };
    f(RowWrite::User(user))?;
    for (i, account) in change.accounts.iter().enumerate() {
        f(RowWrite::Account { i, account })?;
    }
    for (i, (acc, seq, rec)) in change.records.iter().enumerate() {
        f(RowWrite::Record { i, acc: *acc, seq: *seq, rec })?;
    }
    let credited = credited_id(change, user.root);
    let mut root_seqs = None;
    for id in &change.main_txids {
        if derived(change, id, id_key, user.root, &mut root_seqs) {
            continue;
        }
        f(RowWrite::Txid { id, new: Some(id.as_str()) == credited })?;
    }
    for (i, (acc, day, sums)) in change.days.iter().enumerate() {
        f(RowWrite::Day { i, acc: *acc, day: *day, sums })?;
    }
    for (i, (acc, day, row)) in change.track.iter().enumerate() {
        f(RowWrite::Track { i, acc: *acc, day: *day, row })?;
    }
    for (acc, seq, note) in &change.notes {
        f(RowWrite::Note { acc: *acc, seq: *seq, note })?;
    }
    for (key, doc) in &change.docs {
        f(RowWrite::Doc { key, doc: doc.as_deref() })?;
    }
    if let Some(at_secs) = change.wake {
        f(RowWrite::Wake { user_id: &user.user_id, at_secs })?;
    }
    for (acc, _) in &change.removed {
        f(RowWrite::RemoveAccount(*acc))?;
    }
    if let Some(row) = sync {
        f(RowWrite::Change(row))?;
    }
    if let Some(w) = idem {
        for k in &w.remove {
            f(RowWrite::IdemRemove(k))?;
        }
        if let Some(rec) = &w.put {
            f(RowWrite::IdemPut(rec))?;
        }
    }
    Ok(())
}

/// The id a deposit into the main account credits there: a deposit posts that credit first, so
/// it is the change's first record.
fn credited_id(c: &Change, root: AccountId) -> Option<&str> {
    c.records.first().filter(|(acc, _, r)| *acc == root && r.deposit).map(|(_, _, r)| r.id.as_str())
}

/// Whether `key` derives `id` from the sequence number of the main-account record carrying it:
/// then the log itself finds it, and it needs no index row (`domain::txid`). `root_seqs`, built
/// at the first generated id, maps the change's main-account records by sequence number, so a
/// change of many records costs one pass, not one per id.
fn derived<'c>(
    c: &'c Change,
    id: &str,
    key: Option<&IdKey>,
    root: AccountId,
    root_seqs: &mut Option<std::collections::HashMap<u64, &'c str>>,
) -> bool {
    let Some(s) = key.and_then(|k| k.seq(id)) else { return false };
    let seqs = root_seqs.get_or_insert_with(|| {
        c.records.iter().filter(|(acc, _, _)| *acc == root).map(|(_, seq, r)| (*seq, r.id.as_str())).collect()
    });
    seqs.get(&s).is_some_and(|r| *r == id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::tree::{Ledger, Text};

    fn rec(id: &str, deposit: bool) -> TxRecord {
        TxRecord {
            deposit,
            by: "User".into(),
            id: id.into(),
            channel: "c".into(),
            amount_cents: 1,
            balance_cents: 1,
            amount_due_cents: 0,
            overall_balance_cents: 1,
            date_secs: 0,
            note: None,
        }
    }

    fn commit(records: Vec<(AccountId, u64, TxRecord)>, main_txids: Vec<Text>) -> Op {
        let user = UserRecord {
            user_id: "u".into(),
            user_no: 9,
            password_hash: None,
            role: "user".into(),
            created_at: 0,
            root: 1,
            ledger: Ledger::default(),
        };
        let change = Change { records, main_txids, ..Change::default() };
        Op::Commit { user, change, sync: None, idem: None }
    }

    fn txids(op: &Op, key: Option<&IdKey>) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        row_writes(op, key, |w| {
            if let RowWrite::Txid { id, new } = w {
                out.push((id.to_string(), new));
            }
            Ok(())
        })
        .unwrap();
        out
    }

    /// SPEC D28: the id of a deposit into the main account must be new; the ids a split or a
    /// surplus return reuses, and a withdrawal's, may repeat.
    #[test]
    fn only_a_deposit_into_main_marks_its_id_as_one_that_must_be_new() {
        let (root, child) = (1, 2);
        let deposit = commit(
            vec![(root, 0, rec("D1", true)), (root, 1, rec("D1", false)), (child, 0, rec("D1", true))],
            vec!["D1".into()],
        );
        assert_eq!(txids(&deposit, None), [("D1".to_string(), true)]);
        let withdrawal = commit(vec![(root, 4, rec("W1", false))], vec!["W1".into()]);
        assert_eq!(txids(&withdrawal, None), [("W1".to_string(), false)]);
        // A deposit into a child credits no id of the main account.
        let into_child =
            commit(vec![(child, 0, rec("C1", true)), (root, 5, rec("S1", false))], vec!["S1".into()]);
        assert_eq!(txids(&into_child, None), [("S1".to_string(), false)]);
    }

    #[test]
    fn only_ids_the_key_derives_from_their_main_record_skip_the_index() {
        let key = IdKey::new([3, 4], 9);
        let (root, child) = (1, 2);
        let derived0 = key.id(0).unwrap();
        let derived5 = key.id(5).unwrap();
        let derived7 = key.id(7).unwrap();
        let op = commit(
            vec![
                (root, 0, rec(&derived0, true)),
                // The derived id of seq 5, but at seq 1 (say, a client sent it): indexed.
                (root, 1, rec(&derived5, false)),
                (root, 2, rec("T1", false)),
                // A derived id whose record is not the main account's: indexed.
                (child, 7, rec(&derived7, false)),
            ],
            vec![derived0.clone(), derived5.clone(), "T1".into(), derived7.clone()],
        );
        let ids = |key| txids(&op, key).into_iter().map(|(id, _)| id).collect::<Vec<_>>();
        assert_eq!(ids(Some(&key)), [derived5.to_string(), "T1".into(), derived7.to_string()]);
        // Without a key (PostgreSQL, tests) every id is indexed.
        assert_eq!(
            ids(None),
            [derived0.to_string(), derived5.to_string(), "T1".into(), derived7.to_string()]
        );
    }
}
