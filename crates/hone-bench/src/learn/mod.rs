//! `hone bench learn`: the same base checkpoint, environment and budget
//! learned by hone and by TRL's `GRPOTrainer`, one after the other on this
//! machine, and how long each took to reach a held-out success threshold.
//!
//! - hone's loop: `hone demo` as it ships (simulated users' implicit
//!   feedback on the answers they were served, the whole loop: cycles,
//!   gate, canary decided by users, promotion), in `<data-dir>/hone`;
//!   `--optimisers`, `--optimisers-per-cycle`, `--grpo-groups`,
//!   `--canary-share` and `--gate-confidence` choose its loop as they do
//!   the demo's.
//! - hone's loop on TRL: the same with `--trainer trl` (its weight
//!   optimisers' adapters trained by TRL under `accelerate launch`, with
//!   `--python`), in `<data-dir>/hone-trl`.
//! - hone's loop in the sandbox: the same with `--sandbox-users` (a
//!   simulated user also rewards every offline run on demand), in
//!   `<data-dir>/hone-sandbox`: both modes, side by side. The two sides
//!   below are sandboxes by nature — they sample their own episodes and
//!   need a reward for each on demand — and are labelled so.
//! - hone's GRPO alone ([`alone`]): hone's trainer on its own engine's
//!   samples in TRL's steps, same reward and lr, no gate and no canary —
//!   hone's learner against TRL's on equal terms.
//! - TRL: `python/learn_trl.py` — GRPO with a PEFT LoRA on multi-step
//!   episodes it samples itself, tools run by the same environment through
//!   its endpoint (`POST /step`), rewarded as hone's learner rewards its
//!   rollouts (`--trl-reward users`, [`reward`]: a simulated user's
//!   implicit signals and the reward spec's penalties) or with the hidden
//!   score (`--trl-reward hidden`, a cleaner signal than hone's users give),
//!   checkpointed every `--checkpoint-seconds` of learning, in
//!   `<data-dir>/trl`.
//!
//! `--sides` picks the learners (hone's loop always runs: the others are
//! measured through its gateway). `--scenario` puts every side under one of
//! the demo's real-world conditions ([`scenario`]): users with a blind spot
//! (`hack`) reward TRL's and hone's GRPO alone's episodes as they reward
//! the loop's, so a learner without guards shows what the reward makes of
//! it; users who change (`shift`) race hone's loops only, since the other
//! two sample their own tasks from a fixed list.
//!
//! `--seeds` runs the race once per seed and sets the races side by
//! side ([`seeds`]).
//!
//! All are measured by one instrument: the champions hone's demo measured
//! every round, and every checkpoint of the other two served as a version
//! of the demo's agent through the same gateway on the same held-out
//! tasks. Learning time leaves out the measuring (and TRL's checkpoint
//! saves). Prints the table and writes `bench-learn.json` and the curves
//! as `bench-learn.{svg,png}`; not a test.

mod alone;
mod reward;
mod scenario;
mod seeds;

use anyhow::{bail, Context, Result};
use clap::Args;
use hone_demo::stage::{Ports, Stage};
use hone_demo::{self as demo, DemoArgs, DemoOptimiser, GrpoGroups, Measured, RewardMode, Scenario, AGENT};
use hone_envs::{SimulatedUser, Split};
use hone_types::{VersionId, VersionRecord, VersionSpec};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

const TRL_SCRIPT: &str = include_str!("../../python/learn_trl.py");

