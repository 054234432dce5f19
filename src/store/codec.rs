//! The sled engine's value encoding and key layout. Every value starts with its format version
//! byte, then bincode 2 (serde). Keys are fixed-width big-endian so sled's byte order is the
//! logical order (user, account, sequence or day).

use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};
use sled::IVec;

use super::StoreError;

/// The first format: account rows carried their whole per-day history (read by `v1`).
pub const FORMAT_V1: u8 = 1;
/// Account rows hold only the account; day and tracker aggregates are rows of their own.
pub const FORMAT_V2: u8 = 2;
/// A log or change row may hold a run of consecutive entries (checkpoints write runs); every
/// other value is as in format 2.
pub const FORMAT_V3: u8 = 3;
/// Generated ids of a main account's log may have no index row: they derive from the record's
/// sequence number under the database's id secret (`domain::txid`). Rows are as in format 3;
/// the marker moves so that an older binary, whose duplicate check would miss such ids, refuses
/// the directory instead of opening it.
pub const FORMAT_V4: u8 = 4;
/// The storage format of this binary (the marker in `META_FORMAT`).
pub const FORMAT: u8 = FORMAT_V4;
/// The version byte of single values, unchanged since format 2.
const ROW: u8 = FORMAT_V2;
/// The first byte of a row holding a run of entries: then, per entry, its length (u32
/// little-endian) and its value as a single row holds it.
pub const RUN: u8 = FORMAT_V3;

pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::with_capacity(64);
    encode_into(v, &mut out)?;
    Ok(out)
}

/// Appends the row encoding of `v` to `out` (a caller's reused buffer).
pub fn encode_into<T: Serialize>(v: &T, out: &mut Vec<u8>) -> Result<(), StoreError> {
    out.push(ROW);
    bincode::serde::encode_into_std_write(v, out, bincode::config::standard())
        .map_err(|e| StoreError::Codec(e.to_string()))?;
    Ok(())
}

fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, StoreError> {
    bincode::serde::decode_from_slice(body, bincode::config::standard())
        .map(|(v, _)| v)
        .map_err(|e| StoreError::Codec(e.to_string()))
}

fn version_error(v: Option<&u8>) -> StoreError {
    match v {
        Some(v) if *v > FORMAT => StoreError::NewerFormat(format!(
            "a stored value has format version {v}; this binary reads up to {FORMAT}"
        )),
        Some(v) => StoreError::Codec(format!("unexpected format version {v}")),
        None => StoreError::Codec("empty value".into()),
    }
}

/// A value of the current format.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    match bytes.split_first() {
        Some((&ROW, body)) => decode_body(body),
        other => Err(version_error(other.map(|(v, _)| v))),
    }
}

/// A value whose shape has not changed since format 1 (user records, log records): rows of
/// either version are read as they are, so an upgrade never rewrites transaction logs.
pub fn decode_compat<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    match bytes.split_first() {
        Some((&(FORMAT_V1 | FORMAT_V2), body)) => decode_body(body),
        other => Err(version_error(other.map(|(v, _)| v))),
    }
}

/// A format-1 value.
pub fn decode_v1<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    match bytes.split_first() {
        Some((&FORMAT_V1, body)) => decode_body(body),
        other => Err(version_error(other.map(|(v, _)| v))),
    }
}

/// A row's value on its way to sled: bytes of its own, or a value inside an operation's
/// journal record (`frame[start..start + len]`), whose row is the version byte then those
/// bytes. Why: the applier copied every value of every write into a buffer of its own (an
/// allocation and two copies per row, a dozen rows per deposit) though the record holding them
/// all stays in memory anyway; a value left in its record costs a reference to the record.
#[derive(Clone)]
pub enum Val {
    Bytes(IVec),
    Framed { frame: Arc<Vec<u8>>, start: u32, len: u32 },
}

impl Val {
    /// The value inside `frame` at `at`, if `at` lies in it.
    pub fn framed(frame: &Arc<Vec<u8>>, at: std::ops::Range<usize>) -> Option<Val> {
        frame.get(at.clone())?;
        let start = u32::try_from(at.start).ok()?;
        let len = u32::try_from(at.len()).ok()?;
        Some(Val::Framed { frame: frame.clone(), start, len })
    }

