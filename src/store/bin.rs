//! bincode 2's standard encoding (little-endian varints, zigzag for signed integers) of the
//! values every write puts in its journal record: accounts, log records, day and tracker rows,
//! written straight into the frame. Through serde each field is a trait call with an error to
//! check; here it is a few pushes. The bytes are bincode's own (tests hold them to it, value by
//! value and whole frames), so every stored format stays as it is.

use super::{IdemRecord, SyncRow, UserRecord};
use crate::domain::engine::{Origin, TxRecord};
use crate::domain::tree::{Account, DaySums, Grand, Kind, Ledger, Status, Text, TrackRow};

/// A value written as bincode's standard configuration writes it.
pub trait Bin {
    fn put(&self, f: &mut Vec<u8>);
}

/// An unsigned varint: one byte below 251, else a marker byte and the value in the narrowest
/// of 2, 4 or 8 bytes (16 for [`varint128`]).
#[inline]
fn varint(f: &mut Vec<u8>, v: u64) {
    if v < 251 {
        f.push(v as u8);
    } else {
        wide(f, v);
    }
}

/// Each width is its own fixed-size copy: one copy of a length known only at run time was a
/// `memcpy` call per value (profiled).
fn wide(f: &mut Vec<u8>, v: u64) {
    if let Ok(v) = u16::try_from(v) {
        f.push(251);
        f.extend_from_slice(&v.to_le_bytes());
    } else if let Ok(v) = u32::try_from(v) {
        f.push(252);
        f.extend_from_slice(&v.to_le_bytes());
    } else {
        f.push(253);
        f.extend_from_slice(&v.to_le_bytes());
    }
}

#[inline]
fn varint128(f: &mut Vec<u8>, v: u128) {
    match u64::try_from(v) {
        Ok(v) => varint(f, v),
        Err(_) => {
            let mut b = [254u8; 17];
            b[1..].copy_from_slice(&v.to_le_bytes());
            f.extend_from_slice(&b);
        }
    }
}

impl Bin for u64 {
    fn put(&self, f: &mut Vec<u8>) {
        varint(f, *self);
    }
}

impl Bin for u32 {
    fn put(&self, f: &mut Vec<u8>) {
        varint(f, u64::from(*self));
    }
}

impl Bin for u16 {
    fn put(&self, f: &mut Vec<u8>) {
        varint(f, u64::from(*self));
    }
}

impl Bin for u128 {
    fn put(&self, f: &mut Vec<u8>) {
        varint128(f, *self);
    }
}

impl Bin for i64 {
    fn put(&self, f: &mut Vec<u8>) {
        // Zigzag: 0, -1, 1, -2... as 0, 1, 2, 3...
        varint(f, ((*self << 1) ^ (*self >> 63)) as u64);
    }
}

impl Bin for i128 {
    fn put(&self, f: &mut Vec<u8>) {
        varint128(f, ((*self << 1) ^ (*self >> 127)) as u128);
    }
}

impl Bin for u8 {
    fn put(&self, f: &mut Vec<u8>) {
        f.push(*self);
    }
}

impl Bin for bool {
    fn put(&self, f: &mut Vec<u8>) {
        f.push(u8::from(*self));
    }
}

impl Bin for str {
    fn put(&self, f: &mut Vec<u8>) {
        (self.len() as u64).put(f);
        f.extend_from_slice(self.as_bytes());
    }
}

impl Bin for String {
    fn put(&self, f: &mut Vec<u8>) {
        self.as_str().put(f);
    }
}

impl Bin for Text {
    fn put(&self, f: &mut Vec<u8>) {
        self.as_str().put(f);
    }
}

// As their text, the way serde writes them.
impl Bin for Status {
    fn put(&self, f: &mut Vec<u8>) {
        self.as_str().put(f);
    }
}

impl Bin for Origin {
    fn put(&self, f: &mut Vec<u8>) {
        self.as_str().put(f);
    }
}

impl<T: Bin> Bin for Option<T> {
    fn put(&self, f: &mut Vec<u8>) {
        match self {
            None => f.push(0),
            Some(v) => {
                f.push(1);
                v.put(f);
            }
        }
    }
}

