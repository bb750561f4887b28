//! The TRL trainer (`[agents.NAME.learn.trainer] type = "trl"`): the
//! adapter an `sft`, `dpo` or `grpo` optimiser would train on hone's own
//! trainer is trained by TRL with PEFT instead, in a process of its own started with
//! `accelerate launch`, so it runs wherever the user's accelerate config
//! says (a CPU, a GPU, many GPUs under FSDP or DeepSpeed, many nodes).
//!
//! One home for each rule: the rows are the token sequences hone's own
//! trainer would read (rendered by hone, recorded ids where it has them),
//! written in TRL's pre-tokenised columns; GRPO's rows are hone's own
//! plan of the training (`hone_train::schedule`: each micro-batch's
//! completions with the advantages hone computes, the sampler's logprobs
//! and whether it was off-policy), one row per micro-batch, which TRL's
//! GRPO loss takes in order without generating; the hyperparameters are hone's
//! training config for the optimiser, serialised whole into `job.json` for
//! the script (`python/trl_train.py`, embedded here) to map onto TRL's
//! arguments, the user's `args` over them. The script leaves PEFT's adapter
//! files and hone's step reports (`metrics.jsonl`) in the adapter's
//! `.partial` directory, as hone's trainer does.

use super::training::{step_line, Method};
use crate::error::LearnError;
use hone_config::TrlSpec;
use hone_train::data::{DpoExample, GrpoGroup, SftExample};
use hone_train::policy::Sequence;
use hone_train::schedule::grpo_plan;
use hone_train::{Data, TrainConfig};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The script TRL runs, as shipped with this build.
/// The file in the job's directory that asks its processes to stop.
const STOP_FILE: &str = "stop";
const SCRIPT: &str = include_str!("../../../python/trl_train.py");

/// Lines of the script's stderr kept to say why it failed.
const TAIL: usize = 20;

/// What one TRL run needs besides the data.
pub struct TrlJob<'a> {
    pub method: Method,
    pub spec: &'a TrlSpec,
    pub config: &'a TrainConfig,
    pub base: &'a Path,
    pub parent: Option<&'a Path>,
}

