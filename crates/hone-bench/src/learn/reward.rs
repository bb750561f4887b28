//! The reward TRL's side of `hone bench learn` trains on by default: the one
//! hone's learner gives its own rollouts, so both sides learn from the same
//! reward. An episode TRL sampled (its raw assistant turns) is replayed in
//! the environment as the runner plays one — each turn read as the engine's
//! answer is read (`hone_gateway::providers::text_choice`), its tools
//! run — and becomes the episode the gateway would have recorded: every
//! turn a call with the runner's request and its behaviour flags. A
//! simulated user with the demo's noise reacts to the hidden score, and the
//! demo's reward spec scores the episode with hone's own `Rewarder` (the
//! users' signals and the penalties). Testbed to `learn_trl.py` as
//! `POST /reward`; nothing is stored. hone's learner alone ([`super::alone`])
//! has its real, recorded episodes scored the same way ([`SameReward::react`]).

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use hone_envs::episode::play;
use hone_envs::{Runner, SimulatedUser};
use hone_learn::scoring::reward::Rewarder;
use hone_types::call::Door;
use hone_types::openai::{ChatCompletionResponse, ErrorBody, ErrorDetail, Extra};
use hone_types::{
    CallId, CallOutcome, CallRecord, EpisodeDetail, EpisodeId, EpisodeSummary, RewardRecord, Signal, SignalSource,
    SignalValue, VersionId,
};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, PoisonError};

/// `POST /reward` body: one episode as TRL sampled it.
#[derive(Debug, Deserialize)]
pub struct RewardRequest {
    /// The task's text: its first user message.
    pub input: String,
    /// The model's turns, in order.
    pub turns: Vec<SampledTurn>,
}

/// One assistant turn another sampler wrote.
#[derive(Debug, Deserialize)]
pub struct SampledTurn {
    /// The turn's text (Hermes `<tool_call>` blocks included, the
    /// end-of-turn token left out).
    pub text: String,
    /// Whether it ended at its end-of-turn token (false: cut at `max_tokens`).
    pub ended: bool,
}

/// `POST /reward` reply.
#[derive(Debug, Serialize, PartialEq)]
pub struct RewardReply {
    /// The episode's reward under the agent's reward spec.
    pub reward: f64,
    /// The hidden score of its answer (reported, never part of `reward`).
    pub score: f64,
    /// What the simulated user did.
    pub signals: Vec<String>,
    /// The reward's components, `name×weight=value`, for the log.
    pub components: Vec<String>,
}

/// Scores sampled episodes as hone's learner scores its rollouts.
pub struct SameReward {
    runner: Runner,
    rewarder: Rewarder,
    version: VersionId,
    user: SimulatedUser,
    rng: Mutex<rand::rngs::StdRng>,
}

impl SameReward {
    /// `runner` plays the environment and writes the requests; `rewarder`
    /// is the agent's; `version` is recorded on the calls.
    pub fn new(runner: Runner, rewarder: Rewarder, version: VersionId, user: SimulatedUser) -> Self {
        let rng = Mutex::new(user.rng());
        Self {
            runner,
            rewarder,
            version,
            user,
            rng,
        }
    }