#[derive(Debug, Clone, Args)]
pub struct LearnArgs {
    /// Where the runs go: `hone/` (the demo's data directory, where hone's
    /// GRPO alone also keeps its adapters), `hone-trl/` and `hone-sandbox/`
    /// (the other two loops'), `trl/` (TRL's checkpoints) and
    /// `bench-learn.json`; with `--seeds`, one such directory per seed
    /// (`seed-N/`) and `bench-learn-seeds.json` beside them.
    #[arg(long, default_value = "./hone-bench-learn")]
    pub data_dir: PathBuf,
    /// Learning budget of each side, in minutes of wall time.
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// Held-out success a learner must reach (default: 0.9 on easy tasks; 0.35 with harder levels, where this small
    /// base stays far below 90%).
    #[arg(long)]
    pub threshold: Option<f64>,
    /// Seed of every side (users, sampling, initialisation of the adapter).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run the whole race once per seed, comma-separated (each in
    /// `<data-dir>/seed-N`, from the same base), then say which learner
    /// reached the threshold first in how many seeds and by how much
    /// (`bench-learn-seeds.json`, `bench-learn-seeds.{svg,png}`).
    #[arg(long, value_delimiter = ',', conflicts_with = "seed")]
    pub seeds: Vec<u64>,
    /// Start every side from this model instead of the demo's base policy:
    /// a Hugging Face checkpoint directory of a llama or qwen2 instruct
    /// model (e.g. one `hone model import` made from a GGUF file).
    #[arg(long, visible_alias = "base")]
    pub model: Option<PathBuf>,
    /// A Python with torch, transformers, peft, trl, datasets and
    /// accelerate (TRL alone, and the loop on TRL, run with it).
    #[arg(long, env = "HONE_BENCH_PYTHON", default_value = "python3")]
    pub python: String,
    /// Held-out tasks per measurement.
    #[arg(long, default_value_t = 60)]
    pub held_out: u64,
    /// Seconds of learning between two checkpoints of TRL and of hone's
    /// GRPO alone (each is measured afterwards; hone's loop is measured
    /// every round, ~3 s apart while a canary collects traffic and ~20 s
    /// when a cycle runs), so that their time to the threshold is known as
    /// finely as the loop's.
    #[arg(long, default_value_t = 5.0)]
    pub checkpoint_seconds: f64,
    /// Train tasks offered to TRL (its sampler draws from them).
    #[arg(long, default_value_t = 1024)]
    pub train_tasks: u64,
    /// The learning rate of TRL and of hone's GRPO alone (default: the
    /// demo's `grpo` lr, so every side takes steps of the same size).
    #[arg(long, visible_alias = "lr")]
    pub trl_lr: Option<f64>,
    /// What TRL's episodes are rewarded with: `users`, the reward hone's
    /// learner gives its own rollouts (a simulated user's implicit signals
    /// at the demo's noise, and the reward spec's penalties: the same
    /// reward on both sides), or `hidden`, the environment's hidden score
    /// (a cleaner signal than hone ever sees).
    #[arg(long, value_enum, default_value_t = TrlReward::Users)]
    pub trl_reward: TrlReward,
    /// Hardest task every side learns on and is measured on (1 easy,
    /// 2 medium, 3 hard), as `hone demo --max-difficulty` (default: the
    /// demo's, for the scenario if one is given).
    #[arg(long, value_parser = demo::parse_max_difficulty)]
    pub max_difficulty: Option<u8>,
    /// The learners that race, comma-separated: `hone` (hone's loop; it
    /// always runs, the others are measured through its gateway),
    /// `hone-trl`, `sandbox`, `alone`, `trl`. Default: all five; with
    /// `--scenario shift`, hone's three loops.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub sides: Vec<Learner>,
    /// Put every side under a real-world condition, as `hone demo
    /// --scenario`: `hack` (users silent when asked a clarifying question,
    /// on a base that sometimes asks; TRL's and hone's GRPO alone's
    /// episodes are rewarded by such users too) or `shift` (users change
    /// what they ask at `--shift-after`; hone's loops only).
    #[arg(long, value_enum)]
    pub scenario: Option<Scenario>,
    /// With `--scenario shift`: minutes of learning after which users
    /// change, as `hone demo --shift-after`.
    #[arg(long)]
    pub shift_after: Option<f64>,
    /// The agent's reward, as `hone demo --reward` (default: the demo's):
    /// hone's loops learn from it, and TRL's `users` reward and hone's
    /// GRPO alone score their episodes with it.
    #[arg(long, value_enum)]
    pub reward: Option<RewardMode>,
    /// hone's side: the optimisers its loop runs, as `hone demo
    /// --optimisers` (default: the demo's).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub optimisers: Vec<DemoOptimiser>,
    /// hone's side: how many optimisers propose in one cycle, as `hone
    /// demo --optimisers-per-cycle` (default: the demo's).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub optimisers_per_cycle: Option<u64>,
    /// hone's side: where `grpo` takes its groups from, as `hone demo
    /// --grpo-groups` (default: the demo's).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub grpo_groups: Vec<GrpoGroups>,
    /// hone's side: the share of traffic a canary gets, as `hone demo
    /// --canary-share` (default: the demo's).
    #[arg(long)]
    pub canary_share: Option<f64>,
    /// hone's side: how sure its gate must be that a candidate beats the
    /// champion, as `hone demo --gate-confidence` (default: the demo's).
    #[arg(long)]
    pub gate_confidence: Option<f64>,
    /// Learn nothing: print the table and draw the plots again from the
    /// run already in `--data-dir` (its `bench-learn.json`).
    #[arg(long)]
    pub report: bool,
}

/// A learner of the race (`--sides`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Learner {
    /// hone's loop as the demo ships it.
    Hone,
    /// The same loop, its adapters trained by TRL.
    HoneTrl,
    /// The same loop with sandbox users.
    Sandbox,
    /// hone's GRPO alone, no gate and no canary.
    Alone,
    /// TRL's GRPOTrainer.
    Trl,
}

impl Learner {
    const ALL: [Learner; 5] = [
        Learner::Hone,
        Learner::HoneTrl,
        Learner::Sandbox,
        Learner::Alone,
        Learner::Trl,
    ];
    const LOOPS: [Learner; 3] = [Learner::Hone, Learner::HoneTrl, Learner::Sandbox];

    /// Whether it runs Python (TRL) and needs `--python`.
    fn needs_python(self) -> bool {
        matches!(self, Learner::HoneTrl | Learner::Trl)
    }
}

/// What TRL's side trains on (`--trl-reward`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrlReward {
    /// The reward hone's learner gives its rollouts ([`reward::SameReward`]).
    Users,
    /// The environment's hidden score of the answer.
    Hidden,
}

impl TrlReward {
    /// How the report names it.
    fn describe(self) -> &'static str {
        match self {
            TrlReward::Users => "users' implicit signals and penalties as reward, as hone's",
            TrlReward::Hidden => "hidden score as reward",
        }
    }
}

/// One held-out measurement of a learner.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Point {
    learning_s: f64,
    episodes: usize,
    /// hone only: episodes its learner played itself before this point
    /// (rollouts and the gate's evaluations), beside the users' episodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    learner_episodes: Option<usize>,
    rate: f64,
    ci95: (f64, f64),
    version: String,
    /// The share of its held-out answers that asked a clarifying question
    /// instead of answering (the hack scenario's behaviour).
    #[serde(default)]
    asked: f64,
    /// With `--scenario shift`: its held-out success on each kind of task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    families: Vec<scenario::FamilyRate>,
}

