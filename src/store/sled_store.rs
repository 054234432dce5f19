//! The sled engine: the materialised state under the journal ([`super::journal`]). One sled
//! tree holds every row, so one operation's rows, with the journal sequence number they come
//! from, are one atomic `apply_batch`. Key layout and encoding (`codec`) stay inside.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::domain::engine::{Change, TxRecord};
use crate::domain::tree::{Account, AccountId, DaySums, TrackRow, Tree};

use super::codec::{self, decode, decode_compat, encode};
use super::overlay::{successor, Row, Rows};
use super::v1::AccountV1;
use super::{IdemRecord, Op, StoreError, SyncRow, UserMeta, UserRecord};
use sled::IVec;

pub struct SledStore {
    db: sled::Db,
}

/// Storage that cannot be opened or lost writes it once held: refuse to start, naming its files.
pub fn damaged(path: &Path, what: &str) -> StoreError {
    let mut files: Vec<String> = std::fs::read_dir(path)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path().display().to_string()).collect())
        .unwrap_or_default();
    files.sort();
    StoreError::Corrupt(format!(
        "storage in {} is damaged ({what}); files: {}; refusing to start rather than drop acknowledged writes",
        path.display(),
        files.join(", ")
    ))
}

fn eng(e: sled::Error) -> StoreError {
    StoreError::Engine(e.to_string())
}

impl SledStore {
    /// Opens (or creates) the database under `dir`, migrating an older format in place and
    /// refusing a newer one.
    pub fn open(dir: &Path) -> Result<SledStore, StoreError> {
        let path = dir.join("db");
        // sled 0.34 may panic on a damaged file instead of answering an error; either way the
        // message names the files, so an operator knows what to restore.
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            sled::Config::new()
                .path(&path)
                // The journal is the durability point: sled is flushed at checkpoints only,
                // not every 500 ms on its own.
                .flush_every_ms(None)
                .mode(sled::Mode::HighThroughput)
                .open()
        }));
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(sled::Error::Io(e))) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(StoreError::Engine(format!(
                    "{} is in use by another process: {e}",
                    path.display()
                )))
            }
            Ok(Err(e)) => return Err(damaged(&path, &e.to_string())),
            Err(_) => return Err(damaged(&path, "sled panicked while opening it")),
        };
        let store = SledStore { db };
        store.check_format(&path)?;
        Ok(store)
    }

    fn check_format(&self, path: &Path) -> Result<(), StoreError> {
        let stored = self.db.get(codec::META_FORMAT).map_err(eng)?.map(|v| v.first().copied().unwrap_or(0));
        match stored {
            Some(v) if v == codec::FORMAT => Ok(()),
            Some(v) if v > codec::FORMAT => Err(StoreError::NewerFormat(format!(
                "{} has storage format {v}, newer than this binary's {}: upgrade pfm",
                path.display(),
                codec::FORMAT
            ))),
            // No marker: a new directory, or one written by format 1 (which had no marker).
            _ => {
                let migrated = self.migrate_v1()?;
                if migrated > 0 {
                    tracing::info!(accounts = migrated, path = %path.display(), "migrated storage format 1 to 2");
                }
                self.db.insert(codec::META_FORMAT, &[codec::FORMAT]).map_err(eng)?;
                self.db.flush().map_err(eng)?;
                Ok(())
            }
        }
    }

    /// Rewrites every format 1 account row as an account row plus day and tracker rows, one
    /// account per atomic batch; rows already migrated (format 2) are skipped, so an interrupted
    /// migration simply resumes.
    fn migrate_v1(&self) -> Result<usize, StoreError> {
        let mut n = 0;
        for kv in self.db.scan_prefix([codec::ACCOUNT]) {
            let (k, v) = kv.map_err(eng)?;
            if v.first() != Some(&codec::FORMAT_V1) {
                continue;
            }
            let user_no = k.get(1..9).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
            let user_no = user_no.ok_or_else(|| StoreError::Corrupt(format!("bad account key {k:?}")))?;
            let m = codec::decode_v1::<AccountV1>(&v)?.migrate();
            let mut batch = sled::Batch::default();
            let id = m.account.uuid;
            for (day, sums) in &m.days {
                batch.insert(codec::day_key(codec::DAY, user_no, id, *day), encode(sums)?);
            }
            for (day, row) in &m.track {
                batch.insert(codec::day_key(codec::TRACK, user_no, id, *day), encode(row)?);
            }
            batch.insert(k, encode(&m.account)?);
            self.db.apply_batch(batch).map_err(eng)?;
            n += 1;
        }
        Ok(n)
    }

    /// The journal sequence number of the last operation applied.
    pub fn applied_seq(&self) -> Result<u64, StoreError> {
        Ok(self
            .db
            .get(codec::META_APPLIED)
            .map_err(eng)?
            .and_then(|v| v.as_ref().try_into().ok().map(u64::from_be_bytes))
            .unwrap_or(0))
    }

    /// The rows as they are in sled, for reads through the memtables.
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// Applies `op` (journal record `seq`) atomically, without flushing.
    pub fn apply(&self, op: &Op, seq: u64) -> Result<(), StoreError> {
        let mut rows = Vec::new();
        rows_into(&self.db, &mut rows, op)?;
        self.apply_rows(rows.iter().map(|(k, v)| (k.as_slice(), v.as_ref())), Some(seq))
    }

    /// Writes rows as one atomic batch, with the journal record they reach if `seq` is given.
    pub fn apply_rows<'a>(
        &self,
        rows: impl Iterator<Item = (&'a [u8], Option<&'a IVec>)>,
        seq: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut b = sled::Batch::default();
        for (k, v) in rows {
            match v {
                Some(v) => b.insert(k, v.clone()),
                None => b.remove(k),
            }
        }
        if let Some(s) = seq {
            b.insert(codec::META_APPLIED, &s.to_be_bytes());
        }
        self.db.apply_batch(b).map_err(eng)
    }

    /// Makes everything applied so far durable in sled.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map(|_| ()).map_err(eng)
    }

    /// A user number never used before (+1 so that 0 never is one).
    pub fn new_user_no(&self) -> Result<u64, StoreError> {
        self.db.generate_id().map(|n| n + 1).map_err(eng)
    }
}

