//! `openai-rft`'s grader: the agent's reward spec as OpenAI's graders,
//! where it can be expressed. The host grades every sample itself, so the
//! critics that compare the answer with its reference become `python`
//! graders (the same check as the critic, in the host's sandbox: a test
//! runs each against hone's critic on the same answers), an absolute judge
//! becomes a `score_model` grader with its rubric, and several become one
//! `multi` grader summing them with the spec's weights, as hone's reward
//! does. Users' signals, penalties, a relative judge and the critics that
//! read tool calls, JSON schemas or run commands cannot be expressed: they
//! are named, and left out.

use hone_config::{CriticKind, JudgeMode, RewardSpec};
use serde_json::{json, Value};

/// The last number in a text, as the numeric critic reads it
/// (`critics::numeric::last_number`).
const LAST_NUMBER: &str = r#"import re

def last_number(text):
    last = None
    for m in re.finditer(r"[-.]?\d(?:\d|[.,](?=\d))*", text):
        try:
            last = float(m.group(0).replace(",", ""))
        except ValueError:
            pass
    return last
"#;

/// The grader made of the spec, and what of the spec it leaves out.
pub struct Made {
    pub grader: Option<Value>,
    /// Whether the grader reads `item.reference_answer`.
    pub needs_reference: bool,
    pub left_out: Vec<String>,
}

/// The `python` grader checking what `kind` checks, if it compares the
/// answer with a reference or a pattern.
pub fn python_source(kind: &CriticKind) -> Option<(String, bool)> {
    Some(match kind {
        CriticKind::Numeric { tolerance } => (
            format!(
                "{LAST_NUMBER}\ndef grade(sample, item):\n    expected = last_number(str(item[\"reference_answer\"]))\n    \
                 got = last_number(sample[\"output_text\"])\n    if expected is None or got is None:\n        return 0.0\n    \
                 return 1.0 if abs(got - expected) <= {tolerance:?} else 0.0\n"
            ),
            true,
        ),
        CriticKind::Exact { case_sensitive } => (
            format!(
                "def grade(sample, item):\n    def norm(text):\n        text = \" \".join(str(text).split())\n        \
                 return text if {} else text.lower()\n    \
                 return 1.0 if norm(sample[\"output_text\"]) == norm(item[\"reference_answer\"]) else 0.0\n",
                if *case_sensitive { "True" } else { "False" }
            ),
            true,
        ),
        CriticKind::Regex { pattern } => (
            format!(
                "import re\n\ndef grade(sample, item):\n    return 1.0 if re.search({}, sample[\"output_text\"]) else 0.0\n",
                serde_json::to_string(pattern).unwrap_or_default()
            ),
            false,
        ),
        CriticKind::ToolCalls | CriticKind::JsonSchema { .. } | CriticKind::Command { .. } => return None,
    })
}

/// The grader of `spec`.
pub fn of(spec: &RewardSpec) -> Made {
    let mut graders: Vec<(String, f64, Value)> = Vec::new();
    let mut left_out = Vec::new();
    let mut needs_reference = false;
    for critic in &spec.critics {
        match python_source(&critic.kind) {
            Some((source, reads_reference)) => {
                needs_reference |= reads_reference;
                graders.push((
                    critic.name.clone(),
                    critic.weight,
                    json!({"type": "python", "name": critic.name, "source": source}),
                ));
            }
            None => left_out.push(format!(
                "critic `{}` (it reads what the host's graders cannot)",
                critic.name
            )),
        }
    }
    if let Some(judge) = &spec.judge {
        match judge.mode {
            JudgeMode::Absolute => {
                needs_reference = true;
                graders.push((
                    "judge".to_owned(),
                    judge.weight,
                    json!({
                        "type": "score_model",
                        "name": "judge",
                        "model": judge.model,
                        "input": [
                            {"role": "system", "content": format!(
                                "{}\nAnswer with a score from 0 (useless or harmful) to 1 (perfect).", judge.rubric)},
                            {"role": "user", "content":
                                "The assistant's answer:\n{{sample.output_text}}\n\nA reference answer, if any:\n{{item.reference_answer}}"},
                        ],
                        "range": [0, 1],
                    }),
                ));
            }
            JudgeMode::Relative => left_out.push("the relative judge (it ranks a group of answers)".to_owned()),
        }
    }
    for signal in &spec.signals {
        left_out.push(format!("signal `{}` (users give it, not a grader)", signal.name));
    }
    let p = &spec.penalties;
    let penalised = [
        p.invalid_tool_call,
        p.empty,
        p.refusal,
        p.clarifying_question,
        p.error,
        p.truncated,
    ];
    if penalised.iter().any(|v| *v != 0.0) {
        left_out.push("the penalties (behaviours of whole episodes)".to_owned());
    }
    let grader = match graders.len() {
        0 => None,
        1 if (graders[0].1 - 1.0).abs() < 1e-12 => Some(graders.remove(0).2),
        _ => {
            let formula = graders
                .iter()
                .map(|(name, weight, _)| format!("{weight:?} * {}", variable(name)))
                .collect::<Vec<_>>()
                .join(" + ");
            let named: serde_json::Map<String, Value> = graders
                .into_iter()
                .map(|(name, _, grader)| (variable(&name), grader))
                .collect();
            Some(json!({"type": "multi", "name": "reward", "graders": named, "calculate_output": formula}))
        }
    };
    Made {
        grader,
        needs_reference,
        left_out,
    }
}

/// A grader's name as a variable of `calculate_output`.
fn variable(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if clean.starts_with(|c: char| c.is_ascii_digit()) {
        format!("g_{clean}")
    } else {
        clean
    }
}
