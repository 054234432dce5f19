//! Fixed-window rate limits (SPEC 4.4) and failed-attempt backoff (4.5, 4.6), over bounded key
//! tables. A key is kept only as a keyed 128-bit hash, never as its text, so a 60 KB token costs
//! the same 16 bytes as a short one; a table holds at most its capacity, and forgetting keys is
//! O(1), so the cost of a request stays flat however many distinct keys arrive.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

use parking_lot::Mutex;

const SHARDS: usize = 64;
/// Keys a table remembers by default (SPEC 4.4-4.6 state; see [`KeyTable`]).
pub const DEFAULT_TRACKED_KEYS: usize = 131_072;

/// The keyed hash under which tables remember a key: SipHash-1-3 with 128-bit output, a keyed
/// pseudo-random function, so distinct keys colliding is out of reach even for a client
/// choosing its keys (the token cache depends on it). One pass over the key; this was two
/// 64-bit SipHashes, and a deposit whose connection's last token was another user's paid
/// about 1k instructions for hashing it.
#[derive(Clone)]
pub struct KeyHasher(siphasher::sip128::SipHasher13);

impl Default for KeyHasher {
    fn default() -> Self {
        // std's RandomState is seeded from the OS once per process; two of them give the key.
        let k = || RandomState::new().hash_one(0u64);
        KeyHasher(siphasher::sip128::SipHasher13::new_with_keys(k(), k()))
    }
}

impl KeyHasher {
    pub fn hash(&self, key: &str) -> u128 {
        self.0.hash(key.as_bytes()).into()
    }
}

/// An identity hasher for keys that already are uniform hashes.
#[derive(Clone, Copy, Default)]
struct PreHashed(u64);

impl std::hash::Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

type Gen<V> = HashMap<u128, V, std::hash::BuildHasherDefault<PreHashed>>;

/// One shard: two generations. New and touched keys live in `young`; when `young` is full it
/// becomes `old` and the previous `old` is dropped whole (one deallocation: the values own no
/// heap memory, or little), so a key untouched for a whole generation is forgotten. That is an
/// approximate least-recently-used policy with O(1) work per request and at most
/// 2 x `per_gen` keys per shard.
struct Shard<V> {
    young: Gen<V>,
    old: Gen<V>,
}

/// A bounded map from string keys (held as hashes) to small values.
pub struct KeyTable<V> {
    hasher: KeyHasher,
    per_gen: usize,
    shards: Vec<Mutex<Shard<V>>>,
}

impl<V> KeyTable<V> {
    /// A table remembering at most about `capacity` keys (never more).
    pub fn new(capacity: usize) -> KeyTable<V> {
        let per_gen = (capacity / (2 * SHARDS)).max(1);
        KeyTable {
            hasher: KeyHasher::default(),
            per_gen,
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Shard { young: Gen::default(), old: Gen::default() }))
                .collect(),
        }
    }

    /// Most keys the table can hold at once.
    pub fn capacity(&self) -> usize {
        2 * SHARDS * self.per_gen
    }

    /// Keys held now (a test and diagnostics aid; locks every shard in turn).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock();
                s.young.len() + s.old.len()
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `f` on the entry of `key` (`None` when absent). Whatever `f` leaves in the option is
    /// stored (`None` forgets the key).
    pub fn with<R>(&self, key: &str, f: impl FnOnce(&mut Option<V>) -> R) -> R {
        self.with_hashed(self.hasher.hash(key), f)
    }

    /// The table's hash of `key`, for [`KeyTable::with_hashed`] (a caller that checks one key
    /// many times can hash it once).
    pub fn hash_of(&self, key: &str) -> u128 {
        self.hasher.hash(key)
    }

    /// [`KeyTable::with`] for a key hashed by [`KeyTable::hash_of`] of this table.
    pub fn with_hashed<R>(&self, h: u128, f: impl FnOnce(&mut Option<V>) -> R) -> R {
        let mut guard = self.shards[(h >> 64) as usize % SHARDS].lock();
        let s = &mut *guard;
        let mut cur = s.young.remove(&h).or_else(|| s.old.remove(&h));
        let r = f(&mut cur);
        if let Some(v) = cur {
            if s.young.len() >= self.per_gen {
                s.old = std::mem::take(&mut s.young);
            }
            s.young.insert(h, v);
        }
        r
    }
}

/// Outcome of a limiter check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Allow,
    /// Denied; `Retry-After` seconds.
    Deny(u64),
}

pub struct RateLimiter {
    max_requests: u64,
    window_secs: f64,
    table: KeyTable<(f64, u64)>,
}

