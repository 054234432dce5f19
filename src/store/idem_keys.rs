//! The idempotency keys a user keeps (docs/api.md, idempotency keys), held with the user's
//! cached state so a check reads no storage.

use std::collections::HashMap;
use std::sync::Arc;

use super::{IdemRecord, IdemWrite};

/// Idempotency keys are kept this long (docs/api.md, idempotency keys)...
pub const IDEM_TTL_US: i64 = 24 * 3600 * 1_000_000;
/// ...and at most this many per user (the oldest is dropped first).
pub const IDEM_MAX: usize = 1000;

/// A user's kept keys by key. Most users keep none, and then nothing is allocated: an empty
/// table cost every cached user an `Arc` of its own.
#[derive(Debug, Clone, Default)]
pub struct IdemTable(pub Option<Arc<HashMap<String, IdemRecord>>>);

impl IdemTable {
    pub fn from_records(recs: Vec<IdemRecord>) -> IdemTable {
        if recs.is_empty() {
            return IdemTable(None);
        }
        IdemTable(Some(Arc::new(recs.into_iter().map(|r| (r.key.clone(), r)).collect())))
    }

    pub fn get(&self, key: &str) -> Option<&IdemRecord> {
        self.0.as_ref().and_then(|t| t.get(key))
    }
}

/// The key rows to write with `rec` given the kept `table`: expired keys are dropped, then the
/// oldest while the user is at the bound. Returns the new table too.
pub fn idem_write(table: &IdemTable, rec: IdemRecord) -> (IdemWrite, IdemTable) {
    let mut t = table.0.as_deref().cloned().unwrap_or_default();
    let mut remove: Vec<String> =
        t.values().filter(|r| rec.created_us - r.created_us >= IDEM_TTL_US).map(|r| r.key.clone()).collect();
    for k in &remove {
        t.remove(k);
    }
    t.remove(&rec.key);
    while t.len() >= IDEM_MAX {
        let Some(oldest) = t.values().min_by_key(|r| (r.created_us, r.key.clone())).map(|r| r.key.clone())
        else {
            break;
        };
        t.remove(&oldest);
        remove.push(oldest);
    }
    t.insert(rec.key.clone(), rec.clone());
    (IdemWrite { put: Some(rec), remove }, IdemTable(Some(Arc::new(t))))
}
