//! The final answer matches a regular expression.

use super::{Critic, CriticFailure, CriticInput, CriticScore};
use crate::episode::final_text;

pub struct RegexCritic {
    name: String,
    pattern: regex::Regex,
}

impl RegexCritic {
    pub fn new(name: String, pattern: &str) -> Result<Self, String> {
        let pattern = regex::Regex::new(pattern).map_err(|e| format!("critic `{name}`: bad pattern: {e}"))?;
        Ok(Self { name, pattern })
    }
}

impl Critic for RegexCritic {
    fn name(&self) -> &str {
        &self.name
    }

    fn score(&self, input: CriticInput<'_>) -> Result<CriticScore, CriticFailure> {
        let matched = self.pattern.is_match(&final_text(input.episode));
        Ok(CriticScore::pass(
            matched,
            if matched {
                format!("matches `{}`", self.pattern)
            } else {
                format!("does not match `{}`", self.pattern)
            },
        ))
    }
}