impl RateLimiter {
    pub fn new(max_requests: u64, window_secs: u64) -> RateLimiter {
        RateLimiter::with_capacity(max_requests, window_secs, DEFAULT_TRACKED_KEYS)
    }

    pub fn with_capacity(max_requests: u64, window_secs: u64, keys: usize) -> RateLimiter {
        RateLimiter { max_requests, window_secs: window_secs as f64, table: KeyTable::new(keys) }
    }

    pub fn table(&self) -> &KeyTable<(f64, u64)> {
        &self.table
    }

    pub fn check(&self, key: &str, t: f64) -> Verdict {
        self.check_quota(key, t).0
    }

    /// Checks `key` at `t` and reports what is left of its window, for the RateLimit header
    /// fields; computed under the same shard lock, so it costs nothing extra.
    pub fn check_quota(&self, key: &str, t: f64) -> (Verdict, Quota) {
        self.check_quota_hashed(self.table.hash_of(key), t)
    }

    /// [`RateLimiter::check_quota`] for a key hashed by this limiter's [`KeyTable::hash_of`].
    pub fn check_quota_hashed(&self, h: u128, t: f64) -> (Verdict, Quota) {
        let (verdict, start, count) = self.table.with_hashed(h, |e| match e {
            None => {
                *e = Some((t, 1));
                (Verdict::Allow, t, 1)
            }
            Some((start, count)) => {
                if t - *start > self.window_secs {
                    *start = t;
                    *count = 1;
                    (Verdict::Allow, t, 1)
                } else if *count < self.max_requests {
                    *count += 1;
                    (Verdict::Allow, *start, *count)
                } else {
                    let wait = (*start + self.window_secs - t).ceil();
                    (Verdict::Deny(wait.max(1.0) as u64), *start, *count)
                }
            }
        });
        let reset_secs = match verdict {
            Verdict::Deny(s) => s,
            Verdict::Allow => (start + self.window_secs - t).ceil().max(0.0) as u64,
        };
        let quota = Quota {
            limit: self.max_requests,
            window_secs: self.window_secs as u64,
            remaining: self.max_requests.saturating_sub(count),
            reset_secs,
        };
        (verdict, quota)
    }
}

/// One limiter's state for a key after a check (IETF httpapi RateLimit header fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests allowed per window (`q`).
    pub limit: u64,
    /// Window length (`w`).
    pub window_secs: u64,
    /// Requests left in the current window (`r`).
    pub remaining: u64,
    /// Seconds until the window can reset (`t`).
    pub reset_secs: u64,
}

/// Exponential backoff keyed by a failing credential (token or login user id, held as a hash).
pub struct Backoff {
    table: KeyTable<(f64, u32)>,
}

/// Attempt counter cap: the longest wait is 2^16 s.
const MAX_ATTEMPT: u32 = 16;
/// Entries idle this long are forgotten.
const IDLE_SECS: f64 = 86_400.0;

/// Outcome of a failure report.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Answer 401 (the failure was recorded).
    Reject,
    /// Answer 429 with this message and `Retry-After`.
    Wait(String, u64),
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::with_capacity(DEFAULT_TRACKED_KEYS)
    }
}

/// `X` of `Wait X seconds.`: rounded half away from zero to 2 decimals, no trailing zeros.
fn fmt_wait(secs: f64) -> String {
    let hundredths = (secs * 100.0).round() as i128;
    crate::domain::num::fmt_scaled(hundredths, 2)
}

impl Backoff {
    pub fn with_capacity(keys: usize) -> Backoff {
        Backoff { table: KeyTable::new(keys) }
    }

    pub fn table(&self) -> &KeyTable<(f64, u32)> {
        &self.table
    }

    /// Whether a wait is running for `key` (without recording anything).
    pub fn pending(&self, key: &str, t: f64) -> Option<Failure> {
        let (last, attempt) = self.table.with(key, |e| *e)?;
        let wait = wait_secs(attempt);
        let elapsed = t - last;
        (elapsed < wait && elapsed < IDLE_SECS).then(|| waiting(wait - elapsed))
    }

    /// Records a failure at `t` per SPEC 4.5.
    pub fn fail(&self, key: &str, t: f64) -> Failure {
        self.table.with(key, |e| match e {
            Some((last, attempt)) if t - *last < IDLE_SECS => {
                let wait = wait_secs(*attempt);
                let elapsed = t - *last;
                if elapsed < wait {
                    waiting(wait - elapsed)
                } else {
                    *last = t;
                    *attempt = (*attempt + 1).min(MAX_ATTEMPT);
                    Failure::Reject
                }
            }
            _ => {
                *e = Some((t, 0));
                Failure::Reject
            }
        })
    }

