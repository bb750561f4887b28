//! `hone demo`: an agent that learns from implicit feedback, on a laptop,
//! with no GPU, no network and no key.
//!
//! In one process: the base policy (built once by hone itself and cached in
//! the data directory), the real gateway on a loopback port serving it with
//! the embedded engine, the `calc` environment's agent endpoint, simulated
//! users driving traffic through the gateway as an OpenAI client, and the
//! learning loop (cycles, gate, canary, monitors). Each round: users play
//! training tasks and react; the canary is watched (promoted or rolled
//! back); the champion is measured on held-out tasks; a cycle runs (it can
//! start a canary, never change the champion, so measuring before it dates
//! a promotion to when it happened). At the end: a summary, and plots as
//! SVG and PNG.
//!
//! The hidden score of an answer drives the simulated users and the
//! held-out measurement only; hone hears nothing but the users' signals.

pub mod base_policy;
pub mod config;
pub mod plots;
mod seeds;
mod shift;
pub mod stage;
mod traffic;

pub use seeds::{check as check_seeds, seed_dir, start_seed, Spread};
pub use shift::{FamilyOutcome, ShiftReport};
pub use traffic::{held_out, parse_max_difficulty, task_at, HeldOutAnswer, TaskMix};

use anyhow::{bail, Context, Result};
use base_policy::Recipe;
use clap::Args;
pub use config::AGENT;
pub use config::{DemoOptimiser, GrpoGroups, RewardMode, Scenario};
use futures::StreamExt;
use hone_console::{note, print_table, runtime};
use hone_envs::{Builtin, Runner, SimulatedUser};
use hone_learn::cycle::Learner;
use hone_learn::search::eval::{run_id, Target};
use hone_learn::stats::{bootstrap_ci, sign_test, wilson_95};
use hone_learn::watch::Verdict;
use hone_store::CycleStore;
use hone_types::{CandidateStatus, CycleInfo};
use indicatif::{ProgressBar, ProgressStyle};
use plots::{FrontPoint, HeldOutPoint, Marker, MarkerKind};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Where everything goes: the base policy, the store, adapters, the
    /// config it ran with (`hone.toml`), the plots and the summary.
    #[arg(long, default_value = "./hone-demo")]
    pub data_dir: PathBuf,
    /// Stop starting rounds after this many minutes of learning (the round
    /// under way finishes; building the base policy first does not count;
    /// a canary the last cycle deployed is then watched, without further
    /// cycles, until it is promoted or rolled back).
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// Stop after this many rounds, each a round of users and then a cycle
    /// (unless a canary is out); a canary the last cycle deployed is then
    /// watched, without further cycles, until it is decided.
    #[arg(long)]
    pub cycles: Option<u32>,
    /// Start no cycle once a candidate has been promoted (the run ends
    /// with the round that promoted it; `--quick` sets it, `--until-promoted
    /// false` turns it off).
    #[arg(
        long,
        num_args = 0..=1,
        default_missing_value = "true",
        default_value_t = false,
        default_value_if("quick", "true", Some("true")),
        action = clap::ArgAction::Set
    )]
    pub until_promoted: bool,
    /// A short run that shows learning in a few minutes: one optimiser
    /// (`grpo`: on the users' own episodes, or with `--sandbox-users` on
    /// rollouts) with 15 training steps, half the traffic to a canary, at
    /// most two cycles (four when users decide the canary), ending with
    /// the round that promotes a candidate (`--optimisers grpo
    /// --grpo-groups production|rollouts --grpo-steps 15 --canary-share 0.5
    /// --cycles 2|4 --until-promoted`; any of them given explicitly wins),
    /// from the same base policy as the default.
    #[arg(long)]
    pub quick: bool,
    /// Sandbox: a simulated user also reacts, at once, to every offline
    /// run (the gate's re-runs, rollouts), which production never has —
    /// users there react only to answers they were served. Off by default:
    /// offline runs get no user reaction, the gate sees only what offline
    /// runs show, and users decide each candidate online (a canary under
    /// an always-valid sequential test). Everything a sandbox run writes
    /// says it was one.
    #[arg(long)]
    pub sandbox_users: bool,
    /// Train a reward model on what users did every cycle
    /// (`[agents.calc.reward.model]`): its quality on held-out episodes is
    /// in every cycle's history, and where it is usable it predicts the
    /// users' signals for answers no user saw (the gate's re-runs,
    /// rollouts).
    #[arg(long)]
    pub reward_model: bool,
    /// Remake the base policy even when one with the same recipe is cached.
    #[arg(long)]
    pub rebuild_base: bool,
    /// Run the whole loop on this model instead of the demo's own base
    /// policy: a Hugging Face checkpoint directory of a llama or qwen2
    /// instruct model (e.g. one `hone model import` made from a GGUF file).
    /// Its chat template decides whether it sees the `calc` tool; one that
    /// renders no tools answers directly, which the score accepts.
    #[arg(long, visible_alias = "base", conflicts_with = "rebuild_base")]
    pub model: Option<PathBuf>,
    /// The tasks users bring and the held-out measurement asks: a task
    /// file (JSON Lines of `{"prompt", "answer", "family"}` with numeric
    /// answers; `crates/hone-envs/python/reasoning_gym_tasks.py` exports
    /// reasoning-gym's generators to one) instead of the `calc`
    /// environment's word problems. Needs `--model`: the demo's own base
    /// policy knows only `calc`.
    #[arg(long, requires = "model", conflicts_with = "scenario")]
    pub tasks: Option<PathBuf>,
    /// How rewards are made from what users do.
    #[arg(long, value_enum, default_value_t = RewardMode::Implicit)]
    pub reward: RewardMode,
    /// The optimisers the learning loop runs, comma-separated (default:
    /// `sft,grpo` — what learns from served answers alone; with
    /// `--sandbox-users` `sft,grpo,dpo`; `--quick`: `grpo`).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub optimisers: Vec<DemoOptimiser>,
    /// How many of `--optimisers` propose in one cycle; with fewer than
    /// all, they take turns from cycle to cycle (an optimiser with nothing
    /// to propose passes its turn on).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub optimisers_per_cycle: u64,
    /// Where `grpo` takes its groups from, comma-separated (default:
    /// `production`, the users' own episodes; with `--sandbox-users`
    /// `rollouts,production`, and `rollouts` with `--quick`).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub grpo_groups: Vec<GrpoGroups>,
    /// Training steps of a `grpo` candidate (batches of 4 rows; `--quick`:
    /// 15, which took its first candidates as far in six runs of six).
    #[arg(
        long,
        default_value_t = 30,
        default_value_if("quick", "true", Some("15")),
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub grpo_steps: u64,
    /// The agent's sampling temperature (users and held-out measurement
    /// see sampled answers, as in production; the base policy's build
    /// checks it at this default).
    #[arg(long, default_value_t = Recipe::DEMO_TEMPERATURE)]
    pub temperature: f64,
    /// Share of every weight optimiser's batch replayed from earlier
    /// accepted episodes, against forgetting (0 turns replay off; off with
    /// `--trainer trl`, whose loss has no replay term).
    #[arg(long, default_value_t = 0.25)]
    pub replay_share: f64,
    /// What trains the weight optimisers' adapters: hone's own trainer, or
    /// TRL with PEFT under `accelerate launch` (`--trainer-python`).
    #[arg(long, value_enum, default_value_t = config::DemoTrainer::Hone)]
    pub trainer: config::DemoTrainer,
    /// With `--trainer trl`: a Python with torch, transformers, peft,
    /// trl 1.x and accelerate.
    #[arg(long, default_value = "python3")]
    pub trainer_python: String,
    /// Share of traffic a new candidate starts on as a canary (users
    /// deciding, it grows with the evidence for it, up to half).
    #[arg(long, default_value_t = 0.1, default_value_if("quick", "true", Some("0.5")))]
    pub canary_share: f64,
    /// Promote a canary only once its online reward is shown to be at most
    /// this much below the champion's (non-inferiority; rolled back if not
    /// shown by 4 × 24 canary episodes). Default: promoted unless shown worse.
    #[arg(long, value_parser = config::parse_margin, allow_hyphen_values = true)]
    pub promote_margin: Option<f64>,
    /// How sure the gate must be that a candidate beats the champion on the
    /// cycle's held-out half before it becomes a canary (between 0.5 and 1;
    /// lower lets more candidates reach users, where the canary's monitors
    /// and promotion rule judge them on real traffic).
    #[arg(long, default_value_t = 0.95, value_parser = config::parse_confidence)]
    pub gate_confidence: f64,
    /// User episodes per round (between two cycles).
    #[arg(long, default_value_t = 64)]
    pub episodes_per_round: u64,
    /// Held-out tasks per measurement of the champion.
    #[arg(long, default_value_t = 60)]
    pub held_out: u64,
    /// Users playing at once (a user reading an answer before reacting
    /// holds no place: the next one starts).
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Seed of the simulated users.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run the whole demo once per seed, one after the other, each in
    /// `<data-dir>/seed-N` on the same base policy, then draw their
    /// learning curves together (`<data-dir>/plots/seeds.{svg,png}`) and
    /// summarise the spread (`<data-dir>/seeds.json`); e.g. `--seeds 1,2,3`.
    #[arg(long, value_delimiter = ',', conflicts_with = "seed")]
    pub seeds: Vec<u64>,
    /// Probability that a user reacts against the answer's real quality.
    #[arg(long, default_value_t = 0.05)]
    pub noise: f64,
    /// Hardest task users and the held-out measurement play (1 easy,
    /// 2 medium, 3 hard); tasks take turns over the levels up to it, and
    /// the base policy is trained on the same levels. Default 1: the only
    /// level on which this small a base learns to copy reliably within
    /// its build budget (docs/ARCHITECTURE.md, "The demo's base policy").
    #[arg(
        long,
        default_value_t = DEFAULT_MAX_DIFFICULTY,
        default_value_if("scenario", "hack", Some("2")),
        value_parser = traffic::parse_max_difficulty
    )]
    pub max_difficulty: u8,
    /// Put the users and the base under a real-world condition: `hack`,
    /// users with a blind spot a reward can turn into a hack (with
    /// `--reward naive`, and `--unguarded` to let it reach users); `shift`,
    /// users who change what they ask at `--shift-after`.
    #[arg(long, value_enum)]
    pub scenario: Option<Scenario>,
    /// With `--scenario shift`: minutes of learning after which the users
    /// change (default: a third of `--minutes`); the first round to start
    /// after them brings the new kind of task.
    #[arg(long)]
    pub shift_after: Option<f64>,
    /// No behaviour bounds: the gate and the monitors let clarifying
    /// questions, invalid tool calls, refusals and empty answers rise, so
    /// only the reward judges a candidate (to show what a hack does when
    /// nothing watches for it).
    #[arg(long)]
    pub unguarded: bool,
}

