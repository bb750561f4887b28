//! The contract every built-in environment keeps, checked on all of them.

use hone_envs::{tool_result_text, Builtin, Difficulty, Environment, Split, Task, TaskData, ToolError};
use hone_types::openai::{ChatCompletionRequest, Role};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;

fn environments(seed: u64) -> Vec<Arc<dyn Environment>> {
    Builtin::ALL.iter().map(|b| b.build(seed)).collect()
}

/// A spread of tasks: both splits, every difficulty, `per_cell` indices each.
fn sample(environment: &dyn Environment, per_cell: u64) -> Vec<Task> {
    let mut tasks = Vec::new();
    for split in [Split::Train, Split::HeldOut] {
        for difficulty in Difficulty::ALL {
            for index in 0..per_cell {
                tasks.push(environment.task(split, index, difficulty));
            }
        }
    }
    tasks
}

#[test]
fn builtins_are_named_and_parse_back() {
    for builtin in Builtin::ALL {
        assert_eq!(builtin.build(1).name(), builtin.name());
        assert_eq!(builtin.name().parse::<Builtin>().unwrap(), builtin);
    }
    let error = "chess".parse::<Builtin>().unwrap_err();
    assert!(error.contains("calc, lookup"), "{error}");
}

#[test]
fn tasks_are_deterministic_by_seed() {
    for builtin in Builtin::ALL {
        let (one, again, other) = (builtin.build(1), builtin.build(1), builtin.build(2));
        let mut differ = 0;
        let mut prompts = HashSet::new();
        for index in 0..60 {
            for difficulty in Difficulty::ALL {
                let task = one.task(Split::Train, index, difficulty);
                assert_eq!(task, again.task(Split::Train, index, difficulty));
                assert_eq!(
                    task.id,
                    Task::new(builtin.name(), task.prompt.clone(), difficulty, task.data.clone()).id
                );
                differ += usize::from(task.prompt != other.task(Split::Train, index, difficulty).prompt);
                prompts.insert(task.prompt);
            }
        }
        // Another seed names other tasks; indices name (mostly) distinct ones.
        assert!(
            differ > 150,
            "{}: only {differ} of 180 tasks changed with the seed",
            builtin.name()
        );
        assert!(
            prompts.len() > 150,
            "{}: only {} distinct prompts",
            builtin.name(),
            prompts.len()
        );
    }
}

#[test]
fn train_and_held_out_never_share_a_task() {
    for environment in environments(3) {
        let mut train = HashSet::new();
        let mut held_out = HashSet::new();
        for difficulty in Difficulty::ALL {
            for index in 0..1500 {
                let task = environment.task(Split::Train, index, difficulty);
                assert_eq!(task.split(), Split::Train);
                train.insert(task.prompt);
            }
            for index in 0..500 {
                let task = environment.task(Split::HeldOut, index, difficulty);
                assert_eq!(task.split(), Split::HeldOut);
                held_out.insert(task.prompt);
            }
        }
        let shared: Vec<_> = train.intersection(&held_out).collect();
        assert!(shared.is_empty(), "{}: {shared:?}", environment.name());
        assert!(
            held_out.len() > 500,
            "{}: {} held-out prompts",
            environment.name(),
            held_out.len()
        );
    }
    // The held-out share of arbitrary texts is about one fifth.
    let held = (0..10_000)
        .filter(|i| Split::of(&format!("question {i}")) == Split::HeldOut)
        .count();
    assert!((1_800..=2_200).contains(&held), "{held} of 10000 held out");
    assert_eq!(
        Split::of("  What plan is Dana Okafor on?\n"),
        Split::of("What plan is Dana Okafor on?")
    );
}

#[test]
fn difficulty_levels_differ() {
    for environment in environments(5) {
        let mut by_level: Vec<HashSet<String>> = Vec::new();
        let mut steps: Vec<f64> = Vec::new();
        for difficulty in Difficulty::ALL {
            let tasks: Vec<Task> = (0..200)
                .map(|i| environment.task(Split::Train, i, difficulty))
                .collect();
            assert!(tasks.iter().all(|t| t.difficulty == difficulty));
            let tool_calls: usize = tasks
                .iter()
                .map(|t| {
                    environment
                        .demonstration(t)
                        .iter()
                        .map(|m| m.tool_calls().len())
                        .sum::<usize>()
                })
                .sum();
            steps.push(tool_calls as f64 / tasks.len() as f64);
            by_level.push(tasks.into_iter().map(|t| t.prompt).collect());
        }
        for (i, a) in by_level.iter().enumerate() {
            for b in &by_level[i + 1..] {
                assert!(a.is_disjoint(b), "{}: levels share prompts", environment.name());
            }
        }
        assert!(
            steps.windows(2).all(|w| w[0] <= w[1]),
            "{}: {steps:?}",
            environment.name()
        );
    }
    for difficulty in Difficulty::ALL {
        assert_eq!(Difficulty::from_level(difficulty.level()), Some(difficulty));
    }
}

