//! Throughput of failed authentications as distinct invalid tokens pile up (docs/hostile-input.md):
//! a pfm server in this process on 127.0.0.1:0, client threads on keep-alive connections each
//! sending never-repeated invalid tokens. After `total` of them it compares the rate of slices of
//! new tokens on that server with slices on fresh servers (measured in alternation, medians), and
//! fails when the former is below 0.8x. Run through scripts/bench/keys_bench.sh.
//! Usage: keys_bench [total_requests] [slice] [threads] [rounds]

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

/// A server with empty tables in this process.
fn server() -> (pfm::Running, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = pfm::config::Config::for_dir(dir.path());
    cfg.jwt_secret = Some("keys-bench-secret-keys-bench-secret".into());
    // The limiter is not what is measured: failed auth counts against the IP budget.
    cfg.max_requests = u64::MAX / 2;
    (pfm::start(cfg, Arc::new(pfm::clock::SystemClock)).expect("server starts"), dir)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let total = arg(1, 500_000);
    let slice = arg(2, 20_000);
    let threads = arg(3, 4);
    let rounds = arg(4, 5);
    let per = slice / threads;
    let (full, _dir) = server();
    let first = rate(full.addr, threads, 0, per);
    let mut sent = per;
    let fill = total.saturating_sub(slice) / threads;
    let fill_start = Instant::now();
    rate(full.addr, threads, sent, fill);
    sent += fill;
    let fill_secs = fill_start.elapsed().as_secs_f64();
    // The machine's load drifts, so "start" and "after" are measured in alternation: a slice on a
    // fresh server (empty tables, the start condition) then a slice of new keys on the full one.
    let (mut fresh_rates, mut full_rates) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (fresh, _d) = server();
        fresh_rates.push(rate(fresh.addr, threads, 0, per));
        fresh.stop();
        full_rates.push(rate(full.addr, threads, sent, per));
        sent += per;
    }
    let (start, after) = (median(fresh_rates.clone()), median(full_rates.clone()));
    let b = full.app.auth_backoff.table();
    println!("distinct invalid tokens sent to one server: {}", sent * threads);
    println!(
        "its very first slice: {first:.0} req/s; filling: {:.0} req/s",
        (fill * threads) as f64 / fill_secs
    );
    println!("fresh-server slices (req/s): {:?}", fresh_rates.iter().map(|r| r.round()).collect::<Vec<_>>());
    println!("full-server slices  (req/s): {:?}", full_rates.iter().map(|r| r.round()).collect::<Vec<_>>());
    println!(
        "median start {start:.0} req/s, median after {after:.0} req/s, ratio {:.2}; backoff keys held {} of {}",
        after / start,
        b.len(),
        b.capacity()
    );
    full.stop();
    if after < 0.8 * start {
        eprintln!("FAIL: throughput after the distinct keys fell below 0.8x of its start");
        std::process::exit(1);
    }
}