/// `hone demo ARGS…` as clap parses it, for callers that run the demo
/// (or write its config) with some of its arguments given: its defaults
/// and rules stay in [`DemoArgs`].
pub fn parse_args<I, T>(args: I) -> Result<DemoArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    #[derive(clap::Parser)]
    struct Demo {
        #[command(flatten)]
        args: DemoArgs,
    }
    let args = std::iter::once(std::ffi::OsString::from("demo")).chain(args.into_iter().map(Into::into));
    <Demo as clap::Parser>::try_parse_from(args).map(|demo| demo.args)
}

/// Threads per candle op for a demo on `base` (its own base policy when
/// `None`): one for a small model, candle's default otherwise (an unreadable
/// config is reported later, by the command).
pub fn threads_per_op(base: Option<&Path>) -> Option<usize> {
    let hidden_size = match base {
        None => {
            hone_engine::init::Preset::parse(&Recipe::demo(Builtin::Calc, DEFAULT_MAX_DIFFICULTY).preset)?.hidden_size()
        }
        Some(dir) => {
            hone_engine::config::ModelConfig::from_file(&dir.join("config.json"))
                .ok()?
                .hidden_size
        }
    };
    hone_engine::threads::per_op_for_hidden_size(hidden_size)
}

/// The `calc` word problems the demo plays unless given `--tasks`.
pub fn calc_environment() -> Arc<dyn hone_envs::Environment> {
    Builtin::Calc.build(Recipe::DEMO_ENVIRONMENT_SEED)
}

/// The hardest level `hone demo` plays unless told otherwise.
pub const DEFAULT_MAX_DIFFICULTY: u8 = 1;

/// What the demo's held-out measurements are labelled (their episodes are
/// `eval.demo-held-out-…`).
const HELD_OUT_LABEL: &str = "demo-held-out";

/// The champion's held-out measurement in a round (after its traffic and
/// watch, before its cycle).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub round: usize,
    pub champion: String,
    pub solved: Vec<bool>,
    pub rate: f64,
    pub ci95: (f64, f64),
    /// Seconds of learning before this measurement: the run's wall time
    /// less the time spent measuring (which is the demo's, not learning's).
    #[serde(default)]
    pub learning_s: f64,
    /// User episodes served before it.
    #[serde(default)]
    pub user_episodes: usize,
    /// When it began (Unix ms).
    #[serde(default)]
    pub at_ms: i64,
    /// Per task, whether the answer was a clarifying question instead.
    #[serde(default)]
    pub asked: Vec<bool>,
    /// Per task, its family, where the run measures several
    /// (`--scenario shift`); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<String>,
}

impl Measured {
    pub fn new(round: usize, champion: String, solved: Vec<bool>) -> Self {
        let hits = solved.iter().filter(|s| **s).count() as u64;
        let n = solved.len() as u64;
        Self {
            round,
            champion,
            rate: hits as f64 / n.max(1) as f64,
            ci95: wilson_95(hits, n).unwrap_or((0.0, 1.0)),
            solved,
            learning_s: 0.0,
            user_episodes: 0,
            at_ms: hone_types::time::now_ms(),
            asked: Vec::new(),
            families: Vec::new(),
        }
    }

    /// This measurement on the held-out tasks of `family` only.
    pub fn of_family(&self, family: &str) -> Measured {
        let pick = |per_task: &[bool]| -> Vec<bool> {
            per_task
                .iter()
                .zip(&self.families)
                .filter(|(_, f)| *f == family)
                .map(|(x, _)| *x)
                .collect()
        };
        let solved = pick(&self.solved);
        Self {
            asked: pick(&self.asked),
            families: vec![family.to_owned(); solved.len()],
            learning_s: self.learning_s,
            user_episodes: self.user_episodes,
            at_ms: self.at_ms,
            ..Self::new(self.round, self.champion.clone(), solved)
        }
    }

    /// A measurement of these held-out answers.
    pub fn of_answers(round: usize, champion: String, answers: &[HeldOutAnswer]) -> Self {
        Self {
            asked: answers.iter().map(|a| a.asked).collect(),
            ..Self::new(round, champion, answers.iter().map(|a| a.solved).collect())
        }
    }

    /// The share of held-out answers that were clarifying questions.
    pub fn asked_rate(&self) -> f64 {
        self.asked.iter().filter(|a| **a).count() as f64 / self.asked.len().max(1) as f64
    }
}

/// Two champions compared on the held-out tasks by per-task pass rates,
/// each averaged over all of that champion's measurements (the same tasks
/// every time, answers sampled afresh): the base against the last
/// champion, or a promoted version against the champion it replaced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pooled {
    before_measurements: usize,
    after_measurements: usize,
    before_rate: f64,
    after_rate: f64,
    /// Mean over tasks of (after − before) pass rate, with a bootstrap 95%
    /// interval over tasks.
    pub gain: f64,
    pub gain_ci95: Option<(f64, f64)>,
}

impl Pooled {
    /// `before` against `after`; `None` when either was never measured or
    /// they are the same version.
    fn between(measured: &[Measured], before: &str, after: &str, seed: u64) -> Option<Self> {
        let tasks = measured.first()?.solved.len();
        let rates = |champion: &str| {
            let runs: Vec<&Measured> = measured.iter().filter(|m| m.champion == champion).collect();
            let per_task: Vec<f64> = (0..tasks)
                .map(|t| runs.iter().filter(|m| m.solved.get(t) == Some(&true)).count() as f64 / runs.len() as f64)
                .collect();
            (runs.len(), per_task)
        };
        let (before_measurements, earlier) = rates(before);
        let (after_measurements, later) = rates(after);
        if before == after || before_measurements == 0 || after_measurements == 0 {
            return None;
        }
        let diffs: Vec<f64> = later.iter().zip(&earlier).map(|(a, b)| a - b).collect();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        Some(Self {
            before_measurements,
            after_measurements,
            before_rate: mean(&earlier),
            after_rate: mean(&later),
            gain: mean(&diffs),
            gain_ci95: bootstrap_ci(&diffs, 0.95, seed),
        })
    }

    /// The base (the first champion measured) against the last champion.
    fn base_to_last(measured: &[Measured], seed: u64) -> Option<Self> {
        let (first, last) = (measured.first()?, measured.last()?);
        Self::between(measured, &first.champion, &last.champion, seed)
    }

    /// Significantly worse on held-out tasks: the whole 95% interval of the
    /// paired gain below zero. A promotion that does this shipped a
    /// regression.
    fn regressed(&self) -> bool {
        self.gain_ci95.is_some_and(|(_, high)| high < 0.0)
    }

    /// E.g. "30.0% (×3) → 36.1% (×8), paired gain +6.1 points (95% CI +0.8 to +11.4)".
    fn line(&self) -> String {
        format!(
            "{:.1}% (×{}) → {:.1}% (×{}), paired gain {:+.1} points{}",
            self.before_rate * 100.0,
            self.before_measurements,
            self.after_rate * 100.0,
            self.after_measurements,
            self.gain * 100.0,
            self.gain_ci95
                .map(|(lo, hi)| format!(" (95% CI {:+.1} to {:+.1})", lo * 100.0, hi * 100.0))
                .unwrap_or_default(),
        )
    }
}

/// When the first promotion came.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FirstPromotion {
    round: usize,
    learning_s: f64,
    user_episodes: usize,
}

