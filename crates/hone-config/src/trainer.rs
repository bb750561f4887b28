//! `[agents.NAME.learn.trainer]`: what trains the weight optimisers'
//! adapters. `hone` (the default) is hone's own single-device trainer;
//! `trl` hands the same data and hyperparameters to TRL (SFTTrainer,
//! DPOTrainer, GRPOTrainer) with PEFT LoRA, launched through `accelerate launch`, so one
//! config runs on a CPU, a GPU, many GPUs (FSDP or DeepSpeed, by the
//! user's accelerate config) or many nodes.

use crate::ConfigError;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrainer {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The Python (a virtual environment's, typically) with torch,
    /// transformers, peft, trl and accelerate.
    pub python: Option<String>,
    /// An accelerate config file the user owns (`accelerate config`);
    /// without one, hone's single-machine settings.
    pub accelerate_config: Option<PathBuf>,
    /// Processes `accelerate launch` starts (one a GPU).
    pub num_processes: Option<usize>,
    /// `cpu` or `cuda`.
    pub device: Option<String>,
    /// TRL's own training arguments, passed through (applied over hone's).
    pub args: Option<toml::Table>,
    /// The longest a TRL job may run before it is stopped.
    pub time_limit_minutes: Option<u64>,
}

/// What trains an agent's adapters.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum TrainerSpec {
    /// hone's own trainer, in-process.
    #[default]
    Hone,
    /// TRL under accelerate, in a process of its own.
    Trl(TrlSpec),
}

/// `type = "trl"`.
#[derive(Debug, Clone, PartialEq)]
pub struct TrlSpec {
    pub python: String,
    pub accelerate_config: Option<PathBuf>,
    pub num_processes: usize,
    pub device: String,
    /// TRL training arguments over hone's, as JSON (the script's input).
    pub args: serde_json::Map<String, serde_json::Value>,
    pub time_limit_minutes: u64,
}

impl TrlSpec {
    /// A day: long enough for a large adapter on a cluster, short enough
    /// that a job that hangs ends.
    pub const DEFAULT_TIME_LIMIT_MINUTES: u64 = 24 * 60;

    /// Relative paths (`accelerate_config`, and a `python` given as a path
    /// such as `.venv/bin/python`) start from the config file's directory,
    /// not from wherever `hone learn` was started; a bare command name
    /// (`python3`) is still looked up on `PATH`.
    pub(crate) fn anchor(&mut self, base_dir: &Path) {
        if let Some(file) = self.accelerate_config.as_mut().filter(|f| f.is_relative()) {
            *file = base_dir.join(&*file);
        }
        let python = Path::new(&self.python);
        if python.is_relative() && python.components().count() > 1 {
            self.python = base_dir.join(python).display().to_string();
        }
    }
}

impl TrainerSpec {
    pub const NAMES: &'static str = "hone, trl";

    pub fn from_raw(field: &str, raw: Option<RawTrainer>) -> Result<Self, ConfigError> {
        let Some(raw) = raw else {
            return Ok(Self::Hone);
        };
        let field = format!("{field}.trainer");
        let trl_only = [
            ("python", raw.python.is_some()),
            ("accelerate_config", raw.accelerate_config.is_some()),
            ("num_processes", raw.num_processes.is_some()),
            ("device", raw.device.is_some()),
            ("args", raw.args.is_some()),
            ("time_limit_minutes", raw.time_limit_minutes.is_some()),
        ];
        match raw.kind.as_deref().unwrap_or("hone") {
            "hone" => match trl_only.iter().find(|(_, set)| *set) {
                Some((key, _)) => Err(ConfigError::at(
                    format!("{field}.{key}"),
                    "applies to `type = \"trl\"` only; hone's own trainer runs in-process",
                )),
                None => Ok(Self::Hone),
            },
            "trl" => {
                let num_processes = raw.num_processes.unwrap_or(1);
                if num_processes == 0 {
                    return Err(ConfigError::at(format!("{field}.num_processes"), "must be at least 1"));
                }
                let time_limit_minutes = raw.time_limit_minutes.unwrap_or(TrlSpec::DEFAULT_TIME_LIMIT_MINUTES);
                if time_limit_minutes == 0 {
                    return Err(ConfigError::at(
                        format!("{field}.time_limit_minutes"),
                        "must be at least 1",
                    ));
                }
                let device = raw.device.unwrap_or_else(|| "cpu".to_owned());
                if device != "cpu" && device != "cuda" {
                    return Err(ConfigError::at(
                        format!("{field}.device"),
                        format!("`{device}` is not `cpu` or `cuda`"),
                    ));
                }
                let args = match raw.args {
                    Some(table) => match serde_json::to_value(table) {
                        Ok(serde_json::Value::Object(map)) => map,
                        _ => {
                            return Err(ConfigError::at(
                                format!("{field}.args"),
                                "must be a table of TRL options",
                            ))
                        }
                    },
                    None => serde_json::Map::new(),
                };
                Ok(Self::Trl(TrlSpec {
                    python: raw.python.unwrap_or_else(|| "python3".to_owned()),
                    accelerate_config: raw.accelerate_config,
                    num_processes,
                    device,
                    args,
                    time_limit_minutes,
                }))
            }
            other => Err(ConfigError::at(
                format!("{field}.type"),
                format!("`{other}` is not a trainer ({})", Self::NAMES),
            )),
        }
    }
}
