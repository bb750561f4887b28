//! `grpo`: group-relative policy optimisation of a LoRA adapter on groups
//! from the sources `groups` names: `rollouts` (default), each task of the
//! cycle's train half rolled out `group_size` times, each task's episodes
//! one group; `production`, the train half's production episodes
//! themselves with their users' rewards, one answer each against a running
//! baseline; `shadow`, their calls' shadow samples with the served answer,
//! scored alike (`live.rs`).
//!
//! The trainer gets what the engine really sampled: every call's prompt and
//! completion token ids with the sampler's logprobs (so the importance
//! ratio and its clipping mean something), each call credited with the
//! reward spec's per-call credit (its own penalties where it showed the
//! behaviour, else its episode's reward) and tagged with its episode, so an
//! episode counts once in its group however many calls it made. With no
//! reward source for the rollouts it proposes nothing and says why.

use super::live::{self, Live};
use super::rollouts::{self, Rollout};
use super::training::{propose_adapter, push_row, token_completion, weight_base, Examples, Method};
use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use futures::future::BoxFuture;
use hone_config::{GroupSource, TrainingSpec};
use hone_types::Instance;
use serde_json::json;
use std::collections::BTreeMap;

pub struct Grpo {
    pub spec: TrainingSpec,
}

impl Optimiser for Grpo {
    fn name(&self) -> &'static str {
        "grpo"
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>> {
        Box::pin(async move {
            if let Err(why) = weight_base(ctx) {
                (ctx.progress)(&format!("grpo: {why}; nothing proposed"));
                return Ok(Vec::new());
            }
            let items = ctx.store.dataset_items(&ctx.target.id)?;
            let mut rows = Vec::new();
            let mut groups = 0u64;
            let mut baselines = BTreeMap::new();
            for source in &self.spec.groups {
                match source {
                    GroupSource::Rollouts => {
                        for row in self.rollout_groups(ctx, &items).await? {
                            push_row(&mut rows, &row)?;
                            groups += 1;
                        }
                    }
                    GroupSource::Production | GroupSource::Shadow => {
                        let kind = if *source == GroupSource::Production {
                            Live::Production
                        } else {
                            Live::Shadow
                        };
                        let found = live::groups(ctx, &items, kind, self.spec.max_staleness)?;
                        (ctx.progress)(&format!("grpo: {}", found.summary(kind)));
                        if let Some(b) = found.baseline {
                            baselines.insert(ctx.agent.name.clone(), b);
                        }
                        for row in &found.rows {
                            push_row(&mut rows, row)?;
                            groups += 1;
                        }
                    }
                }
            }
            propose_adapter(
                ctx,
                Method::Grpo,
                &self.spec,
                Examples {
                    rows,
                    count: groups,
                    baselines,
                },
            )
            .await
        })
    }
}

impl Grpo {
    /// The champion rolled out `group_size` times on each train task, one
    /// group per task; none (with the reason said) when nothing scores
    /// rollouts.
    async fn rollout_groups(
        &self,
        ctx: &ProposeContext<'_>,
        items: &[Instance],
    ) -> Result<Vec<serde_json::Value>, LearnError> {
        let groups_by_item = match rollouts::scored(ctx, "grpo", items, self.spec.group_size).await? {
            Ok(groups) => groups,
            Err(why) => {
                (ctx.progress)(&why);
                return Ok(Vec::new());
            }
        };
        let mut missing_tokens = 0u64;
        let rows = groups_by_item
            .values()
            .filter_map(|group| group_row(&ctx.agent.name, group, &mut missing_tokens))
            .collect();
        if missing_tokens > 0 {
            (ctx.progress)(&format!(
                "grpo: {missing_tokens} calls carried no token ids (not served by the embedded engine); left out"
            ));
        }
        Ok(rows)
    }
}

/// A group's row of the trainer's GRPO format: one completion per call of
/// every rollout, with its exact tokens, the sampler's logprobs, its credit
/// and its episode; `None` when no call carried token ids (those without
/// are counted in `missing_tokens`).
pub fn group_row(agent: &str, group: &[Rollout], missing_tokens: &mut u64) -> Option<serde_json::Value> {
    let completions = completions(group, missing_tokens);
    (!completions.is_empty()).then(|| json!({"agent": agent, "completions": completions}))
}

fn completions(group: &[Rollout], missing_tokens: &mut u64) -> Vec<serde_json::Value> {
    let mut completions = Vec::new();
    for Rollout { episode, reward } in group {
        for call in &episode.calls {
            let Some(tokens) = call.sampled_tokens() else {
                *missing_tokens += 1;
                continue;
            };
            let mut completion = token_completion(&tokens, reward.credit(call.id));
            completion["episode"] = json!(episode.summary.id.to_string());
            completions.push(completion);
        }
    }
    completions
}
