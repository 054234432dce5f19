//! Journal records on disk: encoding an operation into a checksummed frame, the batch marker,
//! and reading a segment back (telling a torn tail from damage).

use super::*;

pub(super) const MAGIC: u32 = 0x4C4E_4A50; // "PJNL"
/// The magic of frames whose payload ends in [`END`] (this binary's); `MAGIC` frames, written
/// before segments were zero-filled, have no end byte and are still read.
pub(super) const MAGIC_END: u32 = 0x324E_4A50; // "PJN2"
/// The magic of the frame that starts each batch (one append + sync): its sequence number is
/// the batch's first record's, its payload the end byte alone. Only the last batch can be
/// unsynced at a power cut, and a cut may keep any subset of its sectors: damage followed by a
/// later batch's marker is damage in synced data (refused); damage with no batch after it, where
/// a sector never landed, is that last batch torn (dropped, never acknowledged). An older
/// binary reads this magic as a later format and asks to be upgraded.
pub(super) const MAGIC_BATCH: u32 = 0x334E_4A50; // "PJN3"
/// The last byte of a `MAGIC_END` frame: never zero, so a frame whose end is zero never landed.
pub(super) const END: u8 = 0xA5;
/// Disks land writes in whole sectors: a torn append's lost part starts at a multiple of this.
pub(super) const SECTOR: usize = 512;
pub(super) const HEADER: usize = 24;
/// Format of a journal payload (the version byte that starts it). Records of format 1 (before
/// delta sync and idempotency keys) and 2 (before record notes and settings) are still read.
pub(super) const PAYLOAD_FORMAT: u8 = 3;
pub(super) const PAYLOAD_FORMAT_V2: u8 = 2;
pub(super) const PAYLOAD_FORMAT_V1: u8 = 1;

/// A change as payload formats 1 and 2 wrote it: without notes and settings.
#[derive(serde::Deserialize)]
pub(super) struct ChangeV2 {
    accounts: Vec<Arc<crate::domain::tree::Account>>,
    removed: Vec<(AccountId, u64)>,
    records: Vec<(AccountId, u64, crate::domain::engine::TxRecord)>,
    days: Vec<(AccountId, i64, crate::domain::days::DaySums)>,
    track: Vec<(AccountId, i64, crate::domain::days::TrackRow)>,
    ledger: crate::domain::tree::Ledger,
    main_txids: Vec<crate::domain::text::Text>,
}

impl From<ChangeV2> for crate::domain::engine::Change {
    fn from(c: ChangeV2) -> Self {
        let ChangeV2 { accounts, removed, records, days, track, ledger, main_txids } = c;
        Self {
            accounts,
            removed,
            records,
            days,
            track,
            ledger,
            main_txids,
            notes: Vec::new(),
            docs: Vec::new(),
            wake: None,
        }
    }
}

/// An operation as journal payload format 1 wrote it.
#[derive(serde::Deserialize)]
pub(super) enum OpV1 {
    Commit { user: UserRecord, change: ChangeV2 },
    DeleteUser { user: UserRecord },
}

impl From<OpV1> for Op {
    fn from(op: OpV1) -> Op {
        match op {
            OpV1::Commit { user, change } => {
                Op::Commit { user, change: change.into(), sync: None, idem: None }
            }
            OpV1::DeleteUser { user } => Op::DeleteUser { user },
        }
    }
}

/// An operation as journal payload format 2 wrote it.
#[allow(clippy::large_enum_variant)] // read once per old record, then converted
#[derive(serde::Deserialize)]
pub(super) enum OpV2 {
    Commit {
        user: UserRecord,
        change: ChangeV2,
        sync: Option<SyncRow>,
        idem: Option<crate::store::IdemWrite>,
    },
    DeleteUser {
        user: UserRecord,
    },
}

