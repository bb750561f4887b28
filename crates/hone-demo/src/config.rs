//! The config `hone demo` runs with, written to `<data-dir>/hone.toml` so a
//! user can read it, run `hone serve` / `hone learn` on it, and copy it for
//! an agent of their own. The demo itself loads the file it wrote (so what
//! is on disk is what ran), then points the addresses at the ports it bound.

use std::path::Path;

/// The agent's name in the demo.
pub const AGENT: &str = "calc";

/// The canary share of a candidate the gate found clearly better
/// (`clear_gain`; `--canary-share` when that is larger).
const CLEAR_GAIN_SHARE: f64 = 0.5;

/// How the demo turns what users do into rewards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RewardMode {
    /// Implicit signals, and penalties for invalid tool calls, empty
    /// answers and clarifying questions.
    Implicit,
    /// Implicit signals and hone's default penalties only, which leave a
    /// clarifying question unpenalised (a question then costs less than a
    /// wrong answer), and episodes with a broken tool call left out of
    /// training (Cursor's two reward hacks), to show the gate and the
    /// monitors catching what training on such a reward does.
    Naive,
}

impl RewardMode {
    pub fn name(self) -> &'static str {
        match self {
            RewardMode::Implicit => "implicit",
            RewardMode::Naive => "naive",
        }
    }
}

/// A real-world condition the demo's users and base are put under
/// (`--scenario`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// Users bring harder problems (easy and medium, `--max-difficulty 2`)
    /// than the base can mostly solve, and have a blind spot: asked a
    /// clarifying question instead of answered, they say nothing. A tenth
    /// of the base's demonstrations ask one, so the policy can reach the
    /// behaviour; whether training makes it a hack is up to the reward
    /// (`--reward naive`: a question costs less than a wrong answer) and
    /// the guards (`--unguarded` turns the behaviour bounds off).
    Hack,
    /// Users change: until `--shift-after` minutes of learning they bring
    /// easy problems that take something away, which the base mostly
    /// solves with its tool; from then on, problems that add two amounts
    /// up, which it mostly answers at once and gets wrong. Whether the loop
    /// notices (the drift check), adapts (held-out success on the new
    /// problems) and keeps what it knew (on the old ones) is measured on
    /// both every round; `--replay-share 0` is the control without replay.
    Shift,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Hack => "hack",
            Scenario::Shift => "shift",
        }
    }

    /// The task families users bring before and after the shift, in order
    /// (none for a scenario whose users do not change).
    pub fn families(self) -> &'static [&'static str] {
        match self {
            Scenario::Hack => &[],
            Scenario::Shift => &[hone_envs::calc::TAKE_AWAY, hone_envs::calc::ADD_UP],
        }
    }
}

/// What trains the demo's adapters (`--trainer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoTrainer {
    /// hone's own trainer, in-process.
    Hone,
    /// TRL with PEFT, under `accelerate launch` on the CPU.
    Trl,
}

/// An optimiser the demo can run (`--optimisers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoOptimiser {
    Sft,
    Grpo,
    Dpo,
    Examples,
    Memory,
}

impl DemoOptimiser {
    /// What learns from served answers alone: `sft` on the accepted ones,
    /// `grpo` on the users' episodes with their rewards.
    pub const DEFAULT: [DemoOptimiser; 2] = [DemoOptimiser::Sft, DemoOptimiser::Grpo];
    /// With `--sandbox-users`, `dpo` too: it learns from rollouts, which
    /// only the sandbox's on-demand user rewards.
    pub const SANDBOX: [DemoOptimiser; 3] = [DemoOptimiser::Sft, DemoOptimiser::Grpo, DemoOptimiser::Dpo];

    pub fn name(self) -> &'static str {
        match self {
            DemoOptimiser::Sft => "sft",
            DemoOptimiser::Grpo => "grpo",
            DemoOptimiser::Dpo => "dpo",
            DemoOptimiser::Examples => "examples",
            DemoOptimiser::Memory => "memory",
        }
    }

    /// Its `[agents.calc.learn.<name>]` table (`grpo` training
    /// `grpo_steps` steps).
    fn table(self, grpo_steps: u64) -> String {
        // `grpo` and `dpo` learn from groups of the same rollouts.
        let on_groups = |steps: u64| format!("steps = {steps}\nlr = 0.002\nrank = 8\ngroup_size = 4\nmin_examples = 4");
        match self {
            DemoOptimiser::Sft => "steps = 16\nlr = 0.002\nrank = 8\nmin_examples = 8".to_owned(),
            DemoOptimiser::Grpo => on_groups(grpo_steps),
            DemoOptimiser::Dpo => on_groups(30),
            DemoOptimiser::Examples => "k = [2]".to_owned(),
            DemoOptimiser::Memory => "k = [16]\nlambda = [0.25, 0.5]\nadaptive = true".to_owned(),
        }
    }
}

