//! Argon2id password hashing (SPEC 5.3) on the blocking pool, behind a small semaphore so hashing
//! never stalls the async workers or floods memory (each hash takes 19 MiB).

use std::sync::{Arc, OnceLock};

use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::Argon2;
use tokio::sync::Semaphore;

pub struct Passwords {
    permits: Arc<Semaphore>,
}

/// A fixed hash verified for unknown users so timing does not reveal which ids exist.
fn dummy_hash() -> &'static str {
    static H: OnceLock<String> = OnceLock::new();
    H.get_or_init(|| hash_now("pfm-dummy-password").unwrap_or_default())
}

/// Argon2id with m=19456 KiB, t=2, p=1, 16-byte salt, 32-byte output (the crate defaults).
fn hash_now(pw: &str) -> Result<String, String> {
    Argon2::default().hash_password(pw.as_bytes()).map(|h| h.to_string()).map_err(|e| e.to_string())
}

fn verify_now(pw: &str, hash: &str) -> bool {
    Argon2::default().verify_password(pw.as_bytes(), hash).is_ok()
}

impl Default for Passwords {
    fn default() -> Self {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        Passwords { permits: Arc::new(Semaphore::new(n)) }
    }
}

impl Passwords {
    pub async fn hash(&self, pw: String) -> Result<String, String> {
        let _p = self.permits.acquire().await.map_err(|e| e.to_string())?;
        tokio::task::spawn_blocking(move || hash_now(&pw)).await.map_err(|e| e.to_string())?
    }

    /// Verifies `pw` against `hash`, or against the dummy hash when `hash` is `None`
    /// (the answer is then always false).
    pub async fn verify(&self, pw: String, hash: Option<String>) -> Result<bool, String> {
        let _p = self.permits.acquire().await.map_err(|e| e.to_string())?;
        tokio::task::spawn_blocking(move || match hash {
            Some(h) => verify_now(&pw, &h),
            None => {
                verify_now(&pw, dummy_hash());
                false
            }
        })
        .await
        .map_err(|e| e.to_string())
    }
}
