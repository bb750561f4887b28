//! Applies a version to a client's request before it goes upstream (the
//! gateway, per call) or before it is trained on (hosted fine-tuning): the
//! version's system prompt, followed by its playbook's lessons, goes first;
//! retrieved few-shot examples go before the conversation; a version that
//! owns its tool set serves those tools in place of the client's; `model`
//! becomes the route's upstream model; and the version's sampling settings
//! apply by one rule, written here only:
//!
//! - `temperature`, `top_p`, `reasoning_effort`: the version's value is a
//!   default the client may override, unless the version lists the setting
//!   in `enforce` (then the version's value wins). Candidates of the `model`
//!   optimiser enforce what they change, so the setting they were proven
//!   with is the one that serves.
//! - `max_tokens`: a ceiling. The answer never exceeds what the client
//!   asked, nor the version's limit.

use crate::openai::{ChatCompletionRequest, Message, Role};
use crate::{Route, Setting, VersionSpec};

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
    let playbook = crate::playbook::render(&version.playbook);
    let system = match (&version.system, playbook) {
        (Some(system), Some(lessons)) => Some(format!("{system}\n\n{lessons}")),
        (system, lessons) => system.clone().or(lessons),
    };
    if let Some(system) = system {
        upstream.messages.insert(0, Message::new(Role::System, system));
    }
    if !version.tools.is_empty() {
        upstream.tools = Some(version.tools.clone());
    }
    let wins = |setting: Setting, client_set: bool| !client_set || version.enforces(setting);
    if version.temperature.is_some() && wins(Setting::Temperature, upstream.temperature.is_some()) {
        upstream.temperature = version.temperature;
    }
    if version.top_p.is_some() && wins(Setting::TopP, upstream.top_p.is_some()) {
        upstream.top_p = version.top_p;
    }
    if version.reasoning_effort.is_some() && wins(Setting::ReasoningEffort, upstream.reasoning_effort.is_some()) {
        upstream.reasoning_effort.clone_from(&version.reasoning_effort);
    }
    // The version's ceiling caps whichever limit the client sent (both, if
    // it sent both); with none it is sent as `max_completion_tokens`, the
    // name every OpenAI model takes (reasoning models refuse `max_tokens`).
    if let Some(limit) = version.max_tokens {
        let cap = |asked: Option<u32>| asked.map(|asked| asked.min(limit));
        match (upstream.max_completion_tokens, upstream.max_tokens) {
            (None, None) => upstream.max_completion_tokens = Some(limit),
            (completion, tokens) => {
                upstream.max_completion_tokens = cap(completion);
                upstream.max_tokens = cap(tokens);
            }
        }
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
            max_tokens: Some(10),
            ..Default::default()
        };
        let route = Route {
            provider: "up".into(),
            model: "gpt-x".into(),
            adapter: None,
            memory: None,
            adapter_sha256: None,
        };
        let out = apply(&request, &version, &route, &[]);
        assert_eq!(out.model, "gpt-x");
        assert_eq!(out.messages[0].text(), "Be brief.");
        assert_eq!(out.messages[1].text(), "hi");
        assert_eq!(
            out.temperature,
            Some(1.0),
            "the client's temperature overrides a default"
        );
        assert_eq!(out.max_completion_tokens, Some(10), "the version's ceiling");
        assert_eq!(out.max_tokens, None);

        let mut enforcing = version.clone();
        enforcing.enforce(Setting::Temperature);
        let out = apply(&request, &enforcing, &route, &[]);
        assert_eq!(out.temperature, Some(0.2), "an enforced setting wins");

        let bare = ChatCompletionRequest::from_json(
            br#"{"model":"assistant","messages":[{"role":"user","content":"hi"}],"max_tokens":4}"#,
        )
        .unwrap();
        let out = apply(&bare, &version, &route, &[]);
        assert_eq!(
            out.temperature,
            Some(0.2),
            "the version's default when the client sets none"
        );
        assert_eq!(out.max_tokens, Some(4), "never more than the client asked");
        assert_eq!(out.max_completion_tokens, None);

        let shots = [Message::new(Role::User, "2+2?"), Message::new(Role::Assistant, "4")];
        let out = apply(&request, &version, &route, &shots);
        let texts: Vec<String> = out.messages.iter().map(Message::text).collect();
        assert_eq!(texts, ["Be brief.", "2+2?", "4", "hi"]);
    }

    #[test]
    fn token_limits_the_version_caps_every_limit_the_client_sent_and_sends_its_own_as_max_completion_tokens() {
        let version = VersionSpec {
            agent: "assistant".into(),
            routes: vec![],
            max_tokens: Some(10),
            ..Default::default()
        };
        let route = Route {
            provider: "up".into(),
            model: "o4-mini".into(),
            adapter: None,
            memory: None,
            adapter_sha256: None,
        };
        let limits = |body: &str| {
            let request = ChatCompletionRequest::from_json(body.as_bytes()).unwrap();
            let out = apply(&request, &version, &route, &[]);
            (out.max_completion_tokens, out.max_tokens)
        };
        let both =
            r#"{"model":"a","messages":[{"role":"user","content":"hi"}],"max_tokens":500,"max_completion_tokens":400}"#;
        assert_eq!(limits(both), (Some(10), Some(10)), "neither passes uncapped");
        let none = r#"{"model":"a","messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(limits(none), (Some(10), None), "reasoning models refuse max_tokens");
    }

    #[test]
    fn the_playbook_follows_the_prompt_and_owned_tools_replace_the_clients() {
        let request = ChatCompletionRequest::from_json(
            br#"{"model":"a","messages":[{"role":"user","content":"hi"}],
                "tools":[{"type":"function","function":{"name":"convert","description":"old"}}]}"#,
        )
        .unwrap();
        let lesson = |id: &str, text: &str| crate::Lesson {
            id: id.into(),
            text: text.into(),
            helpful: 2,
            harmful: 0,
            sources: vec!["e1".into()],
        };
        let mut version = VersionSpec {
            agent: "a".into(),
            ..Default::default()
        };
        version.playbook = vec![lesson("L1", "Use metres."), lesson("L3", "Cite the source.")];
        let route = Route {
            provider: "up".into(),
            model: "m".into(),
            adapter: None,
            memory: None,
            adapter_sha256: None,
        };
        let out = apply(&request, &version, &route, &[]);
        assert_eq!(
            out.messages[0].text(),
            "Playbook — lessons learnt from earlier conversations:\n- [L1] Use metres.\n- [L3] Cite the source."
        );
        assert_eq!(
            out.tools, request.tools,
            "a version without its own tools keeps the client's"
        );
        version.system = Some("Be brief.".into());
        version.tools = serde_json::from_value(serde_json::json!([{"type":"function","function":{
            "name":"convert","description":"Convert an amount; `amount` is a plain number.",
            "parameters":{"type":"object","properties":{"amount":{"type":"number"}}}}}]))
        .unwrap();
        let out = apply(&request, &version, &route, &[]);
        assert!(out.messages[0].text().starts_with("Be brief.\n\nPlaybook — "));
        assert_eq!(out.messages.len(), 2);
        let tools = out.tools.unwrap();
        assert_eq!(tools.len(), 1);
        assert_eq!(
            tools[0].function.description.as_deref(),
            Some("Convert an amount; `amount` is a plain number.")
        );
    }
}
