//! The sled engine: the materialised state under the journal ([`super::journal`]). One sled
//! tree holds every row, so one operation's rows, with the journal sequence number they come
//! from, are one atomic `apply_batch`. Key layout and encoding (`codec`) stay inside.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::domain::engine::{Change, TxRecord};
use crate::domain::tree::{Account, AccountId, DaySums, TrackRow, Tree};

use super::codec::{self, decode, decode_compat, encode};
use super::v1::AccountV1;
use super::{IdemRecord, Op, StoreError, SyncRow, UserMeta, UserRecord};

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

    /// Applies `op` (journal record `seq`) atomically, without flushing.
    pub fn apply(&self, op: &Op, seq: u64) -> Result<(), StoreError> {
        self.apply_group(&[(seq, op)])
    }

    /// Applies consecutive journal records as few atomic batches as possible, each carrying the
    /// last sequence number it holds. An operation that finds rows to delete by listing them
    /// (a user deletion, removed accounts) goes alone, after what precedes it is applied, so its
    /// listing sees every earlier row.
    pub fn apply_group(&self, ops: &[(u64, &Op)]) -> Result<(), StoreError> {
        let mut b = sled::Batch::default();
        let mut last = None;
        for (seq, op) in ops {
            let lists = match op {
                Op::DeleteUser { .. } => true,
                Op::Commit { change, .. } => !change.removed.is_empty(),
            };
            if lists {
                if let Some(l) = last.take() {
                    b.insert(codec::META_APPLIED, &u64::to_be_bytes(l));
                    self.db.apply_batch(std::mem::take(&mut b)).map_err(eng)?;
                }
                let mut one = sled::Batch::default();
                self.rows_into(&mut one, op)?;
                one.insert(codec::META_APPLIED, &seq.to_be_bytes());
                self.db.apply_batch(one).map_err(eng)?;
            } else {
                self.rows_into(&mut b, op)?;
                last = Some(*seq);
            }
        }
        if let Some(l) = last {
            b.insert(codec::META_APPLIED, &u64::to_be_bytes(l));
            self.db.apply_batch(b).map_err(eng)?;
        }
        Ok(())
    }

    /// Makes everything applied so far durable in sled.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map(|_| ()).map_err(eng)
    }

    /// A user number never used before (+1 so that 0 never is one).
    pub fn new_user_no(&self) -> Result<u64, StoreError> {
        self.db.generate_id().map(|n| n + 1).map_err(eng)
    }

    pub fn read_log(
        &self,
        user_no: u64,
        acc: AccountId,
        from: u64,
        to: u64,
    ) -> Result<Vec<TxRecord>, StoreError> {
        let start = codec::log_key(user_no, acc, from);
        let end = codec::log_key(user_no, acc, to);
        self.db.range(start..end).map(|kv| kv.map_err(eng).and_then(|(_, v)| decode_compat(&v))).collect()
    }

    /// Every user id, in key order.
    pub fn user_ids(&self) -> Result<Vec<String>, StoreError> {
        self.db
            .scan_prefix([codec::USER])
            .keys()
            .map(|k| {
                let k = k.map_err(eng)?;
                String::from_utf8(k[1..].to_vec())
                    .map_err(|_| StoreError::Corrupt(format!("bad user key {k:?}")))
            })
            .collect()
    }

    /// The last change row's knowledge (one reverse seek) and every kept key of `user_no`.
    pub fn load_meta(&self, user_no: u64) -> Result<UserMeta, StoreError> {
        let last = self.db.scan_prefix(codec::user_prefix(codec::CHANGE, user_no)).next_back();
        let knowledge = match last {
            Some(kv) => decode::<SyncRow>(&kv.map_err(eng)?.1)?.knowledge,
            None => 0,
        };
        let mut idem = Vec::new();
        for kv in self.db.scan_prefix(codec::user_prefix(codec::IDEM, user_no)) {
            idem.push(decode::<IdemRecord>(&kv.map_err(eng)?.1)?);
        }
        Ok(UserMeta { knowledge, idem })
    }

    pub fn read_changes(
        &self,
        user_no: u64,
        after: u64,
        upto: u64,
        max: usize,
    ) -> Result<Vec<SyncRow>, StoreError> {
        if after >= upto {
            return Ok(Vec::new());
        }
        let start = codec::change_key(user_no, after + 1);
        let end = codec::change_key(user_no, upto);
        self.db.range(start..=end).take(max).map(|kv| kv.map_err(eng).and_then(|(_, v)| decode(&v))).collect()
    }

    pub fn main_txid_exists(&self, user_no: u64, id: &str) -> Result<bool, StoreError> {
        self.db.contains_key(codec::txid_key(user_no, id)).map_err(eng)
    }

    pub fn load_user(&self, user_id: &str) -> Result<Option<(UserRecord, Tree)>, StoreError> {
        let Some(v) = self.db.get(codec::user_key(user_id)).map_err(eng)? else {
            return Ok(None);
        };
        let user: UserRecord = decode_compat(&v)?;
        let no = user.user_no;
        let mut accounts: HashMap<AccountId, Account> = HashMap::new();
        for kv in self.db.scan_prefix(codec::user_prefix(codec::ACCOUNT, no)) {
            let a: Account = decode(&kv.map_err(eng)?.1)?;
            accounts.insert(a.uuid, a);
        }
        for kv in self.db.scan_prefix(codec::user_prefix(codec::DAY, no)) {
            let (k, v) = kv.map_err(eng)?;
            let (acc, day) =
                codec::parse_day_key(&k).ok_or_else(|| StoreError::Corrupt("bad day key".into()))?;
            let sums: DaySums = decode(&v)?;
            if let Some(a) = accounts.get_mut(&acc) {
                a.days.add(day, &sums);
            }
        }
        for kv in self.db.scan_prefix(codec::user_prefix(codec::TRACK, no)) {
            let (k, v) = kv.map_err(eng)?;
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

    /// Adds the rows of `op` to `b`.
    fn rows_into(&self, b: &mut sled::Batch, op: &Op) -> Result<(), StoreError> {
        match op {
            Op::Commit { user, change, sync, idem } => {
                b.insert(codec::user_key(&user.user_id), encode(user)?);
                self.change_rows(b, user.user_no, change)?;
                if let Some(row) = sync {
                    b.insert(codec::change_key(user.user_no, row.knowledge), encode(row)?);
                }
                if let Some(w) = idem {
                    for k in &w.remove {
                        b.remove(codec::idem_key(user.user_no, k));
                    }
                    if let Some(r) = &w.put {
                        b.insert(codec::idem_key(user.user_no, &r.key), encode(r)?);
                    }
                }
            }
            Op::DeleteUser { user } => {
                b.remove(codec::user_key(&user.user_id));
                for tag in codec::USER_TAGS {
                    for k in self.db.scan_prefix(codec::user_prefix(tag, user.user_no)).keys() {
                        b.remove(k.map_err(eng)?);
                    }
                }
            }
        }
        Ok(())
    }

    fn change_rows(&self, b: &mut sled::Batch, no: u64, c: &Change) -> Result<(), StoreError> {
        for a in &c.accounts {
            b.insert(codec::account_key(no, a.uuid), encode(&**a)?);
        }
        for (acc, seq, rec) in &c.records {
            b.insert(codec::log_key(no, *acc, *seq), encode(rec)?);
        }
        for id in &c.main_txids {
            b.insert(codec::txid_key(no, id), Vec::new());
        }
        for (acc, day, sums) in &c.days {
            b.insert(codec::day_key(codec::DAY, no, *acc, *day), encode(sums)?);
        }
        for (acc, day, row) in &c.track {
            b.insert(codec::day_key(codec::TRACK, no, *acc, *day), encode(row)?);
        }
        for (id, log_len) in &c.removed {
            b.remove(codec::account_key(no, *id));
            // Log keys are computed from the log length: deleting never reads the log.
            for seq in 0..*log_len {
                b.remove(codec::log_key(no, *id, seq));
            }
            // Day and tracker rows are few (one per day with activity); their keys are listed.
            for tag in [codec::DAY, codec::TRACK] {
                for k in self.db.scan_prefix(codec::account_prefix(tag, no, *id)).keys() {
                    b.remove(k.map_err(eng)?);
                }
            }
        }
        Ok(())
    }
}