impl From<OpV2> for Op {
    fn from(op: OpV2) -> Op {
        match op {
            OpV2::Commit { user, change, sync, idem } => {
                Op::Commit { user, change: change.into(), sync, idem }
            }
            OpV2::DeleteUser { user } => Op::DeleteUser { user },
        }
    }
}
/// A frame without its sequence number: the costly part (encoding, payload checksum), done on
/// the caller's thread outside the queue lock.
/// A commit is encoded piece by piece, into exactly the bytes bincode writes for the whole
/// operation, noting where each row value lies (see [`ValueSpans`]).
pub(super) fn encode_frame_body(op: &Op) -> Result<(Vec<u8>, Option<ValueSpans>), StoreError> {
    // Sized like this thread's last frame: a frame grown from empty by many small writes is
    // reallocated several times.
    thread_local! {
        static LAST_LEN: std::cell::Cell<usize> = const { std::cell::Cell::new(1024) };
    }
    let mut f = Vec::with_capacity(LAST_LEN.get().clamp(256, 64 << 10) * 5 / 4);
    f.resize(HEADER, 0);
    f.push(PAYLOAD_FORMAT);
    let spans = match op {
        Op::Commit { user, change, sync, idem } => Some(encode_commit(&mut f, user, change, sync, idem)?),
        Op::DeleteUser { .. } => {
            enc(op, &mut f)?;
            None
        }
    };
    f.push(END);
    let len = u32::try_from(f.len() - HEADER).map_err(|_| StoreError::Codec("operation too large".into()))?;
    f[0..4].copy_from_slice(&MAGIC_END.to_le_bytes());
    f[4..8].copy_from_slice(&len.to_le_bytes());
    let pcrc = crc32fast::hash(&f[HEADER..]);
    f[20..24].copy_from_slice(&pcrc.to_le_bytes());
    LAST_LEN.set(f.len());
    Ok((f, spans))
}

/// Appends bincode's encoding of `v` (standard configuration, as for whole frames) to `f`;
/// returns where it lies.
pub(super) fn enc<T: serde::Serialize + ?Sized>(
    v: &T,
    f: &mut Vec<u8>,
) -> Result<std::ops::Range<usize>, StoreError> {
    let start = f.len();
    bincode::serde::encode_into_std_write(v, f, bincode::config::standard())
        .map_err(|e| StoreError::Codec(e.to_string()))?;
    Ok(start..f.len())
}

/// `Op::Commit` as bincode writes it: the variant index (a varint), then the fields in order;
/// a sequence is its length (a varint u64) then its elements, a tuple its elements, an option
/// a 0 or 1 byte then the value. A test holds this to bincode's own encoding.
pub(super) fn encode_commit(
    f: &mut Vec<u8>,
    user: &UserRecord,
    c: &crate::domain::engine::Change,
    sync: &Option<SyncRow>,
    idem: &Option<crate::store::IdemWrite>,
) -> Result<ValueSpans, StoreError> {
    let mut s = ValueSpans {
        rows: Vec::with_capacity(c.accounts.len() + c.records.len() + c.days.len() + c.track.len()),
        ..ValueSpans::default()
    };
    0u32.put(f);
    s.user = put(user, f);
    // Change, field by field in declaration order.
    (c.accounts.len() as u64).put(f);
    for a in &c.accounts {
        s.rows.push(put(&**a, f));
    }
    c.removed.put(f);
    enc_rows(&c.records, f, &mut s.rows);
    enc_rows(&c.days, f, &mut s.rows);
    enc_rows(&c.track, f, &mut s.rows);
    c.ledger.put(f);
    c.main_txids.put(f);
    // Rare (imports and settings): through serde.
    enc(&c.notes, f)?;
    enc(&c.docs, f)?;
    enc(&c.wake, f)?;
    s.sync = put_option(sync, f);
    match idem {
        None => 0u8.put(f),
        Some(w) => {
            1u8.put(f);
            s.idem_put = put_option(&w.put, f);
            w.remove.put(f);
        }
    }
    Ok(s)
}

/// Appends `v` as bincode writes it (see [`Bin`]); returns where it lies.
pub(super) fn put<T: Bin + ?Sized>(v: &T, f: &mut Vec<u8>) -> std::ops::Range<usize> {
    let start = f.len();
    v.put(f);
    start..f.len()
}

/// A sequence of (account, position, value) rows: its length, then each row; notes where each
/// value lies.
pub(super) fn enc_rows<P: Bin, V: Bin>(
    rows: &[(AccountId, P, V)],
    f: &mut Vec<u8>,
    spans: &mut Vec<std::ops::Range<usize>>,
) {
    (rows.len() as u64).put(f);
    for (acc, pos, v) in rows {
        acc.put(f);
        pos.put(f);
        spans.push(put(v, f));
    }
}

/// An option: a 0 or 1 byte, then the value; returns where the value lies.
pub(super) fn put_option<T: Bin>(v: &Option<T>, f: &mut Vec<u8>) -> Option<std::ops::Range<usize>> {
    (v.is_some() as u8).put(f);
    v.as_ref().map(|x| put(x, f))
}

