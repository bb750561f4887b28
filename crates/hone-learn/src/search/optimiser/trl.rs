//! The TRL trainer (`[agents.NAME.learn.trainer] type = "trl"`): the
//! adapter an `sft` or `dpo` optimiser would train on hone's own trainer is
//! trained by TRL with PEFT instead, in a process of its own started with
//! `accelerate launch`, so it runs wherever the user's accelerate config
//! says (a CPU, a GPU, many GPUs under FSDP or DeepSpeed, many nodes).
//!
//! One home for each rule: the rows are the token sequences hone's own
//! trainer would read (rendered by hone, recorded ids where it has them),
//! written in TRL's pre-tokenised columns; the hyperparameters are hone's
//! training config for the optimiser, serialised whole into `job.json` for
//! the script (`python/trl_train.py`, embedded here) to map onto TRL's
//! arguments, the user's `args` over them. The script leaves PEFT's adapter
//! files and hone's step reports (`metrics.jsonl`) in the adapter's
//! `.partial` directory, as hone's trainer does.

use super::training::Method;
use crate::error::LearnError;
use hone_config::TrlSpec;
use hone_train::data::{DpoExample, SftExample};
use hone_train::{Data, TrainConfig};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The script TRL runs, as shipped with this build.
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
/// the job and the script there, runs `accelerate launch`, and checks that
/// the adapter's files were left behind.
pub fn train(job: &TrlJob<'_>, data: &Data, dir: &Path) -> Result<(), LearnError> {
    let rows = rows(data)?;
    let write = |name: &str, bytes: &[u8]| -> Result<PathBuf, LearnError> {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(LearnError::training(format!("writing {}", path.display())))?;
        Ok(path)
    };
    let mut jsonl = Vec::new();
    for row in &rows {
        serde_json::to_writer(&mut jsonl, row).map_err(LearnError::training("writing a TRL row"))?;
        jsonl.push(b'\n');
    }
    let data_path = write("trl.jsonl", &jsonl)?;
    let job_json = json!({
        "method": job.method.name(),
        "base": job.base,
        "parent": job.parent,
        "device": job.spec.device,
        "config": job.config,
        "args": job.spec.args,
    });
    let job_path = write("job.json", job_json.to_string().as_bytes())?;
    let script = write("trl_train.py", SCRIPT.as_bytes())?;
    let accelerate = match &job.spec.accelerate_config {
        Some(path) => path.clone(),
        None => write("accelerate.yaml", single_machine(job.spec).as_bytes())?,
    };
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
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    tracing::info!(python = %job.spec.python, accelerate = %accelerate.display(), rows = rows.len(), "training with TRL");
    let mut child = command.spawn().map_err(LearnError::training(format!(
        "cannot run `{}` (trainer.python: a Python with torch, transformers, peft, trl and accelerate)",
        job.spec.python
    )))?;
    let mut tail: Vec<String> = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.starts_with("hone-trl") {
                tracing::info!("{line}");
            }
            tail.push(line);
            if tail.len() > TAIL {
                tail.remove(0);
            }
        }
    }
    let status = child.wait().map_err(LearnError::training("waiting for TRL"))?;
    if !status.success() {
        let said = tail
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .cloned()
            .unwrap_or_default();
        return Err(LearnError::training("TRL training failed")(format!(
            "{status}: {said}\n{}",
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

/// The rows in TRL's pre-tokenised columns.
fn rows(data: &Data) -> Result<Vec<Value>, LearnError> {
    match data {
        Data::Sft(examples) => Ok(examples.iter().map(sft_row).collect()),
        Data::Dpo(pairs) => pairs.iter().map(dpo_row).collect(),
        Data::Grpo(_) => Err(LearnError::training("TRL training")(
            "TRL trains sft and dpo for hone; grpo trains on hone's own trainer",
        )),
    }
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
    let prompt_len = |s: &hone_train::policy::Sequence| s.scored.iter().position(|&x| x).unwrap_or(s.tokens.len());
    let (c, r) = (&pair.chosen, &pair.rejected);
    let n = prompt_len(c);
    let refuse = |why: &str| LearnError::training(format!("DPO pair on line {}", pair.line))(why.to_owned());
    if n != prompt_len(r) || c.tokens[..n] != r.tokens[..n] {
        return Err(refuse("its two sides do not share their prompt"));
    }
    if c.scored[n..].iter().chain(&r.scored[n..]).any(|&x| !x) {
        return Err(refuse(
            "a completion holds tokens that are not trained on, which TRL's DPO cannot leave out",
        ));
    }
    Ok(json!({
        "prompt_ids": c.tokens[..n],
        "chosen_ids": c.tokens[n..],
        "rejected_ids": r.tokens[n..],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hone_train::policy::Sequence;

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
    fn one_process_runs_undistributed_and_more_split_by_device() {
        let spec = |device: &str, n| TrlSpec {
            python: "python3".into(),
            accelerate_config: None,
            num_processes: n,
            device: device.into(),
            args: Default::default(),
        };
        assert!(single_machine(&spec("cpu", 1)).contains("distributed_type: \"NO\""));
        assert!(single_machine(&spec("cuda", 4)).contains("distributed_type: MULTI_GPU\n"));
        assert!(single_machine(&spec("cpu", 2)).contains("use_cpu: true"));
    }
}
