//! Reading a judge's answer: the JSON object in it (code fences and chatter
//! around it tolerated), every required field present, scores in [0, 1].
//! Anything else is an error that names the problem.

use super::JudgeScore;
use crate::ask::json_object;
use serde_json::Value;

fn score_of(entry: &serde_json::Map<String, Value>, at: &str) -> Result<JudgeScore, String> {
    let score = match entry.get("score") {
        Some(Value::Number(n)) => n.as_f64().ok_or(format!("{at}score is not a number"))?,
        Some(Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("{at}score {s:?} is not a number"))?,
        Some(other) => return Err(format!("{at}score {other} is not a number")),
        None => return Err(format!("{at}score is missing")),
    };
    if !(0.0..=1.0).contains(&score) {
        return Err(format!("{at}score {score} is outside [0, 1]"));
    }
    let explanation = entry
        .get("explanation")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Ok(JudgeScore { score, explanation })
}

/// `{"explanation": "…", "score": 0.7}`.
pub fn parse_absolute(text: &str) -> Result<JudgeScore, String> {
    score_of(&json_object(text)?, "")
}

/// `{"scores": [{"trajectory_id": "1", "explanation": "…", "score": 0.7}, …]}`
/// with exactly one entry per trajectory `1..=n`; returned in trajectory order.
pub fn parse_relative(text: &str, n: usize) -> Result<Vec<JudgeScore>, String> {
    let object = json_object(text)?;
    let entries = object
        .get("scores")
        .and_then(Value::as_array)
        .ok_or("`scores` is missing or not a list")?;
    let mut scores: Vec<Option<JudgeScore>> = vec![None; n];
    for (i, entry) in entries.iter().enumerate() {
        let entry = entry.as_object().ok_or(format!("scores[{i}] is not an object"))?;
        let id = match entry.get("trajectory_id") {
            Some(Value::String(s)) => s.trim().parse::<usize>().ok(),
            Some(Value::Number(n)) => n.as_u64().map(|v| v as usize),
            _ => None,
        }
        .ok_or(format!("scores[{i}].trajectory_id is missing or not a number"))?;
        let slot = id
            .checked_sub(1)
            .and_then(|k| scores.get_mut(k))
            .ok_or(format!("scores[{i}] names trajectory {id}; there are {n}"))?;
        if slot.is_some() {
            return Err(format!("trajectory {id} is scored twice"));
        }
        *slot = Some(score_of(entry, &format!("scores[{i}]."))?);
    }
    scores
        .into_iter()
        .enumerate()
        .map(|(k, s)| s.ok_or(format!("trajectory {} has no score", k + 1)))
        .collect()
}
