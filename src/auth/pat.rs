//! Personal access tokens (docs/tokens.md): the token's text, the hash kept of it, and when each
//! token was last used.
//!
//! The text is `pfm_pat_<user>.<id>.<secret>`: the owner's user id (base64url, no padding), the
//! token's id in decimal, and 32 random bytes (base64url, no padding). Neither alphabet holds a
//! `.`, so the three parts split without ambiguity, and the owner is read from the text itself:
//! checking a token needs that user's settings only, no index of every token. Only the SHA-256
//! of the secret is stored: the secret has 256 bits of entropy, so a fast hash is enough
//! (nothing can be guessed), where a password needs a slow one.

use std::collections::HashMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

/// What every token starts with: a bearer value that does is never taken for a JWT.
pub const PREFIX: &str = "pfm_pat_";
/// Random bytes of a token's secret.
pub const SECRET_BYTES: usize = 32;
/// Longest user id a token can carry (as long as a JWT's `user_id` claim may be).
const MAX_USER_ID_BYTES: usize = 256;

pub type Secret = [u8; SECRET_BYTES];
pub type Hash = [u8; 32];

/// A bearer value that has the shape of a token; whether it is one is for the owner's
/// settings to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub user_id: String,
    pub id: u64,
    pub secret: Secret,
}

/// Whether a bearer value claims to be a personal access token.
pub fn is_pat(token: &[u8]) -> bool {
    token.starts_with(PREFIX.as_bytes())
}

/// The parts of a token's text, `None` for anything not exactly of the format.
pub fn parse(token: &[u8]) -> Option<Parsed> {
    let rest = token.strip_prefix(PREFIX.as_bytes())?;
    let mut parts = rest.split(|&b| b == b'.');
    let (user, id, secret) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || user.len() > MAX_USER_ID_BYTES * 4 / 3 + 4 {
        return None;
    }
    let user_id = String::from_utf8(URL_SAFE_NO_PAD.decode(user).ok()?).ok()?;
    // Digits only, no sign or leading zero: one text per token.
    if user_id.is_empty()
        || id.is_empty()
        || id.len() > 20
        || id[0] == b'0'
        || !id.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    let id = std::str::from_utf8(id).ok()?.parse().ok()?;
    if secret.len() != (SECRET_BYTES * 4).div_ceil(3) {
        return None;
    }
    let secret: Secret = URL_SAFE_NO_PAD.decode(secret).ok()?.try_into().ok()?;
    Some(Parsed { user_id, id, secret })
}

/// The text of token `id` of `user_id` with this secret.
pub fn format(user_id: &str, id: u64, secret: &Secret) -> String {
    let mut s = String::from(PREFIX);
    URL_SAFE_NO_PAD.encode_string(user_id.as_bytes(), &mut s);
    s.push('.');
    s.push_str(itoa::Buffer::new().format(id));
    s.push('.');
    URL_SAFE_NO_PAD.encode_string(secret, &mut s);
    s
}

/// A new secret from the operating system's generator.
pub fn new_secret() -> Result<Secret, String> {
    let mut s = [0u8; SECRET_BYTES];
    getrandom::fill(&mut s).map_err(|e| e.to_string())?;
    Ok(s)
}

/// What is stored of a secret.
pub fn hash(secret: &Secret) -> Hash {
    Sha256::digest(secret).into()
}

/// `a == b` in a time that does not depend on where they differ, so timing tells a client
/// nothing about how much of a hash it guessed.
pub fn same(a: &Hash, b: &Hash) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// How often at most a token's last use is written to storage.
pub const PERSIST_EVERY_SECS: i64 = 60;
/// Tokens whose last use a node remembers; past it the memory starts over (what is lost is
/// only the last minute's precision of "last used", the stored value stays).
const MAX_REMEMBERED: usize = 65_536;

/// A token's uses as this node saw them.
#[derive(Clone, Copy)]
struct Used {
    last: i64,
    /// When this node last started writing the last use to storage.
    persisted: i64,
}

/// A token: its owner, id and creation time.
type TokenKey = (Box<str>, u64, i64);

