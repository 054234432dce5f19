//! HS256 tokens (SPEC 4.3). jsonwebtoken checks the signature and the header algorithm only; the
//! claim rules of 4.3 are applied here, because its defaults contradict them.

use std::sync::Arc;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Validation};

use super::limits::{KeyTable, DEFAULT_TRACKED_KEYS};
use super::role::Role;
use serde_json::{Map, Value};

pub struct Jwt {
    enc: EncodingKey,
    dec: DecodingKey,
    validation: Validation,
    /// Verified tokens by keyed hash (the token text is not kept).
    cache: KeyTable<Verified>,
}

/// The identity a valid token carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user_id: String,
    pub role: Role,
    pub scope: Scope,
}

/// What a request's credential allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A JWT: everything the user may do.
    Full,
    /// A personal access token (docs/tokens.md): `write` allows everything the user may do
    /// except creating tokens, `read` GET endpoints only.
    Token { id: u64, write: bool },
}

impl Scope {
    pub fn may_write(self) -> bool {
        matches!(self, Scope::Full | Scope::Token { write: true, .. })
    }
}

/// Largest identity (user id and role, in bytes) the verified-token cache keeps.
const MAX_CACHED_IDENTITY_BYTES: usize = 320;
/// Longest accepted `user_id` claim.
const MAX_CLAIM_USER_ID: usize = 256;

/// Longest token a connection remembers (see [`TokenMemo`]); real tokens are a few hundred bytes.
const MAX_MEMO_TOKEN_BYTES: usize = 1024;

/// One connection's last verified token. Clients send the same token on every request of a
/// keep-alive connection, so comparing bytes against it skips hashing the token and the shared
/// cache's lock. Only a verified token is kept, and its times are checked on every use.
#[derive(Default)]
pub struct TokenMemo(Option<(Box<str>, Verified)>);

/// A token whose signature and claim shapes are valid; only its times remain to check.
#[derive(Debug, Clone)]
struct Verified {
    /// Shared, so a cache hit hands it out without copying its strings.
    identity: Arc<Identity>,
    exp: Option<f64>,
    nbf: Option<f64>,
}

impl Verified {
    fn live_at(&self, now_secs: f64) -> Option<Arc<Identity>> {
        let live = self.exp.is_none_or(|exp| now_secs <= exp) && self.nbf.is_none_or(|nbf| nbf <= now_secs);
        live.then(|| self.identity.clone())
    }
}

impl Jwt {
    pub fn new(secret: &[u8]) -> Jwt {
        Jwt::with_cache(secret, DEFAULT_TRACKED_KEYS)
    }

    /// `cache_keys` bounds how many verified tokens are remembered.
    pub fn with_cache(secret: &[u8], cache_keys: usize) -> Jwt {
        let mut v = Validation::new(Algorithm::HS256);
        v.required_spec_claims.clear();
        v.validate_exp = false;
        v.validate_nbf = false;
        v.validate_aud = false;
        v.leeway = 0;
        Jwt {
            enc: EncodingKey::from_secret(secret),
            dec: DecodingKey::from_secret(secret),
            validation: v,
            cache: KeyTable::new(cache_keys),
        }
    }

    /// Verifies a token at `now_secs`; `None` on any failure. A token whose signature and
    /// claims were checked once is remembered, so repeat requests only re-check its times.
    pub fn verify(&self, token: &str, now_secs: f64) -> Option<Arc<Identity>> {
        self.verified(token).and_then(|v| v.live_at(now_secs))
    }

    /// [`Jwt::verify`], asking `memo` (the connection's last token) first. Takes the token's
    /// bytes: the memo's are known to be text, so a repeated token is not checked again.
    pub fn verify_memo(&self, token: &[u8], now_secs: f64, memo: &mut TokenMemo) -> Option<Arc<Identity>> {
        if let Some((t, v)) = &memo.0 {
            if t.as_bytes() == token {
                return v.live_at(now_secs);
            }
        }
        // A token is ASCII: other bytes can never verify.
        let token = std::str::from_utf8(token).ok()?;
        let v = self.verified(token)?;
        if token.len() <= MAX_MEMO_TOKEN_BYTES {
            memo.0 = Some((token.into(), v.clone()));
        }
        v.live_at(now_secs)
    }

    /// A token whose signature and claim shapes are valid, from the cache or checked now.
    fn verified(&self, token: &str) -> Option<Verified> {
        let h = self.cache.hash_of(token);
        let v = match self.cache.with_hashed(h, |e| e.clone()) {
            Some(v) => v,
            None => {
                let v = self.decode(token)?;
                // Only small identities are remembered, so the cache is bounded in bytes too; a
                // token with a huge claim is simply verified again each time.
                if v.identity.user_id.len() + v.identity.role.as_str().len() <= MAX_CACHED_IDENTITY_BYTES {
                    self.cache.with_hashed(h, |e| *e = Some(v.clone()));
                }
                v
            }
        };
        Some(v)
    }