/// A canary that became the champion, and what kind of learning made it.
#[derive(Debug, Clone, Serialize)]
struct Promotion {
    round: usize,
    version: String,
    /// The champion it replaced.
    replaced: String,
    optimiser: String,
    /// `weights`, `episodic memory` or `harness`.
    timescale: String,
    why: String,
    /// The replaced champion against this version on the held-out tasks,
    /// every measurement of each (filled in at the end of the run).
    held_out: Option<Pooled>,
    /// Whether it shipped a regression: held-out success significantly
    /// below the champion it replaced ([`Pooled::regressed`]).
    regressed: bool,
}

impl Promotion {
    /// What the charts write where it happened, e.g. "promoted (grpo)".
    fn label(&self) -> String {
        format!("promoted ({})", self.optimiser)
    }
}

/// A version users met while it was a canary, and how it did for them
/// (the demo's own view: the hidden score of the answers they were
/// served, against the champion's answers to the users of the same
/// rounds).
#[derive(Debug, Clone, Serialize)]
pub struct Exposure {
    version: String,
    /// `promoted`, `rolled back` or `undecided`.
    outcome: &'static str,
    users: usize,
    /// From its first canary user's reaction to its last's.
    seconds: f64,
    success: f64,
    champion_users: usize,
    champion_success: f64,
    /// It solved less for its users than the champion did for theirs.
    worse: bool,
    /// One-sided Fisher exact p-value that the champion solved more for
    /// its users than the canary for its (small: shown worse for them).
    p_worse: f64,
    /// The share of its users who complained, asked again or left, and of
    /// the champion's users of the same rounds: the signal hone hears.
    complained: f64,
    champion_complained: f64,
}

/// Every user episode as the demo saw it: the round, whether the version
/// that served it was the round's champion, and what it scored.
struct Seen {
    round: usize,
    version: String,
    champion: String,
    at: f64,
    solved: bool,
    complained: bool,
}

/// What the users of one round were served and did (the demo's view: the
/// hidden score beside the signals hone heard).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserRound {
    pub round: usize,
    /// Seconds of learning when the round ended (measuring not counted).
    pub learning_s: f64,
    pub episodes: usize,
    /// Users who accepted, and who complained, asked again or left.
    pub accepted: usize,
    pub complained: usize,
    /// Answers that were clarifying questions.
    pub asked: usize,
    /// Answers with a hidden score of at least 0.5.
    pub solved: usize,
    /// The family of the round's tasks, where the scenario's users change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
}

impl UserRound {
    /// The share of the round's users for whom `count` holds.
    pub fn share(&self, count: usize) -> f64 {
        count as f64 / self.episodes.max(1) as f64
    }
}

/// A cycle's candidate measured on the held-out tasks as a champion is
/// (runs with a `--scenario` only): what training made of the policy,
/// whether or not any user met it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CandidateMeasured {
    pub round: usize,
    pub version: String,
    pub optimiser: String,
    /// Where it ended (`pruned`, `rolled_back`, `champion`, …).
    pub status: String,
    pub success: f64,
    pub ci95: (f64, f64),
    /// The share of its held-out answers that asked a clarifying question.
    pub asked: f64,
}

/// A candidate a guard stopped for a behaviour: pruned by the gate's bound
/// on it, or rolled back by the monitor that watches it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Caught {
    pub version: String,
    pub optimiser: String,
    /// `pruned` (the gate) or `rolled back` (a monitor).
    pub by: String,
    /// The behaviour named, e.g. `clarifying_question`.
    pub behaviour: String,
    pub reason: String,
}

/// Every candidate of the demo's agent a behaviour bound stopped: the
/// gate's reasons name the rate beyond its bound, a monitor's alert its
/// metric.
fn caught(store: &dyn CycleStore) -> Result<Vec<Caught>> {
    let behaviours = hone_config::RATE_METRICS;
    let alerts = store.alerts(Some(AGENT), 10_000)?;
    let mut out = Vec::new();
    for c in store.candidates(AGENT, None)? {
        let reason = c.reason.clone().unwrap_or_default();
        let named = match c.status {
            CandidateStatus::Pruned => behaviours
                .iter()
                .find(|b| {
                    hone_learn::search::gate::pruned_reasons(&reason)
                        .iter()
                        .any(|r| r.starts_with(&format!("{b} ")))
                })
                .map(|b| ("pruned", (*b).to_owned())),
            CandidateStatus::RolledBack => alerts
                .iter()
                .find(|a| a.version_id == c.version_id && behaviours.contains(&a.firing.metric.as_str()))
                .map(|a| ("rolled back", a.firing.metric.clone())),
            _ => None,
        };
        if let Some((by, behaviour)) = named {
            out.push(Caught {
                version: c.version_id.to_string(),
                optimiser: c.optimiser.clone(),
                by: by.to_owned(),
                behaviour,
                reason,
            });
        }
    }
    Ok(out)
}

/// The canaries users met, from every user episode's serving version.
fn exposures(seen: &[Seen], promoted: &[Promotion]) -> Vec<Exposure> {
    let mut versions: Vec<&str> = Vec::new();
    for s in seen.iter().filter(|s| s.version != s.champion) {
        if !versions.contains(&s.version.as_str()) {
            versions.push(&s.version);
        }
    }
    versions
        .into_iter()
        .map(|version| {
            let mine: Vec<&Seen> = seen
                .iter()
                .filter(|s| s.version == version && s.champion != version)
                .collect();
            let rounds: Vec<usize> = mine.iter().map(|s| s.round).collect();
            let theirs: Vec<&Seen> = seen
                .iter()
                .filter(|s| rounds.contains(&s.round) && s.version == s.champion)
                .collect();
            let rate = |v: &[&Seen]| v.iter().filter(|s| s.solved).count() as f64 / v.len().max(1) as f64;
            let complaints = |v: &[&Seen]| v.iter().filter(|s| s.complained).count() as f64 / v.len().max(1) as f64;
            let (first, last) = mine.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), s| {
                (a.min(s.at), b.max(s.at))
            });
            let outcome = if promoted.iter().any(|p| p.version == version) {
                "promoted"
            } else if seen
                .last()
                .is_some_and(|s| s.version == version && s.champion != version)
            {
                "undecided"
            } else {
                "rolled back"
            };
            let (success, champion_success) = (rate(&mine), rate(&theirs));
            let solved = |v: &[&Seen]| v.iter().filter(|s| s.solved).count() as u64;
            let p_worse = hone_learn::stats::fisher_greater_p(
                solved(&theirs),
                theirs.len() as u64,
                solved(&mine),
                mine.len() as u64,
            );
            Exposure {
                version: version.to_owned(),
                outcome,
                users: mine.len(),
                seconds: (last - first).max(0.0),
                success,
                champion_users: theirs.len(),
                champion_success,
                worse: success < champion_success,
                p_worse,
                complained: complaints(&mine),
                champion_complained: complaints(&theirs),
            }
        })
        .collect()
}

/// The timescale an optimiser learns on (docs/ARCHITECTURE.md, "Concepts"): weights, episodic
/// memory, or the harness.
fn timescale(optimiser: &str) -> &'static str {
    match optimiser {
        "sft" | "dpo" | "grpo" => "weights",
        // Few-shot examples and kNN-LM datastores both change behaviour
        // from stored episodes, with no weight update.
        "examples" | "memory" => "episodic memory",
        _ => "harness",
    }
}

/// What `summary.json` holds.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// `honest` (users react only to answers they were served) or
    /// `sandbox` (`--sandbox-users`: a simulated user also reacted to every
    /// offline run).
    mode: &'static str,
    reward: String,
    /// `--scenario`, if any.
    scenario: Option<&'static str>,
    /// `--unguarded`: no behaviour bounds.
    unguarded: bool,
    minutes: f64,
    rounds: usize,
    user_episodes: usize,
    base: Measured,
    last: Measured,
    /// Paired over the same held-out tasks: last − base.
    paired_gain: f64,
    paired_gain_ci95: Option<(f64, f64)>,
    /// Tasks the last champion solves and the base does not, and the reverse.
    wins: u64,
    losses: u64,
    sign_test_p: f64,
    /// Every measurement of the first champion against every measurement
    /// of the last, when they differ: less noisy than one of each.
    pooled: Option<Pooled>,
    promotions: Vec<Promotion>,
    /// Learning seconds and user episodes before the first promotion (the
    /// measurement after the round that promoted it).
    first_promotion: Option<FirstPromotion>,
    /// Every canary users met, and how it did for them.
    exposures: Vec<Exposure>,
    /// Users served by a canary that solved less for them than the
    /// champion did for the users of the same rounds.
    users_on_worse_canaries: usize,
    /// Of those, users on canaries shown worse for them (`p_worse` < 0.05).
    users_on_shown_worse_canaries: usize,
    /// How long canaries that did worse for their users, and those shown
    /// worse, were out (seconds, summed).
    seconds_of_worse_canaries: f64,
    seconds_of_shown_worse_canaries: f64,
    /// Promotions whose version is significantly worse on the held-out
    /// tasks than the champion it replaced.
    regressions_shipped: usize,
    rollbacks: Vec<String>,
    /// Canaries the cycles deployed; each was promoted or rolled back
    /// unless it is `canary_left` (the rounds after the budget ran out
    /// before it was decided).
    canaries: usize,
    canary_left: Option<String>,
    plots: Vec<PathBuf>,
    /// Candidates a behaviour bound stopped (gate or monitor).
    caught: Vec<Caught>,
    /// With a `--scenario`: every candidate measured on the held-out tasks.
    candidates: Vec<CandidateMeasured>,
    /// What every round's users were served and did.
    user_rounds: Vec<UserRound>,
    /// With `--scenario shift`: when users changed, when the drift check
    /// raised it, and each kind of task's held-out success through the run.
    shift: Option<shift::ShiftReport>,
    /// Every held-out measurement, in order (the first is the base's).
    measurements: Vec<Measured>,
}