/// Trains into `dir` (the adapter's `.partial` directory): writes the rows,
/// the job and the script there, runs `accelerate launch`, says its steps
/// through `say`, and checks that the adapter's files were left behind.
///
/// A job found in `dir` with the same rows and settings (a cycle resumed
/// after `hone learn` stopped mid-training) resumes from TRL's latest
/// checkpoint there; anything else in `dir` is cleared first. The job
/// stops itself when the process that started it exits and when its time
/// limit runs out (the script watches both); past the limit and a minute's
/// grace, it is killed from here.
pub fn train(
    job: &TrlJob<'_>,
    data: &Data,
    dir: &Path,
    say: &(dyn Fn(String) + Sync),
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<(), LearnError> {
    let rows = rows(data, job.config, job.spec.num_processes)?;
    let mut jsonl = Vec::new();
    for row in &rows {
        serde_json::to_writer(&mut jsonl, row).map_err(LearnError::training("writing a TRL row"))?;
        jsonl.push(b'\n');
    }
    let job_json = json!({
        "method": job.method.name(),
        "base": job.base,
        "parent": job.parent,
        "device": job.spec.device,
        "num_processes": job.spec.num_processes,
        "config": job.config,
        "args": job.spec.args,
    })
    .to_string();
    let resume = same_job(dir, &job_json, &jsonl);
    if !resume {
        let _ = std::fs::remove_dir_all(dir);
    }
    std::fs::create_dir_all(dir).map_err(LearnError::training(format!("creating {}", dir.display())))?;
    let write = |name: &str, bytes: &[u8]| -> Result<PathBuf, LearnError> {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(LearnError::training(format!("writing {}", path.display())))?;
        Ok(path)
    };
    let data_path = write("trl.jsonl", &jsonl)?;
    let job_path = write("job.json", job_json.as_bytes())?;
    let script = write("trl_train.py", SCRIPT.as_bytes())?;
    let accelerate = match &job.spec.accelerate_config {
        Some(path) => path.clone(),
        None => write("accelerate.yaml", single_machine(job.spec).as_bytes())?,
    };
    let limit = Duration::from_secs(job.spec.time_limit_minutes * 60);
    let deadline_ms = hone_types::time::now_ms() + limit.as_millis() as i64;
    let mut command = Command::new(&job.spec.python);
    command
        .args(["-m", "accelerate.commands.launch", "--config_file"])
        .arg(&accelerate)
        .arg("--num_processes")
        .arg(job.spec.num_processes.to_string())
        .arg(&script)
        .arg("--job")
        .arg(&job_path)
        .arg("--data")
        .arg(&data_path)
        .arg("--out")
        .arg(dir)
        .arg("--hone-pid")
        .arg(std::process::id().to_string())
        .arg("--deadline")
        .arg((deadline_ms / 1000).to_string())
        .args(resume.then_some("--resume"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    tracing::info!(python = %job.spec.python, accelerate = %accelerate.display(), rows = rows.len(), resume, "training with TRL");
    let mut child = command.spawn().map_err(LearnError::training(format!(
        "cannot run `{}` (trainer.python: a Python with torch, transformers, peft, trl and accelerate)",
        job.spec.python
    )))?;
    let (lines, from_script) = std::sync::mpsc::channel::<String>();
    if let Some(stderr) = child.stderr.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
    }
    let started = Instant::now();
    let mut tail: Vec<String> = Vec::new();
    let mut killed = false;
    // Asked to stop (the cycle ended): the script's watchdog sees the stop
    // file in its output directory and ends every process; after a grace
    // period the launcher is killed from here.
    let stop_file = dir.join(STOP_FILE);
    let _ = std::fs::remove_file(&stop_file);
    let mut stopping: Option<Instant> = None;
    let mut looked = Instant::now();
    let status = loop {
        let quiet = match from_script.recv_timeout(Duration::from_millis(500)) {
            Ok(line) => {
                if let Some(report) = line.strip_prefix("hone-trl step ") {
                    if let Some(said) = serde_json::from_str(report).ok().as_ref().and_then(step_line) {
                        say(said);
                    }
                } else if let Some(news) = line.strip_prefix("hone-trl ") {
                    say(format!("TRL: {news}"));
                }
                tail.push(line);
                if tail.len() > TAIL {
                    tail.remove(0);
                }
                false
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => true,
            // Output closed: the job is ending.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                break child.wait().map_err(LearnError::training("waiting for TRL"))?;
            }
        };
        // Its output read to the end before its status is taken.
        if quiet {
            if let Some(status) = child.try_wait().map_err(LearnError::training("waiting for TRL"))? {
                break status;
            }
        }
        if stopping.is_none() && looked.elapsed() > Duration::from_secs(2) {
            looked = Instant::now();
            if stop() {
                let _ = std::fs::write(&stop_file, b"the cycle ended\n");
                stopping = Some(Instant::now());
            }
        }
        let overdue = started.elapsed() > limit + Duration::from_secs(60)
            || stopping.is_some_and(|at| at.elapsed() > Duration::from_secs(30));
        if !killed && overdue {
            let _ = child.kill();
            killed = true;
        }
    };
    let _ = std::fs::remove_file(&stop_file);
    if stopping.is_some() && !status.success() {
        let how = match tail.iter().rev().find(|l| l.starts_with("hone-trl stopped")) {
            Some(line) => line.clone(),
            None => "killed after 30 s of grace".to_owned(),
        };
        return Err(LearnError::training("TRL training stopped")(format!(
            "the cycle ended; {how} ({status})"
        )));
    }
    if !status.success() {
        let said = said(&tail);
        let limit_note = if killed || tail.iter().any(|l| l.contains("hone-trl stopped")) {
            format!(" (trainer.time_limit_minutes = {})", job.spec.time_limit_minutes)
        } else {
            String::new()
        };
        return Err(LearnError::training("TRL training failed")(format!(
            "{status}: {said}{limit_note}\n{}",
            tail.join("\n")
        )));
    }
    for file in ["adapter_config.json", "adapter_model.safetensors", "metrics.jsonl"] {
        if !dir.join(file).exists() {
            return Err(LearnError::training("TRL training failed")(format!(
                "it ended without writing {file}"
            )));
        }
    }
    for scratch in ["trl.jsonl", "job.json", "trl_train.py", "accelerate.yaml"] {
        let _ = std::fs::remove_file(dir.join(scratch));
    }
    Ok(())
}

/// Whether `dir` holds a job with these settings and rows that left a
/// checkpoint to resume from.
fn same_job(dir: &Path, job: &str, rows: &[u8]) -> bool {
    let has_checkpoint = std::fs::read_dir(dir.join("checkpoints")).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("checkpoint-"))
    });
    has_checkpoint
        && std::fs::read_to_string(dir.join("job.json")).is_ok_and(|j| j == job)
        && std::fs::read(dir.join("trl.jsonl")).is_ok_and(|r| r == rows)
}