#[test]
fn every_task_round_trips_through_its_prompt() {
    for environment in environments(11) {
        for task in sample(environment.as_ref(), 150) {
            assert_eq!(environment.task_from_prompt(&task.prompt).as_ref(), Some(&task));
            let padded = format!("  {}\n", task.prompt);
            assert_eq!(
                environment.task_from_prompt(&padded).map(|t| t.id),
                Some(task.id.clone())
            );
        }
        for garbage in ["", "hello", "What is 2+2?", "What plan is Nobody Atall on?"] {
            assert_eq!(environment.task_from_prompt(garbage), None, "{garbage}");
        }
    }
    // Tasks are typed data that survive serialisation.
    let task = Builtin::Lookup.build(1).task(Split::Train, 0, Difficulty::Hard);
    let back: Task = serde_json::from_str(&serde_json::to_string(&task).unwrap()).unwrap();
    assert_eq!(back, task);
}

#[test]
fn demonstrations_replay_through_the_tools_and_score_one() {
    for environment in environments(13) {
        let tool_names: Vec<String> = environment.tools().into_iter().map(|t| t.function.name).collect();
        for task in sample(environment.as_ref(), 40) {
            let demonstration = environment.demonstration(&task);
            let (last, steps) = demonstration.split_last().unwrap();
            assert_eq!(last.role, Role::Assistant);
            assert!(last.tool_calls().is_empty());
            assert_eq!(
                environment.score(&task, &last.text()),
                1.0,
                "{}: {}",
                task.prompt,
                last.text()
            );

            // Every tool result is what `call_tool` returns, in call order.
            let mut pending = Vec::new();
            for message in steps {
                match message.role {
                    Role::Assistant => {
                        assert!(pending.is_empty(), "results missing before the next assistant turn");
                        assert!(!message.tool_calls().is_empty());
                        for call in message.tool_calls() {
                            assert!(tool_names.contains(&call.function.name));
                            let replayed = environment.call_tool(&task, &call.function.name, &call.function.arguments);
                            assert!(replayed.is_ok(), "{replayed:?}");
                            pending.push((call.id.clone(), tool_result_text(replayed)));
                        }
                        pending.reverse();
                    }
                    Role::Tool => {
                        let (id, expected) = pending.pop().unwrap();
                        assert_eq!(message.tool_call_id.as_deref(), Some(id.as_str()));
                        assert_eq!(message.text(), expected);
                    }
                    other => panic!("unexpected {other:?} message in a demonstration"),
                }
            }
            assert!(pending.is_empty());

            // Opening + demonstration is a chat request the gateway accepts.
            let mut messages = hone_envs::opening(environment.as_ref(), &task);
            messages.extend(demonstration);
            let body = json!({"model": "demo", "messages": messages, "tools": environment.tools()});
            ChatCompletionRequest::from_json(body.to_string().as_bytes()).unwrap();
        }
    }
}

#[test]
fn wrong_answers_score_zero() {
    let calc = Builtin::Calc.build(17);
    let lookup = Builtin::Lookup.build(17);
    for task in sample(calc.as_ref(), 30) {
        let TaskData::Calc(data) = &task.data else { panic!() };
        assert_eq!(calc.score(&task, &format!("The answer is {}.", data.answer + 1.0)), 0.0);
        assert_eq!(
            calc.score(&task, &format!("{} is what I get, or maybe 3.5", data.answer)),
            0.0
        );
        assert_eq!(calc.score(&task, &format!("It's {}, I think.", data.answer)), 1.0);
        assert_eq!(calc.score(&task, "I don't know."), 0.0);
        assert_eq!(calc.score(&task, ""), 0.0);
        // A task of another environment is never right.
        assert_eq!(lookup.score(&task, &format!("{}", data.answer)), 0.0);
    }
    for task in sample(lookup.as_ref(), 30) {
        let TaskData::Lookup(data) = &task.data else { panic!() };
        assert_eq!(
            lookup.score(&task, &format!("It is {}.", data.expected.to_uppercase())),
            1.0
        );
        assert_eq!(lookup.score(&task, "I could not find that customer."), 0.0);
        assert_eq!(lookup.score(&task, &format!("{}9", data.expected)), 0.0);
        assert_eq!(calc.score(&task, &data.expected), 0.0);
    }
}

#[test]
fn bad_tool_calls_are_errors_the_agent_can_read() {
    for environment in environments(19) {
        let task = environment.task(Split::Train, 0, Difficulty::Easy);
        let tool = environment.tools()[0].function.name.clone();
        let unknown = environment.call_tool(&task, "delete_everything", "{}").unwrap_err();
        assert!(matches!(unknown, ToolError::UnknownTool { .. }));
        assert!(unknown.to_string().contains(&format!("`{tool}`")), "{unknown}");
        for arguments in [
            "not json",
            "[]",
            "{}",
            r#"{"expression": "1", "query": "x", "id": "C0001", "extra": 1}"#,
        ] {
            let error = environment.call_tool(&task, &tool, arguments).unwrap_err();
            assert!(
                matches!(error, ToolError::BadArguments { .. }),
                "{arguments}: {error:?}"
            );
            assert!(tool_result_text(Err(error)).starts_with("error: bad arguments"));
        }
        // The tools and system prompt agree on the names.
        let prompt = environment.system_prompt();
        for tool in environment.tools() {
            assert!(prompt.contains(&format!("`{}", tool.function.name)), "{prompt}");
            let parameters = tool.function.parameters.unwrap();
            assert_eq!(parameters["type"], "object");
        }
    }
}