    /// Signature, header and the time-independent claim rules of 4.3.
    fn decode(&self, token: &str) -> Option<Verified> {
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &self.dec, &self.validation).ok()?;
        let c = data.claims;
        let user_id = match c.get("user_id") {
            Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= MAX_CLAIM_USER_ID => s.clone(),
            _ => return None,
        };
        let num = |k: &str| -> Result<Option<f64>, ()> {
            match c.get(k) {
                None => Ok(None),
                Some(Value::Number(n)) => n.as_f64().map(Some).ok_or(()),
                Some(_) => Err(()),
            }
        };
        let exp = num("exp").ok()?;
        let nbf = num("nbf").ok()?;
        let role = match c.get("role") {
            Some(Value::String(s)) => Role::from(s.as_str()),
            _ => Role::User,
        };
        Some(Verified { identity: Arc::new(Identity { user_id, role, scope: Scope::Full }), exp, nbf })
    }

    /// A compact HS256 token whose header is SPEC 4.3's `{"alg":"HS256","typ":"JWT"}`, byte
    /// for byte as PyJWT and most clients write it (jsonwebtoken's own puts `typ` first).
    pub fn sign(&self, claims: &Map<String, Value>) -> Result<String, String> {
        use base64::Engine as _;
        const HEADER: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";
        let payload = serde_json::to_vec(claims).map_err(|e| e.to_string())?;
        let mut token = String::with_capacity(HEADER.len() + payload.len() * 4 / 3 + 48);
        token.push_str(HEADER);
        token.push('.');
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(&payload, &mut token);
        let sig = jsonwebtoken::crypto::sign(token.as_bytes(), &self.enc, Algorithm::HS256)
            .map_err(|e| e.to_string())?;
        token.push('.');
        token.push_str(&sig);
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn token(j: &Jwt, claims: Value) -> String {
        let Value::Object(m) = claims else { unreachable!("test claims are objects") };
        j.sign(&m).unwrap()
    }

    #[test]
    fn a_connections_memo_checks_times_and_bytes() {
        let j = Jwt::new(b"k");
        let mut memo = TokenMemo::default();
        let t = token(&j, json!({"user_id": "u", "exp": 100}));
        assert_eq!(j.verify_memo(t.as_bytes(), 60.0, &mut memo).map(|i| i.user_id.clone()), Some("u".into()));
        assert!(memo.0.is_some());
        // Remembered, yet expiry still applies.
        assert!(j.verify_memo(t.as_bytes(), 100.5, &mut memo).is_none());
        // A token differing in one byte is verified for itself, and fails; the memo stays.
        let mut forged = t.clone().into_bytes();
        let last = forged.len() - 1;
        forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
        let forged = String::from_utf8(forged).unwrap();
        assert!(j.verify_memo(forged.as_bytes(), 60.0, &mut memo).is_none());
        assert_eq!(memo.0.as_ref().map(|(k, _)| &**k), Some(t.as_str()));
        // Another valid token takes its place.
        let t2 = token(&j, json!({"user_id": "w"}));
        assert_eq!(
            j.verify_memo(t2.as_bytes(), 60.0, &mut memo).map(|i| i.user_id.clone()),
            Some("w".into())
        );
        assert_eq!(memo.0.as_ref().map(|(k, _)| &**k), Some(t2.as_str()));
        // A token too long to remember is still verified.
        let long = token(&j, json!({"user_id": "x", "pad": "p".repeat(2000)}));
        assert!(j.verify_memo(long.as_bytes(), 60.0, &mut memo).is_some());
        assert_eq!(memo.0.as_ref().map(|(k, _)| &**k), Some(t2.as_str()));
    }

    #[test]
    fn cached_tokens_still_expire() {
        let j = Jwt::new(b"k");
        let t = token(&j, json!({"user_id": "u", "exp": 100, "nbf": 50}));
        assert!(j.verify(&t, 49.0).is_none());
        assert_eq!(j.verify(&t, 60.0).map(|i| i.user_id.clone()), Some("u".into()));
        assert!(j.verify(&t, 100.0).is_some());
        assert!(j.verify(&t, 100.5).is_none());
        let other = Jwt::new(b"another key");
        assert!(other.verify(&t, 60.0).is_none());
    }

    #[test]
    fn the_cache_is_bounded_in_entries_and_bytes() {
        let j = Jwt::with_cache(b"k", 1024);
        for i in 0..5000 {
            let t = token(&j, json!({"user_id": format!("u{i}")}));
            assert!(j.verify(&t, 0.0).is_some());
        }
        assert!(j.cache.len() <= j.cache.capacity() && j.cache.capacity() <= 1024);
        let before = j.cache.len();
        let huge = token(&j, json!({"user_id": "big", "role": "r".repeat(100_000)}));
        assert_eq!(j.verify(&huge, 0.0).map(|i| i.role.as_str().len()), Some(100_000));
        assert!(j.cache.len() <= before, "a huge identity is not cached");
    }
}