/// Stamps the sequence number and the header checksum into a frame body.
/// The frame that starts a batch whose first record is `seq` (see [`MAGIC_BATCH`]).
pub(super) fn batch_marker(seq: u64) -> [u8; HEADER + 1] {
    let mut f = [0u8; HEADER + 1];
    f[0..4].copy_from_slice(&MAGIC_BATCH.to_le_bytes());
    f[4..8].copy_from_slice(&1u32.to_le_bytes());
    f[HEADER] = END;
    f[20..24].copy_from_slice(&crc32fast::hash(&[END]).to_le_bytes());
    stamp(&mut f, seq);
    f
}

/// Whether a whole batch marker starts anywhere in `bytes` at or after `from`.
pub(super) fn batch_marker_at_or_after(bytes: &[u8], from: usize) -> bool {
    let magic = MAGIC_BATCH.to_le_bytes();
    let mut at = from;
    while let Some(i) = bytes.get(at..).and_then(|r| memchr::memmem::find(r, &magic)) {
        let off = at + i;
        let f = &bytes[off..];
        if f.len() > HEADER
            && crc32fast::hash(&f[0..16]) == u32_at(f, 16)
            && u32_at(f, 4) == 1
            && f[HEADER] == END
        {
            return true;
        }
        at = off + 1;
    }
    false
}

/// Whether part of a write never landed in the sectors holding `from..to`: zeros from `from`
/// to the end of its sector, or a whole sector of zeros (segments are zero-filled, and sectors
/// past a file's synced size read as zeros; a sector shared with the batch before keeps that
/// batch's bytes). Sectors land whole, so each is read to its end, past `to`: a record's end
/// byte alone in a sector that never landed is zeros only up to `to`.
pub(super) fn unlanded_sector(bytes: &[u8], from: usize, to: usize) -> bool {
    let to = to.min(bytes.len());
    if from >= to {
        return false;
    }
    let zeros = |r: std::ops::Range<usize>| bytes[r].iter().all(|b| *b == 0);
    let sector_end = |at: usize| (at / SECTOR * SECTOR + SECTOR).min(bytes.len());
    zeros(from..sector_end(from))
        || (from.next_multiple_of(SECTOR)..to).step_by(SECTOR).any(|s| zeros(s..sector_end(s)))
}

pub(super) fn stamp(f: &mut [u8], seq: u64) {
    f[8..16].copy_from_slice(&seq.to_le_bytes());
    let hcrc = crc32fast::hash(&f[0..16]);
    f[16..20].copy_from_slice(&hcrc.to_le_bytes());
}

#[cfg(test)]
pub(super) fn encode_frame(seq: u64, op: &Op) -> Result<Vec<u8>, StoreError> {
    let (mut f, _) = encode_frame_body(op)?;
    stamp(&mut f, seq);
    Ok(f)
}

/// One record read back from a segment.
pub(super) struct Frame {
    pub(super) seq: u64,
    pub(super) payload_start: usize,
    pub(super) end: usize,
}

