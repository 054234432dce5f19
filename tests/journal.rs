//! The journal on the real binary: after kill -9, a torn last record is dropped and everything
//! acknowledged is back; a flipped byte inside an acknowledged record refuses to start with a
//! message naming the file and offset.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::proc::{self, request, Proc};
use serde_json::{json, Value};

const SECRET: &str = "journal-test-secret-journal-test-secret";

fn spawn(dir: &Path) -> Result<Proc, String> {
    proc::try_spawn(dir, &["--jwt-secret", SECRET, "--token-endpoint-enabled"], &[])
        .map_err(|e| e.to_string())
}

fn token(addr: SocketAddr) -> String {
    token_for(addr, "j1")
}

/// A token for `user`.
fn token_for(addr: SocketAddr, user: &str) -> String {
    let body = json!({"user_id": user, "role": "user", "exp": 4_000_000_000u64});
    let (st, v) = request(addr, "POST", "/generate_access_token", None, body);
    assert_eq!(st, 200, "{v}");
    v["token"].as_str().expect("token").to_string()
}

/// Registers a user, deposits `n` times with ids T0..; returns (token, main uuid).
fn write_some(addr: SocketAddr, n: usize) -> (String, String) {
    let tok = token(addr);
    let (st, v) =
        request(addr, "POST", "/register", Some(&tok), json!({"user_id": "j1", "initial_balance": 1}));
    assert_eq!(st, 200, "{v}");
    let main = v["uuid"].as_str().unwrap().to_string();
    for i in 0..n {
        let body = json!({"uuid": main, "amount": 2, "channel": "c", "transaction_number": format!("T{i}")});
        assert_eq!(request(addr, "POST", "/deposit", Some(&tok), body).0, 200);
    }
    (tok, main)
}

/// `n` deposits of 2 into `main` with ids T0.., each record about 400 bytes (a long channel),
/// so that a few hundred fill several small segments.
fn deposit_long_records(addr: SocketAddr, tok: &str, main: &str, n: usize) {
    for i in 0..n {
        let body = json!({"uuid": main, "amount": 2, "channel": "c".repeat(256), "transaction_number": format!("T{i}")});
        assert_eq!(request(addr, "POST", "/deposit", Some(tok), body).0, 200);
    }
}

/// A copy of the data directory `data` at `to` (`cp -a`), to damage without touching `data`.
fn copy_data(data: &Path, to: &Path) {
    let st = Command::new("cp").arg("-a").arg(data).arg(to).status().unwrap();
    assert!(st.success(), "cp -a: {st}");
}

/// The journal's files named `*.<ext>`, in name order.
fn segments(dir: &Path) -> Vec<PathBuf> {
    journal_files(dir, "wal")
}

/// Segments of 64 KB, so a few hundred writes fill several.
const SMALL_SEGMENT: u64 = 65536;

/// The binary on `data` with 64 KB segments and a checkpoint every `checkpoint_ms`.
fn spawn_small_segments(data: &Path, checkpoint_ms: &str) -> Result<Proc, String> {
    let seg = SMALL_SEGMENT.to_string();
    let args = [
        "--jwt-secret",
        SECRET,
        "--token-endpoint-enabled",
        "--journal-segment-bytes",
        &seg,
        "--checkpoint-interval-ms",
        checkpoint_ms,
    ];
    proc::try_spawn(data, &args, &[]).map_err(|e| format!("{e:?}"))
}

/// The last non-empty journal segment after a kill -9.
fn live_segment(dir: &Path) -> PathBuf {
    segments(dir)
        .into_iter()
        .rev()
        .find(|p| std::fs::metadata(p).unwrap().len() > 0)
        .expect("a written segment")
}

