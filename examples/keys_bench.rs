//! Throughput of failed authentications as distinct invalid tokens pile up (issue 9, item 1):
//! a pfm server in this process on 127.0.0.1:0, client threads on keep-alive connections each
//! sending never-repeated invalid tokens. Prints the rate of the first and the last slice and
//! fails when the last is below 0.8x the first. Run through scripts/keys_bench.sh.
//! Usage: keys_bench [total_requests] [slice] [threads]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Instant;

fn arg(i: usize, default: usize) -> usize {
    std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

/// Sends `n` requests with tokens `t{thread}-{first + k}`; returns the elapsed seconds.
fn burst(addr: SocketAddr, thread: usize, first: usize, n: usize) -> f64 {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_nodelay(true).ok();
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    for k in first..first + n {
        let req = format!(
            "GET /get_balance HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer eyJhbGciOiJIUzI1NiJ9.bad.t{thread}-{k}\r\n\r\n"
        );
        c.write_all(req.as_bytes()).expect("write");
        // One response per request; every 401 here is small and ends with the JSON's last brace.
        let mut got = 0;
        loop {
            let n = c.read(&mut buf[got..]).expect("read");
            assert!(n > 0, "server closed the connection");
            got += n;
            if buf[..got].ends_with(b"}") {
                break;
            }
        }
        assert!(buf.starts_with(b"HTTP/1.1 401"), "{}", String::from_utf8_lossy(&buf[..got]));
    }
    start.elapsed().as_secs_f64()
}

/// Requests per second of `threads` parallel bursts of `per_thread` requests each.
fn rate(addr: SocketAddr, threads: usize, first: usize, per_thread: usize) -> f64 {
    let start = Instant::now();
    let hs: Vec<_> =
        (0..threads).map(|t| std::thread::spawn(move || burst(addr, t, first, per_thread))).collect();
    for h in hs {
        h.join().expect("client thread");
    }
    (threads * per_thread) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let total = arg(1, 500_000);
    let slice = arg(2, 40_000);
    let threads = arg(3, 4);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = pfm::config::Config::for_dir(dir.path());
    cfg.jwt_secret = Some("keys-bench-secret-keys-bench-secret".into());
    // The limiter is not what is measured: failed auth counts against the IP budget.
    cfg.max_requests = u64::MAX / 2;
    let run = pfm::start(cfg, Arc::new(pfm::clock::SystemClock)).expect("server starts");
    let addr = run.addr;
    let per = slice / threads;
    let first = rate(addr, threads, 0, per);
    let mut sent = per;
    let fill = (total.saturating_sub(2 * slice)) / threads;
    let fill_start = Instant::now();
    rate(addr, threads, sent, fill);
    sent += fill;
    let fill_secs = fill_start.elapsed().as_secs_f64();
    let last = rate(addr, threads, sent, per);
    sent += per;
    let tables = &run.app;
    println!(
        "distinct invalid tokens: {}; first slice {:.0} req/s, last slice {:.0} req/s, ratio {:.2} \
         (fill {:.1} s); backoff keys held {} of capacity {}",
        sent * threads,
        first,
        last,
        last / first,
        fill_secs,
        tables.auth_backoff.table().len(),
        tables.auth_backoff.table().capacity()
    );
    run.stop();
    if last < 0.8 * first {
        eprintln!("FAIL: throughput fell below 0.8x of its start");
        std::process::exit(1);
    }
}
