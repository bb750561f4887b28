//! Crash safety: under concurrent load, `kill -9` the gateway; after a
//! restart every call whose response the client received is in the store.
//! It runs hone with two HTTP threads (the work-stealing pool); the other
//! tests use the default single event-loop thread.

use crate::support::{chat, config, FakeUpstream, Hone};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_delivered_call() {
    let upstream = FakeUpstream::start().await;
    let mut hone = Hone::start(&format!("[gateway]\nthreads = 2\n{}", config(&upstream)));
    let delivered = Arc::new(Mutex::new(HashSet::<String>::new()));
    let url = hone.url("/v1/chat/completions");
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut workers = Vec::new();
    for worker in 0..16 {
        let (url, delivered) = (url.clone(), delivered.clone());
        workers.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            let mut i = 0;
            while Instant::now() < deadline {
                i += 1;
                let stream = i % 4 == 0;
                let mut body = chat("assistant", &format!("worker {worker} call {i}"));
                body["stream"] = stream.into();
                let Ok(response) = client.post(&url).json(&body).send().await else {
                    continue;
                };
                if response.status() != 200 {
                    continue;
                }
                let call = response.headers()["x-hone-call"].to_str().unwrap().to_owned();
                // A response counts as delivered once its body is complete
                // (for a stream: once `[DONE]` arrived).
                match response.text().await {
                    Ok(text) if !stream || text.ends_with("data: [DONE]\n\n") => {
                        delivered.lock().unwrap().insert(call);
                    }
                    _ => {}
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    hone.kill9();
    for worker in workers {
        worker.await.unwrap();
    }
    let delivered = delivered.lock().unwrap().clone();
    assert!(
        delivered.len() > 50,
        "too little load to mean anything: {}",
        delivered.len()
    );

    hone.restart();
    hone.wait_caught_up();
    let conn = rusqlite::Connection::open(hone.db_path()).unwrap();
    let mut stmt = conn.prepare("SELECT id FROM calls").unwrap();
    let stored: HashSet<String> = stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    let missing: Vec<_> = delivered.difference(&stored).collect();
    assert!(
        missing.is_empty(),
        "{} of {} delivered calls are missing after kill -9",
        missing.len(),
        delivered.len()
    );
    eprintln!(
        "kill -9: {} delivered calls, all {} in the store",
        delivered.len(),
        stored.len()
    );
}