#[test]
fn a_torn_tail_is_dropped_and_every_acknowledged_write_survives() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path()).unwrap();
    let addr = p.addr;
    let (tok, main) = write_some(addr, 20);
    p.kill();
    // Simulate an append cut short: the start of one more record (its header says more bytes
    // follow than the file holds).
    let seg = live_segment(dir.path());
    let bytes = std::fs::read(&seg).unwrap();
    let mut torn = bytes[bytes.len() - 60..].to_vec();
    torn.truncate(30);
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    // The header of the first record, after its batch's 25-byte marker frame.
    f.write_all(&bytes[25..49]).unwrap();
    f.write_all(&torn).unwrap();
    drop(f);
    let mut p = spawn(dir.path()).expect("starts after a torn tail");
    let addr = p.addr;
    let (st, v) = request(addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!((st, v["balance"].to_string()), (200, "41".to_string()), "{v}");
    let (_, v) = request(addr, "GET", &format!("/get_transactions?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!(v["transaction_count"], json!(20));
    p.kill();
}

#[test]
fn a_flipped_byte_in_an_acknowledged_record_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path()).unwrap();
    let addr = p.addr;
    write_some(addr, 10);
    p.kill();
    let seg = live_segment(dir.path());
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    std::fs::write(&seg, &bytes).unwrap();
    let err = spawn(dir.path()).expect_err("refuses to start");
    let name = seg.file_name().unwrap().to_string_lossy().to_string();
    assert!(err.contains(&name) && err.contains("offset"), "{err}");
    assert!(!err.contains("exited with exit status: 0"), "{err}");
}