/// The line of the script's output that says why it failed: its last
/// exception (not the launcher's report that a process failed), else its
/// last line.
fn said(tail: &[String]) -> String {
    let exception = |l: &&String| {
        let head = l.split(": ").next().unwrap_or_default();
        !l.starts_with(' ')
            && (head.ends_with("Error") || head.ends_with("Exception") || head == "SystemExit")
            && !head.ends_with("CalledProcessError")
            && !head.ends_with("ChildFailedError")
    };
    tail.iter()
        .rev()
        .find(exception)
        .or_else(|| tail.iter().rev().find(|l| !l.trim().is_empty()))
        .cloned()
        .unwrap_or_default()
}

/// accelerate's settings for one machine of `spec.num_processes`
/// processes on `spec.device` (`distributed_type` quoted: a bare NO is
/// YAML's false).
fn single_machine(spec: &TrlSpec) -> String {
    let distributed = match (spec.device.as_str(), spec.num_processes) {
        (_, 1) => "\"NO\"",
        ("cuda", _) => "MULTI_GPU",
        _ => "MULTI_CPU",
    };
    format!(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: {distributed}\nnum_machines: 1\nnum_processes: {}\nmachine_rank: 0\nmixed_precision: \"no\"\nuse_cpu: {}\n",
        spec.num_processes,
        spec.device == "cpu"
    )
}

/// The rows in TRL's pre-tokenised columns; GRPO's, one per micro-batch
/// of `processes` processes.
fn rows(data: &Data, config: &TrainConfig, processes: usize) -> Result<Vec<Value>, LearnError> {
    match data {
        Data::Sft(examples) => Ok(examples.iter().map(sft_row).collect()),
        Data::Dpo(pairs) => pairs.iter().map(dpo_row).collect(),
        Data::Grpo(groups) => grpo_rows(groups, config, processes),
    }
}

/// hone's GRPO plan as rows: every step's micro-batches (`accumulation` for
/// each of `processes` processes, which take them in turn), each with its
/// step, the step's mean reward and its completions.
fn grpo_rows(groups: &[GrpoGroup], config: &TrainConfig, processes: usize) -> Result<Vec<Value>, LearnError> {
    let planned = TrainConfig {
        accumulation: config.accumulation * processes.max(1),
        ..config.clone()
    };
    let mut rows = Vec::new();
    for (step, planned_step) in grpo_plan(groups, &planned).into_iter().enumerate() {
        for batch in &planned_step.micro_batches {
            let completions = batch
                .keys
                .iter()
                .zip(&batch.advantages)
                .map(|(&(i, j), &advantage)| {
                    let sample = &groups[i].samples[j];
                    let (prompt, completion) = split(&sample.sequence)
                        .ok_or_else(|| refuse(groups[i].line, "a completion holds tokens that are not trained on"))?;
                    Ok(json!({
                        "prompt_ids": prompt,
                        "completion_ids": completion,
                        "behaviour": sample.behaviour,
                        "off_policy": sample.off_policy,
                        "advantage": advantage,
                    }))
                })
                .collect::<Result<Vec<Value>, LearnError>>()?;
            rows.push(json!({"step": step + 1, "reward": planned_step.reward, "completions": completions}));
        }
    }
    Ok(rows)
}

