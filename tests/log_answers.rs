//! Whole-log answers whose logs change under them (src/api/logs.rs): a log that comes back
//! shorter than the answer's state says (its account was deleted since the snapshot) runs the
//! request once more, on the state after it; a log that keeps coming back short is a 500. Over
//! real HTTP, on the embedded engine with its log reads cut short on demand.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::proc;
use common::store::HookedServer;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

/// Every log event of this test process, as `field=value` text: the servers run in-process.
fn captured() -> &'static std::sync::Mutex<Vec<String>> {
    static LINES: std::sync::OnceLock<std::sync::Mutex<Vec<String>>> = std::sync::OnceLock::new();
    LINES.get_or_init(|| {
        struct Capture;
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={:?} ", f.name(), v));
            }
            fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
                self.0.push_str(&format!("{}={} ", f.name(), v));
            }
        }
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
            fn on_event(&self, e: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
                let mut f = Fields(String::new());
                e.record(&mut f);
                captured().lock().unwrap().push(f.0);
            }
        }
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Capture));
        std::sync::Mutex::new(Vec::new())
    })
}

#[test]
fn a_log_cut_short_under_its_answer_runs_the_request_again_then_fails_cleanly() {
    for stream_min_records in [100_000, 2] {
        // The next `short` log reads miss their last record.
        let short = Arc::new(AtomicUsize::new(0));
        let cut = short.clone();
        let srv = HookedServer::start(
            "cut",
            |c| c.stream_min_records = stream_min_records,
            |store| {
                store.read_log = Box::new(move |recs| {
                    if cut.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                        recs.pop();
                    }
                })
            },
        );
        let (addr, tok) = (srv.addr, srv.token.clone());
        let send = |method: &str, path: &str, body: &str| {
            proc::send(addr, method, path, Some(&tok), &[], body).unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        let main = send("POST", "/register", r#"{"user_id":"cut","initial_balance":0}"#).ok().s("uuid");
        for amount in ["1", "2", "3"] {
            send("POST", "/deposit", &format!(r#"{{"uuid":"{main}","amount":"{amount}","channel":"c"}}"#))
                .ok();
        }
        let txs = format!("/get_transactions?uuid={main}");
        let whole = send("GET", &txs, "");
        assert_eq!(whole.ok().json["transaction_count"], json!(3));
        let streamed = stream_min_records == 2;
        assert_eq!(whole.header("transfer-encoding") == Some("chunked"), streamed);
        // Cut once: the request runs again and answers the whole log.
        short.store(1, Ordering::SeqCst);
        let again = send("GET", &txs, "");
        assert_eq!((again.status, again.text.len()), (200, whole.text.len()), "{}", again.text);
        assert_eq!(again.json["transactions"], whole.json["transactions"]);
        let tree = send("GET", "/get_minimal_tree", "");
        short.store(1, Ordering::SeqCst);
        let tree_again = send("GET", "/get_minimal_tree", "");
        assert_eq!(tree_again.ok().json["minimal_tree"], tree.ok().json["minimal_tree"]);
        // Cut every time: an internal error, not a wrong answer, logged with its request id.
        captured();
        short.store(100, Ordering::SeqCst);
        let rid = format!("cut-{stream_min_records}");
        proc::send(addr, "GET", &txs, Some(&tok), &[("X-Request-Id", &rid)], "")
            .unwrap()
            .fails(500, "Transaction retrieval failed: internal error");
        let logged = captured().lock().unwrap().clone();
        assert!(
            logged.iter().any(|l| l.contains("handler failed") && l.contains(&format!("request_id={rid} "))),
            "{logged:?}"
        );
        short.store(0, Ordering::SeqCst);
        assert_eq!(send("GET", &txs, "").text.len(), whole.text.len());
        drop(srv);
    }
}
