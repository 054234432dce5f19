//! Authentication and abuse limits: JWT verification and issue, Argon2id passwords, rate limits
//! and failed-attempt backoff.

pub mod jwt;
pub mod limits;
pub mod password;
pub mod pat;
pub mod role;
