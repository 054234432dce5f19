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

/// Test hook: a clock read from a file holding Unix seconds, so that several processes (the
/// multi-node tests' pfm binaries) see one time that the test moves. Read at every call; a file
/// missing or being replaced reads as the last time seen. Never in a release binary.
#[cfg(any(test, feature = "test-hooks"))]
pub struct FileClock {
    path: std::path::PathBuf,
    last: AtomicI64,
}

#[cfg(any(test, feature = "test-hooks"))]
impl FileClock {
    /// The clock of `path`; the file must hold a time already.
    pub fn open(path: std::path::PathBuf) -> std::io::Result<FileClock> {
        let c = FileClock { path, last: AtomicI64::new(0) };
        let now = c.read().ok_or_else(|| std::io::Error::other("the clock file holds no Unix seconds"))?;
        c.last.store(now, Ordering::SeqCst);
        Ok(c)
    }

    fn read(&self) -> Option<i64> {
        let secs: i64 = std::fs::read_to_string(&self.path).ok()?.trim().parse().ok()?;
        secs.checked_mul(1_000_000)
    }
}

#[cfg(any(test, feature = "test-hooks"))]
impl Clock for FileClock {
    fn now_micros(&self) -> i64 {
        match self.read() {
            Some(us) => {
                self.last.store(us, Ordering::SeqCst);
                us
            }
            None => self.last.load(Ordering::SeqCst),
        }
    }
}
