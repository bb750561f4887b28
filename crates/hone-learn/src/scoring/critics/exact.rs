//! The final answer equals the reference (trimmed, whitespace collapsed,
//! case-insensitive unless asked otherwise).

use super::{reference_text, Critic, CriticFailure, CriticInput, CriticScore};
use crate::episode::final_text;

pub struct ExactCritic {
    pub name: String,
    pub case_sensitive: bool,
}

fn normalise(text: &str, case_sensitive: bool) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if case_sensitive {
        collapsed
    } else {
        collapsed.to_lowercase()
    }
}

impl Critic for ExactCritic {
    fn name(&self) -> &str {
        &self.name
    }

    fn score(&self, input: CriticInput<'_>) -> Result<CriticScore, CriticFailure> {
        let expected = reference_text(input, &self.name)?;
        let answer = final_text(input.episode);
        let equal = normalise(&answer, self.case_sensitive) == normalise(&expected, self.case_sensitive);
        Ok(CriticScore::pass(
            equal,
            if equal {
                "equals the reference".to_owned()
            } else {
                format!("expected {expected:?}, got {answer:?}")
            },
        ))
    }
}