pub fn read_log(
    r: &dyn Rows,
    user_no: u64,
    acc: AccountId,
    from: u64,
    to: u64,
) -> Result<Vec<TxRecord>, StoreError> {
    let start = codec::log_key(user_no, acc, from);
    let end = codec::log_key(user_no, acc, to);
    r.range_rows(&start, Some(&end), false, usize::MAX)?.iter().map(|(_, v)| decode_compat(v)).collect()
}

/// Every user id, in key order.
pub fn user_ids(r: &dyn Rows) -> Result<Vec<String>, StoreError> {
    r.prefix_rows(&[codec::USER])?
        .into_iter()
        .map(|(k, _)| {
            String::from_utf8(k[1..].to_vec()).map_err(|_| StoreError::Corrupt(format!("bad user key {k:?}")))
        })
        .collect()
}

/// The last change row's knowledge (one reverse seek) and every kept key of `user_no`.
pub fn load_meta(r: &dyn Rows, user_no: u64) -> Result<UserMeta, StoreError> {
    let prefix = codec::user_prefix(codec::CHANGE, user_no);
    let hi = successor(&prefix);
    let knowledge = match r.range_rows(&prefix, hi.as_deref(), true, 1)?.first() {
        Some((_, v)) => decode::<SyncRow>(v)?.knowledge,
        None => 0,
    };
    let mut idem = Vec::new();
    for (_, v) in r.prefix_rows(&codec::user_prefix(codec::IDEM, user_no))? {
        idem.push(decode::<IdemRecord>(&v)?);
    }
    Ok(UserMeta { knowledge, idem })
}

pub fn read_changes(
    r: &dyn Rows,
    user_no: u64,
    after: u64,
    upto: u64,
    max: usize,
) -> Result<Vec<SyncRow>, StoreError> {
    if after >= upto {
        return Ok(Vec::new());
    }
    let start = codec::change_key(user_no, after + 1);
    // Up to and including `upto`: the smallest key after it ends the range.
    let mut end = codec::change_key(user_no, upto);
    end.push(0);
    r.range_rows(&start, Some(&end), false, max)?.iter().map(|(_, v)| decode(v)).collect()
}

pub fn main_txid_exists(r: &dyn Rows, user_no: u64, id: &str) -> Result<bool, StoreError> {
    Ok(r.fetch(&codec::txid_key(user_no, id))?.is_some())
}

