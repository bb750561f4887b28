//! The agent loop and `POST /run`, over real HTTP against the fake model.

use crate::support::{serve, upstream, Mode};
use hone_envs::endpoint::{router, RunResponse};
use hone_envs::{Builtin, Difficulty, Environment, RunContext, RunError, Runner, RunnerConfig, Split};
use hone_types::openai::Role;
use hone_types::EpisodeId;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::task::JoinSet;

fn runner(environment: Arc<dyn Environment>, base: &str) -> Runner {
    let mut config = RunnerConfig::new(base, "demo-agent");
    config.api_key = Some("secret".to_owned());
    Runner::new(environment, config).unwrap()
}

fn context(episode: &str, version: Option<&str>) -> RunContext {
    RunContext {
        episode: Some(EpisodeId::parse(episode).unwrap()),
        version: version.map(str::to_owned),
    }
}

#[tokio::test]
async fn a_calc_episode_calls_the_tool_then_answers() {
    let environment = Builtin::Calc.build(1);
    let (up, base) = upstream(environment.clone(), Mode::Oracle).await;
    let task = environment.task(Split::Train, 3, Difficulty::Hard);
    let demonstration = environment.demonstration(&task);

    let outcome = runner(environment.clone(), &base)
        .run(&task, &context("demo-ep-1", Some("v-test")))
        .await
        .unwrap();
    assert_eq!(
        (
            outcome.played.calls,
            outcome.played.tool_calls,
            outcome.played.tool_errors
        ),
        (2, 1, 0)
    );
    assert!(outcome.played.finished);
    assert_eq!(outcome.played.score, 1.0);
    assert_eq!(outcome.played.answer, demonstration[2].text());
    assert_eq!(outcome.episode.as_str(), "demo-ep-1");
    assert_eq!(outcome.played.messages.len(), 2 + demonstration.len());

    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for call in &seen {
        assert_eq!(call.episode.as_deref(), Some("demo-ep-1"));
        assert_eq!(call.version.as_deref(), Some("v-test"));
        assert_eq!(call.authorization.as_deref(), Some("Bearer secret"));
        assert_eq!(call.request.model, "demo-agent");
        let tools: Vec<_> = call
            .request
            .tools
            .iter()
            .flatten()
            .map(|t| t.function.name.as_str())
            .collect();
        assert_eq!(tools, ["calc"]);
        assert_eq!(call.request.messages[0].role, Role::System);
        assert_eq!(call.request.messages[1].text(), task.prompt);
    }
    // The second call carries the executed tool's result for the first call's tool call.
    let second = &seen[1].request.messages;
    assert_eq!(second.len(), 4);
    assert_eq!(second[2].tool_calls()[0].function.name, "calc");
    assert_eq!(second[3].role, Role::Tool);
    assert_eq!(
        second[3].tool_call_id.as_deref(),
        Some(second[2].tool_calls()[0].id.as_str())
    );
    assert_eq!(second[3].text(), demonstration[1].text());
}

#[tokio::test]
async fn a_two_customer_lookup_runs_parallel_tool_calls() {
    let environment = Builtin::Lookup.build(1);
    let (up, base) = upstream(environment.clone(), Mode::Oracle).await;
    let task = environment.task(Split::HeldOut, 0, Difficulty::Hard);
    let outcome = runner(environment, &base)
        .run(&task, &RunContext::default())
        .await
        .unwrap();
    assert_eq!(
        (
            outcome.played.calls,
            outcome.played.tool_calls,
            outcome.played.tool_errors
        ),
        (3, 4, 0)
    );
    assert_eq!(outcome.played.score, 1.0, "{}", outcome.played.answer);
    // Without a given episode the runner makes one, the same for every call.
    let seen = up.seen.lock().unwrap().clone();
    let episodes: Vec<_> = seen.iter().map(|s| s.episode.clone().unwrap()).collect();
    assert_eq!(episodes, vec![outcome.episode.to_string(); 3]);
    assert!(seen.iter().all(|s| s.version.is_none()));
}

#[tokio::test]
async fn a_run_stops_after_max_steps_and_bad_tools_are_reported_to_the_model() {
    let environment = Builtin::Calc.build(1);
    let (up, base) = upstream(environment.clone(), Mode::AlwaysBadTool).await;
    let task = environment.task(Split::Train, 0, Difficulty::Easy);
    let outcome = runner(environment, &base)
        .run(&task, &RunContext::default())
        .await
        .unwrap();
    assert_eq!(
        (
            outcome.played.calls,
            outcome.played.tool_calls,
            outcome.played.tool_errors
        ),
        (4, 4, 4)
    );
    assert!(!outcome.played.finished);
    assert_eq!(outcome.played.score, 0.0);
    assert_eq!(outcome.played.answer, "Let me try a tool.");
    let seen = up.seen.lock().unwrap().clone();
    let last = seen[3].request.messages.last().unwrap();
    assert_eq!(last.role, Role::Tool);
    assert!(
        last.text()
            .starts_with("error: unknown tool `nope`; the tools are: `calc`"),
        "{}",
        last.text()
    );
}