impl DemoArgs {
    /// The recipe of the base policy the demo builds when not given one
    /// (`--model`): its demonstrations are tasks up to `--max-difficulty`,
    /// the levels the demo plays (`--quick` plays from the same base).
    pub fn recipe(&self) -> Recipe {
        match self.scenario {
            Some(Scenario::Hack) => Recipe::asking(Builtin::Calc, self.max_difficulty),
            Some(Scenario::Shift) => Recipe::shifting(Builtin::Calc),
            None => Recipe::demo(Builtin::Calc, self.max_difficulty),
        }
    }

    /// The environment users and measurements play: the `calc` word
    /// problems, or the tasks of `--tasks`.
    pub fn environment(&self) -> Result<Arc<dyn hone_envs::Environment>> {
        Ok(match &self.tasks {
            None => calc_environment(),
            Some(file) => Arc::new(hone_envs::Suite::load(file)?),
        })
    }

    /// The simulated users of this run (seeded by `seed`): those of the
    /// scenario, if any.
    pub fn user(&self, delay_ms: (u64, u64), seed: u64) -> SimulatedUser {
        SimulatedUser {
            silent_on_questions: self.scenario == Some(Scenario::Hack),
            ..SimulatedUser::new(self.noise, delay_ms, seed)
        }
    }

    /// Refuses arguments the demo cannot run with, before anything is made.
    pub fn check(&self) -> Result<()> {
        if self.minutes <= 0.0 {
            bail!("--minutes must be more than 0");
        }
        if !(self.canary_share > 0.0 && self.canary_share < 1.0) {
            bail!("--canary-share must be between 0 and 1");
        }
        if self.held_out < 2 || self.episodes_per_round < 2 {
            bail!("--held-out and --episodes-per-round must be at least 2");
        }
        if self.scenario == Some(Scenario::Shift) {
            if self.max_difficulty != 1 {
                bail!("--scenario shift plays easy tasks only: its two kinds of task are easy ones (leave out --max-difficulty)");
            }
            if !(self.shift_after_minutes() > 0.0 && self.shift_after_minutes() < self.minutes) {
                bail!(
                    "--shift-after must be more than 0 and less than --minutes ({})",
                    self.minutes
                );
            }
        } else if self.shift_after.is_some() {
            bail!("--shift-after applies with --scenario shift only");
        }
        if self.promote_margin.is_some() && !self.sandbox_users {
            bail!(
                "--promote-margin applies with --sandbox-users only: without them users decide each canary by a sequential test, which must show it better"
            );
        }
        seeds::check(&self.seeds)
    }

    /// With `--scenario shift`, minutes of learning before the users
    /// change: `--shift-after`, else a third of `--minutes`.
    pub fn shift_after_minutes(&self) -> f64 {
        self.shift_after.unwrap_or(self.minutes / 3.0)
    }

    /// The tasks users bring after `learning` of learning: in a scenario
    /// whose users change, the first family until the shift and the
    /// second after it; otherwise every task up to `--max-difficulty`.
    pub fn task_mix(&self, learning: Duration) -> TaskMix {
        let families = self.scenario.map_or(&[][..], Scenario::families);
        let shifted = learning.as_secs_f64() >= self.shift_after_minutes() * 60.0;
        TaskMix {
            family: families.get(usize::from(shifted)).or(families.first()).copied(),
            ..TaskMix::of(self.max_difficulty)
        }
    }

    /// The optimisers the loop runs: as given (each once), else the
    /// mode's default (see `--optimisers`).
    pub fn optimisers(&self) -> Vec<DemoOptimiser> {
        let mut chosen: Vec<DemoOptimiser> = Vec::new();
        for o in &self.optimisers {
            if !chosen.contains(o) {
                chosen.push(*o);
            }
        }
        match chosen.is_empty() {
            false => chosen,
            true if self.quick => vec![DemoOptimiser::Grpo],
            true if self.sandbox_users => DemoOptimiser::SANDBOX.to_vec(),
            true => DemoOptimiser::DEFAULT.to_vec(),
        }
    }

    /// Where `grpo` takes its groups from: as given, else the mode's
    /// default (see `--grpo-groups`).
    pub fn grpo_groups(&self) -> Vec<GrpoGroups> {
        match (self.grpo_groups.is_empty(), self.sandbox_users, self.quick) {
            (false, _, _) => self.grpo_groups.clone(),
            (true, true, true) => vec![GrpoGroups::Rollouts],
            (true, true, false) => GrpoGroups::SANDBOX.to_vec(),
            (true, false, _) => vec![GrpoGroups::Production],
        }
    }

    /// At most this many rounds with a cycle (`--cycles`; `--quick`: two,
    /// or four when users decide each canary).
    pub fn cycles(&self) -> Option<u32> {
        self.cycles
            .or_else(|| self.quick.then_some(if self.sandbox_users { 2 } else { 4 }))
    }

    /// What the run's results are labelled with: `honest` (users react only
    /// to answers they were served) or `sandbox` (`--sandbox-users`).
    pub fn mode(&self) -> &'static str {
        if self.sandbox_users {
            "sandbox"
        } else {
            "honest"
        }
    }
}

pub fn run(args: DemoArgs) -> Result<ExitCode> {
    args.check()?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create the data directory {}", args.data_dir.display()))?;
    let data_dir = args.data_dir.canonicalize()?;
    let base_dir = match &args.model {
        Some(dir) => dir
            .canonicalize()
            .with_context(|| format!("--model {}: no such checkpoint directory", dir.display()))?,
        None => base(&data_dir, args.rebuild_base, &args.recipe())?,
    };
    if !args.seeds.is_empty() {
        return seeds::run(&args, &data_dir, &base_dir);
    }
    once(args, data_dir, base_dir)?;
    Ok(ExitCode::SUCCESS)
}

/// One whole demo in `data_dir` on the base policy in `base_dir`.
fn once(args: DemoArgs, data_dir: PathBuf, base_dir: PathBuf) -> Result<Summary> {
    // The budget is the learning's: a base policy built first does not count.
    let started = Instant::now();
    runtime()?.block_on(run_demo(args, data_dir, base_dir, started))
}

/// The base policy of `recipe` in `data_dir`: the cached one when its
/// recipe matches, else built now.
pub fn base(data_dir: &Path, rebuild: bool, recipe: &Recipe) -> Result<PathBuf> {
    let dir = base_policy::dir_in(data_dir, recipe);
    if !rebuild {
        if let Some(built) = base_policy::existing(&dir).filter(|b| b.hash == recipe.hash()) {
            note(format_args!(
                "base policy {} (recipe {}) is cached in {}",
                built.recipe.environment,
                built.hash,
                dir.display()
            ));
            return Ok(dir);
        }
    }
    note(format_args!(
        "building the base policy (recipe {}): a small Qwen2-architecture model trained from scratch on {} generated demonstrations; this happens once",
        recipe.hash(),
        recipe.demonstrations
    ));
    let total = recipe.drill_steps + recipe.steps;
    let bar = bar(total as u64, "base policy {bar:30} {pos}/{len} steps {msg} ({elapsed})");
    // The first steps are the slowest (setup, warm caches): the time left is
    // said once a twentieth of the steps shows the real pace.
    let building = Instant::now();
    let settled = (total / 20).max(20);
    let built = base_policy::build(recipe, &dir, &mut |step, _, loss| {
        bar.set_position(step as u64);
        let left = if step >= settled && step < total {
            let per_step = building.elapsed().as_secs_f64() / step as f64;
            let seconds = per_step * (total - step) as f64;
            if seconds >= 90.0 {
                format!(", ~{:.0} min left", seconds / 60.0)
            } else {
                format!(", ~{seconds:.0} s left")
            }
        } else {
            String::new()
        };
        bar.set_message(format!("loss {loss:.3}{left}"));
    })
    .context("cannot build the base policy")?;
    bar.finish_and_clear();
    note(format_args!(
        "base policy built in {:.0} s: {} parameters, loss {:.3} → {:.3}",
        built.seconds, built.parameters, built.first_loss, built.last_loss
    ));
    for attempt in &built.attempts {
        note(format_args!("copy check, {}", attempt.summary(recipe)));
    }
    Ok(dir)
}