impl<T: Bin> Bin for [T] {
    fn put(&self, f: &mut Vec<u8>) {
        (self.len() as u64).put(f);
        for v in self {
            v.put(f);
        }
    }
}

// A tuple is its elements in order.
impl<A: Bin, B: Bin> Bin for (A, B) {
    fn put(&self, f: &mut Vec<u8>) {
        self.0.put(f);
        self.1.put(f);
    }
}

impl<A: Bin, B: Bin, C: Bin> Bin for (A, B, C) {
    fn put(&self, f: &mut Vec<u8>) {
        self.0.put(f);
        self.1.put(f);
        self.2.put(f);
    }
}

impl Bin for Kind {
    fn put(&self, f: &mut Vec<u8>) {
        // A unit variant is its index.
        let i: u32 = match self {
            Kind::Main => 0,
            Kind::Child => 1,
            Kind::Grandchild => 2,
        };
        i.put(f);
    }
}

impl Bin for Grand {
    fn put(&self, f: &mut Vec<u8>) {
        self.due_date_secs.put(f);
        self.fixed_amount_cents.put(f);
        self.amount_due_cents.put(f);
        self.account_type.put(f);
        self.freq_days.put(f);
        self.periods.num.put(f);
        self.periods.den.put(f);
    }
}

impl Bin for Account {
    /// The stored fields in declaration order (the day and tracker maps are rows of their own).
    fn put(&self, f: &mut Vec<u8>) {
        self.uuid.put(f);
        self.name.put(f);
        self.kind.put(f);
        self.parent.put(f);
        self.children.put(f);
        self.balance_cents.put(f);
        self.allocation_ppm.put(f);
        self.priority_ppm.put(f);
        self.status.put(f);
        self.grand.put(f);
        self.log_len.put(f);
        self.sub_balance_cents.put(f);
        self.sub_due_cents.put(f);
    }
}

impl Bin for TxRecord {
    fn put(&self, f: &mut Vec<u8>) {
        self.deposit.put(f);
        self.by.put(f);
        self.id.put(f);
        self.channel.put(f);
        self.amount_cents.put(f);
        self.balance_cents.put(f);
        self.amount_due_cents.put(f);
        self.overall_balance_cents.put(f);
        self.date_secs.put(f);
    }
}

impl Bin for DaySums {
    fn put(&self, f: &mut Vec<u8>) {
        self.dep_user_cents.put(f);
        self.wd_user_cents.put(f);
        self.dep_all_cents.put(f);
        self.dep_alloc_cents.put(f);
    }
}

impl Bin for TrackRow {
    fn put(&self, f: &mut Vec<u8>) {
        self.amount_due_cents.put(f);
        self.balance_cents.put(f);
    }
}

impl Bin for Ledger {
    fn put(&self, f: &mut Vec<u8>) {
        self.initial_balance_cents.put(f);
        self.deposits_cents.put(f);
        self.withdrawals_cents.put(f);
    }
}

impl Bin for UserRecord {
    fn put(&self, f: &mut Vec<u8>) {
        self.user_id.put(f);
        self.user_no.put(f);
        self.password_hash.put(f);
        self.role.put(f);
        self.created_at.put(f);
        self.root.put(f);
        self.ledger.put(f);
    }
}

impl Bin for SyncRow {
    fn put(&self, f: &mut Vec<u8>) {
        self.knowledge.put(f);
        self.upserted.put(f);
        self.removed.put(f);
        self.appended.put(f);
    }
}

