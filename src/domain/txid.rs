//! Generated transaction ids of the main account's log.
//!
//! SPEC 2.6 gives a generated id as `SYS` and 10 uppercase hexadecimal digits, random. The
//! /deposit duplicate check must find every id in the main account's log, and an index row per
//! generated id was the largest part of a deposit's storage cost. With an [`IdKey`] the id of the
//! main account's record at sequence number `seq` is instead a keyed permutation of `seq`: it
//! looks random, never repeats, and the record it names is found by inverting the permutation
//! and reading one log entry, with no index row at all.
//!
//! The round function is a keyed mixer, not a vetted cipher. That is enough here: a client who
//! could predict its own next generated ids could only give a deposit of its own one of them as
//! `transaction_number` ahead of time, which leaves two records with that id in its own main log
//! (as two random ids colliding would) and changes no balance; the duplicate check stays exact.

use crate::domain::text::Text;

/// The permutation's 40 bits: 10 hexadecimal digits.
const BITS: u32 = 40;
const HALF: u32 = BITS / 2;
const HALF_MASK: u64 = (1 << HALF) - 1;
const ROUNDS: usize = 6;
const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// `SYS` + the low 40 bits of `v` as 10 uppercase hex digits: the shape of every id the engine
/// generates, derived or random. Held inline (no allocation).
pub fn sys_id(v: u64) -> Text {
    let mut b = *b"SYS0000000000";
    for (i, c) in b[3..].iter_mut().rev().enumerate() {
        *c = HEX[((v >> (i * 4)) & 15) as usize];
    }
    // ASCII alone, written just above.
    Text::from(std::str::from_utf8(&b).unwrap_or("SYS"))
}

/// Round keys of one user's id permutation (a balanced Feistel network over 40 bits).
#[derive(Clone, PartialEq, Eq)]
pub struct IdKey([u64; ROUNDS]);

impl std::fmt::Debug for IdKey {
    // Keys never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdKey(..)")
    }
}

/// A 64-bit finaliser (MurmurHash3's): every input bit moves about half the output bits.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl IdKey {
    /// The key of user `user_no` under the store's secret.
    pub fn new(secret: [u64; 2], user_no: u64) -> IdKey {
        let mut k = [0u64; ROUNDS];
        let mut s = mix(secret[0] ^ mix(user_no ^ secret[1]));
        for (i, r) in k.iter_mut().enumerate() {
            s = mix(s ^ secret[i % 2].rotate_left(i as u32 * 11) ^ i as u64);
            *r = s;
        }
        IdKey(k)
    }

    fn round(&self, i: usize, half: u64) -> u64 {
        mix(self.0[i] ^ half) & HALF_MASK
    }

    fn permute(&self, x: u64) -> u64 {
        let (mut l, mut r) = (x >> HALF, x & HALF_MASK);
        for i in 0..ROUNDS {
            (l, r) = (r, l ^ self.round(i, r));
        }
        (l << HALF) | r
    }

    fn unpermute(&self, y: u64) -> u64 {
        let (mut l, mut r) = (y >> HALF, y & HALF_MASK);
        for i in (0..ROUNDS).rev() {
            (l, r) = (r ^ self.round(i, l), l);
        }
        (l << HALF) | r
    }

    /// The generated id of the main account's record `seq` (`None` past 2^40 records).
    pub fn id(&self, seq: u64) -> Option<Text> {
        if seq >> BITS != 0 {
            return None;
        }
        Some(sys_id(self.permute(seq)))
    }

    /// The sequence number whose generated id `id` would be, when `id` has the generated shape.
    /// The record there may still carry another id (a client's), so callers compare.
    pub fn seq(&self, id: &str) -> Option<u64> {
        let digits = id.strip_prefix("SYS")?.as_bytes();
        if digits.len() != (BITS / 4) as usize {
            return None;
        }
        let mut v = 0u64;
        for &c in digits {
            let d = HEX.iter().position(|&h| h == c)? as u64;
            v = (v << 4) | d;
        }
        Some(self.unpermute(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_have_the_generated_shape_and_invert() {
        let k = IdKey::new([1, 2], 7);
        for seq in [0u64, 1, 2, 1000, (1 << 40) - 1] {
            let id = k.id(seq).unwrap();
            assert_eq!(id.len(), 13);
            assert!(id.starts_with("SYS"));
            assert!(id[3..].bytes().all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(&c)), "{id}");
            assert_eq!(k.seq(&id), Some(seq));
        }
        assert_eq!(k.id(1 << 40), None);
    }

    #[test]
    fn other_shapes_name_no_sequence() {
        let k = IdKey::new([1, 2], 7);
        for id in ["", "SYS", "SYS123", "SYS0123456789A", "SYS0123456789a", "sys0123456789", "TXN0123456789"]
        {
            assert_eq!(k.seq(id), None, "{id}");
        }
    }

    #[test]
    fn consecutive_records_get_unrelated_ids_and_users_differ() {
        let a = IdKey::new([11, 22], 1);
        let b = IdKey::new([11, 22], 2);
        let c = IdKey::new([12, 22], 1);
        let ids: std::collections::HashSet<Text> = (0..10_000).map(|s| a.id(s).unwrap()).collect();
        assert_eq!(ids.len(), 10_000);
        assert_ne!(a.id(0), b.id(0));
        assert_ne!(a.id(0), c.id(0));
        // Neighbouring sequence numbers share no obvious prefix.
        let same_prefix = (0..1000).filter(|s| a.id(*s).unwrap()[..6] == a.id(s + 1).unwrap()[..6]).count();
        assert!(same_prefix < 5, "{same_prefix}");
    }

    proptest! {
        #[test]
        fn the_permutation_is_a_bijection_on_40_bits(secret in any::<[u64; 2]>(), no in any::<u64>(),
                                                     seq in 0u64..(1 << 40)) {
            let k = IdKey::new(secret, no);
            let id = k.id(seq).unwrap();
            prop_assert_eq!(k.seq(&id), Some(seq));
        }
    }
}