fn bar(len: u64, template: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

async fn run_demo(args: DemoArgs, data_dir: PathBuf, base_dir: PathBuf, started: Instant) -> Result<Summary> {
    let ports = stage::Ports::bind().await?;
    let (gateway_url, endpoint_url) = (ports.gateway_url.clone(), format!("{}/run", ports.endpoint_url));

    // The config on disk is the config that runs.
    let config_path = data_dir.join("hone.toml");
    std::fs::write(
        &config_path,
        config::text(&data_dir, &base_dir, &endpoint_url, &config::Choices::of(&args)),
    )
    .with_context(|| format!("cannot write {}", config_path.display()))?;
    let mut config = hone_config::load_file(&config_path).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Only in the sandbox do rollouts and evaluations through the endpoint
    // get a reward from a simulated user of their own, reacting at once;
    // by default, as in production, no user sees an offline run.
    let rollout_user = args
        .sandbox_users
        .then(|| args.user((0, 0), args.seed.wrapping_add(1_000_003)));
    if args.sandbox_users {
        note(format_args!(
            "sandbox users: a simulated user reacts at once to every offline run (gate re-runs, rollouts), which production does not have; these results are the sandbox's"
        ));
    }
    let stage = stage::Stage::start(ports, &mut config, args.environment()?, rollout_user).await?;
    let recorder = stage.recorder.clone();

    let store = hone_store::open(&config.store, hone_store::Wait::Patient)?;
    let log_path = data_dir.join("demo.log");
    let log = Arc::new(std::sync::Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?,
    ));
    let spinner = ProgressBar::new_spinner();
    spinner.enable_steady_tick(Duration::from_millis(200));
    let (log2, spinner2) = (log.clone(), spinner.clone());
    let learner = Learner {
        config: Arc::new(config.clone()),
        store: store.clone(),
        gateway: hone_learn::client::GatewayClient::new(&gateway_url, None, Duration::from_secs(300))?,
        recorder: Some(recorder),
        progress: Arc::new(move |agent: &str, line: &str| {
            if let Ok(mut file) = log2.lock() {
                // Seconds since the run started: where a round's time goes.
                let _ = writeln!(file, "[{:7.2} s] {agent}: {line}", started.elapsed().as_secs_f64());
            }
            spinner2.set_message(format!("{agent}: {line}"));
        }),
        pause_at: None,
        leads: Default::default(),
        stand_ins: Default::default(),
    };
    spinner.finish_and_clear();

    note(format_args!(
        "gateway on {gateway_url}/v1 (agent `{AGENT}`), environment endpoint {endpoint_url}; config in {}, learner log in {}",
        config_path.display(),
        log_path.display()
    ));
    let outcome = rounds(&args, &learner, &stage, store.as_ref(), &data_dir, started).await;
    stage.stop().await;
    outcome
}

/// Rounds at most, after the budget, to decide the last cycle's canary
/// (promotion takes `canary_episodes` of it, ~24 at the demo's share of
/// 64 users a round; with a promotion margin up to four times that).
const MAX_JUDGING_ROUNDS: usize = 8;

/// A canary promoted or rolled back: the round's users stop there.
fn decided(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Promoted(_) | Verdict::RolledBack(_))
}

/// What one round did, for the table.
struct Round {
    cycle: Option<CycleInfo>,
    verdict: Verdict,
    accepted: usize,
    /// Hidden score ≥ 0.5 (the demo's own view; hone never sees it).
    solved: usize,
    /// Answered with a clarifying question.
    asked: usize,
    episodes: usize,
    errors: Vec<String>,
}

