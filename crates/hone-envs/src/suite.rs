//! `tasks`: verifiable questions from a file — an external suite of task
//! generators (reasoning-gym's, exported by
//! `crates/hone-envs/python/reasoning_gym_tasks.py`) or a team's own.
//!
//! The file is JSON Lines, one task per line:
//! `{"prompt": "Calculate 5 - 3.", "answer": "2", "family": "basic_arithmetic"}`
//! (`source`, optional, says where it came from). Every answer is a number:
//! the hidden score is 1 when the last number of the reply equals it, the
//! rule reasoning-gym's own `score_answer` applies to the number a reply
//! ends with. The split is [`Split::of`] the prompt, as for every
//! environment; the agent has no tools.

use crate::seeded::stable_hash;
use crate::text::last_number;
use crate::{Difficulty, Environment, Split, Task, TaskData, ToolError};
use hone_types::openai::{Message, Role, Tool};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub const NAME: &str = "tasks";
/// How far a reply's number may be from the answer.
pub const TOLERANCE: f64 = 1e-6;

/// One line of a task file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteTask {
    pub prompt: String,
    /// The answer, as the suite wrote it (a number).
    pub answer: String,
    /// The kind of task (reasoning-gym's dataset name).
    pub family: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Why a task file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("cannot read the task file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: not a task (`{{\"prompt\", \"answer\", \"family\"}}`): {source}")]
    Line {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error("{path}:{line}: the answer `{answer}` is not a number (the score compares numbers)")]
    NotANumber { path: PathBuf, line: usize, answer: String },
    #[error(
        "{path}: no task of the {split} split (a task's split is a hash of its prompt; the file needs more tasks)"
    )]
    EmptySplit { path: PathBuf, split: &'static str },
}

/// The tasks of one file, by split.
#[derive(Debug)]
pub struct Suite {
    tasks: Vec<(SuiteTask, f64)>,
    /// Indices into `tasks`, train then held-out.
    splits: [Vec<usize>; 2],
    by_prompt: HashMap<String, usize>,
    /// Each family's name, once (`Environment::family` answers `'static`
    /// names; a file names a handful, kept for the process's life).
    families: HashMap<String, &'static str>,
}

fn split_slot(split: Split) -> usize {
    match split {
        Split::Train => 0,
        Split::HeldOut => 1,
    }
}

impl Suite {
    /// The tasks of the JSON Lines file at `path` (blank lines skipped; a
    /// prompt given twice is one task).
    pub fn load(path: &Path) -> Result<Self, SuiteError> {
        let text = std::fs::read_to_string(path).map_err(|source| SuiteError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut tasks = Vec::new();
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let task: SuiteTask = serde_json::from_str(line).map_err(|source| SuiteError::Line {
                path: path.to_owned(),
                line: n + 1,
                source,
            })?;
            let value = task
                .answer
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| SuiteError::NotANumber {
                    path: path.to_owned(),
                    line: n + 1,
                    answer: task.answer.clone(),
                })?;
            tasks.push((task, value));
        }
        let suite = Self::of(tasks);
        for split in [Split::Train, Split::HeldOut] {
            if suite.splits[split_slot(split)].is_empty() {
                return Err(SuiteError::EmptySplit {
                    path: path.to_owned(),
                    split: match split {
                        Split::Train => "train",
                        Split::HeldOut => "held-out",
                    },
                });
            }
        }
        Ok(suite)
    }

    fn of(all: Vec<(SuiteTask, f64)>) -> Self {
        let mut suite = Suite {
            tasks: Vec::new(),
            splits: [Vec::new(), Vec::new()],
            by_prompt: HashMap::new(),
            families: HashMap::new(),
        };
        for (task, value) in all {
            let key = task.prompt.trim().to_owned();
            if suite.by_prompt.contains_key(&key) {
                continue;
            }
            let index = suite.tasks.len();
            suite.splits[split_slot(Split::of(&task.prompt))].push(index);
            suite.by_prompt.insert(key, index);
            if !suite.families.contains_key(&task.family) {
                let name: &'static str = Box::leak(task.family.clone().into_boxed_str());
                suite.families.insert(task.family.clone(), name);
            }
            suite.tasks.push((task, value));
        }
        // Served in an order the file does not set (a file listing one
        // family after another would otherwise give users and the held-out
        // measurement one family only): by a stable hash of the prompt, so
        // the families mix in their proportions and an index always names
        // the same task.
        for split in &mut suite.splits {
            split.sort_by_key(|i| (stable_hash(suite.tasks[*i].0.prompt.trim().as_bytes()), *i));
        }
        suite
    }

    /// How many tasks each split holds (train, held-out).
    pub fn sizes(&self) -> (usize, usize) {
        (self.splits[0].len(), self.splits[1].len())
    }

    fn make(&self, index: usize) -> Task {
        let (task, value) = &self.tasks[index];
        Task::new(
            NAME,
            task.prompt.clone(),
            Difficulty::Easy,
            TaskData::Custom {
                data: serde_json::json!({ "answer": value }),
            },
        )
    }

    fn entry(&self, task: &Task) -> Option<&(SuiteTask, f64)> {
        self.by_prompt.get(task.prompt.trim()).map(|i| &self.tasks[*i])
    }
}