impl Point {
    /// A point of `measured`, `learning_s` and `episodes` into learning.
    fn of(measured: &Measured, learning_s: f64, episodes: usize, version: String) -> Self {
        Self {
            learning_s,
            episodes,
            learner_episodes: None,
            rate: measured.rate,
            ci95: measured.ci95,
            version,
            asked: measured.asked_rate(),
            families: scenario::FamilyRate::all_of(measured),
        }
    }
}

/// A learner's curve, when it first reached the threshold, and from when
/// it held it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Side {
    learner: String,
    /// What counts as an episode for it.
    episodes_are: String,
    points: Vec<Point>,
    /// The first measurement at or above the threshold.
    reached: Option<Point>,
    /// The first measurement at or above the threshold from which the mean
    /// of every measurement to the end stays at or above it: a stopwatch a
    /// single lucky measurement cannot stop.
    held: Option<Point>,
    /// hone's loops: the candidates a behaviour bound stopped (`None`: a
    /// learner without guards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    caught: Option<Vec<demo::Caught>>,
    /// hone's loops in a scenario: every candidate its cycles made,
    /// measured on the held-out tasks (what training made of the policy,
    /// whether or not users met it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    candidates: Vec<demo::CandidateMeasured>,
    /// hone's loops under `--scenario shift`: the demo's shift report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shift: Option<demo::ShiftReport>,
}

impl Side {
    fn new(learner: &str, episodes_are: &str, points: Vec<Point>, threshold: f64) -> Self {
        let reached = points.iter().find(|p| p.rate >= threshold).cloned();
        let held = held_from(&points, threshold).cloned();
        Self {
            learner: learner.to_owned(),
            episodes_are: episodes_are.to_owned(),
            points,
            reached,
            held,
            caught: None,
            candidates: Vec::new(),
            shift: None,
        }
    }

    /// One of hone's loops: its curve, and what its summary says it caught
    /// and, under a shift, of the shift.
    fn of_loop(learner: &str, run: LoopRun, threshold: f64) -> Self {
        Self {
            caught: Some(run.caught),
            candidates: run.candidates,
            shift: run.shift,
            ..Self::new(learner, "user episodes", run.points, threshold)
        }
    }

    /// The learner's name without its description ("hone loop (demo: …)"
    /// → "hone loop").
    fn name(&self) -> &str {
        self.learner.split(" (").next().unwrap_or(&self.learner)
    }
}

/// The first point at or above `threshold` whose own and every later
/// point's mean rate is at or above it too.
fn held_from(points: &[Point], threshold: f64) -> Option<&Point> {
    (0..points.len()).find_map(|i| {
        let rest = &points[i..];
        let mean = rest.iter().map(|p| p.rate).sum::<f64>() / rest.len() as f64;
        (points[i].rate >= threshold && mean >= threshold).then_some(&points[i])
    })
}

#[derive(Debug, Serialize, Deserialize)]
struct Report {
    /// The command, commit, date and machine of the race (`None` in a
    /// report written before races were stamped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    produced_by: Option<hone_console::Provenance>,
    threshold: f64,
    minutes: f64,
    seed: u64,
    held_out_tasks: u64,
    base: PathBuf,
    /// `hone demo` arguments hone's side ran with beyond the bench's own
    /// (none: the demo's defaults).
    hone_settings: Vec<String>,
    /// What TRL's side was rewarded with.
    trl_reward: TrlReward,
    /// `--scenario`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scenario: Option<Scenario>,
    sides: Vec<Side>,
}

/// What `learn_trl.py` writes beside each checkpoint.
#[derive(Debug, Deserialize)]
struct CheckpointMeta {
    learning_s: f64,
    episodes: usize,
}

impl LearnArgs {
    /// `--threshold`, or the default for the levels played.
    fn threshold(&self, levels: u8) -> f64 {
        self.threshold.unwrap_or(if levels <= 1 { 0.9 } else { 0.35 })
    }

    /// The learners that race, in the report's order: `--sides`, or every
    /// one the scenario allows; refuses a race without hone's loop, and
    /// learners a scenario cannot put under its condition.
    fn sides(&self) -> Result<Vec<Learner>> {
        let shift = self.scenario == Some(Scenario::Shift);
        if self.sides.is_empty() {
            return Ok(if shift {
                Learner::LOOPS.to_vec()
            } else {
                Learner::ALL.to_vec()
            });
        }
        if !self.sides.contains(&Learner::Hone) {
            bail!("--sides must include `hone`: every other learner is measured through its loop's gateway and set against it");
        }
        if shift {
            if let Some(own) = self.sides.iter().find(|l| !Learner::LOOPS.contains(l)) {
                bail!(
                    "--sides {}: with --scenario shift only hone's loops race (hone, hone-trl, sandbox); TRL and hone's GRPO alone sample their own tasks from a fixed list, rewarded on demand, so no users' change reaches them",
                    clap::ValueEnum::to_possible_value(own).map_or_else(String::new, |v| v.get_name().to_owned())
                );
            }
        }
        Ok(Learner::ALL.into_iter().filter(|l| self.sides.contains(l)).collect())
    }
}