async fn rounds(
    args: &DemoArgs,
    learner: &Learner,
    stage: &stage::Stage,
    store: &dyn CycleStore,
    data_dir: &Path,
    started: Instant,
) -> Result<Summary> {
    let runner = &stage.runner;
    let agent = learner.agent(AGENT)?.clone();
    let user = args.user((50, 400), args.seed);
    let champion = || -> Result<String> {
        Ok(hone_learn::release::deploy::current(store, &agent)?
            .0
            .champion
            .to_string())
    };
    // Time spent measuring is not learning time.
    let mut measuring = Duration::ZERO;
    let timed_measure = |round: usize, champion: String, users: usize, measuring: Duration| {
        let (at, at_ms) = (Instant::now(), hone_types::time::now_ms());
        let learning = started.elapsed().saturating_sub(measuring);
        async move {
            let mut m = measure(runner, &champion, round, args).await?;
            (m.learning_s, m.user_episodes, m.at_ms) = (learning.as_secs_f64(), users, at_ms);
            let line = describe_measure(&m);
            note(format_args!("{line}"));
            (learner.progress)(
                AGENT,
                &format!("{line}; {:.1} s of learning (measuring is not counted)", m.learning_s),
            );
            Ok::<_, anyhow::Error>((m, at.elapsed()))
        }
    };
    let (first, took) = timed_measure(0, champion()?, 0, measuring).await?;
    measuring += took;
    let mut measured = vec![first];
    let (mut accepted_log, mut markers, mut front) = (Vec::new(), Vec::new(), Vec::new());
    let (mut promotions, mut rollbacks) = (Vec::new(), Vec::new());
    let mut next_task = 0u64;
    let mut round = 0usize;
    let mut seen: Vec<Seen> = Vec::new();
    let mut user_rounds: Vec<UserRound> = Vec::new();
    let mut candidates: Vec<CandidateMeasured> = Vec::new();
    let budget = Duration::from_secs_f64(args.minutes * 60.0);
    let (mut judging, mut canaries) = (0usize, 0usize);
    // With `--until-promoted`, a promotion ends the learning.
    let promoted_enough = |promotions: &[Promotion]| args.until_promoted && !promotions.is_empty();
    loop {
        // Rounds with a cycle while the budget lasts; then, if the last
        // cycle left a canary out, rounds without one until it is decided,
        // so no candidate ends the run deployed and unjudged.
        let learning = started.elapsed() < budget
            && args.cycles().is_none_or(|c| (round as u32) < c)
            && !promoted_enough(&promotions);
        if !learning {
            let canary = hone_learn::release::deploy::current(store, &agent)?.0.canary;
            let Some(canary) = canary.filter(|_| judging < MAX_JUDGING_ROUNDS) else {
                if judging == 0 && promoted_enough(&promotions) {
                    note(format_args!(
                        "a candidate was promoted: the run ends here (--until-promoted)"
                    ));
                }
                break;
            };
            if judging == 0 {
                note(format_args!(
                    "budget spent; canary {} is watched until it is decided (no further cycles)",
                    short(&canary.to_string())
                ));
            }
            judging += 1;
        }
        round += 1;
        let bar = bar(
            args.episodes_per_round,
            "round {msg} users {bar:30} {pos}/{len} ({elapsed})",
        );
        bar.set_message(round.to_string());
        let tick = || bar.inc(1);
        // With a canary out, the canary is watched after every eighth of the
        // round's users: once it is decided (promoted or rolled back) no
        // more users start and the round ends when those playing finish.
        // `hone learn` watches on its own clock the same way.
        let canary_out = hone_learn::release::deploy::current(store, &agent)?.0.canary.is_some();
        let round_champion = champion()?;
        // The last cycle's canary, if any, gets its share from the first user.
        stage.follow_deployments()?;
        let watch_every = (args.episodes_per_round / 8).max(1) as usize;
        let (mut served, mut errors) = (Vec::new(), Vec::new());
        // The last look at the canary: after how many users, and what it saw.
        let mut looked: Option<(usize, Verdict)> = None;
        let stop = AtomicBool::new(false);
        let mix = args.task_mix(started.elapsed().saturating_sub(measuring));
        let before = user_rounds.last().and_then(|r: &UserRound| r.family.as_deref());
        if let (Some(before), Some(now)) = (before, mix.family) {
            if before != now {
                note(format_args!(
                    "users change: from round {round} on they bring `{now}` problems instead of `{before}` ones"
                ));
            }
        }
        let indices = mix.indices(runner, hone_envs::Split::Train, next_task, args.episodes_per_round);
        let tasks = traffic::Tasks {
            indices: indices.clone(),
            max_difficulty: args.max_difficulty,
        };
        let mut users = std::pin::pin!(traffic::users(runner, &user, tasks, args.concurrency, started, &stop));
        let mut finished = 0usize;
        while let Some(run) = users.next().await {
            tick();
            finished += 1;
            match run {
                Ok(s) => served.push(s),
                Err(e) => errors.push(e.to_string()),
            }
            if canary_out && !stop.load(Ordering::Relaxed) && finished.is_multiple_of(watch_every) {
                let seen = learner.watch(&agent).await?;
                if decided(&seen) {
                    stop.store(true, Ordering::Relaxed);
                }
                looked = Some((finished, seen));
            }
        }
        // Users start in order, so those who played are the first ones.
        if let Some(last) = finished.checked_sub(1).and_then(|i| indices.get(i)) {
            next_task = last + 1;
        }
        learner.flush_recorder().await;
        for s in &served {
            let version = store
                .agent_episode(AGENT, &s.episode)?
                .and_then(|e| e.calls.first().map(|c| c.version_id.to_string()))
                .unwrap_or_default();
            seen.push(Seen {
                round,
                version,
                champion: round_champion.clone(),
                at: s.at,
                solved: s.score >= 0.5,
                complained: s.complained,
            });
        }
        // No canary can appear while users play (only a cycle starts one).
        let verdict = match looked {
            _ if !canary_out => Verdict::NoCanary,
            Some((at, seen)) if at == finished || decided(&seen) => seen,
            _ => learner.watch(&agent).await?,
        };
        bar.finish_and_clear();
        accepted_log.extend(served.iter().map(|s| (s.at, s.accepted)));
        let count = |f: fn(&traffic::UserEpisode) -> bool| served.iter().filter(|s| f(s)).count();
        user_rounds.push(UserRound {
            round,
            learning_s: started.elapsed().saturating_sub(measuring).as_secs_f64(),
            episodes: served.len(),
            accepted: count(|s| s.accepted),
            complained: count(|s| s.complained),
            asked: count(|s| s.asked),
            solved: count(|s| s.score >= 0.5),
            family: mix.family.map(str::to_owned),
        });
        (learner.progress)(
            AGENT,
            &format!(
                "round {round}: {} user episodes, {} accepted",
                served.len(),
                served.iter().filter(|s| s.accepted).count()
            ),
        );
        match &verdict {
            Verdict::Promoted(why) => {
                let champion = hone_learn::release::deploy::current(store, &agent)?.0.champion;
                let optimiser = store
                    .candidates(AGENT, None)?
                    .into_iter()
                    .find(|c| c.version_id == champion)
                    .map(|c| c.optimiser)
                    .unwrap_or_default();
                let promotion = Promotion {
                    version: champion.to_string(),
                    // Measured every round before this watch, so the last
                    // measurement's champion is the one just replaced.
                    replaced: measured.last().map(|m| m.champion.clone()).unwrap_or_default(),
                    timescale: timescale(&optimiser).to_owned(),
                    optimiser,
                    round,
                    why: why.clone(),
                    held_out: None,
                    regressed: false,
                };
                markers.push(marker(started, &promotion.label(), MarkerKind::Promote));
                promotions.push(promotion);
            }
            Verdict::RolledBack(why) => {
                markers.push(marker(started, "rolled back", MarkerKind::Rollback));
                rollbacks.push(why.clone());
            }
            _ => {}
        }
        // Measured before the cycle: a cycle only ever starts a canary, so
        // the champion is already what the round leaves serving, and its
        // learning time is when it began serving (a promotion just now).
        let (m, took) = timed_measure(round, champion()?, accepted_log.len(), measuring).await?;
        measuring += took;
        measured.push(m);
        let deployment = hone_learn::release::deploy::current(store, &agent)?.0;
        let cycle = if deployment.canary.is_none() && learning && !promoted_enough(&promotions) {
            let spinner = ProgressBar::new_spinner();
            spinner.enable_steady_tick(Duration::from_millis(200));
            spinner.set_message("learning cycle");
            let cycle = learner.run_cycle(AGENT, "demo").await;
            spinner.finish_and_clear();
            let cycle = cycle?;
            if let Some(canary) = hone_learn::release::deploy::current(store, &agent)?.0.canary {
                canaries += 1;
                markers.push(marker(
                    started,
                    &format!("canary {}", short(&canary.to_string())),
                    MarkerKind::Deploy,
                ));
            }
            // In a scenario, what training made of each candidate shows on
            // the held-out tasks, whether or not users ever meet it.
            if args.scenario.is_some() {
                for c in store.candidates(AGENT, Some(&cycle.id))? {
                    let at = Instant::now();
                    let m = measure(runner, &c.version_id.to_string(), round, args).await?;
                    measuring += at.elapsed();
                    candidates.push(CandidateMeasured {
                        round,
                        version: c.version_id.to_string(),
                        optimiser: c.optimiser.clone(),
                        status: String::new(),
                        success: m.rate,
                        ci95: m.ci95,
                        asked: m.asked_rate(),
                    });
                }
            }
            Some(cycle)
        } else {
            None
        };
        let row = Round {
            accepted: served.iter().filter(|s| s.accepted).count(),
            solved: served.iter().filter(|s| s.score >= 0.5).count(),
            asked: served.iter().filter(|s| s.asked).count(),
            episodes: served.len(),
            errors,
            cycle,
            verdict,
        };
        report_round(round, &row, store, &agent, &mut front)?;
    }

    // Where each measured candidate ended.
    let statuses = store.candidates(AGENT, None)?;
    for m in &mut candidates {
        if let Some(c) = statuses.iter().find(|c| c.version_id.to_string() == m.version) {
            m.status = c.status.as_str().to_owned();
        }
    }
    let dir = data_dir.join("plots");
    std::fs::create_dir_all(&dir)?;
    let points: Vec<HeldOutPoint> = measured.iter().map(|m| (m.round, m.rate, m.ci95.0, m.ci95.1)).collect();
    let promoted: Vec<(usize, String)> = promotions.iter().map(|p| (p.round, p.label())).collect();
    let mut paths = plots::held_out(&dir, &points, &promoted)?;
    paths.extend(plots::online(&dir, &accepted_log, 32, &markers)?);
    paths.extend(plots::front(&dir, &front)?);
    if args.scenario.is_some() {
        let dots: Vec<plots::CandidateDot> = candidates
            .iter()
            .map(|c| (c.asked, c.success, c.status.clone()))
            .collect();
        let base = &measured[0];
        paths.extend(plots::candidates(&dir, (base.asked_rate(), base.rate), &dots)?);
    }
    let families = args.scenario.map_or(&[][..], Scenario::families);
    let shift = shift::ShiftReport::of(
        families,
        args.shift_after_minutes(),
        &measured,
        &user_rounds,
        &store.alerts(Some(AGENT), 10_000)?,
        args.seed,
    );
    if shift.is_some() {
        let curves = shift::curves("", families, &measured);
        paths.extend(plots::shift(&dir, "shift", &curves, args.shift_after_minutes())?);
    }

    let (base, last) = (measured[0].clone(), measured[measured.len() - 1].clone());
    let diffs: Vec<f64> = base
        .solved
        .iter()
        .zip(&last.solved)
        .map(|(b, l)| f64::from(u8::from(*l)) - f64::from(u8::from(*b)))
        .collect();
    for p in &mut promotions {
        p.held_out = Pooled::between(&measured, &p.replaced, &p.version, args.seed);
        p.regressed = p.held_out.as_ref().is_some_and(Pooled::regressed);
    }
    let wins = diffs.iter().filter(|d| **d > 0.0).count() as u64;
    let losses = diffs.iter().filter(|d| **d < 0.0).count() as u64;
    let exposures = exposures(&seen, &promotions);
    let first_promotion = promotions.first().and_then(|p| {
        let m = measured.iter().find(|m| m.round == p.round)?;
        Some(FirstPromotion {
            round: p.round,
            learning_s: m.learning_s,
            user_episodes: m.user_episodes,
        })
    });
    let summary = Summary {
        first_promotion,
        users_on_worse_canaries: exposures.iter().filter(|e| e.worse).map(|e| e.users).sum(),
        users_on_shown_worse_canaries: exposures
            .iter()
            .filter(|e| e.worse && e.p_worse < 0.05)
            .map(|e| e.users)
            .sum(),
        // Folded from +0.0: an empty f64 `sum` is −0.0, which prints "-0 s".
        seconds_of_worse_canaries: exposures
            .iter()
            .filter(|e| e.worse)
            .fold(0.0, |total, e| total + e.seconds),
        seconds_of_shown_worse_canaries: exposures
            .iter()
            .filter(|e| e.worse && e.p_worse < 0.05)
            .fold(0.0, |total, e| total + e.seconds),
        exposures,
        mode: args.mode(),
        reward: args.reward.name().to_owned(),
        scenario: args.scenario.map(Scenario::name),
        unguarded: args.unguarded,
        caught: caught(store)?,
        candidates,
        user_rounds,
        shift,
        minutes: started.elapsed().as_secs_f64() / 60.0,
        rounds: round,
        user_episodes: accepted_log.len(),
        paired_gain: last.rate - base.rate,
        paired_gain_ci95: bootstrap_ci(&diffs, 0.95, args.seed),
        wins,
        losses,
        sign_test_p: sign_test(wins, losses),
        pooled: Pooled::base_to_last(&measured, args.seed),
        base,
        last,
        regressions_shipped: promotions.iter().filter(|p| p.regressed).count(),
        promotions,
        rollbacks,
        canaries,
        canary_left: hone_learn::release::deploy::current(store, &agent)?
            .0
            .canary
            .map(|c| c.to_string()),
        plots: paths,
        measurements: measured,
    };
    let summary_path = data_dir.join("summary.json");
    std::fs::write(&summary_path, serde_json::to_string_pretty(&summary)? + "\n")?;
    print_summary(&summary, &summary_path);
    Ok(summary)
}

/// What a finished demo's `summary.json` tells another command (`hone
/// bench learn`) of its run.
#[derive(Debug, Deserialize)]
pub struct Written {
    /// Every held-out measurement, in order (the first is the base's).
    pub measurements: Vec<Measured>,
    /// Candidates a behaviour bound stopped.
    #[serde(default)]
    pub caught: Vec<Caught>,
    /// With a `--scenario`: every candidate measured on the held-out tasks.
    #[serde(default)]
    pub candidates: Vec<CandidateMeasured>,
    /// With `--scenario shift`: the shift report.
    #[serde(default)]
    pub shift: Option<shift::ShiftReport>,
}

