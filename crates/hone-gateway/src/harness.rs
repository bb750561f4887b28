//! Applies a version to a client's request before it goes upstream: the
//! version's system prompt goes first, its sampling settings win over the
//! client's (the version is what hone optimises), retrieved few-shot
//! examples go before the conversation, and `model` becomes the route's
//! upstream model.

use hone_types::openai::{ChatCompletionRequest, Message, Role};
use hone_types::{Route, VersionSpec};

pub fn apply(
    request: &ChatCompletionRequest,
    version: &VersionSpec,
    route: &Route,
    examples: &[Message],
) -> ChatCompletionRequest {
    let mut upstream = request.clone();
    upstream.model.clone_from(&route.model);
    if !examples.is_empty() {
        // After the client's leading system messages, before its conversation.
        let at = upstream
            .messages
            .iter()
            .take_while(|m| matches!(m.role, Role::System | Role::Developer))
            .count();
        upstream.messages.splice(at..at, examples.iter().cloned());
    }
    if let Some(system) = &version.system {
        upstream.messages.insert(0, Message::new(Role::System, system.clone()));
    }
    if version.temperature.is_some() {
        upstream.temperature = version.temperature;
    }
    if version.top_p.is_some() {
        upstream.top_p = version.top_p;
    }
    if let Some(limit) = version.max_tokens {
        if upstream.max_completion_tokens.is_some() {
            upstream.max_completion_tokens = Some(limit);
        } else {
            upstream.max_tokens = Some(limit);
        }
    }
    if version.reasoning_effort.is_some() {
        upstream.reasoning_effort.clone_from(&version.reasoning_effort);
    }
    upstream
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_prompt_and_sampling_apply() {
        let request = ChatCompletionRequest::from_json(
            br#"{"model":"assistant","messages":[{"role":"user","content":"hi"}],"temperature":1.0,"max_completion_tokens":50}"#,
        )
        .unwrap();
        let version = VersionSpec {
            agent: "assistant".into(),
            routes: vec![],
            system: Some("Be brief.".into()),
            temperature: Some(0.2),
            top_p: None,
            max_tokens: Some(10),
            reasoning_effort: None,
            examples: None,
        };
        let route = Route {
            provider: "up".into(),
            model: "gpt-x".into(),
            adapter: None,
        };
        let out = apply(&request, &version, &route, &[]);
        assert_eq!(out.model, "gpt-x");
        assert_eq!(out.messages[0].text(), "Be brief.");
        assert_eq!(out.messages[1].text(), "hi");
        assert_eq!(out.temperature, Some(0.2));
        assert_eq!(out.max_completion_tokens, Some(10));
        assert_eq!(out.max_tokens, None);

        let shots = [Message::new(Role::User, "2+2?"), Message::new(Role::Assistant, "4")];
        let out = apply(&request, &version, &route, &shots);
        let texts: Vec<String> = out.messages.iter().map(Message::text).collect();
        assert_eq!(texts, ["Be brief.", "2+2?", "4", "hi"]);
    }
}