    /// The row's version byte, when it is not in `body`, and the rest of the row.
    fn parts(&self) -> (Option<u8>, &[u8]) {
        match self {
            Val::Bytes(v) => (None, v),
            Val::Framed { frame, start, len } => {
                let (s, n) = (*start as usize, *len as usize);
                (Some(ROW), &frame[s..s + n])
            }
        }
    }

    /// The row's length in bytes.
    pub fn len(&self) -> usize {
        let (v, body) = self.parts();
        usize::from(v.is_some()) + body.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The row's first byte (its version, or [`RUN`]).
    pub fn first(&self) -> Option<u8> {
        match self.parts() {
            (Some(v), _) => Some(v),
            (None, body) => body.first().copied(),
        }
    }

    /// Appends the row's bytes to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        let (v, body) = self.parts();
        out.extend(v);
        out.extend_from_slice(body);
    }

    /// The row as sled holds it.
    pub fn to_ivec(&self) -> IVec {
        match self {
            Val::Bytes(v) => v.clone(),
            Val::Framed { .. } => {
                let mut b = Vec::with_capacity(self.len());
                self.append_to(&mut b);
                IVec::from(b)
            }
        }
    }
}

impl PartialEq for Val {
    fn eq(&self, other: &Val) -> bool {
        let ((a, x), (b, y)) = (self.parts(), other.parts());
        a.iter().chain(x).eq(b.iter().chain(y))
    }
}

impl std::fmt::Debug for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut b = Vec::with_capacity(self.len());
        self.append_to(&mut b);
        write!(f, "Val({b:?})")
    }
}

impl From<IVec> for Val {
    fn from(v: IVec) -> Val {
        Val::Bytes(v)
    }
}

impl From<&[u8]> for Val {
    fn from(v: &[u8]) -> Val {
        Val::Bytes(IVec::from(v))
    }
}

/// One run row made of single row values, in order.
pub fn encode_run<'a>(values: impl Iterator<Item = &'a Val>) -> Result<Vec<u8>, StoreError> {
    let mut out = vec![RUN];
    for v in values {
        let n = u32::try_from(v.len()).map_err(|_| StoreError::Codec("log record too large".into()))?;
        out.extend_from_slice(&n.to_le_bytes());
        v.append_to(&mut out);
    }
    Ok(out)
}

/// The entries of a log or change row: one for a single row, several for a run.
pub fn decode_run<T: DeserializeOwned>(bytes: &[u8]) -> Result<Vec<T>, StoreError> {
    if bytes.first() != Some(&RUN) {
        return Ok(vec![decode_compat(bytes)?]);
    }
    let mut out = Vec::new();
    let mut rest = &bytes[1..];
    while !rest.is_empty() {
        let (n, tail) =
            rest.split_at_checked(4).ok_or_else(|| StoreError::Corrupt("log run cut short".into()))?;
        let n = u32::from_le_bytes([n[0], n[1], n[2], n[3]]) as usize;
        let (v, tail) =
            tail.split_at_checked(n).ok_or_else(|| StoreError::Corrupt("log run cut short".into()))?;
        out.push(decode_compat(v)?);
        rest = tail;
    }
    Ok(out)
}

/// For a key of a row that runs may join (a log row: tag, user, account, sequence number; a
/// change row: tag, user, knowledge), the length of the prefix the run shares, and the row's
/// sequence number (its first entry's, for a run).
pub fn run_key(k: &[u8]) -> Option<(usize, u64)> {
    let prefix = match (k.first(), k.len()) {
        (Some(&LOG), 33) => 25,
        (Some(&CHANGE), 17) => 9,
        _ => return None,
    };
    Some((prefix, u64::from_be_bytes(k.get(prefix..)?.try_into().ok()?)))
}

/// Where a key ends in a sequence number or a day (log, change, day and tracker rows): the
/// length of the prefix before its last 8 bytes. The memtable keeps such rows in one sorted
/// vector per prefix. Keys of these tags always have these lengths, so no such prefix is the
/// start of another key than its own rows'.
pub fn split_key(k: &[u8]) -> Option<usize> {
    match (k.first(), k.len()) {
        (Some(&LOG | &DAY | &TRACK), 33) => Some(25),
        (Some(&CHANGE), 17) => Some(9),
        _ => None,
    }
}