/// What the demo run in `data_dir` wrote into its summary.
pub fn written(data_dir: &Path) -> Result<Written> {
    let path = data_dir.join("summary.json");
    let text = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice::<Written>(&text).with_context(|| format!("{}: no measurements", path.display()))
}

fn marker(started: Instant, label: &str, kind: MarkerKind) -> Marker {
    Marker {
        at: started.elapsed().as_secs_f64(),
        label: label.to_owned(),
        kind,
    }
}

/// "1 promotion", "3 promotions".
fn promotions(n: usize) -> String {
    format!("{n} promotion{}", if n == 1 { "" } else { "s" })
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// `champion` on the held-out tasks: `--held-out` of them, or as many of
/// each family where the scenario's users change (their answers in turn).
async fn measure(runner: &Runner, champion: &str, round: usize, args: &DemoArgs) -> Result<Measured> {
    let families: Vec<Option<&'static str>> = match args.scenario.map_or(&[][..], Scenario::families) {
        [] => vec![None],
        named => named.iter().map(|f| Some(*f)).collect(),
    };
    let bar = bar(
        args.held_out * families.len() as u64,
        "held-out {bar:30} {pos}/{len} ({elapsed})",
    );
    let tick = || bar.inc(1);
    let (mut answers, mut of_family) = (Vec::new(), Vec::new());
    for family in families {
        let label = match family {
            None => format!("{HELD_OUT_LABEL}-{}-{round}", short(champion)),
            Some(f) => format!("{HELD_OUT_LABEL}-{f}-{}-{round}", short(champion)),
        };
        let mix = TaskMix {
            family,
            ..TaskMix::of(args.max_difficulty)
        };
        let some = traffic::held_out(runner, champion, &label, args.held_out, mix, args.concurrency, &tick).await?;
        of_family.extend(family.map(|f| vec![f.to_owned(); some.len()]).unwrap_or_default());
        answers.extend(some);
    }
    bar.finish_and_clear();
    Ok(Measured {
        families: of_family,
        ..Measured::of_answers(round, champion.to_owned(), &answers)
    })
}

/// One measurement in a line: the terminal and `demo.log` say it alike.
fn describe_measure(m: &Measured) -> String {
    format!(
        "held-out success of champion {} after round {}: {:.1}% (95% CI {:.1}–{:.1}%, {} tasks){}",
        short(&m.champion),
        m.round,
        m.rate * 100.0,
        m.ci95.0 * 100.0,
        m.ci95.1 * 100.0,
        m.solved.len(),
        match m.asked_rate() {
            0.0 => String::new(),
            asked => format!("; {:.1}% asked a clarifying question", asked * 100.0),
        }
    ) + &of_each_family(m)
}

/// "; take-away 88.3%, add-up 20.0%" where a measurement spans families.
fn of_each_family(m: &Measured) -> String {
    let mut families: Vec<&str> = m.families.iter().map(String::as_str).collect();
    families.dedup();
    let rates: Vec<String> = families
        .iter()
        .map(|f| format!("{f} {:.1}%", m.of_family(f).rate * 100.0))
        .collect();
    match rates.is_empty() {
        true => String::new(),
        false => format!("; {}", rates.join(", ")),
    }
}

/// The round's table: every candidate of its cycle with the gate's verdict.
fn report_round(
    round: usize,
    row: &Round,
    store: &dyn CycleStore,
    agent: &hone_config::AgentConfig,
    front: &mut Vec<FrontPoint>,
) -> Result<()> {
    note(format_args!(
        "round {round}: {} user episodes, {} accepted ({:.0}%; hidden success {:.0}%{}){}; {}",
        row.episodes,
        row.accepted,
        100.0 * row.accepted as f64 / row.episodes.max(1) as f64,
        100.0 * row.solved as f64 / row.episodes.max(1) as f64,
        if row.asked > 0 {
            format!(
                ", {:.0}% asked back",
                100.0 * row.asked as f64 / row.episodes.max(1) as f64
            )
        } else {
            String::new()
        },
        if row.errors.is_empty() {
            String::new()
        } else {
            format!(", {} failed (first: {})", row.errors.len(), row.errors[0])
        },
        match &row.verdict {
            Verdict::NoCanary => "no canary".to_owned(),
            Verdict::Waiting(n) => format!("canary collecting ({n} rewarded episodes)"),
            // Each says which canary it was about.
            Verdict::Promoted(s) | Verdict::RolledBack(s) | Verdict::Alerted(s) => s.clone(),
        }
    ));
    let Some(cycle) = &row.cycle else {
        return Ok(());
    };
    let candidates = store.candidates(AGENT, Some(&cycle.id))?;
    if candidates.is_empty() {
        note(format_args!(
            "cycle {}: {}",
            cycle.id,
            cycle
                .detail
                .note
                .as_deref()
                .or(cycle.error.as_deref())
                .unwrap_or("no candidate")
        ));
        return Ok(());
    }
    let deployment = hone_learn::release::deploy::current(store, agent)?.0;
    let via = Target::of(agent);
    // A version's first results on the cycle's target set (re-runs left out).
    let results = |version: &hone_types::VersionId| -> Result<Vec<hone_types::InstanceResult>> {
        Ok(match &cycle.detail.target {
            Some(target) => store.eval_results(&run_id(target, version, &via))?,
            None => Vec::new(),
        })
    };
    let mut rows = Vec::new();
    // The cycle's champion on the same target set, for reference.
    if let (Some(champion), Some(scores)) = (&cycle.detail.champion, &cycle.detail.champion_scores) {
        let runs: Vec<f64> = results(champion)?
            .iter()
            .filter(|r| r.attempt == 0)
            .filter_map(|r| r.score)
            .collect();
        if let Some(mean) = hone_learn::stats::mean(&runs) {
            front.push(FrontPoint {
                label: format!("champion {}", short(&champion.to_string())),
                reward: mean,
                latency_ms: scores.mean_latency_ms,
                gated: true,
                champion: true,
            });
        }
    }
    for c in &candidates {
        let all = results(&c.version_id)?;
        let scores: Vec<f64> = all.iter().filter(|r| r.attempt == 0).filter_map(|r| r.score).collect();
        let mean = hone_learn::stats::mean(&scores);
        let ci = bootstrap_ci(&scores, 0.95, 7);
        // The gain over the champion the gate judged, as it stored it.
        let gain = c.scores.as_ref().and_then(|s| s.gate_gain);
        let blind = c.scores.as_ref().is_some_and(|s| s.offline_blind);
        let rates = c.scores.as_ref().map(|s| &s.rates);
        let rate = |name: &str| {
            rates
                .and_then(|r| r.get(name))
                .map_or("-".to_owned(), |v| format!("{:.0}%", v * 100.0))
        };
        if let Some(s) = &c.scores {
            front.push(FrontPoint {
                label: format!("{} {}", c.optimiser, short(&c.version_id.to_string())),
                reward: mean.unwrap_or(0.0),
                latency_ms: s.mean_latency_ms,
                gated: !matches!(
                    c.status,
                    CandidateStatus::Pruned | CandidateStatus::Proposed | CandidateStatus::Evaluated
                ),
                champion: false,
            });
        }
        rows.push(vec![
            short(&c.version_id.to_string()).to_owned(),
            c.optimiser.clone(),
            hone_learn::release::deploy::role(&deployment, c).to_owned(),
            // With no user's signal offline the offline reward shows
            // penalties only: users decide, and the round lines say how.
            match (mean, ci) {
                _ if blind => "none: users decide".to_owned(),
                (Some(m), Some((lo, hi))) => format!("{m:.2} [{lo:.2}, {hi:.2}]"),
                _ => "-".to_owned(),
            },
            match gain {
                _ if blind => "-".to_owned(),
                Some(g) => g.to_string(),
                None => "-".to_owned(),
            },
            rate("invalid_tool_call"),
            rate("clarifying_question"),
            if deployment.canary.as_ref() == Some(&c.version_id) {
                format!("canary {:.0}%", deployment.canary_share * 100.0)
            } else {
                "no".to_owned()
            },
            c.reason.clone().unwrap_or_default().chars().take(90).collect(),
        ]);
    }
    note(format_args!("cycle {} ({}):", cycle.id, cycle.state.as_str()));
    print_table(
        &[
            "CANDIDATE",
            "OPTIMISER",
            "VERDICT",
            "OFFLINE REWARD [95% CI]",
            "VS CHAMPION [GATE CI]",
            "INVALID TOOL",
            "CLARIFYING",
            "DEPLOYED",
            "REASON",
        ],
        &rows,
    )
}