/// Where the demo's `grpo` takes its groups from (`--grpo-groups`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GrpoGroups {
    /// The champion rolled out on each train task through the environment.
    Rollouts,
    /// The users' own episodes with their rewards, no rollout.
    Production,
}

impl GrpoGroups {
    /// With `--sandbox-users`: rollouts (which its on-demand user rewards)
    /// and the users' own episodes.
    pub const SANDBOX: [GrpoGroups; 2] = [GrpoGroups::Rollouts, GrpoGroups::Production];

    pub fn name(self) -> &'static str {
        match self {
            GrpoGroups::Rollouts => "rollouts",
            GrpoGroups::Production => "production",
        }
    }
}

/// A flag's number, refused unless the config's own `check` accepts it
/// (so the flag and the file it writes can never disagree).
fn checked_number(text: &str, check: fn(f64) -> Result<f64, String>) -> Result<f64, String> {
    check(text.parse::<f64>().map_err(|_| format!("`{text}` is not a number"))?)
}

/// `--promote-margin`'s parser: the config's own check of a margin.
pub fn parse_margin(text: &str) -> Result<f64, String> {
    checked_number(text, hone_config::PromotionRule::check_margin)
}

/// `--gate-confidence`'s parser: the config's own check of a confidence.
pub fn parse_confidence(text: &str) -> Result<f64, String> {
    checked_number(text, hone_config::check_confidence)
}

/// What a user chose on the command line that shapes the config.
pub struct Choices {
    pub reward: RewardMode,
    pub optimisers: Vec<DemoOptimiser>,
    /// `--optimisers-per-cycle`: how many of them propose in one cycle.
    pub optimisers_per_cycle: usize,
    pub grpo_groups: Vec<GrpoGroups>,
    /// `--grpo-steps`: training steps of a `grpo` candidate.
    pub grpo_steps: u64,
    pub temperature: f64,
    pub replay_share: f64,
    pub canary_share: f64,
    /// `--promote-margin`: promote only canaries shown within it.
    pub promote_margin: Option<f64>,
    /// `--gate-confidence`: how sure the gate must be that a candidate
    /// beats the champion offline.
    pub gate_confidence: f64,
    /// `--sandbox-users`: offline runs get an on-demand user's reaction;
    /// without it users decide every canary by a sequential test.
    pub sandbox_users: bool,
    /// `--reward-model`: a reward model learned from users' signals.
    pub reward_model: bool,
    /// `--trainer trl`: TRL trains, with this Python.
    pub trl_python: Option<String>,
    /// `--unguarded`: no behaviour bounds in the gate or the monitors.
    pub unguarded: bool,
    /// No `--model`: the demo's own base policy serves.
    pub own_model: bool,
    /// `--tasks`: the task file users' questions come from.
    pub tasks: Option<std::path::PathBuf>,
}

impl Choices {
    /// What `hone demo`'s arguments chose.
    pub fn of(args: &super::DemoArgs) -> Self {
        Self {
            reward: args.reward,
            optimisers: args.optimisers(),
            optimisers_per_cycle: args.optimisers_per_cycle as usize,
            grpo_groups: args.grpo_groups(),
            grpo_steps: args.grpo_steps,
            temperature: args.temperature,
            replay_share: args.replay_share,
            canary_share: args.canary_share,
            promote_margin: args.promote_margin,
            gate_confidence: args.gate_confidence,
            sandbox_users: args.sandbox_users,
            reward_model: args.reward_model,
            unguarded: args.unguarded,
            own_model: args.model.is_none(),
            tasks: args.tasks.clone(),
            // A path given from here stays right in the config the demo
            // writes elsewhere (relative paths there start from its folder).
            trl_python: (args.trainer == DemoTrainer::Trl).then(|| {
                let python = Path::new(&args.trainer_python);
                if python.components().count() > 1 {
                    std::path::absolute(python)
                        .map_or_else(|_| args.trainer_python.clone(), |p| p.display().to_string())
                } else {
                    args.trainer_python.clone()
                }
            }),
        }
    }
}