pub fn load_user(r: &dyn Rows, user_id: &str) -> Result<Option<(UserRecord, Tree)>, StoreError> {
    let Some(v) = r.fetch(&codec::user_key(user_id))? else {
        return Ok(None);
    };
    let user: UserRecord = decode_compat(&v)?;
    let no = user.user_no;
    let mut accounts: HashMap<AccountId, Account> = HashMap::new();
    for (_, v) in r.prefix_rows(&codec::user_prefix(codec::ACCOUNT, no))? {
        let a: Account = decode(&v)?;
        accounts.insert(a.uuid, a);
    }
    for (k, v) in r.prefix_rows(&codec::user_prefix(codec::DAY, no))? {
        let (acc, day) = codec::parse_day_key(&k).ok_or_else(|| StoreError::Corrupt("bad day key".into()))?;
        let sums: DaySums = decode(&v)?;
        if let Some(a) = accounts.get_mut(&acc) {
            a.days.add(day, &sums);
        }
    }
    for (k, v) in r.prefix_rows(&codec::user_prefix(codec::TRACK, no))? {
        let (acc, day) =
            codec::parse_day_key(&k).ok_or_else(|| StoreError::Corrupt("bad tracker key".into()))?;
        let row: TrackRow = decode(&v)?;
        if let Some(a) = accounts.get_mut(&acc) {
            a.track.insert(day, row);
        }
    }
    let tree = Tree {
        root: user.root,
        accounts: accounts.into_iter().map(|(id, a)| (id, Arc::new(a))).collect(),
        ledger: user.ledger.clone(),
    };
    Ok(Some((user, tree)))
}

/// Whether writing `op` lists rows to find what to delete (so it must see every earlier row).
pub fn lists_rows(op: &Op) -> bool {
    match op {
        Op::DeleteUser { .. } => true,
        Op::Commit { change, .. } => !change.removed.is_empty(),
    }
}

fn put<T: serde::Serialize>(out: &mut Vec<Row>, k: Vec<u8>, v: &T) -> Result<(), StoreError> {
    out.push((k, Some(IVec::from(encode(v)?))));
    Ok(())
}

/// The rows `op` writes and removes; rows to delete are found by listing them in `r`.
pub fn rows_into(r: &dyn Rows, out: &mut Vec<Row>, op: &Op) -> Result<(), StoreError> {
    match op {
        Op::Commit { user, change, sync, idem } => {
            put(out, codec::user_key(&user.user_id), user)?;
            change_rows(r, out, user.user_no, change)?;
            if let Some(row) = sync {
                put(out, codec::change_key(user.user_no, row.knowledge), row)?;
            }
            if let Some(w) = idem {
                for k in &w.remove {
                    out.push((codec::idem_key(user.user_no, k), None));
                }
                if let Some(rec) = &w.put {
                    put(out, codec::idem_key(user.user_no, &rec.key), rec)?;
                }
            }
        }
        Op::DeleteUser { user } => {
            out.push((codec::user_key(&user.user_id), None));
            for tag in codec::USER_TAGS {
                for (k, _) in r.prefix_rows(&codec::user_prefix(tag, user.user_no))? {
                    out.push((k.to_vec(), None));
                }
            }
        }
    }
    Ok(())
}

fn change_rows(r: &dyn Rows, out: &mut Vec<Row>, no: u64, c: &Change) -> Result<(), StoreError> {
    for a in &c.accounts {
        put(out, codec::account_key(no, a.uuid), &**a)?;
    }
    for (acc, seq, rec) in &c.records {
        put(out, codec::log_key(no, *acc, *seq), rec)?;
    }
    for id in &c.main_txids {
        out.push((codec::txid_key(no, id), Some(IVec::default())));
    }
    for (acc, day, sums) in &c.days {
        put(out, codec::day_key(codec::DAY, no, *acc, *day), sums)?;
    }
    for (acc, day, row) in &c.track {
        put(out, codec::day_key(codec::TRACK, no, *acc, *day), row)?;
    }
    for (id, log_len) in &c.removed {
        out.push((codec::account_key(no, *id), None));
        // Log keys are computed from the log length: deleting never reads the log.
        for seq in 0..*log_len {
            out.push((codec::log_key(no, *id, seq), None));
        }
        // Day and tracker rows are few (one per day with activity); their keys are listed.
        for tag in [codec::DAY, codec::TRACK] {
            for (k, _) in r.prefix_rows(&codec::account_prefix(tag, no, *id))? {
                out.push((k.to_vec(), None));
            }
        }
    }
    Ok(())
}