/// A real full disk (a small tmpfs; needs root, as CI runs): the write that meets it gets a JSON
/// 5xx and leaves nothing behind, reads go on, and writes resume once space is back.
#[test]
fn a_full_disk_fails_the_write_cleanly_and_reads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24m", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let data = mnt.join("data");
    let mut p = spawn(&data).unwrap();
    let addr = p.addr;
    let (tok, main) = write_some(addr, 5);
    // Fill the disk.
    let filler = mnt.join("filler");
    {
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![7u8; 1 << 16];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    // Appends fill the journal's last page first; keep writing until one needs a new page.
    let deposit = |i: usize| {
        let body = json!({"uuid": main, "amount": 2, "channel": "c", "transaction_number": format!("F{i}")});
        request(addr, "POST", "/deposit", Some(&tok), body)
    };
    let mut acked = 5;
    let failed_at = (0..2_000)
        .find(|i| {
            let (st, v) = deposit(*i);
            if st == 200 {
                acked += 1;
                return false;
            }
            assert!(st >= 500, "{st} {v}");
            assert_eq!(v["success"], json!(false), "{v}");
            assert!(v["error"].is_string(), "{v}");
            true
        })
        .expect("a write failed on the full disk");
    // Reads go on, and show nothing of the failed write.
    let balance = (1 + 2 * acked).to_string();
    let (st, v) = request(addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!((st, v["balance"].to_string()), (200, balance), "{v}");
    // Space back: storage recovers by itself (sled is reopened and caught up with the journal)
    // and the same deposit goes through within seconds.
    std::fs::remove_file(&filler).unwrap();
    let t0 = std::time::Instant::now();
    loop {
        let (st, v) = deposit(failed_at);
        if st == 200 {
            break;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(30), "writes did not resume: {st} {v}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    acked += 1;
    p.kill();
    let mut p = spawn(&data).expect("restarts");
    let addr = p.addr;
    let (_, v) = request(addr, "GET", &format!("/get_transactions?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!(v["transaction_count"], json!(acked), "{v}");
    let (_, v) = request(addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!(v["balance"].to_string(), (1 + 2 * acked).to_string());
    p.kill();
}

/// (offset, length) of each frame of a journal segment, up to where its zeros begin.
fn frames(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let mut off = 0;
    while off + 24 <= bytes.len() && bytes[off..off + 4] != [0, 0, 0, 0] {
        let len = u32::from_le_bytes(bytes[off + 4..off + 8].try_into().unwrap()) as usize;
        v.push((off, 24 + len));
        off += 24 + len;
    }
    v
}

/// docs/storage.md: under sustained writes segments are zero-filled ahead of use. After a
/// kill -9, the unused zeros are not damage; a torn last record in them (its first sectors landed)
/// is dropped and everything acknowledged is back; a flipped byte in the last acknowledged
/// record still refuses to start, naming the file and offset.
#[test]
fn zero_filled_segments_keep_acknowledged_writes_and_tell_torn_from_damaged() {
    const SEG: u64 = SMALL_SEGMENT;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    // No checkpoint deletes a segment during the test.
    let spawn = |data: &Path| spawn_small_segments(data, "3600000");
    let mut p = spawn(&data).unwrap();
    let (tok, main) = write_some(p.addr, 0);
    // Records of about 800 bytes, so that each spans a sector boundary.
    let n = 300;
    for i in 0..n {
        let body = json!({"uuid": main, "amount": 2, "channel": "c".repeat(256),
            "transaction_number": format!("T{i}-{}", "n".repeat(100))});
        assert_eq!(request(p.addr, "POST", "/deposit", Some(&tok), body).0, 200);
    }
    p.kill();
    let segs = segments(&data);
    let filled: Vec<&PathBuf> = segs.iter().filter(|s| std::fs::metadata(s).unwrap().len() == SEG).collect();
    assert!(filled.len() >= 2, "no zero-filled segments were used: {segs:?}");
    let seg = segs.last().unwrap().clone();
    let bytes = std::fs::read(&seg).unwrap();
    assert_eq!(bytes.len() as u64, SEG, "the last segment is a zero-filled one");
    let fr = frames(&bytes);
    let &(last_off, last_len) = fr.last().expect("records in the last segment");
    let written = last_off + last_len;
    assert!(bytes[written..].iter().all(|b| *b == 0), "zeros after the records");

    // A flipped byte in the last acknowledged record, on a copy.
    let copy = dir.path().join("flip");
    copy_data(&data, &copy);
    let flipped = copy.join("journal").join(seg.file_name().unwrap());
    let mut b = bytes.clone();
    b[last_off + last_len / 2] ^= 0x08;
    std::fs::write(&flipped, &b).unwrap();
    let err = match spawn(&copy) {
        Ok(_) => panic!("started with a damaged acknowledged record"),
        Err(e) => e,
    };
    let name = seg.file_name().unwrap().to_string_lossy().to_string();
    assert!(err.contains(&name) && err.contains(&format!("offset {last_off}")), "{err}");

    // A torn append: one more record (the last one again, with the next sequence number), of
    // which only the sectors before a boundary inside it landed.
    let mut next = bytes[last_off..last_off + last_len].to_vec();
    let seq = u64::from_le_bytes(next[8..16].try_into().unwrap()) + 1;
    next[8..16].copy_from_slice(&seq.to_le_bytes());
    let hcrc = crc32fast::hash(&next[0..16]);
    next[16..20].copy_from_slice(&hcrc.to_le_bytes());
    let boundary = (written + 24 + 1).next_multiple_of(512);
    assert!(boundary < written + next.len() && written + next.len() <= bytes.len(), "record sizes changed");
    let mut b = bytes.clone();
    b[written..boundary].copy_from_slice(&next[..boundary - written]);
    std::fs::write(&seg, &b).unwrap();
    let mut p = spawn(&data).expect("starts after a torn tail");
    let addr = p.addr;
    let (st, v) = request(addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!((st, v["balance"].to_string()), (200, (1 + 2 * n).to_string()), "{v}");
    let (_, v) = request(addr, "GET", &format!("/get_transactions?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!(v["transaction_count"], json!(n));
    // And it goes on taking writes.
    let body = json!({"uuid": main, "amount": 2, "channel": "c", "transaction_number": "after"});
    assert_eq!(request(addr, "POST", "/deposit", Some(&tok), body).0, 200);
    p.kill();
}

fn journal_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

/// Checkpoints delete the segments they cover (renamed, cut down, removed, while writes go on);
/// a deletion a crash cut short leaves a file start-up deletes, and nothing is lost.
#[test]
fn checkpoints_delete_covered_segments_and_start_up_finishes_a_deletion_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let mut p = spawn_small_segments(&data, "50").unwrap();
    let (tok, main) = write_some(p.addr, 0);
    let n = 400;
    deposit_long_records(p.addr, &tok, &main, n);
    // About 250 KB of records went through 64 KB segments; the checkpoints delete all but the
    // last one or two.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (wal, dropping) = (journal_files(&data, "wal"), journal_files(&data, "dropping"));
        if wal.len() <= 2 && dropping.is_empty() {
            assert!(!wal[0].ends_with("00000000000000000001.wal"), "no segment was deleted: {wal:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "covered segments stay: {wal:?} {dropping:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    p.kill();
    // A deletion cut short: a covered segment renamed and partly cut down.
    let left = data.join("journal").join("00000000000000000002.dropping");
    std::fs::write(&left, vec![0xA5u8; 12345]).unwrap();
    let mut p = spawn_small_segments(&data, "50").expect("starts with a deletion cut short");
    assert!(!left.exists(), "start-up deletes what a deletion left");
    let (st, v) = request(p.addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!((st, v["balance"].to_string()), (200, (1 + 2 * n).to_string()), "{v}");
    let (_, v) = request(p.addr, "GET", &format!("/get_transactions?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!(v["transaction_count"], json!(n));
    p.kill();
}

/// A segment gone from the middle, or from the start, of the journal (deleted by hand, lost
/// with a disk) refuses to start, naming the segment that follows the gap: replay used to
/// skip over it and drop every acknowledged write it held.
#[test]
fn a_missing_segment_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    // No checkpoint deletes a segment during the test.
    let mut p = spawn_small_segments(&data, "3600000").unwrap();
    let (tok, main) = write_some(p.addr, 0);
    let n = 300;
    deposit_long_records(p.addr, &tok, &main, n);
    p.kill();
    let segs = segments(&data);
    assert!(segs.len() >= 3, "too few segments to take one from the middle: {segs:?}");
    let copy_without = |name: &str, gone: &Path| {
        let copy = dir.path().join(name);
        copy_data(&data, &copy);
        std::fs::remove_file(copy.join("journal").join(gone.file_name().unwrap())).unwrap();
        copy
    };
    for (name, gone, next) in [("middle", &segs[1], &segs[2]), ("first", &segs[0], &segs[1])] {
        let copy = copy_without(name, gone);
        let err = match spawn_small_segments(&copy, "3600000") {
            Ok(_) => panic!("started without segment {gone:?} ({name})"),
            Err(e) => e,
        };
        let next = next.file_name().unwrap().to_string_lossy().to_string();
        assert!(err.contains(&next) && err.contains("missing"), "{name}: {err}");
    }
    // Untouched, the segments chain, and everything is back.
    let mut p = spawn_small_segments(&data, "3600000").expect("starts with every segment");
    let (st, v) = request(p.addr, "GET", &format!("/get_balance?uuid={main}"), Some(&tok), Value::Null);
    assert_eq!((st, v["balance"].to_string()), (200, (1 + 2 * n).to_string()), "{v}");
    p.kill();
}

/// Replay writes the journal into sled through a memtable, as checkpoints do (one sled batch per
/// record made a restart after heavy writes slow). A deletion in the journal lists the rows it
/// removes through that memtable, so rows written earlier in the same replay go too. After a
/// kill -9 with no checkpoint taken, every answer is as acknowledged, and the deleted accounts'
/// log rows are gone from storage.
#[test]
fn replay_restores_writes_and_deletions_made_since_the_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut p = spawn_small_segments(&data, "600000").unwrap();
    let addr = p.addr;
    let (tok, main) = write_some(addr, 3);
    let post = |tok: &str, path: &str, body: Value| {
        let (st, v) = request(addr, "POST", path, Some(tok), body);
        assert_eq!(st, 200, "{path}: {v}");
        v
    };
    let child = |parent: &str, name: &str| {
        let v =
            post(&tok, "/add_sub_account", json!({"parent_uuid": parent, "name": name, "allocation": 0.5}));
        v["uuid"].as_str().unwrap().to_string()
    };
    let needs = child(&main, "Needs");
    let rent = child(&needs, "Rent");
    let fun = child(&main, "Fun");
    let deposit = |tok: &str, uuid: &str| {
        post(tok, "/deposit", json!({"uuid": uuid, "amount": 3, "channel": "c".repeat(200)}))
    };
    for _ in 0..40 {
        deposit(&tok, &main);
    }
    let (st, v) = request(addr, "DELETE", &format!("/delete?uuid={needs}"), Some(&tok), Value::Null);
    assert_eq!(st, 200, "{v}");
    for _ in 0..10 {
        deposit(&tok, &main);
    }
    // A second user, written and deleted whole.
    let body = json!({"user_id": "j2", "role": "user", "exp": 4_000_000_000u64});
    let tok2 =
        request(addr, "POST", "/generate_access_token", None, body).1["token"].as_str().unwrap().to_string();
    let main2 = post(&tok2, "/register", json!({"user_id": "j2"}))["uuid"].as_str().unwrap().to_string();
    for _ in 0..5 {
        deposit(&tok2, &main2);
    }
    let (st, v) = request(addr, "DELETE", &format!("/delete?uuid={main2}"), Some(&tok2), Value::Null);
    assert_eq!(st, 200, "{v}");
    let read = |addr: SocketAddr, path: &str| {
        let r = proc::send(addr, "GET", path, Some(&tok), &[], "").unwrap();
        (r.status, r.text.split(",\"start_time\"").next().unwrap_or("").to_string())
    };
    let paths = [
        "/get_minimal_tree".to_string(),
        format!("/get_transactions?uuid={main}"),
        format!("/get_transactions?uuid={fun}"),
    ];
    let before: Vec<_> = paths.iter().map(|p| read(addr, p)).collect();
    p.kill();
    // No checkpoint ran: the journal from its first record holds it all, over several segments.
    let segs = segments(&data);
    assert!(segs.len() >= 2 && segs[0].ends_with("00000000000000000001.wal"), "{segs:?}");
    let copy = dir.path().join("copy");
    copy_data(&data, &copy);
    // The binary, replaying: the same answers.
    let p = spawn_small_segments(&data, "600000").unwrap();
    let after: Vec<_> = paths.iter().map(|path| read(p.addr, path)).collect();
    assert_eq!(after, before);
    let (st, _) = request(p.addr, "GET", &format!("/get_balance?uuid={main2}"), Some(&tok2), Value::Null);
    assert_eq!(st, 404);
    drop(p);
    // Storage, replaying: no log row of a deleted account is left.
    let store = pfm::store::journal::JournalStore::open(&copy).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    use pfm::store::Store;
    let no = rt.block_on(store.load_user("j1")).unwrap().unwrap().0.user_no;
    let rows = |uuid: &str| {
        let id = pfm::domain::tree::parse_uuid(uuid).unwrap();
        rt.block_on(store.read_log(no, id, 0, 10_000)).unwrap().len()
    };
    assert_eq!((rows(&needs), rows(&rent)), (0, 0));
    assert!(rows(&fun) >= 50, "{}", rows(&fun));
    assert!(rt.block_on(store.load_user("j2")).unwrap().is_none());
}

/// Deletions (whose batches, and those after them, the applier thread stages) among several
/// users' concurrent deposits (which the journal thread stages itself): what the server
/// answered before a kill -9 is what replay gives back, and every cent is in the main account
/// once every sub-account is deleted.
#[test]
fn deletions_among_concurrent_deposits_are_staged_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut p = spawn_small_segments(&data, "200").unwrap();
    let addr = p.addr;
    let users: Vec<(String, String)> = (0..3)
        .map(|i| {
            let user = format!("d{i}");
            let tok = token_for(addr, &user);
            let (st, v) = request(addr, "POST", "/register", Some(&tok), json!({"user_id": user}));
            assert_eq!(st, 200, "{v}");
            (tok, v["uuid"].as_str().unwrap().to_string())
        })
        .collect();
    let post = |tok: &str, path: &str, body: Value| {
        let (st, v) = request(addr, "POST", path, Some(tok), body);
        assert_eq!(st, 200, "{path}: {v}");
        v
    };
    std::thread::scope(|s| {
        for (tok, main) in &users {
            for _ in 0..2 {
                s.spawn(move || {
                    for _ in 0..150 {
                        post(tok, "/deposit", json!({"uuid": main, "amount": 1, "channel": "c"}));
                    }
                });
            }
            s.spawn(move || {
                for i in 0..15 {
                    let body = json!({"parent_uuid": main, "name": format!("S{i}"), "allocation": 0.5});
                    let sub = post(tok, "/add_sub_account", body)["uuid"].as_str().unwrap().to_string();
                    for _ in 0..3 {
                        post(tok, "/deposit", json!({"uuid": sub, "amount": 2, "channel": "c"}));
                    }
                    let path = format!("/delete?uuid={sub}");
                    let (st, v) = request(addr, "DELETE", &path, Some(tok), Value::Null);
                    assert_eq!(st, 200, "{v}");
                }
            });
        }
    });
    let read = |addr: SocketAddr| {
        let mut out = Vec::new();
        for (tok, main) in &users {
            for path in ["/get_minimal_tree".to_string(), format!("/get_transactions?uuid={main}&limit=1000")]
            {
                let r = proc::send(addr, "GET", &path, Some(tok), &[], "").unwrap();
                assert_eq!(r.status, 200, "{path}: {}", r.text);
                out.push(r.text.split(",\"start_time\"").next().unwrap_or("").to_string());
            }
        }
        out
    };
    let before = read(addr);
    p.kill();
    let p = spawn_small_segments(&data, "200").unwrap();
    assert_eq!(read(p.addr), before);
    for (tok, main) in &users {
        let (st, v) = request(p.addr, "GET", &format!("/get_balance?uuid={main}"), Some(tok), Value::Null);
        // 2 x 150 deposits of 1, and 15 x 3 of 2 into sub-accounts since deleted into main.
        assert_eq!((st, v["balance"].to_string()), (200, "390".to_string()), "{v}");
    }
}

/// Each thread of process `pid` as (name, nice value), from /proc.
fn thread_niceness(pid: u32) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let (Ok(comm), Ok(stat)) =
            (std::fs::read_to_string(t.join("comm")), std::fs::read_to_string(t.join("stat")))
        else {
            continue; // the thread ended meanwhile
        };
        // Fields after the parenthesised name: state is field 3, nice field 19.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let nice: i64 = rest.split(' ').nth(16).unwrap().parse().unwrap();
        out.push((comm.trim().to_string(), nice));
    }
    out
}

#[test]
fn background_threads_yield_the_cpu_to_requests() {
    let dir = tempfile::tempdir().unwrap();
    let p = spawn(dir.path()).unwrap();
    write_some(p.addr, 3);
    let threads = thread_niceness(p.child.id());
    let nice = |name: &str| threads.iter().find(|(n, _)| n == name).map(|t| t.1);
    // The priority the process was started with (0 unless the test itself runs under `nice`).
    let base = nice("pfm-journal").unwrap_or_else(|| panic!("no journal thread: {threads:?}"));
    // Checkpoints run in bursts of sled work; at the requests' priority they took a core from
    // the async workers and showed as latency spikes. (Nice 10 is absolute: started nicer than
    // that, the thread could not go back up without privilege.)
    if base < 10 {
        assert_eq!(nice("pfm-checkpoint"), Some(10), "{threads:?}");
    }
    for (name, n) in &threads {
        if name.starts_with("tokio-rt-worker") || name == "pfm-applier" {
            assert_eq!(*n, base, "{name} serves requests and keeps the process's priority: {threads:?}");
        }
    }
    assert!(threads.iter().any(|(n, _)| n.starts_with("tokio-rt-worker")), "{threads:?}");
}