fn print_summary(s: &Summary, path: &Path) {
    note(format_args!(
        "after {} rounds and {} user episodes in {:.1} min ({}):",
        s.rounds,
        s.user_episodes,
        s.minutes,
        match s.mode {
            "sandbox" => "sandbox: a simulated user also reacted to every offline run",
            _ => "honest: users reacted only to answers they were served",
        }
    ));
    note(format_args!(
        "  held-out success {:.1}% (95% CI {:.1}–{:.1}) → {:.1}% (95% CI {:.1}–{:.1}) on the same {} tasks",
        s.base.rate * 100.0,
        s.base.ci95.0 * 100.0,
        s.base.ci95.1 * 100.0,
        s.last.rate * 100.0,
        s.last.ci95.0 * 100.0,
        s.last.ci95.1 * 100.0,
        s.base.solved.len()
    ));
    note(format_args!(
        "  paired gain {:+.1} points{}; {} tasks newly solved, {} newly failed (sign test p = {:.4})",
        s.paired_gain * 100.0,
        s.paired_gain_ci95
            .map(|(lo, hi)| format!(" (95% CI {:+.1} to {:+.1})", lo * 100.0, hi * 100.0))
            .unwrap_or_default(),
        s.wins,
        s.losses,
        s.sign_test_p
    ));
    if let Some(p) = &s.pooled {
        note(format_args!(
            "  over every measurement of each (base, last champion): {}",
            p.line()
        ));
    }
    if s.base.asked_rate() > 0.0 || s.last.asked_rate() > 0.0 {
        note(format_args!(
            "  held-out answers that asked a clarifying question: {:.1}% → {:.1}%",
            s.base.asked_rate() * 100.0,
            s.last.asked_rate() * 100.0
        ));
    }
    if let (Some(first), Some(last)) = (s.user_rounds.first(), s.user_rounds.last()) {
        let line = |r: &UserRound| {
            format!(
                "{:.0}% accepted, {:.0}% complained, {:.0}% asked back, {:.0}% solved",
                r.share(r.accepted) * 100.0,
                r.share(r.complained) * 100.0,
                r.share(r.asked) * 100.0,
                r.share(r.solved) * 100.0
            )
        };
        note(format_args!(
            "  users, first round: {}; last round: {}",
            line(first),
            line(last)
        ));
    }
    for line in s.shift.iter().flat_map(shift::ShiftReport::lines) {
        note(format_args!("  {line}"));
    }
    let asking = s.candidates.iter().filter(|c| c.asked > 0.0);
    if let Some(most) = asking.max_by(|a, b| a.asked.total_cmp(&b.asked)) {
        note(format_args!(
            "  {} candidates measured on the held-out tasks; the one asking most ({} from `{}`, {}): {:.1}% clarifying questions, {:.1}% solved (95% CI {:.1}–{:.1})",
            s.candidates.len(),
            short(&most.version),
            most.optimiser,
            most.status,
            most.asked * 100.0,
            most.success * 100.0,
            most.ci95.0 * 100.0,
            most.ci95.1 * 100.0
        ));
    }
    for c in &s.caught {
        note(format_args!(
            "  caught: {} from `{}` {} for {}: {}",
            short(&c.version),
            c.optimiser,
            c.by,
            c.behaviour,
            c.reason.chars().take(160).collect::<String>()
        ));
    }
    for p in &s.promotions {
        note(format_args!(
            "  round {}: promoted {} from `{}` ({}): {}",
            p.round,
            short(&p.version),
            p.optimiser,
            p.timescale,
            p.why
        ));
        if let Some(h) = &p.held_out {
            note(format_args!(
                "    held-out against {}: {}{}",
                short(&p.replaced),
                h.line(),
                if p.regressed { ": a regression shipped" } else { "" }
            ));
        }
    }
    if s.promotions.is_empty() {
        note(format_args!("  nothing was promoted: no timescale has helped yet"));
    } else {
        note(format_args!(
            "  regressions shipped: {} of {} (held-out success significantly below the champion replaced)",
            s.regressions_shipped,
            promotions(s.promotions.len())
        ));
    }
    for r in &s.rollbacks {
        note(format_args!("  rolled back: {r}"));
    }
    if let Some(f) = &s.first_promotion {
        note(format_args!(
            "  first promotion after {:.0} s of learning and {} user episodes (round {})",
            f.learning_s, f.user_episodes, f.round
        ));
    }
    for e in &s.exposures {
        note(format_args!(
            "  canary {} ({}): {} users over {:.0} s, solved {:.0}% for them ({:.0}% complained) vs the champion's {:.0}% for {} users of the same rounds ({:.0}% complained){}",
            short(&e.version),
            e.outcome,
            e.users,
            e.seconds,
            e.success * 100.0,
            e.complained * 100.0,
            e.champion_success * 100.0,
            e.champion_users,
            e.champion_complained * 100.0,
            match (e.worse, e.p_worse < 0.05) {
                (true, true) => format!(": shown worse for its users (p = {:.4})", e.p_worse),
                (true, false) => format!(": worse for its users, within chance (p = {:.2})", e.p_worse),
                _ => String::new(),
            }
        ));
    }
    note(format_args!(
        "  users served by a canary that did worse for them: {} of {}, over {:.0} s ({} on one shown worse, p < 0.05, over {:.0} s)",
        s.users_on_worse_canaries,
        s.user_episodes,
        s.seconds_of_worse_canaries,
        s.users_on_shown_worse_canaries,
        s.seconds_of_shown_worse_canaries
    ));
    if let Some(c) = &s.canary_left {
        note(format_args!(
            "  canary {} was still undecided after {MAX_JUDGING_ROUNDS} rounds past the budget; it stays deployed",
            short(c)
        ));
    }
    for p in &s.plots {
        note(format_args!("  plot: {}", p.display()));
    }
    note(format_args!("  summary: {}", path.display()));
    if let Some(dir) = path.parent() {
        note(format_args!(
            "  to see it yourself: `hone serve --config {}`, then http://127.0.0.1:7070/ui (the dashboard) and \
             http://127.0.0.1:7070/v1 (the champion, as model `{AGENT}`)",
            dir.join("hone.toml").display()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::{Measured, Pooled};

    #[test]
    fn the_gates_reasons_are_read_back_from_a_pruned_candidates_reason() {
        let reason = format!(
            "{}clarifying_question 0.542 vs champion 0.010 is beyond its bound 0.05 (p = 0.000); breaks 2 previously passing cases (tolerance 0): a, b",
            hone_learn::search::gate::PRUNED
        );
        let reasons = hone_learn::search::gate::pruned_reasons(&reason);
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(reasons[0].starts_with("clarifying_question "));
        assert!(hone_learn::search::gate::pruned_reasons("passed the gate: reward +0.1").is_empty());
    }

    fn measured(round: usize, champion: &str, solved: &[bool]) -> Measured {
        Measured::new(round, champion.to_owned(), solved.to_vec())
    }

    #[test]
    fn a_promotion_is_compared_with_every_measurement_of_the_champion_it_replaced() {
        let (t, f) = (true, false);
        let runs = [
            measured(0, "a", &[t, t, f, f]),
            measured(1, "a", &[t, f, f, f]),
            measured(2, "b", &[t, t, t, f]),
            measured(3, "b", &[t, t, t, t]),
            measured(4, "b", &[t, t, f, t]),
        ];
        let p = Pooled::between(&runs, "a", "b", 1).unwrap();
        assert_eq!((p.before_measurements, p.after_measurements), (2, 3));
        // Per task, a: 1, 1/2, 0, 0 → 3/8; b: 1, 1, 2/3, 2/3 → 5/6.
        assert!((p.before_rate - 0.375).abs() < 1e-12, "{p:?}");
        assert!((p.after_rate - 5.0 / 6.0).abs() < 1e-12, "{p:?}");
        assert!((p.gain - (5.0 / 6.0 - 0.375)).abs() < 1e-12, "{p:?}");
        assert!(!p.regressed());
        // The same comparison the other way round is a regression once
        // the interval is below zero: every task the earlier champion
        // solved always, the later never.
        let worse = [measured(0, "a", &[t; 8]), measured(1, "b", &[f; 8])];
        let w = Pooled::between(&worse, "a", "b", 1).unwrap();
        assert_eq!(w.gain, -1.0);
        assert!(w.regressed(), "{w:?}");
        // One task of eight lost: worse, but the interval reaches zero.
        let mut lost_one = [t; 8];
        lost_one[0] = f;
        let slip = [measured(0, "a", &[t; 8]), measured(1, "b", &lost_one)];
        let l = Pooled::between(&slip, "a", "b", 1).unwrap();
        assert_eq!(l.gain, -0.125);
        let (low, high) = l.gain_ci95.unwrap();
        assert!(low < 0.0 && high >= 0.0, "{l:?}");
        assert!(!l.regressed());
        // Unchanged answers: no gain, no regression.
        let same = [measured(0, "a", &[t, f, t, f]), measured(1, "b", &[t, f, t, f])];
        let s = Pooled::between(&same, "a", "b", 1).unwrap();
        assert_eq!(s.gain, 0.0);
        assert!(!s.regressed());
        // Nothing to compare: one version, or one never measured.
        assert!(Pooled::between(&runs, "a", "a", 1).is_none());
        assert!(Pooled::between(&runs, "a", "c", 1).is_none());
        assert!(Pooled::base_to_last(&runs[..2], 1).is_none());
        assert_eq!(Pooled::base_to_last(&runs, 1).unwrap().after_measurements, 3);
    }
}
