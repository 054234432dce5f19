//! What a transaction record may say beyond SPEC 2.6's fields: the payee, the memo and the
//! import id of a line read from a bank statement (docs/import.md). A record without a note
//! reads exactly as before, so clients that never import see no new field.

use serde::{Deserialize, Serialize};

use super::text::Text;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    pub payee: Option<Text>,
    pub memo: Option<Text>,
    /// The statement line's import id (also the record's transaction id).
    pub import_id: Option<Text>,
    /// The schedule whose occurrence the record posted (its transaction id names the
    /// occurrence).
    pub schedule: Option<u64>,
}
