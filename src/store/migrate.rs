//! `pfm migrate --from A --to B`: copies every user (record, tree with its day and tracker
//! rows, every account's log and the main account's id index) from one engine to the other,
//! then reads every user back from the target and compares it with the source.
//!
//! Each side is a data directory (the embedded engine) or a `postgres://` URL. The target must
//! hold no user. User numbers are internal keys, so the target hands out its own.

use std::path::Path;

use crate::domain::engine::Change;

use super::journal::JournalStore;
use super::pg::PgStore;
use super::{Op, Store, StoreError, UserRecord};

/// One side of a migration.
pub enum Side {
    Dir(JournalStore),
    Pg(PgStore),
}

/// Whether `s` names a PostgreSQL database rather than a data directory.
pub fn is_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

impl Side {
    pub fn open(s: &str) -> Result<Side, StoreError> {
        if is_url(s) {
            Ok(Side::Pg(PgStore::open(s)?))
        } else {
            Ok(Side::Dir(JournalStore::open(Path::new(s))?))
        }
    }

    fn store(&self) -> &dyn Store {
        match self {
            Side::Dir(j) => j,
            Side::Pg(p) => p,
        }
    }

    async fn user_ids(&self) -> Result<Vec<String>, StoreError> {
        match self {
            Side::Dir(j) => j.user_ids().await,
            Side::Pg(p) => p.user_ids().await,
        }
    }
}

/// A user in full, as the engines store it (logs included).
struct Whole {
    record: UserRecord,
    change: Change,
}

impl Whole {
    /// Everything but the user number, for comparing the two sides.
    fn same(&self, o: &Whole) -> bool {
        let (a, b) = (&self.change, &o.change);
        let mut ra = self.record.clone();
        ra.user_no = o.record.user_no;
        ra == o.record
            && a.accounts == b.accounts
            && a.records == b.records
            && a.days == b.days
            && a.track == b.track
            && a.main_txids == b.main_txids
            && a.notes == b.notes
            && a.docs == b.docs
            && a.ledger == b.ledger
    }
}

async fn read_whole(store: &dyn Store, user_id: &str) -> Result<Option<Whole>, StoreError> {
    let Some((record, tree)) = store.load_user(user_id).await? else {
        return Ok(None);
    };
    let mut accounts: Vec<_> = tree.accounts.values().cloned().collect();
    accounts.sort_by_key(|a| a.uuid);
    let mut change = Change { ledger: tree.ledger.clone(), ..Change::default() };
    for a in &accounts {
        for (seq, rec) in store.read_log(record.user_no, a.uuid, 0, a.log_len).await?.into_iter().enumerate()
        {
            if rec.indexed(a.uuid, tree.root) {
                change.main_txids.push(rec.id.clone());
            }
            if let Some(n) = &rec.note {
                change.notes.push((a.uuid, seq as u64, n.clone()));
            }
            change.records.push((a.uuid, seq as u64, rec));
        }
        if a.log_len != change.records.iter().filter(|r| r.0 == a.uuid).count() as u64 {
            return Err(StoreError::Corrupt(format!("{user_id}: account {} misses log records", a.uuid)));
        }
        change.days.extend(a.days.daily(i64::MIN, i64::MAX).map(|(d, s)| (a.uuid, d, s)));
        change.track.extend(a.track.range(i64::MIN, i64::MAX).map(|(d, r)| (a.uuid, d, r)));
    }
    change.main_txids.sort();
    change.main_txids.dedup();
    change.accounts = accounts;
    change.docs = tree.docs.iter().map(|(k, d)| (k.clone(), Some(d.clone()))).collect();
    Ok(Some(Whole { record, change }))
}

/// What a migration did.
#[derive(Debug, Default)]
pub struct Report {
    pub users: usize,
    pub records: usize,
}

/// Copies every user from `from` to `to` and verifies the copy.
pub async fn migrate(from: &Side, to: &Side) -> Result<Report, StoreError> {
    if !to.user_ids().await?.is_empty() {
        return Err(StoreError::TargetNotEmpty);
    }
    let ids = from.user_ids().await?;
    let mut report = Report::default();
    for id in &ids {
        let Some(mut whole) = read_whole(from.store(), id).await? else { continue };
        whole.record.user_no = to.store().new_user_no().await?;
        report.records += whole.change.records.len();
        to.store()
            .commit(
                Box::new(Op::Commit { user: whole.record, change: whole.change, sync: None, idem: None }),
                0,
                None,
            )
            .await?;
        report.users += 1;
    }
    // Verify: every user reads back equal (but for its user number) on the target.
    for id in &ids {
        let same = match (read_whole(from.store(), id).await?, read_whole(to.store(), id).await?) {
            (Some(a), Some(b)) => a.same(&b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            return Err(StoreError::Corrupt(format!("user {id} differs on the target after copying")));
        }
    }
    from.store().flush()?;
    to.store().flush()?;
    Ok(report)
}
