//! Personal access tokens as a user's settings (docs/tokens.md): what is kept of each token.
//! The token's text is never kept, only the hash of its secret.

use serde::{Deserialize, Serialize};

use super::text::Text;

/// Tokens one user may keep.
pub const MAX_TOKENS: usize = 50;
/// The key of the counter of token ids: ids are never reused, so a revoked token's text never
/// names a later token.
pub const NEXT_ID_KEY: &str = "pat-next";

/// One token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessToken {
    pub id: u64,
    pub name: Text,
    /// `write`: everything the user may do; else `read`, GET endpoints only.
    pub write: bool,
    /// SHA-256 of the token's secret.
    pub hash: [u8; 32],
    /// Seconds since the epoch.
    pub created: i64,
    /// The moment the token stops working, if it does.
    pub expires: Option<i64>,
    /// The last use written to storage (at most once a minute, see `auth::pat::Usage`).
    pub last_used: Option<i64>,
}

impl AccessToken {
    pub fn live_at(&self, now_secs: i64) -> bool {
        self.expires.is_none_or(|e| now_secs < e)
    }
}

/// The key prefix of tokens among a user's settings.
pub const KEY_PREFIX: &str = "pat:";

/// The key of token `id`.
pub fn token_key(id: u64) -> Text {
    Text::from(format!("{KEY_PREFIX}{id}"))
}