/// Whether rows under this [`split_key`] prefix may be joined into runs (log and change rows).
pub fn runs_join(prefix: &[u8]) -> bool {
    matches!((prefix.first(), prefix.len()), (Some(&LOG), 25) | (Some(&CHANGE), 9))
}

pub const USER: u8 = b'u';
pub const ACCOUNT: u8 = b'a';
pub const LOG: u8 = b't';
pub const MAIN_TXID: u8 = b'x';
pub const DAY: u8 = b'd';
pub const TRACK: u8 = b'k';
/// Delta-sync change rows, by (user, knowledge).
pub const CHANGE: u8 = b'c';
/// Kept idempotency keys, by (user, key).
pub const IDEM: u8 = b'i';
/// Notes of log records (payee, memo, import id), by (user, account, sequence number).
pub const NOTE: u8 = b'n';
/// A user's settings (import rules, saved CSV mappings), by (user, key).
pub const DOC: u8 = b's';
/// When each user next needs the service (seconds: a scheduled occurrence, a webhook delivery,
/// a Bill's notice), by user id: what every waker pass reads. Rows written before it held
/// seconds held the day of the next occurrence; read as seconds they are long past, so the
/// first pass visits those users and writes the time anew.
pub const WAKE: u8 = b'q';
/// Engine metadata: format version, and the last journal record applied.
pub const META_FORMAT: &[u8] = b"m:format";
pub const META_APPLIED: &[u8] = b"m:applied";
/// The secret under which generated transaction ids are derived (`domain::txid`), made once.
pub const META_ID_SECRET: &[u8] = b"m:idsecret";
/// Every per-user tag, for deleting a whole user.
pub const USER_TAGS: [u8; 9] = [ACCOUNT, LOG, MAIN_TXID, DAY, TRACK, CHANGE, IDEM, NOTE, DOC];

/// A row key: inline when it fits (every account, log, day, tracker and change key does), so
/// building one allocates nothing; the applier builds about ten per write.
#[derive(Clone)]
pub enum Key {
    Inline(u8, [u8; KEY_INLINE]),
    Heap(Vec<u8>),
}

const KEY_INLINE: usize = 40;

impl Key {
    fn new() -> Key {
        Key::Inline(0, [0; KEY_INLINE])
    }

    pub fn extend_from_slice(&mut self, b: &[u8]) {
        match self {
            Key::Inline(n, buf) => {
                let len = usize::from(*n);
                match buf.get_mut(len..len + b.len()) {
                    Some(dst) => {
                        dst.copy_from_slice(b);
                        // At most KEY_INLINE, so it fits a u8.
                        *n += b.len() as u8;
                    }
                    None => {
                        let mut v = Vec::with_capacity(len + b.len());
                        v.extend_from_slice(&buf[..len]);
                        v.extend_from_slice(b);
                        *self = Key::Heap(v);
                    }
                }
            }
            Key::Heap(v) => v.extend_from_slice(b),
        }
    }