/// How reading a segment ended.
pub(super) enum Tail {
    Clean,
    /// The last record is cut short (or zero-filled): the writer died mid-append, before its
    /// sync, so nothing there was acknowledged.
    Torn(usize),
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

/// Parses every frame of a segment. Zeros after the last frame are unused space (a segment is
/// zero-filled ahead of use). A damaged complete record is corruption, an error naming the file
/// and offset; only a last record that never landed whole may be a torn tail: cut short by the
/// file's end, or, for a frame with an end byte, one whose end lies in the zeros after the last
/// sector written (an acknowledged frame's end byte is on disk and never zero; rounding up to
/// a whole sector keeps a damaged end byte in a record's last sector from passing for a tear).
pub(super) fn parse_segment(path: &Path, bytes: &[u8], last: bool) -> Result<(Vec<Frame>, Tail), StoreError> {
    let corrupt = |off: usize, what: &str| {
        StoreError::Corrupt(format!(
            "journal {} is damaged at offset {off}: {what}; refusing to start rather than drop acknowledged writes",
            path.display()
        ))
    };
    // Where the written bytes end: past it the segment holds only zeros. `landed`: the end of
    // the sector holding the last of them, where a torn append's lost sectors begin.
    let written = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    let landed = written.next_multiple_of(SECTOR);
    // The last batch torn by a power cut that kept some of its sectors and not others (see
    // [`MAGIC_BATCH`]): damage at `off` with no later batch, in a segment of batches, and a
    // sector that never landed before `written` or `to` (the damaged record's end, which can
    // lie in the zeros past `written`).
    let unlanded_batch = |off: usize, to: usize| {
        last && (off == 0 || batch_marker_at_or_after(bytes, 0))
            && !batch_marker_at_or_after(bytes, off + 1)
            && unlanded_sector(bytes, off, to.max(written))
    };
    let mut frames = Vec::new();
    let mut off = 0usize;
    let mut prev_seq = 0u64;
    while off < written {
        let rest = &bytes[off..];
        let magic = if rest.len() >= HEADER { u32_at(rest, 0) } else { 0 };
        let header_ok = (magic == MAGIC || magic == MAGIC_END || magic == MAGIC_BATCH)
            && crc32fast::hash(&rest[0..16]) == u32_at(rest, 16);
        // A whole header of a later frame format ("PJN4" on): a newer binary wrote it.
        if !header_ok
            && rest.len() >= HEADER
            && rest[..3] == *b"PJN"
            && (b'4'..=b'9').contains(&rest[3])
            && crc32fast::hash(&rest[0..16]) == u32_at(rest, 16)
        {
            return Err(StoreError::NewerFormat(format!(
                "journal {} holds a record of frame format {} at offset {off}; this binary reads PJN3: upgrade pfm",
                path.display(),
                String::from_utf8_lossy(&rest[..4])
            )));
        }
        if !header_ok {
            // A header cut short by the file's end or by sectors that never landed.
            return if last && (rest.len() < HEADER || landed < off + HEADER) || unlanded_batch(off, written) {
                Ok((frames, Tail::Torn(off)))
            } else if rest.len() < HEADER {
                Err(corrupt(off, "truncated record header"))
            } else {
                Err(corrupt(off, "record header checksum mismatch"))
            };
        }
        let len = u32_at(rest, 4) as usize;
        let mut s = [0u8; 8];
        s.copy_from_slice(&rest[8..16]);
        let seq = u64::from_le_bytes(s);
        if len > rest.len() - HEADER {
            return if last { Ok((frames, Tail::Torn(off))) } else { Err(corrupt(off, "truncated record")) };
        }
        let with_end = magic == MAGIC_END || magic == MAGIC_BATCH;
        if crc32fast::hash(&rest[HEADER..HEADER + len]) != u32_at(rest, 20) {
            if unlanded_batch(off, off + HEADER + len) {
                return Ok((frames, Tail::Torn(off)));
            }
            // Whole but for its end byte: on disk, since its content got there. Without batch
            // markers its sector can look unwritten (the end byte alone, or after zeros, in the
            // record's last sector): a torn append looks the same, but dropping the record could
            // lose an acknowledged write, so it is damage either way.
            if with_end && len > 0 && {
                let mut h = crc32fast::Hasher::new();
                h.update(&rest[HEADER..HEADER + len - 1]);
                h.update(&[END]);
                h.finalize() == u32_at(rest, 20)
            } {
                return Err(corrupt(off, &format!("record {seq} has a damaged end byte")));
            }
            return if last && with_end && off + HEADER + len > landed {
                Ok((frames, Tail::Torn(off)))
            } else {
                Err(corrupt(off, &format!("checksum mismatch in record {seq}")))
            };
        }
        if with_end && (len == 0 || rest[HEADER + len - 1] != END) {
            return Err(corrupt(off, &format!("record {seq} lacks its end byte")));
        }
        if magic == MAGIC_BATCH {
            // The batch's first record follows with the same number.
            if seq <= prev_seq {
                return Err(corrupt(off, "sequence numbers go backwards"));
            }
            off += HEADER + len;
            continue;
        }
        if seq <= prev_seq {
            return Err(corrupt(off, "sequence numbers go backwards"));
        }
        prev_seq = seq;
        let end = off + HEADER + len - usize::from(with_end);
        frames.push(Frame { seq, payload_start: off + HEADER, end });
        off += HEADER + len;
    }
    Ok((frames, Tail::Clean))
}

pub(super) fn decode_payload(path: &Path, seq: u64, p: &[u8]) -> Result<Op, StoreError> {
    let corrupt = |e: bincode::error::DecodeError| {
        StoreError::Corrupt(format!("journal {} record {seq}: {e}", path.display()))
    };
    match p.split_first() {
        Some((&PAYLOAD_FORMAT, body)) => bincode::serde::decode_from_slice(body, bincode::config::standard())
            .map(|(op, _)| op)
            .map_err(corrupt),
        Some((&PAYLOAD_FORMAT_V2, body)) => {
            bincode::serde::decode_from_slice::<OpV2, _>(body, bincode::config::standard())
                .map(|(op, _)| op.into())
                .map_err(corrupt)
        }
        Some((&PAYLOAD_FORMAT_V1, body)) => {
            bincode::serde::decode_from_slice::<OpV1, _>(body, bincode::config::standard())
                .map(|(op, _)| op.into())
                .map_err(corrupt)
        }
        Some((v, _)) => Err(StoreError::NewerFormat(format!(
            "journal {} record {seq} has format {v}; this binary reads {PAYLOAD_FORMAT}: upgrade pfm",
            path.display()
        ))),
        None => Err(StoreError::Corrupt(format!("journal {} record {seq} is empty", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_encodes_whole_and_carries_no_spans() {
        let o = op(3);
        let (frame, spans) = encode_frame_body(&o).unwrap();
        let whole = bincode::serde::encode_to_vec(&o, bincode::config::standard()).unwrap();
        assert_eq!(&frame[HEADER + 1..frame.len() - 1], &whole[..]);
        assert!(spans.is_none());
    }

    fn op(n: u64) -> Op {
        Op::DeleteUser {
            user: UserRecord {
                user_id: format!("u{n}").into(),
                user_no: n,
                password_hash: None,
                role: "user".into(),
                created_at: 0,
                root: 1,
                ledger: Default::default(),
            },
        }
    }

    fn segment(n: u64) -> Vec<u8> {
        (1..=n).flat_map(|s| encode_frame(s, &op(s)).unwrap()).collect()
    }

    #[test]
    fn format_1_and_2_payloads_still_read_as_commits_without_what_they_lacked() {
        let user = match op(4) {
            Op::DeleteUser { user } => user,
            Op::Commit { .. } => unreachable!(),
        };
        let commit = Op::Commit { user, change: Default::default(), sync: None, idem: None };
        let mut p = vec![PAYLOAD_FORMAT];
        bincode::serde::encode_into_std_write(&commit, &mut p, bincode::config::standard()).unwrap();
        // Format 2 had no notes, settings and due day: the same bytes without their two empty
        // lists and `None` (one byte each), which end the change.
        let mut v2 = p[..p.len() - 5].to_vec();
        v2.extend_from_slice(&p[p.len() - 2..]);
        v2[0] = PAYLOAD_FORMAT_V2;
        assert!(matches!(decode_payload(Path::new("x"), 1, &v2).unwrap(),
            Op::Commit { user, sync: None, idem: None, .. } if user.user_no == 4));
        // Format 1 had no `sync` and `idem` fields either: without their two `None`s.
        let mut v1 = v2[..v2.len() - 2].to_vec();
        v1[0] = PAYLOAD_FORMAT_V1;
        assert!(matches!(decode_payload(Path::new("x"), 1, &v1).unwrap(),
            Op::Commit { user, sync: None, idem: None, .. } if user.user_no == 4));
        assert!(decode_payload(Path::new("x"), 1, &p).is_ok());
    }

    #[test]
    fn frames_read_back_in_order() {
        let b = segment(5);
        let (frames, tail) = parse_segment(Path::new("x"), &b, true).unwrap();
        assert!(matches!(tail, Tail::Clean));
        assert_eq!(frames.iter().map(|f| f.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
        let f = &frames[2];
        assert!(matches!(decode_payload(Path::new("x"), 3, &b[f.payload_start..f.end]).unwrap(),
            Op::DeleteUser { user } if user.user_no == 3));
        // The payload handed on stops before the end byte: bincode reads it all.
        for f in &frames {
            let body = &b[f.payload_start + 1..f.end];
            let (_, used): (Op, usize) =
                bincode::serde::decode_from_slice(body, bincode::config::standard()).unwrap();
            assert_eq!(used, body.len());
            assert_eq!(b[f.end], END);
        }
    }

    #[test]
    fn a_cut_last_record_is_a_torn_tail_and_only_it_is_dropped() {
        let b = segment(4);
        let whole = segment(3).len();
        for cut in [whole + 1, whole + HEADER - 1, whole + HEADER + 1, b.len() - 1] {
            let (frames, tail) = parse_segment(Path::new("x"), &b[..cut], true).unwrap();
            assert_eq!(frames.len(), 3, "cut at {cut}");
            assert!(matches!(tail, Tail::Torn(off) if off == whole));
        }
        // A zero-filled tail (a zero-filled segment's unused space, or a size that grew while
        // the data never landed) holds nothing: every record before it is kept.
        let mut z = segment(3);
        z.extend_from_slice(&[0u8; 100]);
        for last in [true, false] {
            let (frames, tail) = parse_segment(Path::new("x"), &z, last).unwrap();
            assert!(frames.len() == 3 && matches!(tail, Tail::Clean));
        }
        // In a closed segment, a cut record is damage, never silently dropped.
        assert!(parse_segment(Path::new("x"), &b[..b.len() - 1], false).is_err());
    }

    #[test]
    fn a_flipped_byte_anywhere_is_refused_with_file_and_offset() {
        // Also in a zero-filled segment, where the written part ends before the file does.
        for zeros in [0, 4096] {
            let mut b = segment(4);
            b.resize(b.len() + zeros, 0);
            let written = segment(4).len();
            for i in 0..written {
                for bit in [0x01, 0x40, 0x80] {
                    let mut d = b.clone();
                    d[i] ^= bit;
                    match parse_segment(Path::new("seg.wal"), &d, true) {
                        Err(StoreError::Corrupt(m)) => {
                            assert!(m.contains("seg.wal") && m.contains("offset"), "{m}")
                        }
                        other => panic!("byte {i} bit {bit}: {:?}", other.map(|(f, _)| f.len())),
                    }
                }
            }
        }
    }

    /// Frames of about 700 bytes: each spans a sector boundary.
    fn big_segment(n: u64) -> Vec<u8> {
        (1..=n)
            .flat_map(|s| {
                let mut o = op(s);
                if let Op::DeleteUser { user } = &mut o {
                    user.user_id = format!("u{s}-{}", "x".repeat(700)).into();
                }
                encode_frame(s, &o).unwrap()
            })
            .collect()
    }

    /// Batches as the journal thread writes them: a marker, then big frames `from..=to`.
    fn batch(from: u64, to: u64) -> Vec<u8> {
        let mut b = batch_marker(from).to_vec();
        b.extend((from..=to).flat_map(|s| {
            let mut o = op(s);
            if let Op::DeleteUser { user } = &mut o {
                user.user_id = format!("u{s}-{}", "x".repeat(700)).into();
            }
            encode_frame(s, &o).unwrap()
        }));
        b
    }

    /// A power cut keeps any subset of the last batch's sectors (the only unsynced one): with
    /// no batch after the damage and a sector that never landed, it is a torn tail, dropped
    /// from its first damaged record. The same damage before a later batch's marker is in
    /// synced, acknowledged data: refused. So is damage in the last batch where every sector
    /// landed (a flipped byte).
    #[test]
    fn a_last_batch_torn_in_any_sectors_is_dropped_and_damage_before_a_later_batch_is_refused() {
        let (first, second) = (batch(1, 10), batch(11, 20));
        let mut seg = [first.clone(), second.clone()].concat();
        seg.resize(seg.len().next_multiple_of(4096) + 8192, 0);
        let seqs = |b: &[u8]| -> Result<(Vec<u64>, Option<usize>), String> {
            parse_segment(Path::new("seg.wal"), b, true)
                .map(|(f, t)| {
                    let torn = match t {
                        Tail::Torn(o) => Some(o),
                        Tail::Clean => None,
                    };
                    (f.iter().map(|f| f.seq).collect(), torn)
                })
                .map_err(|e| e.to_string())
        };
        assert_eq!(seqs(&seg).unwrap(), ((1..=20).collect(), None));
        // Any one sector of the second batch lost, the first sector shared with the first
        // batch losing only the second's bytes: the first batch whole, the second cut at its
        // first damaged record.
        let start = first.len();
        for lost in (start / SECTOR..(start + second.len()).div_ceil(SECTOR)).map(|s| s * SECTOR) {
            let mut b = seg.clone();
            b[lost.max(start)..lost + SECTOR].fill(0);
            let (got, torn) = seqs(&b).unwrap_or_else(|e| panic!("sector at {lost}: {e}"));
            let torn = torn.unwrap_or_else(|| panic!("sector at {lost}: not torn"));
            assert!(torn >= start && torn <= lost.max(start), "sector at {lost}: torn at {torn}");
            assert!(got.len() >= 10 && got[..10] == (1..=10).collect::<Vec<_>>()[..], "{got:?}");
        }
        // Several sectors of it, the marker's among them.
        let mut b = seg.clone();
        b[start..(start + 1).next_multiple_of(SECTOR)].fill(0);
        b[start + 2048..start + 2048 + SECTOR].fill(0);
        assert_eq!(seqs(&b).unwrap(), ((1..=10).collect(), Some(start)));
        // A sector of the first batch lost, the second whole after it: refused.
        for lost in [SECTOR, 3 * SECTOR, (start - 1) / SECTOR * SECTOR] {
            let mut b = seg.clone();
            b[lost..(lost + SECTOR).min(start)].fill(0);
            let e = seqs(&b).expect_err("damage before a later batch");
            assert!(e.contains("seg.wal") && e.contains("damaged"), "{e}");
        }
        // A flipped byte in the last batch, every sector landed: refused.
        let mut b = seg.clone();
        b[start + 1500] ^= 0x40;
        assert!(seqs(&b).is_err());
    }

    /// A last batch torn at the sector boundary just before a record's end byte: every sector
    /// but the one holding that byte alone landed. It was never synced, so it is a torn tail;
    /// the same bytes before a later batch are damage in synced data.
    #[test]
    fn a_last_batch_torn_just_before_an_end_byte_is_a_torn_tail() {
        let head = batch(1, 3);
        let frame_with = |k: usize| {
            let mut o = op(4);
            if let Op::DeleteUser { user } = &mut o {
                user.user_id = format!("u4-{}", "x".repeat(k)).into();
            }
            encode_frame(4, &o).unwrap()
        };
        let marker = batch_marker(4);
        let k = (0..SECTOR)
            .find(|&k| (head.len() + marker.len() + frame_with(k).len() - 1).is_multiple_of(SECTOR))
            .expect("some length puts the end byte at a sector start");
        let mut b = [&head[..], &marker[..], &frame_with(k)].concat();
        let end = b.len() - 1;
        let start = head.len();
        let seqs = |b: &[u8]| {
            parse_segment(Path::new("seg.wal"), b, true)
                .map(|(f, t)| {
                    (
                        f.iter().map(|f| f.seq).collect::<Vec<_>>(),
                        matches!(t, Tail::Torn(o) if o == start + HEADER + 1),
                    )
                })
                .map_err(|e| e.to_string())
        };
        // Its sector never landed: zeros in a zero-filled segment, or past the synced size in a
        // growing one whose new size landed.
        for spare in [4096, 0] {
            let mut torn = b.clone();
            torn.resize(b.len() + spare, 0);
            torn[end] = 0;
            assert_eq!(seqs(&torn).unwrap(), ((1..=3).collect(), true), "spare {spare}");
        }
        // Its sector landed with the byte damaged: refused.
        let mut flipped = b.clone();
        flipped.resize(b.len() + 4096, 0);
        flipped[end] ^= 0x40;
        assert!(seqs(&flipped).unwrap_err().contains("end byte"));
        // Before a later batch, the same bytes are damage: refused.
        b.resize(end + SECTOR, 0);
        b[end] = 0;
        b.extend_from_slice(&batch(5, 6));
        let e = seqs(&b).expect_err("damage before a later batch");
        assert!(e.contains("seg.wal") && e.contains("end byte"), "{e}");
    }

    /// In a zero-filled segment a torn append shows as a last record whose sectors from some
    /// boundary on are still zeros: it is dropped, and only it.
    #[test]
    fn a_record_ending_in_the_zeros_of_a_filled_segment_is_a_torn_tail() {
        let whole = big_segment(3).len();
        let full = big_segment(4);
        let cuts: Vec<usize> = (whole + 1..full.len()).filter(|c| c % SECTOR == 0).collect();
        assert!(!cuts.is_empty());
        for &cut in &cuts {
            let mut b = full[..cut].to_vec();
            b.resize(full.len() + 4096, 0);
            let (frames, tail) = parse_segment(Path::new("x"), &b, true).unwrap();
            assert_eq!(frames.len(), 3, "landed up to {cut}");
            assert!(matches!(tail, Tail::Torn(off) if off == whole), "landed up to {cut}");
            // Never in a closed segment: there it is damage.
            assert!(parse_segment(Path::new("x"), &b, false).is_err(), "landed up to {cut}");
        }
        // Its sectors landing out of order (a hole of zeros, the end byte on disk) is not told
        // apart from damage: refused, never dropped.
        let mut b = full.clone();
        let hole = whole + HEADER + 2;
        b[hole..hole + 3].fill(0);
        assert!(parse_segment(Path::new("x"), &b, true).is_err());
        // Nor is a damaged end byte turned to zero inside its record's last sector.
        let mut b = full.clone();
        b.resize(full.len() + 4096, 0);
        assert_ne!((full.len() - 1) % SECTOR, 0, "the end byte starts a sector: pick another size");
        b[full.len() - 1] = 0;
        assert!(matches!(parse_segment(Path::new("x"), &b, true), Err(StoreError::Corrupt(_))));
    }

    /// A last record whose end byte starts a sector, damaged to zero: the written part then
    /// seems to end a sector earlier, as if the append were torn, but the rest of the record
    /// checks out, so it landed: refused, never dropped as a torn tail.
    #[test]
    fn a_damaged_end_byte_alone_in_its_sector_is_refused_not_dropped() {
        let head = segment(3);
        let frame_with = |k: usize| {
            let mut o = op(4);
            if let Op::DeleteUser { user } = &mut o {
                user.user_id = format!("u4-{}", "x".repeat(k)).into();
            }
            encode_frame(4, &o).unwrap()
        };
        let k = (0..SECTOR)
            .find(|&k| (head.len() + frame_with(k).len() - 1).is_multiple_of(SECTOR))
            .expect("some length puts the end byte at a sector start");
        let mut b = head.clone();
        b.extend_from_slice(&frame_with(k));
        let end = b.len() - 1;
        b.resize(b.len() + 4096, 0);
        let (frames, _) = parse_segment(Path::new("x"), &b, true).unwrap();
        assert_eq!(frames.len(), 4, "intact, it reads whole");
        b[end] = 0;
        match parse_segment(Path::new("seg.wal"), &b, true) {
            Err(StoreError::Corrupt(m)) => {
                assert!(m.contains("seg.wal") && m.contains(&format!("offset {}", head.len())), "{m}");
                assert!(m.contains("end byte"), "{m}");
            }
            other => panic!(
                "a damaged acknowledged record was taken for a torn tail: {:?}",
                other.map(|(f, _)| f.len())
            ),
        }
    }

    /// A frame of a later format ("PJN4", its header checksum whole) asks for a newer binary.
    #[test]
    fn a_newer_frame_format_refuses_as_newer_not_as_damage() {
        let mut b = segment(3);
        let at = segment(2).len();
        b[at + 3] = b'4';
        let hcrc = crc32fast::hash(&b[at..at + 16]);
        b[at + 16..at + 20].copy_from_slice(&hcrc.to_le_bytes());
        match parse_segment(Path::new("seg.wal"), &b, true) {
            Err(StoreError::NewerFormat(m)) => assert!(m.contains("PJN4") && m.contains("upgrade"), "{m}"),
            other => panic!("{:?}", other.map(|(f, _)| f.len())),
        }
        // With a damaged header checksum it is damage, as before.
        b[at + 16] ^= 1;
        assert!(matches!(parse_segment(Path::new("seg.wal"), &b, true), Err(StoreError::Corrupt(_))));
    }

    /// Frames written before the end byte (magic "PJNL") still read, and their payload decodes.
    #[test]
    fn frames_without_the_end_byte_still_read() {
        let mut b = Vec::new();
        for s in 1..=3u64 {
            let mut f = vec![0u8; HEADER];
            f.push(PAYLOAD_FORMAT);
            bincode::serde::encode_into_std_write(op(s), &mut f, bincode::config::standard()).unwrap();
            let len = (f.len() - HEADER) as u32;
            f[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            f[4..8].copy_from_slice(&len.to_le_bytes());
            let pcrc = crc32fast::hash(&f[HEADER..]);
            f[20..24].copy_from_slice(&pcrc.to_le_bytes());
            stamp(&mut f, s);
            b.extend_from_slice(&f);
        }
        b.extend_from_slice(&segment(5)[segment(3).len()..]);
        let (frames, tail) = parse_segment(Path::new("x"), &b, true).unwrap();
        assert!(matches!(tail, Tail::Clean));
        assert_eq!(frames.len(), 5);
        for f in &frames {
            assert!(matches!(decode_payload(Path::new("x"), f.seq, &b[f.payload_start..f.end]).unwrap(),
                Op::DeleteUser { user } if user.user_no == f.seq));
        }
        // An old frame cut short is still a torn tail.
        let old_end = frames[2].end;
        let (frames, tail) = parse_segment(Path::new("x"), &b[..old_end - 1], true).unwrap();
        assert!(frames.len() == 2 && matches!(tail, Tail::Torn(_)));
    }
}
