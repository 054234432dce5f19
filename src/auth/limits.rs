//! Fixed-window rate limits (SPEC 4.4) and failed-attempt backoff (4.5, 4.6). Tables are sharded
//! parking_lot mutexes, never held across an await; idle entries are evicted so memory stays
//! bounded under many distinct keys.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use parking_lot::Mutex;

const SHARDS: usize = 32;
/// A shard is swept for idle entries when it grows past this many keys.
const SWEEP_AT: usize = 4096;

/// Which of `shards` tables holds `k`.
pub(crate) fn shard_of<K: Hash + ?Sized>(k: &K, shards: usize) -> usize {
    let mut h = DefaultHasher::new();
    k.hash(&mut h);
    (h.finish() as usize) % shards
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
    shards: Vec<Mutex<HashMap<String, (f64, u64)>>>,
}

impl RateLimiter {
    pub fn new(max_requests: u64, window_secs: u64) -> RateLimiter {
        RateLimiter {
            max_requests,
            window_secs: window_secs as f64,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    pub fn check(&self, key: &str, t: f64) -> Verdict {
        self.check_quota(key, t).0
    }

    /// Checks `key` at `t` and reports what is left of its window, for the RateLimit header
    /// fields; computed under the same shard lock, so it costs nothing extra.
    pub fn check_quota(&self, key: &str, t: f64) -> (Verdict, Quota) {
        let mut map = self.shards[shard_of(key, SHARDS)].lock();
        if map.len() >= SWEEP_AT && !map.contains_key(key) {
            let w = self.window_secs;
            map.retain(|_, (start, _)| t - *start <= w);
        }
        let (verdict, start, count) = match map.get_mut(key) {
            None => {
                map.insert(key.to_string(), (t, 1));
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
        };
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

/// Exponential backoff keyed by a failing credential (token string or login user id).
pub struct Backoff {
    shards: Vec<Mutex<HashMap<String, (f64, u32)>>>,
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
        Backoff { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }
}

/// `X` of `Wait X seconds.`: rounded half away from zero to 2 decimals, no trailing zeros.
fn fmt_wait(secs: f64) -> String {
    let hundredths = (secs * 100.0).round() as i128;
    crate::domain::num::fmt_scaled(hundredths, 2)
}

impl Backoff {
    /// Whether a wait is running for `key` (without recording anything).
    pub fn pending(&self, key: &str, t: f64) -> Option<Failure> {
        let map = self.shards[shard_of(key, SHARDS)].lock();
        let (last, attempt) = *map.get(key)?;
        let wait = wait_secs(attempt);
        let elapsed = t - last;
        (elapsed < wait && elapsed < IDLE_SECS).then(|| waiting(wait - elapsed))
    }

    /// Records a failure at `t` per SPEC 4.5.
    pub fn fail(&self, key: &str, t: f64) -> Failure {
        let mut map = self.shards[shard_of(key, SHARDS)].lock();
        if map.len() >= SWEEP_AT && !map.contains_key(key) {
            map.retain(|_, (last, _)| t - *last < IDLE_SECS);
        }
        match map.get_mut(key) {
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
                map.insert(key.to_string(), (t, 0));
                Failure::Reject
            }
        }
    }

    pub fn clear(&self, key: &str) {
        self.shards[shard_of(key, SHARDS)].lock().remove(key);
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
}