    pub fn push(&mut self, c: u8) {
        self.extend_from_slice(&[c]);
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Key::Inline(n, b) => &b[..usize::from(*n)],
            Key::Heap(v) => v,
        }
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<&[u8]> for Key {
    fn from(b: &[u8]) -> Key {
        let mut k = Key::new();
        k.extend_from_slice(b);
        k
    }
}

impl PartialEq for Key {
    fn eq(&self, o: &Key) -> bool {
        **self == **o
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Key {
    fn cmp(&self, o: &Key) -> std::cmp::Ordering {
        (**self).cmp(&**o)
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

pub fn user_key(user_id: &str) -> Key {
    let mut k = Key::new();
    k.push(USER);
    k.extend_from_slice(user_id.as_bytes());
    k
}

/// A key of fixed-width fields, written straight into an inline key: built through
/// `extend_from_slice` one field at a time, the dozen keys of a deposit cost over 2k
/// instructions (a call and a `memcpy` per field).
#[inline]
fn fixed(tag: u8, user_no: u64, acc: Option<u128>, last: Option<u64>) -> Key {
    let mut b = [0u8; KEY_INLINE];
    b[0] = tag;
    b[1..9].copy_from_slice(&user_no.to_be_bytes());
    let mut n = 9;
    if let Some(a) = acc {
        b[9..25].copy_from_slice(&a.to_be_bytes());
        n = 25;
    }
    if let Some(x) = last {
        b[n..n + 8].copy_from_slice(&x.to_be_bytes());
        n += 8;
    }
    // At most 33 bytes, within the inline size.
    Key::Inline(n as u8, b)
}

pub fn user_prefix(tag: u8, user_no: u64) -> Key {
    fixed(tag, user_no, None, None)
}

/// `tag` user_no account: the account row, or the prefix of its log, day or tracker rows.
pub fn account_prefix(tag: u8, user_no: u64, acc: u128) -> Key {
    fixed(tag, user_no, Some(acc), None)
}

pub fn account_key(user_no: u64, acc: u128) -> Key {
    account_prefix(ACCOUNT, user_no, acc)
}

pub fn log_key(user_no: u64, acc: u128, seq: u64) -> Key {
    fixed(LOG, user_no, Some(acc), Some(seq))
}

/// A day or tracker row; the day's sign bit is flipped so negative days sort first.
pub fn day_key(tag: u8, user_no: u64, acc: u128, day: i64) -> Key {
    fixed(tag, user_no, Some(acc), Some((day as u64) ^ (1 << 63)))
}

/// The account and day of a day or tracker row key.
pub fn parse_day_key(k: &[u8]) -> Option<(u128, i64)> {
    let acc = u128::from_be_bytes(k.get(9..25)?.try_into().ok()?);
    let day = u64::from_be_bytes(k.get(25..33)?.try_into().ok()?) ^ (1 << 63);
    Some((acc, day as i64))
}

pub fn txid_key(user_no: u64, id: &str) -> Key {
    let mut k = user_prefix(MAIN_TXID, user_no);
    k.extend_from_slice(id.as_bytes());
    k
}

pub fn change_key(user_no: u64, knowledge: u64) -> Key {
    fixed(CHANGE, user_no, None, Some(knowledge))
}

pub fn note_key(user_no: u64, acc: u128, seq: u64) -> Key {
    fixed(NOTE, user_no, Some(acc), Some(seq))
}

pub fn wake_key(user_id: &str) -> Key {
    let mut k = Key::new();
    k.push(WAKE);
    k.extend_from_slice(user_id.as_bytes());
    k
}

pub fn doc_key(user_no: u64, key: &str) -> Key {
    let mut k = user_prefix(DOC, user_no);
    k.extend_from_slice(key.as_bytes());
    k
}

pub fn idem_key(user_no: u64, key: &str) -> Key {
    let mut k = user_prefix(IDEM, user_no);
    k.extend_from_slice(key.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hold_their_bytes_inline_and_past_the_inline_size() {
        for len in [0, 1, 39, 40, 41, 100] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            // Built in pieces of every size, so a piece crosses the inline limit.
            for piece in [1, 7, 40] {
                let mut k = Key::from(&[][..]);
                for c in bytes.chunks(piece) {
                    k.extend_from_slice(c);
                }
                assert_eq!(&*k, &bytes[..]);
                assert_eq!(matches!(k, Key::Inline(..)), len <= KEY_INLINE);
                assert_eq!(k, Key::from(&bytes[..]));
            }
        }
        assert!(user_key("a") < user_key(&"a".repeat(50)));
    }

    /// The fixed-width keys are their fields big-endian, one after another.
    #[test]
    fn fixed_keys_are_their_fields_in_order() {
        let (u, a, n) = (
            0x0102_0304_0506_0708u64,
            0x1112_1314_1516_1718_191a_1b1c_1d1e_1f20u128,
            0x2122_2324_2526_2728u64,
        );
        let cat = |parts: &[&[u8]]| parts.concat();
        let (u_, a_, n_) = (u.to_be_bytes(), a.to_be_bytes(), n.to_be_bytes());
        assert_eq!(&*user_prefix(DAY, u), &cat(&[&[DAY], &u_])[..]);
        assert_eq!(&*account_prefix(LOG, u, a), &cat(&[&[LOG], &u_, &a_])[..]);
        assert_eq!(&*account_key(u, a), &cat(&[&[ACCOUNT], &u_, &a_])[..]);
        assert_eq!(&*log_key(u, a, n), &cat(&[&[LOG], &u_, &a_, &n_])[..]);
        assert_eq!(&*change_key(u, n), &cat(&[&[CHANGE], &u_, &n_])[..]);
        let d = (-5i64 as u64 ^ (1 << 63)).to_be_bytes();
        assert_eq!(&*day_key(TRACK, u, a, -5), &cat(&[&[TRACK], &u_, &a_, &d])[..]);
        // More can follow inline.
        let mut k = log_key(u, a, n);
        k.push(9);
        assert_eq!(&*k, &cat(&[&[LOG], &u_, &a_, &n_, &[9]])[..]);
    }

    #[test]
    fn day_keys_sort_by_day_and_parse_back() {
        let days = [-40_000i64, -1, 0, 1, 20_000];
        let keys: Vec<_> = days.iter().map(|d| day_key(DAY, 7, 9, *d)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        for (k, d) in keys.iter().zip(days) {
            assert_eq!(parse_day_key(k), Some((9, d)));
        }
    }

    #[test]
    fn unknown_versions_are_refused() {
        let mut v = encode(&5u32).unwrap();
        assert_eq!(decode::<u32>(&v).unwrap(), 5);
        v[0] = FORMAT + 1;
        assert!(matches!(decode_run::<u32>(&v), Err(StoreError::NewerFormat(_))));
        assert!(matches!(decode::<u32>(&v), Err(StoreError::NewerFormat(_))));
        assert!(matches!(decode_compat::<u32>(&v), Err(StoreError::NewerFormat(_))));
    }

    /// A value left in its journal record is, as a row, its version byte then its bytes there:
    /// the same row an encoding of its own gives, alone and inside a run.
    #[test]
    fn a_value_inside_its_record_is_the_row_its_encoding_is() {
        let own = encode(&(7u64, "seven")).unwrap();
        let mut record = vec![1, 2, 3];
        record.extend_from_slice(&own[1..]);
        record.push(0xA5);
        let record = Arc::new(record);
        let framed = Val::framed(&record, 3..3 + own.len() - 1).unwrap();
        let bytes = Val::from(&own[..]);
        assert_eq!(framed, bytes);
        assert_eq!((framed.len(), framed.first()), (own.len(), Some(ROW)));
        assert_eq!(&framed.to_ivec()[..], &own[..]);
        assert_eq!(decode::<(u64, String)>(&framed.to_ivec()).unwrap(), (7, "seven".to_string()));
        let run = encode_run([framed.clone(), bytes].iter()).unwrap();
        assert_eq!(
            decode_run::<(u64, String)>(&run).unwrap(),
            vec![(7, "seven".into()), (7, "seven".into())]
        );
        // A span past the record's end is no value.
        assert!(Val::framed(&record, 3..record.len() + 1).is_none());
        assert_ne!(Val::framed(&record, 2..2 + own.len() - 1).unwrap(), Val::from(&own[..]));
    }

    #[test]
    fn a_run_reads_back_as_its_records_and_a_cut_one_is_refused() {
        let vals: Vec<Vec<u8>> = [7u64, 8, 9].iter().map(|n| encode(n).unwrap()).collect();
        let run =
            encode_run(vals.iter().map(|v| Val::from(v.as_slice())).collect::<Vec<_>>().iter()).unwrap();
        assert_eq!(decode_run::<u64>(&run).unwrap(), vec![7, 8, 9]);
        assert_eq!(decode_run::<u64>(&vals[0]).unwrap(), vec![7]);
        assert!(matches!(decode_run::<u64>(&run[..run.len() - 1]), Err(StoreError::Corrupt(_))));
        assert_eq!(run_key(&log_key(3, 4, 99)), Some((25, 99)));
        assert_eq!(run_key(&change_key(3, 42)), Some((9, 42)));
        assert_eq!(run_key(&account_key(3, 4)), None);
        for k in [log_key(3, 4, 99), change_key(3, 42)] {
            let n = split_key(&k).unwrap();
            assert_eq!(Some((n, u64::from_be_bytes(k[n..].try_into().unwrap()))), run_key(&k));
            assert!(runs_join(&k[..n]));
        }
        let d = day_key(DAY, 3, 4, -2);
        assert_eq!(split_key(&d), Some(25));
        assert!(!runs_join(&d[..25]));
        assert_eq!(split_key(&account_key(3, 4)), None);
        assert_eq!(split_key(&user_key("a-user-id-of-exactly-32-bytes-xx")), None);
    }
}
