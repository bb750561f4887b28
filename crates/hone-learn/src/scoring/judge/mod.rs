//! LLM judges through any configured provider, called via the gateway as
//! the `hone-judge` agent (so their calls are recorded as its episodes).
//! Two modes: [`Judge::absolute`] scores one episode against the rubric;
//! [`Judge::relative`] ranks a group of episodes with the same goal
//! (RULER-style). Output that does not parse is sent back with the error and
//! asked again; after the configured retries it is a [`JudgeFailure`], never a score.

mod parse;
mod render;

pub use parse::{parse_absolute, parse_relative};
pub use render::{conversation, shared_prefix};

use crate::client::ChatClient;
use hone_config::{JudgeSpec, JUDGE_AGENT};
use hone_types::EpisodeDetail;
use serde_json::Value;
use std::sync::Arc;

/// A judge's verdict on one episode.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeScore {
    /// In [0, 1].
    pub score: f64,
    pub explanation: String,
}

/// The judge never produced a usable answer; holds the last problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("judge failed after {attempts} attempts: {last_error}")]
pub struct JudgeFailure {
    pub attempts: u32,
    pub last_error: String,
    /// The judge episode, to look at what it said.
    pub episode: String,
}

pub struct Judge {
    pub spec: JudgeSpec,
    /// The judged agent: it names the `hone-judge` version to use.
    pub agent: String,
    pub client: Arc<dyn ChatClient>,
}

const SYSTEM: &str = "You are a strict, fair evaluator of an AI assistant's work. Judge only by the rubric. \
Answer with a single JSON object and nothing else.";

impl Judge {
    /// Scores one episode against the rubric.
    pub async fn absolute(&self, episode: &EpisodeDetail) -> Result<JudgeScore, JudgeFailure> {
        let prompt = format!(
            "Rubric:\n{}\n\nThe conversation:\n{}\n\nReply with JSON only: {{\"explanation\": \"<one or two sentences>\", \"score\": <number from 0 to 1>}}",
            self.spec.rubric,
            render::transcript(&conversation(episode)),
        );
        self.ask(&prompt, parse_absolute).await
    }

    /// Ranks episodes that share a goal against each other: the shared
    /// prefix is shown once, then each trajectory after it. Returns one
    /// score per episode, in order.
    pub async fn relative(&self, group: &[&EpisodeDetail]) -> Result<Vec<JudgeScore>, JudgeFailure> {
        let conversations: Vec<Vec<Value>> = group.iter().map(|e| conversation(e)).collect();
        let prefix = shared_prefix(&conversations);
        let mut prompt = format!(
            "Rubric:\n{}\n\nSeveral attempts at the same task follow. They share this context:\n{}\n",
            self.spec.rubric,
            render::transcript(&conversations[0][..prefix])
        );
        for (i, c) in conversations.iter().enumerate() {
            prompt.push_str(&format!(
                "\n<trajectory id=\"{}\">\n{}\n</trajectory>\n",
                i + 1,
                render::transcript(&c[prefix..])
            ));
        }
        prompt.push_str(&format!(
            "\nCompare the trajectories with each other and score each from 0 to 1 (better ones higher). \
Reply with JSON only: {{\"scores\": [{{\"trajectory_id\": \"1\", \"explanation\": \"<why>\", \"score\": <0..1>}}, …]}} \
with exactly one entry for each of the {} trajectories.",
            group.len()
        ));
        let n = group.len();
        self.ask(&prompt, move |text| parse_relative(text, n)).await
    }

    async fn ask<T>(&self, prompt: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<T, JudgeFailure> {
        let asked = crate::ask::Asked {
            client: self.client.as_ref(),
            model: JUDGE_AGENT,
            version: &self.agent,
            episode: format!("judge.{}", hone_types::EpisodeId::new_v7()),
            system: SYSTEM,
            retries: self.spec.retries,
        };
        asked.json(prompt, None, parse).await.map_err(|f| JudgeFailure {
            attempts: f.attempts,
            last_error: f.last_error,
            episode: f.episode,
        })
    }
}