    /// The reward of one sampled episode.
    pub async fn reward(&self, request: &RewardRequest) -> Result<RewardReply> {
        let environment = self.runner.environment().as_ref();
        let task = environment
            .task_from_prompt(&request.input)
            .with_context(|| format!("`input` is not a task of `{}`", environment.name()))?;
        if request.turns.is_empty() {
            anyhow::bail!("an episode needs at least one turn");
        }
        let mut turns = request.turns.iter();
        let mut calls = Vec::new();
        let played = play(environment, &task, request.turns.len(), |messages| {
            let next = turns.next().map(|turn| {
                let finish = if turn.ended { "stop" } else { "length" };
                let choice = hone_gateway::providers::text_choice(0, turn.text.clone(), true, finish);
                calls.push((self.runner.request(&messages), choice.clone()));
                choice.message
            });
            async move { next.context("the episode asked for more turns than were sent") }
        })
        .await?;
        if calls.len() != request.turns.len() {
            anyhow::bail!(
                "turn {} answered without a tool call; the {} after it were never asked for",
                calls.len(),
                request.turns.len() - calls.len()
            );
        }

        let now = hone_types::time::now_ms();
        let episode = EpisodeId::new_v7();
        let agent = self.rewarder.agent.clone();
        let records: Vec<CallRecord> = calls
            .into_iter()
            .map(|(request, choice)| {
                let response = ChatCompletionResponse {
                    id: String::new(),
                    object: "chat.completion".into(),
                    created: now / 1000,
                    model: agent.clone(),
                    choices: vec![choice],
                    usage: None,
                    extra: Extra::new(),
                };
                CallRecord {
                    id: CallId::new_v7(),
                    episode_id: episode.clone(),
                    agent: agent.clone(),
                    version_id: self.version.clone(),
                    started_at: now,
                    outcome: CallOutcome::Ok,
                    stream: false,
                    flags: hone_types::behaviour::flags(&request, &response),
                    request,
                    response: Some(response),
                    error: None,
                    provider: None,
                    model: None,
                    attempts: Vec::new(),
                    usage: None,
                    cost_usd: None,
                    latency_ms: 0.0,
                    ttft_ms: None,
                    upstream_ms: 0.0,
                    shadow: Vec::new(),
                    door: Door::default(),
                }
            })
            .collect();
        let mut detail = EpisodeDetail {
            summary: EpisodeSummary {
                id: episode,
                agent,
                started_at: now,
                last_call_at: now,
                call_count: records.len() as u64,
            },
            calls: records,
            signals: Vec::new(),
        };
        let (scored, signals) = self.react(&mut detail, played.score)?;
        Ok(RewardReply {
            reward: scored.value,
            score: played.score,
            signals,
            components: scored
                .components
                .iter()
                .map(|c| format!("{}×{}={}", c.name, c.weight, c.value))
                .collect(),
        })
    }

    /// The simulated user's reaction to an episode whose answer has the
    /// hidden `score` (its signals added to the episode), and the reward
    /// the agent's reward spec then gives it: the reward and the signals' names.
    pub fn react(&self, episode: &mut EpisodeDetail, score: f64) -> Result<(RewardRecord, Vec<String>)> {
        let now = hone_types::time::now_ms();
        let reaction = {
            let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
            self.user.react(score, &mut *rng)
        };
        let id = episode.summary.id.clone();
        for signal in &reaction {
            let feedback = signal.feedback(&id);
            episode.signals.push(Signal {
                id: uuid::Uuid::now_v7(),
                episode_id: id.clone(),
                call_id: None,
                name: feedback.name,
                value: SignalValue::from_json(&feedback.value, None).map_err(anyhow::Error::msg)?,
                source: feedback.source.unwrap_or(SignalSource::Implicit),
                comment: None,
                created_at: now,
            });
        }
        let scored = self.rewarder.score(episode, None, None, now);
        Ok((scored, reaction.iter().map(|s| s.name().to_owned()).collect()))
    }

    /// Serves `POST /reward` on a free loopback port (a request it cannot
    /// score gets a 422 with the reason): its URL, and the server's task
    /// (dropping the set stops it).
    pub async fn serve(self: Arc<Self>) -> Result<(String, tokio::task::JoinSet<()>)> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/reward", listener.local_addr()?);
        let router = Router::new().route("/reward", post(answer)).with_state(self);
        let mut server = tokio::task::JoinSet::new();
        server.spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                hone_console::note(format_args!("hone bench learn: the reward server stopped: {e}"));
            }
        });
        Ok((url, server))
    }
}

