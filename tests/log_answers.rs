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
        // Cut every time: an internal error, not a wrong answer.
        short.store(100, Ordering::SeqCst);
        send("GET", &txs, "").fails(500, "Transaction retrieval failed: internal error");
        short.store(0, Ordering::SeqCst);
        assert_eq!(send("GET", &txs, "").text.len(), whole.text.len());
        drop(srv);
    }
}
