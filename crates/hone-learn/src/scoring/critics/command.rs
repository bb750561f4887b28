//! An external program judges the episode: it gets the episode (and the
//! reference) as JSON on stdin, runs without a shell under a timeout, and
//! scores by printing a number in [0, 1] as its last line of output, or by
//! its exit code (0 passes) when it prints none.

use super::{Critic, CriticFailure, CriticInput, CriticScore};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub struct CommandCritic {
    pub name: String,
    pub argv: Vec<String>,
    pub timeout: Duration,
}

impl Critic for CommandCritic {
    fn name(&self) -> &str {
        &self.name
    }

    fn score(&self, input: CriticInput<'_>) -> Result<CriticScore, CriticFailure> {
        let fail = |what: String| CriticFailure(format!("`{}` ({}): {what}", self.name, self.argv[0]));
        let payload = serde_json::to_vec(&serde_json::json!({
            "episode": input.episode,
            "reference": input.reference,
        }))
        .map_err(|e| fail(e.to_string()))?;
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| fail(format!("cannot start: {e}")))?;
        // Write stdin and read stdout on threads so a program that prints
        // before reading everything cannot deadlock against us.
        let mut stdin = child.stdin.take().ok_or_else(|| fail("no stdin".into()))?;
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&payload);
        });
        let mut stdout = child.stdout.take().ok_or_else(|| fail("no stdout".into()))?;
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out);
            out
        });
        let started = Instant::now();
        let status = loop {
            match child.try_wait().map_err(|e| fail(e.to_string()))? {
                Some(status) => break status,
                None if started.elapsed() > self.timeout => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(fail(format!("timed out after {} ms", self.timeout.as_millis())));
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        let _ = writer.join();
        let out = reader.join().unwrap_or_default();
        let last = out.lines().rev().find(|l| !l.trim().is_empty()).map(str::trim);
        match last.map(str::parse::<f64>) {
            Some(Ok(score)) if (0.0..=1.0).contains(&score) => Ok(CriticScore {
                score,
                per_call: Vec::new(),
                reason: Some(format!("printed {score}")),
            }),
            Some(Ok(score)) => Err(fail(format!("printed {score}, outside [0, 1]"))),
            _ => match status.code() {
                Some(code) => Ok(CriticScore::pass(code == 0, format!("exit code {code}"))),
                None => Err(fail("killed by a signal".into())),
            },
        }
    }
}