    pub fn clear(&self, key: &str) {
        self.table.with(key, |e| *e = None);
    }
}
/// `2^attempt` seconds, the attempt capped (D26).
fn wait_secs(attempt: u32) -> f64 {
    f64::from(1u32 << attempt.min(MAX_ATTEMPT))
}

fn waiting(remaining: f64) -> Failure {
    Failure::Wait(
        format!("Too many failed attempts. Wait {} seconds.", fmt_wait(remaining)),
        remaining.ceil().max(1.0) as u64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hash_alike_in_one_hasher_apart_across_keys_and_hashers() {
        let (a, b) = (KeyHasher::default(), KeyHasher::default());
        assert_eq!(a.hash("token-1"), a.clone().hash("token-1"));
        assert_ne!(a.hash("token-1"), a.hash("token-2"));
        assert_ne!(a.hash(""), a.hash("\0"));
        // Each hasher is keyed afresh, so a key's hash says nothing about another table's.
        assert_ne!(a.hash("token-1"), b.hash("token-1"));
        // Both halves carry the key: shards use the high one, the maps the low one.
        let hs: std::collections::HashSet<u64> =
            (0..1000).map(|i| (a.hash(&i.to_string()) >> 64) as u64).collect();
        let ls: std::collections::HashSet<u64> = (0..1000).map(|i| a.hash(&i.to_string()) as u64).collect();
        assert_eq!((hs.len(), ls.len()), (1000, 1000));
    }

    #[test]
    fn fixed_window_example() {
        let l = RateLimiter::new(3, 10);
        assert_eq!(l.check("u", 0.0), Verdict::Allow);
        assert_eq!(l.check("u", 1.0), Verdict::Allow);
        assert_eq!(l.check("u", 2.0), Verdict::Allow);
        assert_eq!(l.check("u", 3.0), Verdict::Deny(7));
        assert_eq!(l.check("u", 10.0), Verdict::Deny(1));
        assert_eq!(l.check("u", 10.5), Verdict::Allow);
    }

    #[test]
    fn quota_reports_remaining_and_reset() {
        let l = RateLimiter::new(3, 10);
        let q = |r, t| Quota { limit: 3, window_secs: 10, remaining: r, reset_secs: t };
        assert_eq!(l.check_quota("u", 0.0), (Verdict::Allow, q(2, 10)));
        assert_eq!(l.check_quota("u", 2.5), (Verdict::Allow, q(1, 8)));
        assert_eq!(l.check_quota("u", 3.0), (Verdict::Allow, q(0, 7)));
        assert_eq!(l.check_quota("u", 4.0), (Verdict::Deny(6), q(0, 6)));
        assert_eq!(l.check_quota("u", 10.5), (Verdict::Allow, q(2, 10)));
    }

    #[test]
    fn backoff_example() {
        let b = Backoff::default();
        assert_eq!(b.fail("t", 0.0), Failure::Reject);
        assert_eq!(b.fail("t", 0.3), Failure::Wait("Too many failed attempts. Wait 0.7 seconds.".into(), 1));
        assert_eq!(b.fail("t", 1.5), Failure::Reject);
        assert_eq!(b.fail("t", 2.0), Failure::Wait("Too many failed attempts. Wait 1.5 seconds.".into(), 2));
        assert_eq!(b.fail("t", 3.5), Failure::Reject);
        assert_eq!(b.fail("t", 5.0), Failure::Wait("Too many failed attempts. Wait 2.5 seconds.".into(), 3));
    }

    #[test]
    fn half_a_million_distinct_keys_stay_within_capacity() {
        let cap = 16_384;
        let b = Backoff::with_capacity(cap);
        let l = RateLimiter::with_capacity(3, 10, cap);
        // Long keys cost no more than short ones: only their hash is kept.
        let long = "x".repeat(60_000);
        b.fail(&long, 0.0);
        for i in 0..500_000u32 {
            let k = format!("token-{i}");
            assert_eq!(b.fail(&k, 1.0), Failure::Reject);
            assert_eq!(l.check(&k, 1.0), Verdict::Allow);
        }
        assert!(b.table().len() <= b.table().capacity(), "{}", b.table().len());
        assert!(l.table().len() <= l.table().capacity());
        assert!(b.table().capacity() <= cap && b.table().len() >= cap / 2);
    }

    #[test]
    fn a_key_in_use_survives_a_flood_of_new_keys() {
        let b = Backoff::with_capacity(1024);
        assert_eq!(b.fail("victim", 0.0), Failure::Reject);
        for i in 0..100_000u32 {
            b.fail(&format!("k{i}"), 0.5);
            if i % 20 == 0 {
                // The victim's wait is still running, and asking keeps it young.
                assert!(b.pending("victim", 0.5).is_some(), "forgotten after {i} keys");
            }
        }
    }
}
