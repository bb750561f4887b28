//! `tools`: clearer tool descriptions and parameter schemas where tool
//! calls go wrong. For a champion that owns its tool set, the train set's
//! episodes are grouped by tool: calls that did not fit the tool (unknown
//! name, arguments that are not JSON or break the schema) and failed
//! episodes that called it. A tool with at least `min_failures` gets a
//! reflection model's rewrite of its description and schema; the diff is a
//! unified diff of the tool set.

use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use crate::search::optimiser::reflect::evidence::{self, Evidence};
use crate::search::optimiser::reflect::Reflector;
use futures::future::BoxFuture;
use hone_config::ToolsSpec;
use hone_types::openai::Tool;
use serde_json::Value;

pub struct ToolsOptimiser {
    pub spec: ToolsSpec,
}

/// Where one tool went wrong.
struct Cluster<'e> {
    tool: &'e Tool,
    invalid: Vec<&'e Evidence>,
    failed: Vec<&'e Evidence>,
}

impl Optimiser for ToolsOptimiser {
    fn name(&self) -> &'static str {
        "tools"
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>> {
        Box::pin(async move {
            if ctx.champion.tools.is_empty() {
                (ctx.progress)(
                    "tools: the champion owns no tool set (declare `tools` on the version); nothing proposed",
                );
                return Ok(Vec::new());
            }
            let evidence = evidence::of(ctx)?;
            let mut clusters: Vec<Cluster> = ctx
                .champion
                .tools
                .iter()
                .map(|tool| {
                    let name = &tool.function.name;
                    let invalid: Vec<&Evidence> = evidence
                        .iter()
                        .filter(|e| e.tool_problems.iter().any(|p| &p.tool == name))
                        .collect();
                    let failed = evidence
                        .iter()
                        .filter(|e| !e.passed && e.tools_called.contains(name) && !invalid.contains(e))
                        .collect();
                    Cluster { tool, invalid, failed }
                })
                .filter(|c| c.invalid.len() + c.failed.len() >= self.spec.min_failures)
                .collect();
            clusters.sort_by_key(|c| std::cmp::Reverse(c.invalid.len() + c.failed.len()));
            if clusters.is_empty() {
                (ctx.progress)(&format!(
                    "tools: no tool has {} or more invalid calls or failed episodes",
                    self.spec.min_failures
                ));
                return Ok(Vec::new());
            }
            let reflector = Reflector::of(ctx, self.name());
            let mut proposals = Vec::new();
            for cluster in clusters.iter().take(self.spec.max_candidates) {
                let before = ctx.meter.spent();
                let prompt = reflection_prompt(cluster, self.spec.minibatch);
                let (diagnosis, description, parameters) = match reflector.ask(&prompt, parse).await {
                    Ok(a) => a,
                    Err(f) if f.budget_spent => {
                        (ctx.progress)(&format!("tools: {}; no more rewrites this cycle", f.last_error));
                        break;
                    }
                    Err(f) => {
                        (ctx.progress)(&format!(
                            "tools: no usable rewrite of `{}` ({}; episode {})",
                            cluster.tool.function.name, f.last_error, f.episode
                        ));
                        continue;
                    }
                };
                let mut spec = ctx.champion.clone();
                for tool in &mut spec.tools {
                    if tool.function.name == cluster.tool.function.name {
                        tool.function.description = Some(description.clone());
                        if let Some(p) = &parameters {
                            tool.function.parameters = Some(p.clone());
                        }
                    }
                }
                if spec == *ctx.champion {
                    continue;
                }
                let mut proposal = Proposal::of(ctx.champion, spec);
                proposal.diff = format!(
                    "{}\n`{}`: {} invalid calls, {} failed episodes after calling it: {diagnosis}",
                    proposal.diff,
                    cluster.tool.function.name,
                    cluster.invalid.len(),
                    cluster.failed.len()
                );
                proposal.spend = Some(ctx.meter.spent().since(before));
                proposals.push(proposal);
            }
            Ok(proposals)
        })
    }
}

fn reflection_prompt(cluster: &Cluster<'_>, size: usize) -> String {
    let mut text = format!(
        "The assistant is offered this tool:\n<tool>\n{}\n</tool>\n\nEpisodes where calling it went wrong:\n",
        serde_json::to_string_pretty(cluster.tool).unwrap_or_default()
    );
    for (i, e) in cluster
        .invalid
        .iter()
        .chain(cluster.failed.iter())
        .take(size)
        .enumerate()
    {
        text.push_str(&e.render(i + 1));
    }
    text.push_str(
        "\nDiagnose why the model calls this tool wrongly or at the wrong time. Write a clearer description \
(when to use it, what each argument holds, with an example) and, if the schema itself misleads, a corrected \
JSON schema for its parameters. Keep the tool's name and what it does. Reply with JSON only: \
{\"diagnosis\": \"…\", \"description\": \"…\", \"parameters\": {<JSON schema, or omit to keep it>}}",
    );
    text
}

fn parse(text: &str) -> Result<(String, String, Option<Value>), String> {
    let object = crate::ask::json_object(text)?;
    let description = object
        .get("description")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .ok_or("`description` is missing or empty")?
        .to_owned();
    let parameters = match object.get("parameters") {
        None | Some(Value::Null) => None,
        Some(p) if p.get("type").and_then(Value::as_str) == Some("object") => {
            jsonschema::validator_for(p).map_err(|e| format!("`parameters` is not a usable JSON schema: {e}"))?;
            Some(p.clone())
        }
        Some(_) => return Err("`parameters` must be a JSON schema with \"type\": \"object\"".into()),
    };
    let diagnosis = object.get("diagnosis").and_then(Value::as_str).unwrap_or("").trim();
    Ok((crate::ask::clip(diagnosis, 300), description, parameters))
}