/// When each token was last used, in memory: a token used on every request would otherwise
/// write its settings on every request. Keyed by owner, id and creation time, so a user id
/// registered anew never inherits another token's uses.
#[derive(Default)]
pub struct Usage {
    map: Mutex<HashMap<TokenKey, Used>>,
}

impl Usage {
    /// Records a use at `now` (seconds) of token `id` created at `created`, whose stored last use
    /// is `stored`. True when the caller should write the use to storage: the stored value and
    /// this node's last write are both at least [`PERSIST_EVERY_SECS`] old.
    pub fn touch(&self, user_id: &str, id: u64, created: i64, now: i64, stored: Option<i64>) -> bool {
        let mut map = self.map.lock();
        let key = (Box::from(user_id), id, created);
        if map.len() >= MAX_REMEMBERED && !map.contains_key(&key) {
            map.clear();
        }
        let e = map.entry(key).or_insert(Used { last: now, persisted: i64::MIN });
        e.last = e.last.max(now);
        let since = now.saturating_sub(stored.unwrap_or(i64::MIN).max(e.persisted));
        if since >= PERSIST_EVERY_SECS {
            e.persisted = now;
            return true;
        }
        false
    }

    /// The last use this node saw of a token.
    pub fn last(&self, user_id: &str, id: u64, created: i64) -> Option<i64> {
        self.map.lock().get(&(Box::from(user_id), id, created)).map(|u| u.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_reads_back_and_nothing_else_parses() {
        let secret = [7u8; SECRET_BYTES];
        for user in ["alice", "a_b-c", "ünï code", &"x".repeat(256)] {
            let t = format(user, 42, &secret);
            assert!(t.starts_with(PREFIX) && is_pat(t.as_bytes()));
            let p = parse(t.as_bytes()).expect("parses");
            assert_eq!((p.user_id.as_str(), p.id, p.secret), (user, 42, secret));
        }
        let good = format("alice", 1, &secret);
        let (head, tail) = good.rsplit_once('.').unwrap();
        let bad = [
            "pfm_pat_".to_string(),
            "pfm_pat_..".into(),
            format!("{good}."),
            format!("{good}x"),
            format!("{head}.{}", &tail[1..]),
            good.replace(".1.", ".01."),
            good.replace(".1.", ".-1."),
            good.replace(".1.", ".."),
            good.replace(".1.", ".99999999999999999999."),
            format!("pfm_pat_.1.{tail}"),
            format!("pfm_pat_%%%.1.{tail}"),
            // Base64 of bytes that are not UTF-8.
            format!("pfm_pat_{}.1.{tail}", URL_SAFE_NO_PAD.encode([0xff, 0xfe])),
        ];
        for b in bad {
            assert_eq!(parse(b.as_bytes()), None, "{b}");
        }
        assert_eq!(parse(&[b'p', b'f', b'm', 0xff]), None);
        assert!(!is_pat(b"eyJhbGciOiJIUzI1NiJ9.e30.x"));
    }

    #[test]
    fn hashes_compare_by_value() {
        let a = hash(&[1; SECRET_BYTES]);
        let b = hash(&[2; SECRET_BYTES]);
        assert!(same(&a, &a) && !same(&a, &b));
        let mut c = a;
        c[31] ^= 1;
        assert!(!same(&a, &c));
        assert_ne!(new_secret().unwrap(), new_secret().unwrap());
    }

    #[test]
    fn a_use_is_written_at_most_once_a_minute() {
        let u = Usage::default();
        assert!(u.touch("u", 1, 0, 100, None));
        assert!(!u.touch("u", 1, 0, 130, None));
        assert_eq!(u.last("u", 1, 0), Some(130));
        assert!(u.touch("u", 1, 0, 160, None));
        // A stored use another node wrote recently counts too.
        assert!(!u.touch("u", 2, 0, 200, Some(190)));
        assert!(u.touch("u", 2, 0, 250, Some(190)));
        // Another token of the same id (the user id registered anew) starts afresh.
        assert_eq!(u.last("u", 1, 5), None);
    }
}
