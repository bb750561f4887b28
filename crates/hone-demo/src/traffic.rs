//! The demo's traffic and its measurements, both through the real gateway:
//!
//! - [`users`]: simulated users each play a task from the training
//!   split (routed by the deployment: champion or canary) and, after their
//!   delay, send their implicit reaction as feedback. The hidden score goes
//!   no further than this file's report.
//! - [`held_out`]: a version's success on held-out tasks, pinned with
//!   `X-Hone-Version` and recorded as evaluation episodes (not traffic); no
//!   feedback is sent.

use futures::StreamExt;
use hone_envs::{Difficulty, RunContext, Runner, SimulatedUser, Split};
use hone_types::EpisodeId;
use rand::SeedableRng;
use std::sync::atomic::{AtomicBool, Ordering};

/// One user's episode, as the demo saw it.
#[derive(Debug, Clone)]
pub struct UserEpisode {
    /// The user's episode (the store knows which version served it).
    pub episode: EpisodeId,
    /// Seconds since the demo started, when the user reacted.
    pub at: f64,
    /// The hidden score (for the demo's own report only).
    pub score: f64,
    pub accepted: bool,
    /// The user complained, asked again or left.
    pub complained: bool,
    /// The answer was a clarifying question, not an answer.
    pub asked: bool,
}

/// `--max-difficulty`'s parser: a level the environments know
/// ([`Difficulty::from_level`]).
pub fn parse_max_difficulty(text: &str) -> Result<u8, String> {
    text.parse::<u8>()
        .ok()
        .filter(|level| Difficulty::from_level(*level).is_some())
        .ok_or_else(|| format!("`{text}` is not a difficulty level (1 easy, 2 medium, 3 hard)"))
}

/// The task of a running index: difficulties up to `max_difficulty` take
/// turns.
pub fn task_at(runner: &Runner, split: Split, index: u64, max_difficulty: u8) -> hone_envs::Task {
    let levels = u64::from(max_difficulty.clamp(1, Difficulty::ALL.len() as u8));
    let difficulty = Difficulty::from_level((index % levels) as u8 + 1).unwrap_or(Difficulty::Easy);
    runner.environment().task(split, index, difficulty)
}

/// Which tasks users play and measurements ask: difficulties up to
/// `max_difficulty` taking turns, only those of `family`
/// ([`hone_envs::Environment::family`]) when one is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskMix {
    pub max_difficulty: u8,
    pub family: Option<&'static str>,
}

impl TaskMix {
    /// Every task up to `max_difficulty`.
    pub fn of(max_difficulty: u8) -> Self {
        Self {
            max_difficulty,
            family: None,
        }
    }

    /// The running indices ([`task_at`]'s) of the mix's first `count`
    /// tasks of `split` from index `first` on. A family is looked for among
    /// at most a thousand indices per task; fewer indices come back when
    /// it is that rare (or the environment names no families).
    pub fn indices(&self, runner: &Runner, split: Split, first: u64, count: u64) -> Vec<u64> {
        let Some(family) = self.family else {
            return (first..first + count).collect();
        };
        let env = runner.environment();
        (first..first + count.saturating_mul(1_000))
            .filter(|i| env.family(&task_at(runner, split, *i, self.max_difficulty)) == Some(family))
            .take(usize::try_from(count).unwrap_or(usize::MAX))
            .collect()
    }
}

/// Which training tasks a round's users play: the tasks at these running
/// indices ([`TaskMix::indices`]).
pub struct Tasks {
    pub indices: Vec<u64>,
    pub max_difficulty: u8,
}

/// One user per task of `tasks`, `concurrency` playing at a time; each,
/// once its answer is in, reacts after its delay, and the stream yields
/// what it saw as each reaction is sent. The delay is the user's time to
/// read and react: it holds no place among the `concurrency`, as one
/// user's reading does not hold back the next user's request. A run the
/// gateway refused yields its error (the user got no answer and sends
/// nothing). Once `stop` is set no further user starts; those already
/// playing finish and react, so no episode is cut off. Every task started
/// yields exactly one item.
pub fn users<'a>(
    runner: &'a Runner,
    user: &'a SimulatedUser,
    tasks: Tasks,
    concurrency: usize,
    started: std::time::Instant,
    stop: &'a AtomicBool,
) -> impl futures::Stream<Item = Result<UserEpisode, hone_envs::RunError>> + 'a {
    let Tasks {
        indices,
        max_difficulty,
    } = tasks;
    let count = indices.len();
    let indices = indices.into_iter().take_while(move |_| !stop.load(Ordering::Relaxed));
    futures::stream::iter(indices)
        .map(move |index| async move {
            let task = task_at(runner, Split::Train, index, max_difficulty);
            Ok::<_, hone_envs::RunError>((index, runner.run(&task, &RunContext::default()).await?))
        })
        .buffer_unordered(concurrency.max(1))
        .map(move |played| async move {
            let (index, outcome) = played?;
            // Each user reacts with a stream of their own, so the order in
            // which concurrent runs finish does not change any reaction.
            let mut rng = rand::rngs::StdRng::seed_from_u64(user.seed ^ index.wrapping_mul(0x9e37_79b9));
            let reaction = user.react_to(&outcome.played.answer, outcome.played.score, &mut rng);
            tokio::time::sleep(user.delay(&mut rng)).await;
            for signal in &reaction {
                runner.send_feedback(&signal.feedback(&outcome.episode)).await?;
            }
            Ok::<_, hone_envs::RunError>(UserEpisode {
                episode: outcome.episode.clone(),
                at: started.elapsed().as_secs_f64(),
                score: outcome.played.score,
                accepted: reaction.iter().any(|s| s.is_positive()),
                complained: reaction.iter().any(|s| !s.is_positive()),
                asked: hone_types::behaviour::is_clarifying_question(outcome.played.answer.trim()),
            })
        })
        // Every user whose answer is in reacts in its own time.
        .buffer_unordered(count.max(1))
}

