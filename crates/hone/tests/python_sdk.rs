//! The official `openai` Python SDK drives the gateway: a plain call, a
//! streaming call and a tool-calling round trip; the episodes are read back.
//! `scripts/test` installs the SDK; without it this test fails and says so.

use crate::support::{client, config, FakeUpstream, Hone};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_round_trips() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .expect("python3 is needed");
    assert!(
        probe.status.success(),
        "the openai Python SDK is not installed: run `pip install openai` (scripts/test does)"
    );
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_roundtrip.py");
    let base_url = hone.url("/v1");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(script)
            .env("HONE_BASE_URL", base_url)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "SDK script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();

    for (key, calls) in [("plain", 1), ("stream", 1), ("tools", 2)] {
        let id = report[key].as_str().unwrap();
        let episode: Value = client()
            .get(hone.url(&format!("/v1/episodes/{id}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(episode["calls"].as_array().unwrap().len(), calls, "{key}");
        assert!(episode["calls"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["outcome"] == "ok"));
    }
    let tools: Value = client()
        .get(hone.url(&format!("/v1/episodes/{}", report["tools"].as_str().unwrap())))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        tools["calls"][0]["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(tools["calls"][1]["request"]["messages"][2]["role"], "tool");
    assert_eq!(tools["signals"][0]["name"], "resolved");
}
