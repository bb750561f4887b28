//! JSON-schema validity of the final answer's text.

use super::{Critic, CriticFailure, CriticInput, CriticScore};
use crate::episode::{final_call, final_text};

pub struct JsonSchemaCritic {
    name: String,
    validator: jsonschema::Validator,
}

impl JsonSchemaCritic {
    pub fn new(name: String, schema: &serde_json::Value) -> Result<Self, String> {
        let validator = jsonschema::validator_for(schema)
            .map_err(|e| format!("critic `{name}`: the schema does not compile: {e}"))?;
        Ok(Self { name, validator })
    }
}

impl Critic for JsonSchemaCritic {
    fn name(&self) -> &str {
        &self.name
    }

    fn score(&self, input: CriticInput<'_>) -> Result<CriticScore, CriticFailure> {
        let text = final_text(input.episode);
        let call = final_call(input.episode).map(|c| c.id);
        let (score, reason) = match serde_json::from_str::<serde_json::Value>(text.trim()) {
            Err(e) => (0.0, format!("the answer is not JSON: {e}")),
            Ok(value) => match self.validator.iter_errors(&value).next() {
                Some(e) => (
                    0.0,
                    format!("the answer does not match the schema: {e} (at `{}`)", e.instance_path),
                ),
                None => (1.0, "the answer matches the schema".to_owned()),
            },
        };
        Ok(CriticScore {
            score,
            per_call: call.map(|c| vec![(c, score)]).unwrap_or_default(),
            reason: Some(reason),
        })
    }
}