/// One held-out answer, as the demo judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldOutAnswer {
    /// Hidden score ≥ 0.5.
    pub solved: bool,
    /// A clarifying question instead of an answer.
    pub asked: bool,
}

/// Held-out answers of `version`: the first `n` held-out tasks of `mix`,
/// each solved or not (hidden score ≥ 0.5) and answered or asked back.
/// `label` keeps the evaluation episode ids of different measurements apart.
pub async fn held_out(
    runner: &Runner,
    version: &str,
    label: &str,
    n: u64,
    mix: TaskMix,
    concurrency: usize,
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<HeldOutAnswer>, hone_envs::RunError> {
    let runs = futures::stream::iter(mix.indices(runner, Split::HeldOut, 0, n))
        .map(|index| async move {
            let task = task_at(runner, Split::HeldOut, index, mix.max_difficulty);
            let context = RunContext {
                episode: EpisodeId::evaluation(label, index as usize, "0").ok(),
                version: Some(version.to_owned()),
            };
            let outcome = runner.run(&task, &context).await?;
            tick();
            Ok::<_, hone_envs::RunError>(HeldOutAnswer {
                solved: outcome.played.score >= 0.5,
                asked: hone_types::behaviour::is_clarifying_question(outcome.played.answer.trim()),
            })
        })
        .buffered(concurrency.max(1));
    runs.collect::<Vec<_>>().await.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use crate::stage::{Ports, Stage};
    use hone_engine::init::{write_checkpoint, Preset};
    use hone_types::EpisodeQuery;
    use std::time::Duration;

    /// The real gateway and engine (a random tiny model) behind the demo's
    /// config; users who read each answer for half a second.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn once_stopped_no_further_user_starts_and_every_user_started_finishes_and_reacts() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("tiny");
        write_checkpoint(hone_engine::Arch::Qwen2, Preset::Tiny, 1, &base).unwrap();
        let ports = Ports::bind().await.unwrap();
        let endpoint = format!("{}/run", ports.endpoint_url);
        let args = crate::parse_args(std::iter::empty::<&str>()).unwrap();
        let path = dir.path().join("hone.toml");
        let text = config::text(dir.path(), &base, &endpoint, &config::Choices::of(&args));
        std::fs::write(&path, text).unwrap();
        let mut config = hone_config::load_file(&path).unwrap();
        let stage = Stage::start(ports, &mut config, args.environment().unwrap(), None)
            .await
            .unwrap();

        // Users who read for half a second before they react: longer than
        // an episode takes, so users go on starting while the first reads.
        let user = SimulatedUser::new(0.0, (500, 500), 1);
        let stop = AtomicBool::new(false);
        let count = 1_000;
        let tasks = Tasks {
            indices: (0..count).collect(),
            max_difficulty: 1,
        };
        let concurrency = 3;
        let runner = stage.runner.clone();
        let stream = users(&runner, &user, tasks, concurrency, std::time::Instant::now(), &stop);
        let mut stream = std::pin::pin!(stream);
        let mut served = 0;
        while let Some(item) = stream.next().await {
            // A random model's answer is now and then right by chance:
            // what matters here is that every user got one and reacted.
            item.unwrap();
            served += 1;
            stop.store(true, Ordering::Relaxed);
        }
        println!("{served} users served, {concurrency} playing at once, stopped at the first reaction");
        // Those who started while the first user read (a reader holds no
        // place), and no more: the stop at the first reaction ended it.
        assert!(
            served > concurrency && served < count as usize,
            "{served} users served after the stop at the first reaction"
        );

        stage.recorder.flush(Duration::from_secs(10)).await.unwrap();
        let store = hone_store::open(&config.store, hone_store::Wait::Patient).unwrap();
        let page = store
            .episodes(&EpisodeQuery {
                limit: 100,
                ..EpisodeQuery::default()
            })
            .unwrap();
        // One episode per user served, none begun and dropped, and each
        // user's reaction reached the gateway although the stop came first.
        assert_eq!(page.episodes.len(), served, "{:?}", page.episodes);
        for episode in &page.episodes {
            assert!(!episode.signals.is_empty(), "no reaction recorded: {episode:?}");
        }
        stage.stop().await;
    }
}