impl Bin for IdemRecord {
    fn put(&self, f: &mut Vec<u8>) {
        self.key.put(f);
        self.fingerprint.put(f);
        self.created_us.put(f);
        self.status.put(f);
        self.body.put(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::frac::Frac;
    use proptest::prelude::*;

    fn same<T: Bin + serde::Serialize + ?Sized>(v: &T) -> Result<(), TestCaseError> {
        let mut ours = Vec::new();
        v.put(&mut ours);
        let theirs = bincode::serde::encode_to_vec(v, bincode::config::standard()).unwrap();
        prop_assert_eq!(ours, theirs);
        Ok(())
    }

    /// Integers near every varint boundary, and their negatives.
    fn edgy() -> impl Strategy<Value = i128> {
        prop_oneof![
            any::<i128>(),
            any::<i64>().prop_map(i128::from),
            (0u32..130, -2i128..=2).prop_map(|(s, d)| (1i128 << s.min(126)) + d),
            (0u32..130, -2i128..=2).prop_map(|(s, d)| -(1i128 << s.min(126)) + d),
            (240i128..260),
        ]
    }

    /// Known labels are variants of their own, written as the text all the same.
    #[test]
    fn statuses_and_origins_encode_as_bincode_does() {
        for s in ["active", "inactive", "closed", "User", "System", "Active", "user", ""] {
            same(&Status::from(s)).unwrap();
            same(&Origin::from(s)).unwrap();
            let mut ours = Vec::new();
            Status::from(s).put(&mut ours);
            assert_eq!(ours, bincode::serde::encode_to_vec(s, bincode::config::standard()).unwrap());
        }
    }

    proptest! {
        #[test]
        fn integers_encode_as_bincode_does(x in edgy()) {
            same(&x)?;
            same(&(x as i64))?;
            same(&(x as u64))?;
            same(&(x as u32))?;
            same(&(x as u16))?;
            same(&(x as u128))?;
            same(&(x as u128).wrapping_neg())?;
        }

        #[test]
        fn values_encode_as_bincode_does(
            n in proptest::collection::vec(edgy(), 8),
            name in ".{0,300}",
            deposit in any::<bool>(),
            grand in any::<bool>(),
            kind in 0u8..3,
        ) {
            let kind = [Kind::Main, Kind::Child, Kind::Grandchild][usize::from(kind)];
            let g = grand.then(|| Grand {
                due_date_secs: (n[0] % 2 == 0).then_some(n[1] as i64),
                fixed_amount_cents: n[2] as i64,
                amount_due_cents: n[3] as i64,
                account_type: name.as_str().into(),
                freq_days: (n[4] % 2 == 0).then_some(n[5] as u32),
                periods: Frac { num: n[6] as i64, den: n[7] as i64 },
            });
            let mut a = Account::new(n[0] as u128, name.as_str().into(), kind, (n[1] % 3 == 0).then_some(n[2] as u128), g);
            a.children = n.iter().map(|x| *x as u128).collect();
            a.balance_cents = n[3] as i64;
            a.allocation_ppm = n[4] as i64;
            a.priority_ppm = n[5] as i64;
            a.status = name.chars().rev().collect::<String>().into();
            a.log_len = n[6] as u64;
            a.sub_balance_cents = n[7];
            a.sub_due_cents = -n[0];
            same(&a)?;
            let r = TxRecord {
                deposit,
                by: name.as_str().into(),
                id: format!("{}", n[1]).into(),
                channel: name.repeat(2).into(),
                amount_cents: n[2] as i64,
                balance_cents: n[3] as i64,
                amount_due_cents: n[4],
                overall_balance_cents: n[5],
                date_secs: n[6] as i64,
                note: None,
            };
            same(&r)?;
            same(&DaySums { dep_user_cents: n[0], wd_user_cents: n[1], dep_all_cents: n[2], dep_alloc_cents: n[3] })?;
            same(&TrackRow { amount_due_cents: n[4] as i64, balance_cents: n[5] as i64 })?;
            let ledger = Ledger { initial_balance_cents: n[0] as i64, deposits_cents: n[1], withdrawals_cents: n[2] };
            same(&ledger)?;
            same(&UserRecord {
                user_id: name.as_str().into(),
                user_no: n[3] as u64,
                password_hash: deposit.then(|| name.repeat(3).into()),
                role: "user".into(),
                created_at: n[4] as i64,
                root: n[5] as u128,
                ledger,
            })?;
            same(&SyncRow {
                knowledge: n[6] as u64,
                upserted: n.iter().map(|x| *x as u128).collect(),
                removed: n[..(n[0] as usize % 8)].iter().map(|x| *x as u128).collect(),
                appended: n.iter().map(|x| (*x as u128, *x as u64, (*x >> 64) as u64)).collect(),
            })?;
            same(&[name.clone(), format!("{}", n[7])][..])?;
            same(&IdemRecord {
                key: name.clone(),
                fingerprint: name.as_bytes().to_vec(),
                created_us: n[0] as i64,
                status: n[1] as u16,
                body: name.repeat(2),
            })?;
        }
    }
}
