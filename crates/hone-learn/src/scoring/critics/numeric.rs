//! The last number in the final answer equals the reference's number within
//! a tolerance ("The answer is 42." matches 42).

use super::{reference_text, Critic, CriticFailure, CriticInput, CriticScore};
use crate::episode::final_text;

pub struct NumericCritic {
    pub name: String,
    pub tolerance: f64,
}

/// The last number written in `text` (commas as thousands separators allowed).
pub fn last_number(text: &str) -> Option<f64> {
    let mut last = None;
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit()
            || (matches!(chars[i], '-' | '.') && chars.get(i + 1).is_some_and(char::is_ascii_digit));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < chars.len()
            && (chars[j].is_ascii_digit()
                || ((chars[j] == '.' || chars[j] == ',') && chars.get(j + 1).is_some_and(char::is_ascii_digit)))
        {
            j += 1;
        }
        let token: String = chars[i..j].iter().filter(|c| **c != ',').collect();
        if let Ok(v) = token.parse::<f64>() {
            last = Some(v);
        }
        i = j;
    }
    last
}

impl Critic for NumericCritic {
    fn name(&self) -> &str {
        &self.name
    }

    fn score(&self, input: CriticInput<'_>) -> Result<CriticScore, CriticFailure> {
        let expected_text = reference_text(input, &self.name)?;
        let expected = last_number(&expected_text).ok_or_else(|| {
            CriticFailure(format!(
                "`{}`: the reference {expected_text:?} holds no number",
                self.name
            ))
        })?;
        let answer = final_text(input.episode);
        Ok(match last_number(&answer) {
            None => CriticScore::pass(false, format!("expected {expected}, the answer holds no number")),
            Some(got) => {
                let ok = (got - expected).abs() <= self.tolerance;
                CriticScore::pass(ok, format!("expected {expected}, got {got}"))
            }
        })
    }
}
