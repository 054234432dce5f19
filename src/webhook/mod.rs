//! Outgoing webhooks: the sending half. The event store and the delivery loop decide what to
//! send and when; this module signs a delivery, checks where it may go, makes one attempt and
//! says whether another is worth making, and when.
//!
//! - A delivery is a JSON event (id, type, time, data) POSTed with `Pfm-Signature:
//!   t=<unix secs>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>` ([`signature`], [`verify`]), as
//!   Stripe and Firefly III sign theirs, so a receiver can check the sender and refuse replays.
//! - A URL is checked when registered ([`check_url`]) and the addresses are checked again on
//!   every connection ([`Sender::send`]): loopback, private, link-local, CGNAT, metadata and
//!   other special addresses are refused unless the operator allows them.
//! - One attempt takes at most 10 s and reads at most 64 KB of the answer. A timeout, a
//!   connection error, a 5xx, 408 or 429 is retried, with exponential backoff and jitter
//!   ([`backoff`]), until [`GIVE_UP_AFTER_SECS`] (3 days) after the first attempt.
//! - Nothing here logs a secret, a signature or a URL's path or query.

mod addr;
mod send;
mod sign;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use addr::{check_url, forbidden, host_of, MAX_URL_LEN};
pub use send::{
    Attempt, Sender, ATTEMPT_TIMEOUT, EVENT_ID_HEADER, EVENT_TYPE_HEADER, MAX_ANSWER_BYTES, USER_AGENT_VALUE,
};
pub use sign::{new_secret, signature, verify, SECRET_PREFIX, SIGNATURE_HEADER};

/// The delivery loop stops retrying an event this long after its first attempt (3 days).
pub const GIVE_UP_AFTER_SECS: i64 = 3 * 24 * 3600;

/// The first retry's delay before jitter.
pub const BACKOFF_BASE: Duration = Duration::from_secs(30);
/// The longest delay before jitter. With equal jitter a delay is then 4 to 8 h, so a receiver
/// down for days is still tried several times a day, and 3 days take at most 27 attempts.
pub const BACKOFF_CAP: Duration = Duration::from_secs(8 * 3600);

/// The delay before the next attempt, after `n` failed attempts (1-based: `n = 1` after the
/// first failure): `d = min(30 s * 2^(n-1), 8 h)`, then equal jitter, `d/2 + rand01 * d/2`, so
/// that receivers that failed together are not retried together, while a delay never drops
/// below half its step. `rand01` is in [0, 1) (values outside are clamped), e.g. from
/// [`random01`]. The schedule never ends by itself: the caller stops at
/// [`GIVE_UP_AFTER_SECS`].
pub fn backoff(n: u32, rand01: f64) -> Duration {
    let step = n.max(1) - 1;
    // 30 s * 2^10 is past the cap already; a bounded shift cannot overflow.
    let d = BACKOFF_BASE.saturating_mul(1u32 << step.min(20)).min(BACKOFF_CAP);
    let r = if rand01.is_finite() { rand01.clamp(0.0, 1.0) } else { 0.0 };
    d / 2 + (d / 2).mul_f64(r)
}

/// A uniform random number in [0, 1) from the OS, for [`backoff`]'s jitter.
pub fn random01() -> f64 {
    let mut b = [0u8; 8];
    // Jitter only spreads retries out; should the OS source fail, no jitter is a safe answer.
    if getrandom::fill(&mut b).is_err() {
        return 0.5;
    }
    // The top 53 bits, the precision of an f64 in [0, 1).
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}
