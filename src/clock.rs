//! The one clock the service reads (SPEC 14.4), injectable so tests can fix time.

use std::sync::atomic::{AtomicI64, Ordering};

pub trait Clock: Send + Sync + 'static {
    /// Microseconds since the Unix epoch, UTC.
    fn now_micros(&self) -> i64;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
    }
}

/// A clock that only moves when told to.
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn at_secs(secs: i64) -> ManualClock {
        ManualClock(AtomicI64::new(secs * 1_000_000))
    }
    pub fn set_secs(&self, secs: i64) {
        self.0.store(secs * 1_000_000, Ordering::SeqCst);
    }
    pub fn advance_micros(&self, us: i64) {
        self.0.fetch_add(us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