/// A sequence's unscored prompt and its scored completion; `None` when
/// unscored tokens follow scored ones (TRL scores every completion token).
fn split(s: &Sequence) -> Option<(&[u32], &[u32])> {
    let n = s.scored.iter().position(|&x| x).unwrap_or(s.tokens.len());
    s.scored[n..].iter().all(|&x| x).then(|| s.tokens.split_at(n))
}

fn refuse(line: usize, why: &str) -> LearnError {
    LearnError::training(format!("training row on line {line}"))(why.to_owned())
}

/// `input_ids`, and `labels` with -100 where a token is not trained on.
fn sft_row(example: &SftExample) -> Value {
    let s = &example.sequence;
    let labels: Vec<i64> = s
        .tokens
        .iter()
        .zip(&s.scored)
        .map(|(&t, &scored)| if scored { i64::from(t) } else { -100 })
        .collect();
    json!({"input_ids": s.tokens, "labels": labels})
}

/// `prompt_ids` (the unscored prefix the two sequences share), then each
/// side's scored completion; a pair whose completions hold unscored tokens
/// (TRL scores every completion token) is refused, naming its line.
fn dpo_row(pair: &DpoExample) -> Result<Value, LearnError> {
    let unscored = "a completion holds tokens that are not trained on, which TRL cannot leave out";
    let (prompt, chosen) = split(&pair.chosen).ok_or_else(|| refuse(pair.line, unscored))?;
    let (other, rejected) = split(&pair.rejected).ok_or_else(|| refuse(pair.line, unscored))?;
    if prompt != other {
        return Err(refuse(pair.line, "its two sides do not share their prompt"));
    }
    Ok(json!({"prompt_ids": prompt, "chosen_ids": chosen, "rejected_ids": rejected}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_carry_hones_tokens_and_masks_in_trls_columns() {
        let sft = SftExample {
            line: 1,
            sequence: Sequence::prompt_completion(&[1, 2], &[3, 4]),
        };
        assert_eq!(
            sft_row(&sft),
            json!({"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4]})
        );
        let pair = DpoExample {
            line: 7,
            chosen: Sequence::prompt_completion(&[1, 2], &[3]),
            rejected: Sequence::prompt_completion(&[1, 2], &[5, 6]),
        };
        assert_eq!(
            dpo_row(&pair).unwrap(),
            json!({"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [5, 6]})
        );
        let apart = DpoExample {
            line: 8,
            chosen: Sequence::prompt_completion(&[1, 2], &[3]),
            rejected: Sequence::prompt_completion(&[1, 9], &[3]),
        };
        let error = dpo_row(&apart).unwrap_err().to_string();
        assert!(error.contains("line 8"), "{error}");
    }

    #[test]
    fn a_failure_is_said_by_the_scripts_exception_not_the_launchers() {
        let tail: Vec<String> = [
            "  File \"trl_train.py\", line 3, in main",
            "ValueError: No reward source provided.",
            "Traceback (most recent call last):",
            "subprocess.CalledProcessError: Command '[python]' returned non-zero exit status 1.",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(said(&tail), "ValueError: No reward source provided.");
        assert_eq!(said(&["killed".to_owned(), String::new()]), "killed");
    }

    #[test]
    fn one_process_runs_undistributed_and_more_split_by_device() {
        let spec = |device: &str, n| TrlSpec {
            python: "python3".into(),
            accelerate_config: None,
            num_processes: n,
            device: device.into(),
            args: Default::default(),
            time_limit_minutes: 60,
        };
        assert!(single_machine(&spec("cpu", 1)).contains("distributed_type: \"NO\""));
        assert!(single_machine(&spec("cuda", 4)).contains("distributed_type: MULTI_GPU\n"));
        assert!(single_machine(&spec("cpu", 2)).contains("use_cpu: true"));
    }
}
