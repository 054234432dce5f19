//! Start-up: every journal record after the checkpoint marker is applied again, segments are
//! checked to chain on from one another, and a torn tail is cut off.

use super::*;

/// At start, applies every journal record after the checkpoint marker again; returns the
/// last sequence number in the journal (or sled's, if higher). A torn tail is cut off, and the
/// segments are deleted once sled, flushed, holds all of them.
pub(super) fn replay(fs: &dyn Fs, sled: &SledStore, jdir: &Path) -> Result<u64, StoreError> {
    let applied = sled.applied_seq()?;
    // Records are gathered in a memtable and written into sled as the checkpoints write them
    // (log records joined into runs, in large batches): one sled batch per record made a
    // restart after heavy writes take 20 s for 400 MB of journal. A record that lists rows (a
    // deletion) reads them through the memtable over sled, as the applier does.
    let overlay = Overlay::default();
    let id_secret = Some(sled.id_secret());
    let mut replayed = 0usize;
    let (last, segs) = scan_journal(fs, jdir, applied, |seq, op| {
        let rows = overlay.read(sled.db(), |r| {
            let mut rows = Vec::with_capacity(op.rows());
            sled_store::rows_into(r, &mut rows, &op, id_secret).map(|_| rows)
        })?;
        overlay.stage(rows, seq);
        if overlay.active_bytes() >= MEMTABLE_BYTES {
            write_replayed(sled, &overlay)?;
        }
        replayed += 1;
        Ok(())
    })?;
    write_replayed(sled, &overlay)?;
    sled.flush()?;
    finish_replay(fs, jdir, sled.applied_seq()?, &segs)?;
    if replayed > 0 {
        tracing::info!(records = replayed, "replayed the journal into storage");
    }
    Ok(last)
}

/// The journal's side of a start: checks the marker against what storage holds (`applied`),
/// reads every segment in order, checks that they chain, hands each record after the marker
/// to `apply` and cuts a torn tail off. Returns the last sequence number seen (or `applied`,
/// if higher) and the segments read.
pub(super) fn scan_journal(
    fs: &dyn Fs,
    jdir: &Path,
    applied: u64,
    mut apply: impl FnMut(u64, Op) -> Result<(), StoreError>,
) -> Result<(u64, Vec<PathBuf>), StoreError> {
    // Journal segments are deleted once a sled flush holds them; the marker says how far that
    // was. sled holding less means it lost flushed writes (its recovery stops at a damaged
    // record), which the journal can no longer restore.
    let marked = read_checkpoint(fs, jdir)?;
    if applied < marked {
        let db = jdir.parent().unwrap_or(jdir).join("db");
        return Err(crate::store::sled_store::damaged(
            &db,
            &format!("it holds writes up to journal record {applied}, but records up to {marked} were flushed to it"),
        ));
    }
    let mut segs: Vec<PathBuf> = fs
        .list(jdir)
        .map_err(|e| io(jdir, e))?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    segs.sort();
    let mut last = applied;
    // Where the previous segment ended: each is named one past the last record before it.
    let mut before: Option<(&PathBuf, Option<u64>)> = None;
    for (i, path) in segs.iter().enumerate() {
        let bytes = fs.read(path).map_err(|e| io(path, e))?;
        let (frames, tail) = parse_segment(path, &bytes, i + 1 == segs.len())?;
        check_chain(path, before, applied, frames.first().map(|f| f.seq))?;
        before = Some((path, frames.last().map(|f| f.seq)));
        for f in &frames {
            // From the marker, not from what sled says it holds: sled's files are trusted only
            // as far as a checkpoint synced them. Past that, a run that failed a sync may have
            // left sled's pages in the page cache, marked clean but never written (see
            // `Halt`); replaying rewrites them. Replaying a record sled holds is harmless.
            if f.seq > marked {
                apply(f.seq, decode_payload(path, f.seq, &bytes[f.payload_start..f.end])?)?;
            }
            last = last.max(f.seq);
        }
        if let Tail::Torn(off) = tail {
            tracing::warn!(file = %path.display(), offset = off, bytes = bytes.len() - off,
                "dropping a torn journal tail (an append cut short before its sync; never acknowledged)");
            let f = fs.open(path).map_err(|e| io(path, e))?;
            f.set_len(off as u64).and_then(|_| f.sync_all()).map_err(|e| io(path, e))?;
        }
    }
    Ok((last, segs))
}

