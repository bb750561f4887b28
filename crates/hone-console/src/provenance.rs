//! What every measured result is stamped with ([`Provenance`]): the
//! command that produced it, the commit, the date and the machine, so a
//! result file says where it came from. Written by `hone demo --seeds`,
//! `hone bench …` and `hone-bench gateway`.

use serde::{Deserialize, Serialize};

/// Where a result came from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Provenance {
    pub command: String,
    /// The commit the running program was built from (`+changes` when the
    /// checkout had uncommitted changes), when it was built from a git
    /// checkout.
    pub commit: Option<String>,
    /// RFC 3339, UTC.
    pub date: String,
    pub machine: Machine,
}

/// The CPU model, cores and memory of this machine, and its NVIDIA GPUs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: Option<String>,
    pub cores: Option<usize>,
    pub memory_gib: Option<f64>,
    /// The GPUs' names as `nvidia-smi` lists them (none where it is missing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<String>,
}

impl Provenance {
    /// `command` (its words, program first) run now on this machine.
    pub fn now(command: &[String]) -> Self {
        Self {
            command: command.join(" "),
            commit: option_env!("HONE_COMMIT").map(str::to_owned),
            date: hone_types::time::format_rfc3339(hone_types::time::now_ms()),
            machine: Machine::this(),
        }
    }
}

impl Machine {
    /// Read from `/proc` (nothing where it is missing).
    pub fn this() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kb: Option<u64> = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok());
        Self {
            cpu,
            cores: std::thread::available_parallelism().map(|n| n.get()).ok(),
            memory_gib: memory_kb.map(|kb| (kb as f64 / 1_048_576.0 * 10.0).round() / 10.0),
            gpus: nvidia_gpus(),
        }
    }
}

/// `nvidia-smi`'s names of the GPUs (empty where it is not installed).
fn nvidia_gpus() -> Vec<String> {
    std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().map(str::to_owned).collect())
        .unwrap_or_default()
}