impl Environment for Suite {
    fn name(&self) -> &'static str {
        NAME
    }

    /// The `index`-th task of `split`, round and round (a file has no
    /// difficulty levels: `difficulty` is not used).
    fn task(&self, split: Split, index: u64, _difficulty: Difficulty) -> Task {
        let tasks = &self.splits[split_slot(split)];
        let at = usize::try_from(index % tasks.len().max(1) as u64).unwrap_or(0);
        self.make(tasks[at])
    }

    fn tools(&self) -> Vec<Tool> {
        Vec::new()
    }

    fn system_prompt(&self) -> String {
        "You answer short questions that have a number as their answer.\n\
         Reply with one short sentence that ends with the number, for example `The answer is 42.` \
         The last number in your reply is taken as your answer."
            .to_owned()
    }

    fn call_tool(&self, _task: &Task, name: &str, _arguments: &str) -> Result<String, ToolError> {
        Err(ToolError::unknown(name, &[]))
    }

    fn score(&self, task: &Task, answer: &str) -> f64 {
        match (self.entry(task), last_number(answer)) {
            (Some((_, value)), Some(said)) if (said - value).abs() <= TOLERANCE => 1.0,
            _ => 0.0,
        }
    }

    fn task_from_prompt(&self, prompt: &str) -> Option<Task> {
        self.by_prompt.get(prompt.trim()).map(|i| self.make(*i))
    }

    fn family(&self, task: &Task) -> Option<&'static str> {
        self.entry(task)
            .and_then(|(t, _)| self.families.get(&t.family).copied())
    }

    fn demonstration(&self, task: &Task) -> Vec<Message> {
        match self.entry(task) {
            Some((t, _)) => vec![Message::new(
                Role::Assistant,
                format!("The answer is {}.", t.answer.trim()),
            )],
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(lines: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        std::fs::write(&path, lines).unwrap();
        (dir, path)
    }

    fn lines(n: usize) -> String {
        (0..n)
            .map(|i| {
                format!(
                    "{{\"prompt\": \"Calculate {i} + 2.\", \"answer\": \"{}\", \"family\": \"basic_arithmetic\"}}\n",
                    i + 2
                )
            })
            .collect()
    }

    #[test]
    fn tasks_are_split_by_prompt_scored_by_their_last_number_and_found_again() {
        let (_dir, path) = file(&lines(40));
        let suite = Suite::load(&path).unwrap();
        let (train, held_out) = suite.sizes();
        assert_eq!(train + held_out, 40);
        assert!(held_out > 0 && train > held_out, "{train} / {held_out}");
        for split in [Split::Train, Split::HeldOut] {
            for i in 0..50 {
                let task = suite.task(split, i, Difficulty::Hard);
                assert_eq!(task.split(), split);
                assert_eq!(suite.task_from_prompt(&task.prompt), Some(task.clone()));
                let answer: i64 = task.prompt["Calculate ".len()..]
                    .split(' ')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert_eq!(suite.score(&task, &format!("It is {}.", answer + 2)), 1.0);
                assert_eq!(suite.score(&task, &format!("{} + 2 = {}", answer, answer + 3)), 0.0);
                assert_eq!(suite.score(&task, "I do not know"), 0.0);
                assert_eq!(suite.family(&task), Some("basic_arithmetic"));
                let demo = suite.demonstration(&task);
                assert_eq!(suite.score(&task, &demo[0].text()), 1.0);
            }
        }
        assert_eq!(suite.task_from_prompt("Calculate 1000 + 2."), None);
    }

    #[test]
    fn families_listed_one_after_another_are_served_mixed() {
        let other: String = (0..40)
            .map(|i| {
                format!(
                    "{{\"prompt\": \"{i} - 1 =\", \"answer\": \"{}\", \"family\": \"chain_sum\"}}\n",
                    i - 1
                )
            })
            .collect();
        let (_dir, path) = file(&format!("{}{other}", lines(40)));
        let suite = Suite::load(&path).unwrap();
        for split in [Split::Train, Split::HeldOut] {
            let first: Vec<_> = (0..6)
                .map(|i| suite.family(&suite.task(split, i, Difficulty::Easy)))
                .collect();
            assert!(
                first.contains(&Some("chain_sum")) && first.contains(&Some("basic_arithmetic")),
                "{split:?}: {first:?}"
            );
        }
    }

    #[test]
    fn a_bad_file_is_refused_with_its_line() {
        let (_dir, path) = file(&format!("{}{{\"prompt\": \"x\"}}\n", lines(3)));
        let error = Suite::load(&path).unwrap_err().to_string();
        assert!(error.contains("tasks.jsonl:4: not a task"), "{error}");
        let (_dir, path) =
            file("{\"prompt\": \"Sort 3 1 2\", \"answer\": \"[1, 2, 3]\", \"family\": \"number_sorting\"}\n");
        let error = Suite::load(&path).unwrap_err().to_string();
        assert!(error.contains(":1: the answer `[1, 2, 3]` is not a number"), "{error}");
        let (_dir, path) = file(&lines(1));
        let error = Suite::load(&path).unwrap_err().to_string();
        assert!(error.contains("no task of the"), "{error}");
        let missing = Suite::load(Path::new("/no/such/tasks.jsonl")).unwrap_err().to_string();
        assert!(
            missing.contains("cannot read the task file /no/such/tasks.jsonl"),
            "{missing}"
        );
    }
}
