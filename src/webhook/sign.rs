//! The signature a receiver checks: `Pfm-Signature: t=<unix secs>,v1=<hex HMAC-SHA256>` over
//! `"<t>.<body>"`, the scheme Stripe and Firefly III use. Signing the timestamp with the body
//! lets a receiver refuse a replay of an old delivery without keeping a list of seen ids.

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = hmac::Hmac<Sha256>;

/// The header that carries the signature: `t=<unix secs>,v1=<lowercase hex HMAC-SHA256>`.
pub const SIGNATURE_HEADER: &str = "Pfm-Signature";

/// Prefix of every secret `new_secret` makes, so a leaked one is recognisable in a scan.
pub const SECRET_PREFIX: &str = "whsec_";

fn mac(secret: &[u8], timestamp: i64, body: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length, so this cannot fail.
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC accepts any key length");
    m.update(timestamp.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m
}

/// The `Pfm-Signature` header value for `body` sent at `timestamp` (unix seconds):
/// `t=<timestamp>,v1=<lowercase hex HMAC-SHA256(secret, "<timestamp>.<body>")>`.
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let tag = mac(secret, timestamp, body).finalize().into_bytes();
    let mut out = String::with_capacity(80);
    out.push_str("t=");
    out.push_str(&timestamp.to_string());
    out.push_str(",v1=");
    for b in tag.iter() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn unhex(s: &str) -> Option<Vec<u8>> {
    fn nib(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks(2).map(|p| Some(nib(p[0])? << 4 | nib(p[1])?)).collect()
}

/// What a receiver does with a delivery: true when `header` (a `Pfm-Signature` value) carries a
/// timestamp within `tolerance_secs` of `now` (either side, for clock skew) and at least one
/// `v1=` signature that matches `body` under `secret`. The comparison is constant time; several
/// `v1=` entries are accepted so that a receiver can hold two secrets while one is rotated.
pub fn verify(secret: &[u8], header: &str, body: &[u8], now: i64, tolerance_secs: i64) -> bool {
    let mut t: Option<i64> = None;
    let mut sigs: Vec<Vec<u8>> = Vec::new();
    for part in header.split(',') {
        let Some((k, v)) = part.trim().split_once('=') else { continue };
        match k {
            "t" if t.is_none() => t = v.parse().ok(),
            "v1" => sigs.extend(unhex(v)),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    if now.checked_sub(t).is_none_or(|d| d.checked_abs().is_none_or(|d| d > tolerance_secs)) {
        return false;
    }
    // `verify_slice` compares in constant time; every candidate is checked, so the time taken
    // does not say which one matched.
    let mut ok = false;
    for s in &sigs {
        ok |= mac(secret, t, body).verify_slice(s).is_ok();
    }
    ok
}

/// A new signing secret: `whsec_` and 32 random bytes from the OS, base64url without padding
/// (49 characters). The whole string, prefix included, is the HMAC key.
pub fn new_secret() -> String {
    let mut b = [0u8; 32];
    // The OS random source failing leaves no safe secret to hand out; this happens only on a
    // broken system, not because of anything a request sent.
    getrandom::fill(&mut b).expect("the OS random source is available");
    let mut s = String::from(SECRET_PREFIX);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(b, &mut s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = br#"{"id":"evt_1","type":"deposit.created"}"#;
    const SECRET: &[u8] = b"whsec_test-secret";

    #[test]
    fn known_answer() {
        // An independent computation, with Python's hmac module:
        // python3 -c 'import hmac,hashlib; print(hmac.new(b"whsec_test-secret",
        //   b"1700000000.{\"id\":\"evt_1\",\"type\":\"deposit.created\"}", hashlib.sha256).hexdigest())'
        assert_eq!(
            signature(SECRET, 1_700_000_000, BODY),
            "t=1700000000,v1=48e03a842e5f2600e3bad5404bc5b9db2b27ddf82345c25fd6a662aba0dc7af5"
        );
    }

    #[test]
    fn known_answer_against_python() {
        // The same check on a random secret and body, against Python at test time, so the
        // fixed vector above is not the only witness.
        let secret = new_secret();
        let body = format!(r#"{{"id":"{}","data":{{"amount":"12.50"}}}}"#, new_secret());
        let script = "import hmac,hashlib,sys; k,t,b=sys.argv[1:4]; \
                      print(hmac.new(k.encode(), (t+'.'+b).encode(), hashlib.sha256).hexdigest())";
        let out = std::process::Command::new("python3")
            .args(["-c", script, &secret, "1712345678", &body])
            .output()
            .expect("python3 runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let py = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            signature(secret.as_bytes(), 1_712_345_678, body.as_bytes()),
            format!("t=1712345678,v1={}", py.trim())
        );
    }

    #[test]
    fn verify_accepts_its_own_and_refuses_tampering() {
        let now = 1_700_000_000;
        let h = signature(SECRET, now, BODY);
        assert!(verify(SECRET, &h, BODY, now, 300));
        assert!(verify(SECRET, &h, BODY, now + 300, 300), "at the tolerance's edge");
        assert!(verify(SECRET, &h, BODY, now - 60, 300), "a receiver clock behind");
        assert!(!verify(b"whsec_other", &h, BODY, now, 300), "wrong secret");
        assert!(!verify(SECRET, &h, br#"{"id":"evt_2","type":"deposit.created"}"#, now, 300), "changed body");
        assert!(!verify(SECRET, &h, BODY, now + 301, 300), "old timestamp: a replay");
        // The timestamp is signed: moving it forward to pass the window breaks the signature.
        let replayed = h.replacen("t=1700000000", "t=1700000400", 1);
        assert!(!verify(SECRET, &replayed, BODY, now + 400, 300));
        // Upper-case hex and a second (rotated) signature are accepted.
        let upper =
            format!("t={now},v1={},v1={}", "00".repeat(32), h.split("v1=").nth(1).unwrap().to_uppercase());
        assert!(verify(SECRET, &upper, BODY, now, 300));
        for bad in ["", "t=,v1=", "v1=abcd", "t=1700000000", "t=1700000000,v1=zz", "t=x,v1=00"] {
            assert!(!verify(SECRET, bad, BODY, now, 300), "{bad:?}");
        }
        assert!(!verify(SECRET, &format!("t={},v1=00", i64::MIN), BODY, i64::MAX, 300));
    }

    #[test]
    fn secrets_are_random_and_well_formed() {
        let a = new_secret();
        let b = new_secret();
        assert_ne!(a, b);
        assert!(a.starts_with(SECRET_PREFIX));
        assert_eq!(a.len(), SECRET_PREFIX.len() + 43);
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&a[SECRET_PREFIX.len()..]).unwrap();
        assert_eq!(raw.len(), 32);
    }
}