pub fn run(args: LearnArgs) -> Result<ExitCode> {
    if !args.seeds.is_empty() {
        return seeds::run(&args);
    }
    if args.report {
        let report = read_report(&args.data_dir)?;
        publish(&report, &args.data_dir)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (data_dir, base) = prepare(&args)?;
    once(&args, &data_dir, &base)?;
    Ok(ExitCode::SUCCESS)
}

/// The report of the run already in `data_dir` (`--report`).
fn read_report(data_dir: &Path) -> Result<Report> {
    let path = data_dir.join("bench-learn.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("--report: cannot read {} (run the bench there first)", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("--report: {} is not a report of `hone bench learn`", path.display()))
}

/// Checks the arguments and the Python side before anything runs; makes
/// `--data-dir` and finds (or builds, once) the base checkpoint. Returns
/// both, absolute.
fn prepare(args: &LearnArgs) -> Result<(PathBuf, PathBuf)> {
    // hone's side is checked by the demo's own rules (`--minutes` among them).
    let (demo_args, _) = hone_side(args)?;
    let threshold = args.threshold(demo_args.max_difficulty);
    if !(threshold > 0.0 && threshold <= 1.0) {
        bail!("--threshold must be in (0, 1]");
    }
    if args.checkpoint_seconds <= 0.0 {
        bail!("--checkpoint-seconds must be above 0");
    }
    if args.sides()?.iter().any(|l| l.needs_python()) {
        check_python(&args.python)?;
    }
    std::fs::create_dir_all(&args.data_dir).with_context(|| format!("cannot create {}", args.data_dir.display()))?;
    let data_dir = args.data_dir.canonicalize()?;
    let base = match &args.model {
        Some(dir) => dir
            .canonicalize()
            .with_context(|| format!("--model {}: no such checkpoint directory", dir.display()))?,
        None => demo::base(&data_dir, false, &demo_args.recipe())?,
    };
    Ok((data_dir, base))
}

/// One race (`args.seed`) in `data_dir` from `base`: the chosen sides one
/// after the other, then `bench-learn.json`, the table and the plots.
fn once(args: &LearnArgs, data_dir: &Path, base: &Path) -> Result<Report> {
    let (demo_args, settings) = hone_side(args)?;
    let threshold = args.threshold(demo_args.max_difficulty);
    let learners = args.sides()?;
    let base = base.to_path_buf();
    let given = settings.iter().map(|s| format!(" {s}")).collect::<String>();
    let hone_dir = data_dir.join("hone");
    let mut sides = Vec::new();
    let hone = loop_side(demo_args.clone(), &hone_dir, &base, args.minutes)?;
    let base_point = hone.points.first().cloned().context("the demo measured nothing")?;
    sides.push(Side::of_loop(
        &format!("hone loop (demo{given}: users' implicit feedback on the answers they were served, gate, canary users decide)"),
        hone,
        threshold,
    ));
    // The other loops: the demo's arguments changed one way each.
    let other_loops = [
        (
            Learner::HoneTrl,
            DemoArgs {
                trainer: demo::config::DemoTrainer::Trl,
                trainer_python: args.python.clone(),
                ..demo_args.clone()
            },
            "hone-trl",
            format!("hone loop on TRL (demo --trainer trl{given}: the same loop, its adapters trained by TRL under accelerate launch, no replay)"),
        ),
        (
            Learner::Sandbox,
            DemoArgs {
                sandbox_users: true,
                ..demo_args.clone()
            },
            "hone-sandbox",
            format!("hone loop, sandbox users (demo --sandbox-users{given}: a simulated user also rewards every offline run on demand)"),
        ),
    ];
    for (learner, loop_args, dir, label) in other_loops {
        if learners.contains(&learner) {
            let run = loop_side(loop_args, &data_dir.join(dir), &base, args.minutes)?;
            sides.push(Side::of_loop(&label, run, threshold));
        }
    }

    let (alone, trl) = (learners.contains(&Learner::Alone), learners.contains(&Learner::Trl));
    if alone || trl {
        let (alone_points, trl_points, lr) = hone_console::runtime()?.block_on(async {
            let testbed = Testbed::start(&hone_dir, &base, demo_args.max_difficulty).await?;
            let lr = args.trl_lr.unwrap_or(testbed.grpo.lr);
            let sides = async {
                let alone_points = match alone {
                    true => Some(alone::side(&testbed, args, lr, &demo_args).await?),
                    false => None,
                };
                let trl_points = match trl {
                    true => Some(trl_side(&testbed, args, data_dir, lr, &demo_args).await?),
                    false => None,
                };
                anyhow::Ok((alone_points, trl_points, lr))
            }
            .await;
            testbed.stage.stop().await;
            sides
        })?;
        // Both start from the base as hone's side measured it.
        let from_base = |points: Vec<Point>| {
            let mut all = vec![Point {
                version: format!("{} (the base, as hone measured it)", base_point.version),
                learner_episodes: None,
                ..base_point.clone()
            }];
            all.extend(points);
            all
        };
        if let Some(points) = alone_points {
            sides.push(Side::new(
                &format!("hone GRPO alone (sandbox: its trainer on its engine's samples, rewarded on demand by a simulated user's implicit signals and penalties, lr {lr}; no gate, no canary)"),
                "sampled episodes",
                from_base(points),
                threshold,
            ));
        }
        if let Some(points) = trl_points {
            sides.push(Side::new(
                &format!(
                    "TRL GRPOTrainer (sandbox: {}, on demand, lr {lr})",
                    args.trl_reward.describe()
                ),
                "sampled episodes",
                from_base(points),
                threshold,
            ));
        }
    }

    let command: Vec<String> = std::env::args().collect();
    let report = Report {
        produced_by: Some(hone_console::Provenance::now(&command)),
        threshold,
        minutes: args.minutes,
        seed: args.seed,
        held_out_tasks: args.held_out,
        base,
        hone_settings: settings,
        trl_reward: args.trl_reward,
        scenario: args.scenario,
        sides,
    };
    std::fs::write(
        data_dir.join("bench-learn.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )?;
    publish(&report, data_dir)?;
    Ok(report)
}

/// Draws both curves beside `bench-learn.json` in `data_dir` and prints the table.
fn publish(report: &Report, data_dir: &Path) -> Result<()> {
    let path = data_dir.join("bench-learn.json");
    let curves: Vec<demo::plots::Curve> = report
        .sides
        .iter()
        .map(|side| {
            let points = side.points.iter();
            let points = points.map(|p| (p.learning_s / 60.0, p.rate, p.ci95.0, p.ci95.1));
            // The legend names the learner; the table and the JSON describe it.
            (side.name().to_owned(), points.collect())
        })
        .collect();
    let mut plots = demo::plots::learning_race(data_dir, &curves, report.threshold)?;
    let named: Vec<(String, &Side)> = report.sides.iter().map(|s| (s.name().to_owned(), s)).collect();
    plots.extend(scenario::plots(
        report.scenario,
        report.held_out_tasks,
        &named,
        data_dir,
        "bench-learn",
    )?);
    print_report(report, &path, &plots)
}

/// What one of hone's loops did: its curve, and what its summary says.
struct LoopRun {
    points: Vec<Point>,
    caught: Vec<demo::Caught>,
    candidates: Vec<demo::CandidateMeasured>,
    shift: Option<demo::ShiftReport>,
}

/// One of hone's loops: `hone demo` as `demo_args` say, for `minutes`, in
/// `dir` from `base`: its curve (every round's held-out measurement, with
/// the episodes its learner played itself by then) and its summary's
/// scenario figures.
fn loop_side(mut demo_args: DemoArgs, dir: &Path, base: &Path, minutes: f64) -> Result<LoopRun> {
    hone_console::note(format_args!(
        "hone bench learn: hone — `hone demo{}{}` for {minutes} minutes from {}",
        if demo_args.sandbox_users {
            " --sandbox-users"
        } else {
            ""
        },
        if demo_args.trainer == demo::config::DemoTrainer::Trl {
            " --trainer trl"
        } else {
            ""
        },
        base.display()
    ));
    demo_args.data_dir = dir.to_path_buf();
    demo_args.model = Some(base.to_path_buf());
    demo::run(demo_args)?;
    let written = demo::written(dir)?;
    let runs = learner_runs(dir)?;
    let points = written
        .measurements
        .iter()
        .map(|m| Point {
            learner_episodes: Some(played_by(&runs, m.at_ms)),
            ..Point::of(m, m.learning_s, m.user_episodes, m.champion.clone())
        })
        .collect();
    Ok(LoopRun {
        points,
        caught: written.caught,
        candidates: written.candidates,
        shift: written.shift,
    })
}

/// hone's side: `hone demo` with the bench's budget, seed and tasks and
/// the loop settings given (parsed and checked by the demo's own
/// arguments, so its defaults and rules live in one place), and those
/// settings as they were given.
fn hone_side(args: &LearnArgs) -> Result<(DemoArgs, Vec<String>)> {
    let mut chosen: Vec<String> = Vec::new();
    let listed = |names: Vec<&str>| names.join(",");
    if !args.optimisers.is_empty() {
        chosen.extend([
            "--optimisers".into(),
            listed(args.optimisers.iter().map(|o| o.name()).collect()),
        ]);
    }
    if let Some(n) = args.optimisers_per_cycle {
        chosen.extend(["--optimisers-per-cycle".into(), n.to_string()]);
    }
    if !args.grpo_groups.is_empty() {
        chosen.extend([
            "--grpo-groups".into(),
            listed(args.grpo_groups.iter().map(|g| g.name()).collect()),
        ]);
    }
    if let Some(share) = args.canary_share {
        chosen.extend(["--canary-share".into(), share.to_string()]);
    }
    if let Some(confidence) = args.gate_confidence {
        chosen.extend(["--gate-confidence".into(), confidence.to_string()]);
    }
    if let Some(levels) = args.max_difficulty {
        chosen.extend(["--max-difficulty".into(), levels.to_string()]);
    }
    if let Some(scenario) = args.scenario {
        chosen.extend(["--scenario".into(), scenario.name().to_owned()]);
    }
    if let Some(minutes) = args.shift_after {
        chosen.extend(["--shift-after".into(), minutes.to_string()]);
    }
    if let Some(reward) = args.reward {
        chosen.extend(["--reward".into(), reward.name().to_owned()]);
    }
    let common = [
        "--minutes".into(),
        args.minutes.to_string(),
        "--seed".into(),
        args.seed.to_string(),
        "--held-out".into(),
        args.held_out.to_string(),
    ];
    let demo = demo::parse_args(common.into_iter().chain(chosen.clone()))?;
    demo.check()?;
    Ok((demo, chosen))
}

/// The episodes hone's learner played in the demo (rollouts and the
/// evaluate and gate steps' runs; the demo's own held-out measurements are
/// not evaluation runs), as `(when its run began, episodes)`, sorted.
fn learner_runs(hone_dir: &Path) -> Result<Vec<(i64, usize)>> {
    let config = hone_config::load_file(&hone_dir.join("hone.toml")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let store = hone_store::open(&config.store, hone_store::Wait::Patient)?;
    let mut runs = Vec::new();
    for run in store.eval_runs(Some(AGENT), 1_000_000)? {
        runs.push((run.created_at, store.eval_results(&run.id)?.len()));
    }
    runs.sort_unstable();
    Ok(runs)
}

/// Episodes of `runs` begun by `at_ms`.
fn played_by(runs: &[(i64, usize)], at_ms: i64) -> usize {
    runs.iter().take_while(|(at, _)| *at <= at_ms).map(|(_, n)| n).sum()
}

/// Fails early, with what to install, when the Python side cannot run.
fn check_python(python: &str) -> Result<()> {
    let probe = std::process::Command::new(python)
        .args(["-c", "import torch, transformers, peft, trl, datasets, accelerate"])
        .output()
        .with_context(|| format!("cannot run `{python}` (pass --python PATH)"))?;
    if !probe.status.success() {
        bail!(
            "`{python}` lacks the TRL side's packages ({}); install them with `{python} -m pip install torch transformers peft trl datasets accelerate`, or pass --python PATH",
            String::from_utf8_lossy(&probe.stderr).lines().last().unwrap_or_default()
        );
    }
    Ok(())
}

/// The demo's config served again for the sides that learn outside its
/// loop (same agent, same sampling): the gateway and the environment's
/// endpoint, the store, and what those sides learn with.
pub(super) struct Testbed {
    pub config: hone_config::Config,
    pub stage: Stage,
    pub endpoint_url: String,
    pub store: Arc<dyn hone_store::CycleStore>,
    pub base: PathBuf,
    pub base_id: VersionId,
    pub spec: VersionSpec,
    /// The demo's `grpo` settings (group, lr, LoRA), which both sides share.
    pub grpo: hone_config::TrainingSpec,
    /// The hardest task level they learn on and are measured on.
    pub levels: u8,
}

impl Testbed {
    async fn start(hone_dir: &Path, base: &Path, levels: u8) -> Result<Self> {
        let mut config = hone_config::load_file(&hone_dir.join("hone.toml")).map_err(|e| anyhow::anyhow!("{e}"))?;
        let ports = Ports::bind().await?;
        let endpoint_url = ports.endpoint_url.clone();
        let stage = Stage::start(ports, &mut config, demo::calc_environment(), None).await?;
        let agent = config.agents.get(AGENT).context("the demo's config has no agent")?;
        let base_version = agent
            .versions
            .get("base")
            .context("the demo's config has no `base` version")?;
        let grpo = agent
            .learn
            .optimisers
            .iter()
            .find_map(|o| match o {
                hone_config::OptimiserSpec::Grpo(training) => Some(training.clone()),
                _ => None,
            })
            .context("the demo's config has no `grpo` optimiser")?;
        let (base_id, spec) = (base_version.id.clone(), base_version.spec.clone());
        let store = hone_store::open(&config.store, hone_store::Wait::Patient)?;
        Ok(Self {
            config,
            stage,
            endpoint_url,
            store,
            base: base.to_path_buf(),
            base_id,
            spec,
            grpo,
            levels,
        })
    }

    /// Scores episodes as hone's learner scores its rollouts, with a
    /// simulated `user` of its own (the demo's users', seeded apart).
    fn same_reward(&self, user: SimulatedUser) -> Result<reward::SameReward> {
        let agent = self
            .config
            .agents
            .get(AGENT)
            .context("the demo's config has no agent")?;
        let rewarder =
            hone_learn::scoring::reward::Rewarder::new(AGENT, &agent.reward, None).map_err(anyhow::Error::msg)?;
        Ok(reward::SameReward::new(
            self.stage.runner.clone(),
            rewarder,
            self.base_id.clone(),
            user,
        ))
    }

    /// The folder the embedded engine finds adapters in.
    fn adapters(&self) -> PathBuf {
        let provider = self.spec.routes.first().map_or("", |r| r.provider.as_str());
        self.config.adapters_dir(provider)
    }

    /// The base with `adapter` (in [`Testbed::adapters`]) as a version of the
    /// demo's agent, recorded; its id.
    fn register(&self, adapter: &str, created_by: &str) -> Result<VersionId> {
        let mut trained = self.spec.clone();
        trained
            .routes
            .first_mut()
            .context("the demo's base version has no route")?
            .adapter = Some(adapter.to_owned());
        let id = trained.id();
        self.store.upsert_versions(&[VersionRecord {
            id: id.clone(),
            agent: AGENT.to_owned(),
            label: Some(adapter.to_owned()),
            spec: trained,
            parent: Some(self.base_id.clone()),
            created_by: created_by.to_owned(),
            created_at: hone_types::time::now_ms(),
        }])?;
        Ok(id)
    }

    /// Serves every checkpoint's adapter as a version of the demo's agent
    /// and measures it on the held-out tasks, as the demo measures its
    /// champions; the points, in order.
    async fn measure(
        &self,
        who: &str,
        created_by: &str,
        checkpoints: &[Checkpoint],
        args: &LearnArgs,
    ) -> Result<Vec<Point>> {
        let mut points = Vec::new();
        for c in checkpoints {
            let id = self.register(&c.adapter, created_by)?;
            let answers = demo::held_out(
                &self.stage.runner,
                id.as_str(),
                &format!("held-out-{}", c.adapter),
                args.held_out,
                demo::TaskMix::of(self.levels),
                16,
                &|| {},
            )
            .await?;
            let m = Measured::of_answers(0, id.to_string(), &answers);
            hone_console::note(format_args!(
                "  {who} {}: {:.0} s of learning, {} episodes → held-out {:.1}%",
                c.adapter,
                c.learning_s,
                c.episodes,
                m.rate * 100.0
            ));
            points.push(Point::of(&m, c.learning_s, c.episodes, format!("{id} ({})", c.adapter)));
        }
        Ok(points)
    }
}

/// A learner's adapter kept for measuring: its name in the engine's
/// adapters folder, and the learning time and episodes behind it.
pub(super) struct Checkpoint {
    pub adapter: String,
    pub learning_s: f64,
    pub episodes: usize,
}

/// Trains with TRL against the environment endpoint (rewarded as
/// `--trl-reward` says, `users` by one like the demo's), then measures
/// every checkpoint through the demo's own gateway; the points, in order.
async fn trl_side(
    testbed: &Testbed,
    args: &LearnArgs,
    data_dir: &Path,
    lr: f64,
    users: &DemoArgs,
) -> Result<Vec<Point>> {
    let trl_dir = data_dir.join("trl");
    let checkpoints = trl_dir.join("checkpoints");
    if checkpoints.exists() {
        std::fs::remove_dir_all(&checkpoints).with_context(|| format!("cannot clear {}", checkpoints.display()))?;
    }
    std::fs::create_dir_all(&trl_dir)?;
    let rewards = match args.trl_reward {
        TrlReward::Hidden => None,
        // A user of its own, seeded apart from the demo's two.
        TrlReward::Users => Some(
            Arc::new(testbed.same_reward(users.user((0, 0), args.seed.wrapping_add(2_000_003)))?)
                .serve()
                .await?,
        ),
    };
    let tasks_path = trl_dir.join("tasks.json");
    write_tasks(&tasks_path, testbed, lr, args)?;

    hone_console::note(format_args!(
        "hone bench learn: TRL — GRPOTrainer for {} minutes (progress below)",
        args.minutes
    ));
    let script = trl_dir.join("learn_trl.py");
    std::fs::write(&script, TRL_SCRIPT)?;
    let mut command = std::process::Command::new(&args.python);
    command
        .arg(&script)
        .arg("--model")
        .arg(&testbed.base)
        .arg("--tasks")
        .arg(&tasks_path)
        .arg("--endpoint")
        .arg(&testbed.endpoint_url)
        .arg("--minutes")
        .arg(args.minutes.to_string())
        .arg("--out")
        .arg(&trl_dir)
        .arg("--seed")
        .arg(args.seed.to_string())
        .arg("--checkpoint-seconds")
        .arg(args.checkpoint_seconds.to_string());
    if let Some((url, _)) = &rewards {
        command.arg("--reward-url").arg(url);
    }
    let python = args.python.clone();
    let status = tokio::task::spawn_blocking(move || command.status())
        .await?
        .with_context(|| format!("cannot run `{python}`"))?;
    if let Some((_, mut server)) = rewards {
        server.abort_all();
    }
    if !status.success() {
        bail!("the TRL side failed ({status}); its output is above");
    }

    hone_console::note(format_args!(
        "hone bench learn: measuring TRL's checkpoints on the held-out tasks"
    ));
    let adapters = testbed.adapters();
    let mut kept = Vec::new();
    for (name, meta) in trl_checkpoints(&checkpoints)? {
        let adapter = format!("trl-{name}");
        copy_dir(&checkpoints.join(&name), &adapters.join(&adapter))?;
        kept.push(Checkpoint {
            adapter,
            learning_s: meta.learning_s,
            episodes: meta.episodes,
        });
    }
    testbed.measure("TRL", "trl", &kept, args).await
}

/// The tasks TRL learns on, each with the prompt token ids hone's engine
/// renders for it (the prompt the base was trained on), and the settings
/// both sides share.
fn write_tasks(path: &Path, testbed: &Testbed, lr: f64, args: &LearnArgs) -> Result<()> {
    let (runner, spec, grpo) = (&testbed.stage.runner, &testbed.spec, &testbed.grpo);
    let tokenizer = hone_engine::Tokenizer::load(&testbed.base)?;
    let environment = runner.environment();
    let tools = serde_json::to_value(environment.tools())?;
    let mut tasks = Vec::new();
    for index in 0..args.train_tasks {
        let task = demo::task_at(runner, Split::Train, index, testbed.levels);
        let opening = serde_json::to_value(hone_envs::opening(environment.as_ref(), &task))?;
        let opening = opening.as_array().map(Vec::as_slice).unwrap_or_default();
        let text = tokenizer.template.render_openai(opening, Some(&tools), true)?;
        tasks.push(serde_json::json!({"input": task.prompt, "prompt_ids": tokenizer.encode(&text)?}));
    }
    let clipping = hone_train::loss::grpo::GrpoOptions::default();
    // The demo's `grpo` table (group, lr, rank and the alpha hone trains
    // with) and hone-train's clipping.
    let settings = serde_json::json!({
        "tasks": tasks,
        "temperature": spec.temperature.unwrap_or(1.0),
        "max_tokens": spec.max_tokens.unwrap_or(96),
        "max_steps": runner.config().max_steps,
        "group_size": grpo.group_size,
        "tasks_per_step": hone_learn::search::optimiser::training::BATCH,
        "lr": lr,
        "rank": grpo.rank,
        "alpha": grpo.lora_alpha(),
        "epsilon_low": clipping.epsilon_low,
        "epsilon_high": clipping.epsilon_high,
    });
    std::fs::write(path, serde_json::to_string(&settings)?)?;
    Ok(())
}

/// Seconds of learning as the table's minutes: two decimals, since a
/// threshold on easy tasks is reached within the first minute.
fn minutes(seconds: f64) -> String {
    format!("{:.2}", seconds / 60.0)
}

/// The checkpoints `learn_trl.py` saved, in order, with their meta.
fn trl_checkpoints(dir: &Path) -> Result<Vec<(String, CheckpointMeta)>> {
    let mut found = Vec::new();
    if !dir.exists() {
        return Ok(found);
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let meta_path = entry.path().join("meta.json");
        if !name.starts_with("ckpt-") || !meta_path.exists() {
            continue;
        }
        let meta: CheckpointMeta = serde_json::from_slice(&std::fs::read(&meta_path)?)
            .with_context(|| format!("cannot read {}", meta_path.display()))?;
        found.push((name, meta));
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

fn print_report(report: &Report, path: &Path, plots: &[PathBuf]) -> Result<()> {
    let mut out = std::io::stdout();
    writeln!(
        out,
        "\nhone bench learn — held-out success ≥ {:.0}% on {} tasks, {} minutes each, seed {}, base {}",
        report.threshold * 100.0,
        report.held_out_tasks,
        report.minutes,
        report.seed,
        report.base.display()
    )?;
    writeln!(
        out,
        "\n| learner | reached after (min of learning) | episodes then | held from (min) | base | best (95% CI) | last |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    for side in &report.sides {
        let best = side
            .points
            .iter()
            .max_by(|a, b| a.rate.total_cmp(&b.rate))
            .map_or("—".to_owned(), |p| {
                format!(
                    "{:.1}% ({:.1}–{:.1})",
                    p.rate * 100.0,
                    p.ci95.0 * 100.0,
                    p.ci95.1 * 100.0
                )
            });
        let pct = |p: Option<&Point>| p.map_or("—".to_owned(), |p| format!("{:.1}%", p.rate * 100.0));
        // The measurement before the first at the threshold brackets when
        // the learner crossed it (each side is measured only so often).
        let before = |p: &Point| {
            side.points
                .iter()
                .take_while(|q| q.learning_s < p.learning_s)
                .last()
                .map_or(String::new(), |q| {
                    format!("; {:.1}% at {:.0} s", q.rate * 100.0, q.learning_s)
                })
        };
        let (when, episodes) = match &side.reached {
            Some(p) => (
                format!("{} ({:.0} s{})", minutes(p.learning_s), p.learning_s, before(p)),
                match p.learner_episodes {
                    Some(played) => format!(
                        "{} {} (+{played} its learner played: rollouts, gate)",
                        p.episodes, side.episodes_are
                    ),
                    None => format!("{} {}", p.episodes, side.episodes_are),
                },
            ),
            None => ("not reached".to_owned(), "—".to_owned()),
        };
        let held = side
            .held
            .as_ref()
            .map_or("not held".to_owned(), |p| minutes(p.learning_s));
        writeln!(
            out,
            "| {} | {when} | {episodes} | {held} | {} | {best} | {} |",
            side.learner,
            pct(side.points.first()),
            pct(side.points.last())
        )?;
    }
    writeln!(
        out,
        "\nOne measurement of {} tasks at the agent's temperature swings by several points (\"held from\": the first \
         measurement at the threshold after which the curve's mean stays there); the curves are in {}.",
        report.held_out_tasks,
        path.display()
    )?;
    if let Some(base) = report.sides.first().and_then(|side| side.points.first()) {
        if base.rate >= report.threshold {
            writeln!(
                out,
                "The base already measured {:.1}%, at or above the threshold: both \"reached\" it before learning; raise --threshold.",
                base.rate * 100.0
            )?;
        }
    }
    scenario::print(report, &mut out)?;
    for plot in plots {
        writeln!(out, "plot: {}", plot.display())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(rates: &[f64]) -> Vec<Point> {
        rates
            .iter()
            .enumerate()
            .map(|(i, rate)| Point {
                learning_s: 60.0 * i as f64,
                episodes: i,
                learner_episodes: None,
                rate: *rate,
                ci95: (0.0, 1.0),
                version: format!("v{i}"),
                asked: 0.0,
                families: Vec::new(),
            })
            .collect()
    }

    #[test]
    fn a_lucky_measurement_reaches_the_threshold_but_does_not_hold_it() {
        // Touches 0.35 at minute 1, falls back; holds from minute 3 on.
        let side = Side::new("l", "e", curve(&[0.2, 0.35, 0.25, 0.4, 0.33, 0.38]), 0.35);
        assert_eq!(side.reached.map(|p| p.version), Some("v1".into()));
        // From v1 the mean is (0.35+0.25+0.4+0.33+0.38)/5 = 0.342 < 0.35.
        assert_eq!(side.held.map(|p| p.version), Some("v3".into()));
        // A curve that ends below: reached, never held.
        let side = Side::new("l", "e", curve(&[0.2, 0.4, 0.2, 0.2]), 0.35);
        assert!(side.reached.is_some() && side.held.is_none());
        // Never reached, never held.
        let side = Side::new("l", "e", curve(&[0.2, 0.3]), 0.35);
        assert!(side.reached.is_none() && side.held.is_none());
    }
}