/// Ends a start once storage holds (synced) every record up to `applied`: the marker says so,
/// then the segments read go.
pub(super) fn finish_replay(
    fs: &dyn Fs,
    jdir: &Path,
    applied: u64,
    segs: &[PathBuf],
) -> Result<(), StoreError> {
    write_checkpoint(fs, jdir, applied)?;
    for path in segs {
        fs.remove(path).map_err(|e| io(path, e))?;
    }
    Ok(())
}

/// Starts the journal after a start-up's replay: a spare or a covered segment an earlier run left
/// goes (a spare may be half filled; a `*.dropping` segment is covered by its checkpoint), and
/// segment `next_seq` is created, its name synced.
pub(super) fn start_journal(fs: &dyn Fs, jdir: &Path, next_seq: u64) -> Result<(PathBuf, JFile), StoreError> {
    for p in fs.list(jdir).map_err(|e| io(jdir, e))? {
        if p.file_name().is_some_and(|n| n == SPARE_NAME) || p.extension().is_some_and(|x| x == DROPPING_EXT)
        {
            fs.remove(&p).map_err(|e| io(&p, e))?;
        }
    }
    let seg = segment_path(jdir, next_seq);
    let file = fs.create(&seg).map_err(|e| io(&seg, e))?;
    sync_dir(fs, jdir)?;
    Ok((seg, file))
}

/// Writes the records replayed so far into sled, the last journal record they reach with them.
/// Not atomic as a whole, like a checkpoint: stopped part-way, the next start replays them again
/// from the record sled says it holds.
pub(super) fn write_replayed(sled: &SledStore, overlay: &Overlay) -> Result<(), StoreError> {
    if let Some(m) = overlay.freeze() {
        sled.write_table(m.rows(), m.last_seq(), CHECKPOINT_CHUNK, || {})?;
        overlay.release_frozen();
    }
    Ok(())
}

/// A segment must follow on from the one before it, whose last record is one before its name
/// (the first segment: from what storage holds), and hold no record before its name: a
/// segment gone missing would otherwise drop acknowledged writes without a word.
pub(super) fn check_chain(
    path: &Path,
    before: Option<(&PathBuf, Option<u64>)>,
    applied: u64,
    first: Option<u64>,
) -> Result<(), StoreError> {
    let refuse = |what: String| {
        StoreError::Corrupt(format!(
            "journal {}: {what}; refusing to start rather than drop acknowledged writes",
            path.display()
        ))
    };
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| refuse("its name is not a record number".into()))?;
    match before {
        None if name > applied.saturating_add(1) => {
            return Err(refuse(format!(
                "it starts at record {name}, but storage holds records up to {applied} only: a segment is missing"
            )))
        }
        Some((prev, ended)) if ended.map(|l| l.saturating_add(1)) != Some(name) => {
            let ended = ended.map_or("no record".to_string(), |l| format!("record {l}"));
            return Err(refuse(format!(
                "it starts at record {name}, but {} ends at {ended}: a segment is missing",
                prev.display()
            )));
        }
        _ => {}
    }
    match first {
        Some(f) if f < name => Err(refuse(format!("it holds record {f}, before record {name} of its name"))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_must_chain_on_from_storage_and_from_each_other() {
        let a = PathBuf::from("j/00000000000000000101.wal");
        let b = PathBuf::from("j/00000000000000000201.wal");
        // The first follows on from what storage holds (records up to 100, or further).
        assert!(check_chain(&a, None, 100, Some(101)).is_ok());
        assert!(check_chain(&a, None, 150, Some(120)).is_ok());
        let e = check_chain(&a, None, 99, Some(101)).unwrap_err().to_string();
        assert!(e.contains("101.wal") && e.contains("missing"), "{e}");
        // The next starts one past the previous one's last record; refused writes may leave a
        // gap before its own first record.
        assert!(check_chain(&b, Some((&a, Some(200))), 0, Some(201)).is_ok());
        assert!(check_chain(&b, Some((&a, Some(200))), 0, Some(205)).is_ok());
        assert!(check_chain(&b, Some((&a, None)), 0, None).is_err());
        let e = check_chain(&b, Some((&a, Some(150))), 0, Some(201)).unwrap_err().to_string();
        assert!(e.contains("201.wal") && e.contains("101.wal") && e.contains("record 150"), "{e}");
        // No record before its name, and a name that is a record number.
        assert!(check_chain(&b, Some((&a, Some(200))), 0, Some(199)).is_err());
        assert!(check_chain(Path::new("j/x.wal"), None, 0, None).is_err());
    }
}