#[tokio::test]
async fn a_wrong_direct_answer_scores_zero_and_a_failing_gateway_is_an_error() {
    let environment = Builtin::Calc.build(1);
    let task = environment.task(Split::Train, 0, Difficulty::Easy);
    let (_, base) = upstream(environment.clone(), Mode::Wrong).await;
    let outcome = runner(environment.clone(), &base)
        .run(&task, &RunContext::default())
        .await
        .unwrap();
    assert_eq!(
        (outcome.played.calls, outcome.played.tool_calls, outcome.played.score),
        (1, 0, 0.0)
    );
    assert!(outcome.played.finished);

    let (_, base) = upstream(environment.clone(), Mode::Fails).await;
    let error = runner(environment.clone(), &base)
        .run(&task, &RunContext::default())
        .await
        .unwrap_err();
    assert!(matches!(error, RunError::Status { status: 500, .. }), "{error:?}");

    let error = runner(environment, "http://127.0.0.1:1")
        .run(&task, &RunContext::default())
        .await
        .unwrap_err();
    assert!(matches!(error, RunError::Unreachable { .. }), "{error:?}");
}

/// Posts to `/run` the way `hone eval --endpoint` does (crates/hone-learn/src/search/eval/mod.rs).
async fn post_run(url: &str, body: Value, episode: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .header("x-hone-version", "0123456789abcdef")
        .header("x-hone-episode", episode)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn the_run_endpoint_answers_hone_eval() {
    let mut tasks = JoinSet::new();
    let environment = Builtin::Calc.build(1);
    let (up, model) = upstream(environment.clone(), Mode::Oracle).await;
    let endpoint = serve(router(Arc::new(runner(environment.clone(), &model))), &mut tasks).await;
    let url = format!("{endpoint}/run");
    let task = environment.task(Split::HeldOut, 1, Difficulty::Medium);
    let answer = environment.demonstration(&task).last().unwrap().text();

    let (status, body) = post_run(&url, json!({"input": task.prompt}), "eval.run1.0.0-0").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"output": answer, "score": 1.0, "calls": 2}));
    let reply: RunResponse = serde_json::from_value(body).unwrap();
    assert_eq!(reply.calls, 2);
    let seen = up.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|s| s.episode.as_deref() == Some("eval.run1.0.0-0")));
    assert!(seen.iter().all(|s| s.version.as_deref() == Some("0123456789abcdef")));
}

#[tokio::test]
async fn the_run_endpoint_refuses_what_it_cannot_run() {
    let mut tasks = JoinSet::new();
    let environment = Builtin::Lookup.build(1);
    let (_, model) = upstream(environment.clone(), Mode::Fails).await;
    let endpoint = serve(router(Arc::new(runner(environment.clone(), &model))), &mut tasks).await;
    let url = format!("{endpoint}/run");
    let task = environment.task(Split::Train, 0, Difficulty::Easy);

    let (status, body) = post_run(&url, json!({"input": "Tell me a joke."}), "e1").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("unknown_task")),
        "{body}"
    );
    assert!(body["error"]["message"].as_str().unwrap().contains("lookup"), "{body}");

    let (status, body) = post_run(&url, json!({"question": task.prompt}), "e2").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_body")),
        "{body}"
    );

    let (status, body) = post_run(&url, json!({"input": task.prompt}), "bad id!").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_episode_id")),
        "{body}"
    );

    let (status, body) = post_run(&url, json!({"input": task.prompt}), "e3").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (502, Some("gateway_error")),
        "{body}"
    );
    assert_eq!(body["error"]["type"], "upstream_error");
}

/// `POST /step`, a trainer's view of an episode: a turn that calls the tool
/// gets the tool's result exactly as the runner sends it, a final answer
/// gets its hidden score, a last turn is scored even if it calls a tool,
/// and a body or task it cannot read is refused in the endpoint's format.
#[tokio::test]
async fn the_step_endpoint_runs_tools_and_scores_answers_by_the_environment_s_rules() {
    let mut tasks = JoinSet::new();
    let environment = Builtin::Calc.build(1);
    let (_, model) = upstream(environment.clone(), Mode::Oracle).await;
    let endpoint = serve(router(Arc::new(runner(environment.clone(), &model))), &mut tasks).await;
    let step = |body: Value| {
        let url = format!("{endpoint}/step");
        async move {
            let response = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        }
    };
    let task = environment.task(Split::Train, 5, Difficulty::Medium);
    let demonstration = environment.demonstration(&task);
    let call = &demonstration[0].tool_calls()[0].function;
    let turn = format!(
        "<tool_call>\n{{\"name\": \"{}\", \"arguments\": {}}}\n</tool_call>",
        call.name, call.arguments
    );

    let (status, body) = step(json!({"input": task.prompt, "turn": turn})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"tool_results": [demonstration[1].text()]}));
    let (_, body) = step(json!({"input": task.prompt, "turn": demonstration[2].text()})).await;
    assert_eq!(body, json!({"score": 1.0}));
    let (_, body) = step(json!({"input": task.prompt, "turn": "The answer is 0.5."})).await;
    assert_eq!(body, json!({"score": 0.0}));
    let (_, body) = step(json!({"input": task.prompt, "turn": turn, "last": true})).await;
    assert_eq!(body, json!({"score": 0.0}), "a last turn is the answer");
    let bad = r#"<tool_call>
{"name": "calc", "arguments": {"expression": "2 +"}}
</tool_call>"#;
    let (_, body) = step(json!({"input": task.prompt, "turn": bad})).await;
    assert!(
        body["tool_results"][0].as_str().unwrap().starts_with("error: "),
        "{body}"
    );

    let (status, body) = step(json!({"input": "Tell me a joke.", "turn": "no"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("unknown_task")),
        "{body}"
    );
    let (status, body) = step(json!({"input": task.prompt})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_body")),
        "{body}"
    );
}