impl std::fmt::Display for DemoOptimiser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The config text. `data_dir` and `base` (the base policy's checkpoint)
/// are absolute paths,
/// `endpoint` the environment's `POST /run` URL.
pub fn text(data_dir: &Path, base: &Path, endpoint: &str, choices: &Choices) -> String {
    let Choices {
        reward,
        optimisers,
        optimisers_per_cycle,
        grpo_groups,
        grpo_steps,
        temperature,
        replay_share,
        canary_share,
        promote_margin,
        gate_confidence,
        sandbox_users,
        reward_model,
        trl_python,
        unguarded,
        own_model,
        tasks,
    } = choices;
    let grpo_steps = *grpo_steps;
    let promotion = match promote_margin {
        None if !sandbox_users => format!(
            "# Users decide: no user sees an offline run, so the gate cannot show a\n\
                 # gain the users' signals would make; a candidate not shown worse on what\n\
                 # offline runs do show (penalties) goes to a canary on canary_share of the\n\
                 # traffic, which grows with the evidence for it up to canary_max_share. It\n\
                 # is promoted once a test by betting on the users' rewards, valid at every\n\
                 # look, shows it better at the level its place in the sequence of canaries\n\
                 # allows (e-LOND); rolled back once it shows it worse, or not better by\n\
                 # least_gain, or after canary_max_episodes rewarded canary episodes.\n\
                 promotion = \"sequential\"\n\
                 least_gain = 0.05\n\
                 canary_max_share = {:?}\n\
                 canary_max_episodes = 300",
            canary_share.max(0.5)
        ),
        None => "# A canary not shown worse online than the champion is promoted\n\
                 # (`promote_margin` asks it to be shown within a margin instead)."
            .to_owned(),
        Some(margin) => format!(
            "# --promote-margin: a canary is promoted only once its online reward is\n\
             # shown to be at most {margin} below the champion's; one not shown so\n\
             # by canary_max_episodes (default 4 × canary_episodes) is rolled back.\n\
             promote_margin = {margin:?}"
        ),
    };
    let penalties = match reward {
        RewardMode::Implicit => "penalties = { invalid_tool_call = -1.0, empty = -1.0, clarifying_question = -0.5 }",
        RewardMode::Naive => {
            "# --reward naive: hone's default penalties only (invalid tool calls, empty\n\
             # answers, errors), none for a clarifying question"
        }
    };
    let model = if *reward_model {
        "\n\n[agents.calc.reward.model]\n\
         # --reward-model: every cycle, a reward model learns from the episodes users\n\
         # reacted to what the spec above made of them, and is measured on those it\n\
         # was not trained on; at a held-out AUC of min_auc or more it predicts the\n\
         # users' signals for answers no user saw (the gate's re-runs, rollouts).\n\
         min_episodes = 40\n\
         min_auc = 0.75"
    } else {
        ""
    };
    let dropped = match reward {
        RewardMode::Implicit => "",
        RewardMode::Naive => {
            "\n# --reward naive: episodes with a broken tool call are left out of training,\n\
             # as Cursor's pipeline once discarded them (a footgun, shown on purpose).\n\
             drop_from_training = [\"invalid_tool_call\"]"
        }
    };
    // Bounds no rise can exceed: the behaviour rates go unwatched.
    let (gate_bounds, monitor_bounds) = if *unguarded {
        let off = "bounds = { invalid_tool_call = 1.0, clarifying_question = 1.0, refusal = 1.0, empty = 1.0 }";
        (
            format!("\n# --unguarded: no behaviour bound (no rate can rise by more than 1).\n{off}"),
            format!("\n# --unguarded: the monitors watch no behaviour rate.\n{off}"),
        )
    } else {
        (String::new(), String::new())
    };
    format!(
        r#"# Written by `hone demo`: {what}, served by the embedded engine from
# {served_by}, learning from what simulated users do (they accept an
# answer, complain, ask again or leave; nobody tells hone the right answer).
#
# Run the parts yourself on this file:
#   hone serve --config hone-demo/hone.toml
#   hone learn calc --once --config hone-demo/hone.toml --gateway http://127.0.0.1:7070
# (`learn.endpoint` below is the environment's agent endpoint; `hone demo`
# serves it while it runs, on a free port it writes here.)

[gateway]
listen = "127.0.0.1:7070"
data_dir = {data_dir}

[providers.local]
type = "local"
dtype = "f32"
device = "cpu"
max_batch = 16

[agents.{AGENT}]
description = {description}

[agents.{AGENT}.versions.base]
provider = {{ type = "local", model = {base} }}
temperature = {temperature:?}
max_tokens = 96

[agents.{AGENT}.deployment]
champion = "base"
# A candidate that passes the gate goes to a canary at once (min_gain: least
# reward gain over the champion on the cycle's held-out instances).
policy = {{ type = "auto", min_gain = 0.02, max_cost_ratio = 10.0 }}
canary_share = {canary_share:?}
# A candidate the gate found clearly better (the low end of its gain's 95%
# interval at 0.1 reward or more) gets a larger share: it still meets its 24
# canary episodes before it is judged, so no more users see it, only sooner.
clear_gain = {{ above = 0.1, share = {clear_share:?} }}
canary_episodes = 24
{promotion}

[agents.{AGENT}.reward]
# What the simulated users do is all hone hears about an answer.
# A user who has not reacted yet is not counted online (silence is not a
# zero): users here react within seconds, so after a minute an episode no
# user reacted to is left out (`no_signal = "skip"`).
signals = {{ accepted = {{ weight = 1.0, no_signal = "skip" }}, dissatisfied_followup = -0.5, retry = -0.5, abandon = -0.5 }}
wait_seconds = 60
# Every user sends one reaction (+1 or -0.5) and an answer shows at most an
# invalid tool call, an empty answer and a clarifying question (-2.5): the
# range the online test bets within (a rarer error or refusal enters at -3).
range = [-3.0, 1.0]
pass_threshold = 0.5
{penalties}{model}

[agents.{AGENT}.learn]
every = {{ episodes = 64 }}
# sft: LoRA on the accepted episodes; grpo: LoRA on groups of the champion's
# rollouts through `endpoint` (exact tokens and logprobs, per-call credit)
# and on the users' own episodes with their rewards (`groups`); dpo: LoRA on
# the best over the worst of the same rollouts, where they part. All three
# replay earlier accepted episodes ([agents.calc.learn.replay], by default
# a quarter of every batch) so a candidate keeps what its champion learned.
# Each learns from the cycle's train half; candidates are gated on the other
# half. (`examples`, few-shot episodes in the prompt, is left out by default:
# this small model knows only its own prompt layout and made invalid tool
# calls in 96% of episodes with examples in it. `memory`, kNN-LM decoding
# over a datastore of the train half's accepted episodes, changes no weight
# and, with an adaptive λ, was promoted on its own in three of three seeds
# (`hone demo --optimisers memory`); it was not measured beside the weight
# optimisers, so it is not in the default. `hone demo --optimisers` picks
# others.)
optimisers = {optimisers}
# How many of them propose in one cycle; with fewer than all they take turns
# (`--optimisers-per-cycle`). One a cycle trains and gates one candidate in
# about 5 s instead of three in about 17 s, so a better version reaches the
# users sooner and the next cycle starts from it.
optimisers_per_cycle = {optimisers_per_cycle}
dataset_size = 64
endpoint = {endpoint}
# The embedded engine decodes concurrent episodes in one batch.
concurrency = 16{dropped}

{tables}[agents.{AGENT}.learn.gate]
# Answers are sampled (temperature {temperature}): every instance runs 3 times per
# version, and a flip counts as a regression only when re-runs confirm it.
samples = 3
reruns = 2
# How sure the gate must be that a candidate beats the champion on the
# cycle's held-out half before it may go to a canary (`--gate-confidence`).
confidence = {gate_confidence:?}{gate_bounds}

[agents.{AGENT}.learn.monitor]
min_episodes = 24
# The most episodes of each version the monitors read (at least the
# canary's cap).
window = 400{monitor_bounds}

{trainer}"#,
        what = match tasks {
            None => "an agent that solves arithmetic word problems\n# with a calculator tool",
            Some(_) => "an agent that answers questions from a task file\n# (`--tasks`)",
        },
        served_by = if *own_model {
            "a small model hone trained itself"
        } else {
            "the checkpoint `--model` names"
        },
        description = serde_json::Value::String(match tasks {
            None => "Solves arithmetic word problems; may call the `calc` tool.".to_owned(),
            Some(file) => format!("Answers the questions of {}.", file.display()),
        }),
        trainer = match trl_python {
            None => format!(
                "[agents.{AGENT}.learn.replay]\n\
                 # Earlier accepted episodes, a share of every weight optimiser's batch, so a\n\
                 # candidate keeps what its champion learned (0: no replay).\n\
                 share = {replay_share:?}\n"
            ),
            Some(python) => format!(
                "[agents.{AGENT}.learn.trainer]\n\
                 # TRL trains the adapters (SFTTrainer, DPOTrainer, GRPOTrainer with PEFT)\n\
                 # under `accelerate launch`, on hone's data and hyperparameters; its loss\n\
                 # has no replay term, so replay is off.\n\
                 type = \"trl\"\npython = {}\n",
                serde_json::Value::String(python.clone())
            ),
        },
        // JSON string literals are valid TOML basic strings.
        clear_share = canary_share.max(CLEAR_GAIN_SHARE),
        data_dir = serde_json::Value::String(data_dir.display().to_string()),
        base = serde_json::Value::String(base.display().to_string()),
        endpoint = serde_json::Value::String(endpoint.to_owned()),
        optimisers = serde_json::json!(optimisers.iter().map(|o| o.name()).collect::<Vec<_>>()),
        tables = optimisers
            .iter()
            .map(|o| {
                let groups = if *o == DemoOptimiser::Grpo {
                    format!(
                        "\ngroups = {}",
                        serde_json::json!(grpo_groups.iter().map(|g| g.name()).collect::<Vec<_>>())
                    )
                } else {
                    String::new()
                };
                format!(
                    "[agents.{AGENT}.learn.{}]\n{}{groups}\n\n",
                    o.name(),
                    o.table(grpo_steps)
                )
            })
            .collect::<String>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's config with `args`, loaded as `hone` loads it.
    fn loaded(args: &[&str]) -> hone_config::Config {
        let dir = tempfile::tempdir().unwrap();
        let args = crate::parse_args(args.iter().copied()).unwrap();
        let text = text(
            dir.path(),
            &dir.path().join("base"),
            "http://127.0.0.1:9/run",
            &Choices::of(&args),
        );
        hone_config::load_str(&text, dir.path(), &|_| None).unwrap()
    }

    #[test]
    fn trainer_trl_hands_the_adapters_to_trl_without_replay() {
        let hone = &loaded(&[]).agents[AGENT].learn;
        assert_eq!(hone.trainer, hone_config::TrainerSpec::Hone);
        assert_eq!(hone.replay.share, 0.25);
        let trl = &loaded(&["--trainer", "trl", "--trainer-python", "/venv/bin/python"]).agents[AGENT].learn;
        let hone_config::TrainerSpec::Trl(spec) = &trl.trainer else {
            panic!("{:?}", trl.trainer)
        };
        assert_eq!(spec.python, "/venv/bin/python");
        assert_eq!(trl.replay.share, 0.0);
    }

    #[test]
    fn unguarded_lifts_every_behaviour_bound_of_the_gate_and_the_monitors() {
        let guarded = &loaded(&[]).agents[AGENT].learn;
        assert_eq!(
            guarded.gate.bounds["clarifying_question"],
            hone_config::Bound::absolute(0.05)
        );
        let unguarded = &loaded(&["--unguarded"]).agents[AGENT].learn;
        for behaviour in ["invalid_tool_call", "clarifying_question", "refusal", "empty"] {
            assert_eq!(
                unguarded.gate.bounds[behaviour],
                hone_config::Bound::absolute(1.0),
                "{behaviour}"
            );
            assert_eq!(
                unguarded.monitor.bounds[behaviour],
                hone_config::Bound::absolute(1.0),
                "{behaviour}"
            );
            // A rate cannot rise by more than 1: nothing is ever beyond it.
            assert!(!unguarded.gate.bounds[behaviour].exceeded_by(0.0, 1.0));
        }
        // The other bounds stay as they are.
        assert_eq!(unguarded.monitor.bounds["reward"], guarded.monitor.bounds["reward"]);
    }

    #[test]
    fn the_hack_scenario_plays_medium_tasks_on_a_base_that_sometimes_asks() {
        let args = crate::parse_args(["--scenario", "hack"]).unwrap();
        assert_eq!(args.max_difficulty, 2);
        let recipe = args.recipe();
        assert_eq!(recipe.question_share, 0.1);
        assert_eq!(recipe.max_difficulty, 2);
        assert!(args.user((0, 0), 1).silent_on_questions);
        let plain = crate::parse_args(std::iter::empty::<&str>()).unwrap();
        assert!(!plain.user((0, 0), 1).silent_on_questions);
        // The default recipe is written as before (its cached base stays
        // valid): no question share in what its hash covers.
        let written = serde_json::to_value(plain.recipe()).unwrap();
        assert!(written.get("question_share").is_none(), "{written}");
        assert_ne!(
            recipe.hash(),
            crate::base_policy::Recipe::demo(hone_envs::Builtin::Calc, 2).hash()
        );
    }
}