/// An error in the OpenAI shape the environment endpoint uses too.
fn refused(status: StatusCode, code: &str, message: String) -> (StatusCode, Json<ErrorBody>) {
    let error = ErrorDetail {
        message,
        kind: "invalid_request_error".to_owned(),
        code: Some(code.to_owned()),
        param: None,
    };
    (status, Json(ErrorBody { error }))
}

async fn answer(
    State(same): State<Arc<SameReward>>,
    body: axum::body::Bytes,
) -> Result<Json<RewardReply>, (StatusCode, Json<ErrorBody>)> {
    let request: RewardRequest = serde_json::from_slice(&body).map_err(|e| {
        refused(
            StatusCode::BAD_REQUEST,
            "invalid_body",
            format!("invalid body ({e}); send {{\"input\": \"<the task's text>\", \"turns\": [{{\"text\": \"…\", \"ended\": true}}]}}"),
        )
    })?;
    same.reward(&request)
        .await
        .map(Json)
        .map_err(|e| refused(StatusCode::UNPROCESSABLE_ENTITY, "unscorable_episode", format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hone_demo::base_policy::Recipe;
    use hone_demo::config::{text, Choices};
    use hone_demo::AGENT;
    use hone_envs::{Builtin, Difficulty, RunnerConfig, Split, TaskData};

    /// The demo's reward spec, from the config text the demo writes.
    fn demo_rewarder() -> Rewarder {
        let dir = std::path::Path::new("/nonexistent-demo");
        let args = hone_demo::parse_args(std::iter::empty::<&str>()).unwrap();
        let choices = Choices::of(&args);
        let config = hone_config::load_str(
            &text(dir, &dir.join("base"), "http://127.0.0.1:9/run", &choices),
            dir,
            &|_| None,
        )
        .unwrap();
        Rewarder::new(AGENT, &config.agents[AGENT].reward, None).unwrap()
    }

    /// Scores with a user who never errs (noise 0), so every reward is
    /// known in advance from the demo's spec: accepted +1; a wrong answer
    /// draws one of three complaints, each −0.5; an invalid tool call −1;
    /// a clarifying question −0.5.
    fn same() -> (SameReward, hone_envs::Task, String) {
        let environment = Builtin::Calc.build(Recipe::DEMO_ENVIRONMENT_SEED);
        let runner = Runner::new(environment.clone(), RunnerConfig::new("http://127.0.0.1:9", AGENT)).unwrap();
        let task = environment.task(Split::Train, 3, Difficulty::Medium);
        let TaskData::Calc(calc) = &task.data else {
            panic!("a calc task")
        };
        let expression = calc.expression.clone();
        let user = SimulatedUser::new(0.0, (0, 0), 7);
        (
            SameReward::new(
                runner,
                demo_rewarder(),
                VersionId::parse("00000000000000ba").unwrap(),
                user,
            ),
            task,
            expression,
        )
    }

    fn turn(text: &str) -> SampledTurn {
        SampledTurn {
            text: text.to_owned(),
            ended: true,
        }
    }

    fn call(expression: &str) -> String {
        format!(
            "<tool_call>\n{}\n</tool_call>",
            serde_json::json!({"name": "calc", "arguments": {"expression": expression}})
        )
    }

    async fn score(same: &SameReward, input: &str, turns: Vec<SampledTurn>) -> RewardReply {
        same.reward(&RewardRequest {
            input: input.to_owned(),
            turns,
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn an_episode_another_sampler_wrote_gets_the_reward_hones_spec_gives() {
        let (same, task, expression) = same();
        let environment = same.runner.environment().clone();
        let result = environment.call_tool(
            &task,
            "calc",
            &serde_json::json!({"expression": expression}).to_string(),
        );
        let result = result.unwrap();

        // The tool, then its result as the answer: solved and accepted.
        let solved = score(
            &same,
            &task.prompt,
            vec![turn(&call(&expression)), turn(&format!("The answer is {result}."))],
        )
        .await;
        assert_eq!((solved.score, solved.reward), (1.0, 1.0), "{solved:?}");
        assert_eq!(solved.signals, ["accepted"]);

        // A wrong direct answer: one complaint, no penalty.
        let wrong = score(&same, &task.prompt, vec![turn("The answer is 123456.")]).await;
        assert_eq!((wrong.score, wrong.reward), (0.0, -0.5), "{wrong:?}");
        assert_eq!(wrong.signals.len(), 1);
        assert_ne!(wrong.signals[0], "accepted");

        // A tool call that is not JSON: the invalid-call penalty on top.
        let broken = score(
            &same,
            &task.prompt,
            vec![turn(
                "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \n</tool_call>",
            )],
        )
        .await;
        assert_eq!(broken.reward, -1.5, "{broken:?}");
        assert!(broken.components.iter().any(|c| c.starts_with("invalid_tool_call×-1")));

        // A clarifying question: its penalty and the user's complaint.
        let asks = score(&same, &task.prompt, vec![turn("Which numbers do you mean?")]).await;
        assert_eq!(asks.reward, -1.0, "{asks:?}");

        // A right answer cut at max_tokens is still the answer; truncation
        // costs nothing under the demo's spec.
        let cut = SampledTurn {
            text: format!("The answer is {result}."),
            ended: false,
        };
        let cut = score(&same, &task.prompt, vec![cut]).await;
        assert_eq!(cut.reward, 1.0, "{cut:?}");
    }

    #[tokio::test]
    async fn the_reward_is_served_over_http_and_bad_requests_are_refused() {
        let (same, task, _) = same();
        let (url, mut server) = Arc::new(same).serve().await.unwrap();
        let client = reqwest::Client::new();
        let post = |body: serde_json::Value| client.post(&url).json(&body).send();
        let wrong = post(
            serde_json::json!({"input": task.prompt, "turns": [{"text": "The answer is 123456.", "ended": true}]}),
        )
        .await
        .unwrap();
        assert_eq!(wrong.status(), 200);
        let reply: serde_json::Value = wrong.json().await.unwrap();
        assert_eq!(
            (reply["reward"].as_f64(), reply["score"].as_f64()),
            (Some(-0.5), Some(0.0)),
            "{reply}"
        );
        let unknown = post(serde_json::json!({"input": "no such task", "turns": [{"text": "1", "ended": true}]}))
            .await
            .unwrap();
        assert_eq!(unknown.status(), 422);
        let message = |body: ErrorBody| body.error.message;
        let said = message(unknown.json().await.unwrap());
        assert!(said.contains("is not a task"), "{said}");
        let malformed = post(serde_json::json!({"input": task.prompt})).await.unwrap();
        assert_eq!(malformed.status(), 400);
        let said = message(malformed.json().await.unwrap());
        assert!(said.contains("missing field `turns`"), "{said}");
        server.abort_all();
    }

    #[tokio::test]
    async fn an_episode_that_cannot_be_replayed_is_refused() {
        let (same, task, _) = same();
        let after_answer = same
            .reward(&RewardRequest {
                input: task.prompt.clone(),
                turns: vec![turn("The answer is 1."), turn("The answer is 2.")],
            })
            .await
            .unwrap_err();
        assert!(after_answer.to_string().contains("never asked for"), "{after_answer}");
        let unknown = same
            .reward(&RewardRequest {
                input: "What is the capital of France?".into(),
                turns: vec![turn("Paris.")],
            })
            .await
            .unwrap_err();
        assert!(unknown.to_string().contains("is not a task of `calc`"), "{unknown}");
        let none = same
            .reward(&RewardRequest {
                input: task.prompt.clone(),
                turns: Vec::new(),
            })
            .await
            .unwrap_err();
        assert!(none.to_string().contains("at least one turn"), "{none}");
    }
}
