//! The playbook's curator (ACE): a reflector's answer is a list of delta
//! operations — add, edit, merge, retire — and helpful/harmful tags on the
//! lessons it saw at work; the curator applies them to the current lessons
//! by rule, never by rewriting the whole: at most `max_ops` operations, a
//! new lesson that repeats one already held counts for it instead, a lesson
//! whose harm outweighs its help by `retire_margin` is retired, and the
//! playbook is kept within `max_lessons` and `max_chars`.

use hone_types::Lesson;
use serde::Deserialize;
use std::collections::BTreeSet;

/// One delta operation, as the reflector writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Op {
    Add {
        text: String,
        #[serde(default)]
        episodes: Vec<String>,
    },
    Edit {
        id: String,
        text: String,
        #[serde(default)]
        episodes: Vec<String>,
    },
    Merge {
        ids: Vec<String>,
        text: String,
    },
    Retire {
        id: String,
        #[serde(default)]
        reason: String,
        #[serde(default)]
        episodes: Vec<String>,
    },
}

/// Whether a lesson helped or hurt on the episodes named.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tag {
    pub id: String,
    /// `helpful`, `harmful` or `neutral`.
    pub verdict: String,
    #[serde(default)]
    pub episodes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct Reflection {
    #[serde(default)]
    pub tags: Vec<Tag>,
    #[serde(default)]
    pub operations: Vec<Op>,
}

/// Reads a reflector's answer.
pub fn parse(text: &str) -> Result<Reflection, String> {
    let object = crate::ask::json_object(text)?;
    let reflection: Reflection =
        serde_json::from_value(serde_json::Value::Object(object)).map_err(|e| format!("unexpected shape: {e}"))?;
    for (i, tag) in reflection.tags.iter().enumerate() {
        if !matches!(tag.verdict.as_str(), "helpful" | "harmful" | "neutral") {
            return Err(format!("tags[{i}].verdict must be helpful, harmful or neutral"));
        }
    }
    Ok(reflection)
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_lessons: usize,
    pub max_chars: usize,
    pub max_ops: usize,
    pub retire_margin: u32,
}

/// The curated lessons and what was done, one line per change.
#[derive(Debug, Clone, PartialEq)]
pub struct Curated {
    pub lessons: Vec<Lesson>,
    pub log: Vec<String>,
    /// Whether a lesson was added, edited, merged or retired (counts alone
    /// make no new version).
    pub changed: bool,
}

const MAX_SOURCES: usize = 8;

fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Near-duplicates: the same words, or word sets that overlap by 80% (Jaccard).
fn same_lesson(a: &str, b: &str) -> bool {
    let (a, b) = (words(a), words(b));
    let union = a.union(&b).count();
    union > 0 && a.intersection(&b).count() * 5 >= union * 4
}

fn add_sources(lesson: &mut Lesson, episodes: &[String]) {
    for e in episodes {
        if lesson.sources.len() < MAX_SOURCES && !lesson.sources.contains(e) {
            lesson.sources.push(e.clone());
        }
    }
}

fn quote(text: &str) -> String {
    format!("\"{}\"", crate::ask::clip(text, 120))
}

fn from(episodes: &[String]) -> String {
    if episodes.is_empty() {
        String::new()
    } else {
        format!(" (from {})", episodes.join(", "))
    }
}

/// Applies `reflection` to `current`; new lessons are numbered from
/// `next_id` (one past every id the agent ever used, so none is reused).
pub fn curate(current: &[Lesson], reflection: &Reflection, limits: &Limits, mut next_id: u32) -> Curated {
    let mut lessons = current.to_vec();
    let mut log = Vec::new();
    let mut new_id = || {
        let id = format!("L{next_id}");
        next_id += 1;
        id
    };
    for tag in &reflection.tags {
        let Some(lesson) = lessons.iter_mut().find(|l| l.id == tag.id) else {
            continue;
        };
        let n = tag.episodes.len().max(1) as u32;
        match tag.verdict.as_str() {
            "helpful" => lesson.helpful += n,
            "harmful" => lesson.harmful += n,
            _ => continue,
        }
        add_sources(lesson, &tag.episodes);
    }
    if reflection.operations.len() > limits.max_ops {
        log.push(format!(
            "kept the first {} of {} operations (max_ops)",
            limits.max_ops,
            reflection.operations.len()
        ));
    }
    for op in reflection.operations.iter().take(limits.max_ops) {
        match op {
            Op::Add { text, episodes } => {
                let text = text.trim();
                if text.is_empty() {
                    continue;
                }
                if let Some(held) = lessons.iter_mut().find(|l| same_lesson(&l.text, text)) {
                    held.helpful += 1;
                    add_sources(held, episodes);
                    log.push(format!("= {} already says {}", held.id, quote(text)));
                    continue;
                }
                let mut lesson = Lesson {
                    id: new_id(),
                    text: text.to_owned(),
                    helpful: 0,
                    harmful: 0,
                    sources: Vec::new(),
                };
                add_sources(&mut lesson, episodes);
                log.push(format!("+ {} {}{}", lesson.id, quote(text), from(episodes)));
                lessons.push(lesson);
            }
            Op::Edit { id, text, episodes } => {
                let text = text.trim();
                match lessons.iter_mut().find(|l| &l.id == id) {
                    Some(lesson) if !text.is_empty() && lesson.text != text => {
                        log.push(format!(
                            "~ {id} {} → {}{}",
                            quote(&lesson.text),
                            quote(text),
                            from(episodes)
                        ));
                        lesson.text = text.to_owned();
                        add_sources(lesson, episodes);
                    }
                    Some(_) => {}
                    None => log.push(format!("ignored an edit of unknown lesson {id}")),
                }
            }
            Op::Merge { ids, text } => {
                let text = text.trim();
                let known: Vec<&String> = ids.iter().filter(|id| lessons.iter().any(|l| &l.id == *id)).collect();
                if known.len() < 2 || text.is_empty() {
                    log.push(format!(
                        "ignored a merge of {} (needs two held lessons)",
                        ids.join(", ")
                    ));
                    continue;
                }
                let mut merged = Lesson {
                    id: new_id(),
                    text: text.to_owned(),
                    helpful: 0,
                    harmful: 0,
                    sources: Vec::new(),
                };
                for l in lessons.iter().filter(|l| known.contains(&&l.id)) {
                    merged.helpful += l.helpful;
                    merged.harmful += l.harmful;
                    let sources = l.sources.clone();
                    add_sources(&mut merged, &sources);
                }
                let names: Vec<String> = known.iter().map(|s| s.to_string()).collect();
                lessons.retain(|l| !names.contains(&l.id));
                log.push(format!("⊕ {} merges {}: {}", merged.id, names.join(", "), quote(text)));
                lessons.push(merged);
            }
            Op::Retire { id, reason, episodes } => match lessons.iter().position(|l| &l.id == id) {
                Some(at) => {
                    let l = lessons.remove(at);
                    let why = if reason.trim().is_empty() {
                        String::new()
                    } else {
                        format!(": {}", reason.trim())
                    };
                    log.push(format!(
                        "− {id} retired{why} (helpful {}, harmful {}){}",
                        l.helpful,
                        l.harmful,
                        from(episodes)
                    ));
                }
                None => log.push(format!("ignored retiring unknown lesson {id}")),
            },
        }
    }
    lessons.retain(|l| {
        let harmful = l.harmful > 0 && l.harmful >= l.helpful + limits.retire_margin;
        if harmful {
            log.push(format!(
                "− {} retired: more harmful than helpful (helpful {}, harmful {}; on {})",
                l.id,
                l.helpful,
                l.harmful,
                l.sources.join(", ")
            ));
        }
        !harmful
    });
    let chars = |ls: &[Lesson]| ls.iter().map(|l| l.text.chars().count()).sum::<usize>();
    while lessons.len() > limits.max_lessons || (lessons.len() > 1 && chars(&lessons) > limits.max_chars) {
        // The least useful lesson goes first; among equals, the oldest.
        let Some(at) = (0..lessons.len()).min_by_key(|&i| {
            let l = &lessons[i];
            (
                i64::from(l.helpful) - i64::from(l.harmful),
                hone_types::playbook::number(&l.id).unwrap_or(0),
            )
        }) else {
            break;
        };
        let l = lessons.remove(at);
        log.push(format!(
            "− {} retired for space (helpful {}, harmful {})",
            l.id, l.helpful, l.harmful
        ));
    }
    let shape = |ls: &[Lesson]| ls.iter().map(|l| (l.id.clone(), l.text.clone())).collect::<Vec<_>>();
    let changed = shape(&lessons) != shape(current);
    Curated { lessons, log, changed }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lesson(id: &str, text: &str, helpful: u32, harmful: u32) -> Lesson {
        Lesson {
            id: id.into(),
            text: text.into(),
            helpful,
            harmful,
            sources: Vec::new(),
        }
    }

    const LIMITS: Limits = Limits {
        max_lessons: 10,
        max_chars: 1_000,
        max_ops: 5,
        retire_margin: 2,
    };

    #[test]
    fn deltas_add_edit_merge_and_retire_and_a_repeat_counts_for_the_held_lesson() {
        let current = vec![
            lesson("L1", "Round every answer to the nearest ten.", 0, 0),
            lesson("L2", "Answer with a number.", 1, 0),
            lesson("L3", "Show units.", 0, 0),
            lesson("L4", "Write units in full.", 0, 0),
        ];
        let reflection = parse(
            r#"Here you go: {"tags": [{"id": "L1", "verdict": "harmful", "episodes": ["e1", "e2"]},
                 {"id": "L2", "verdict": "helpful", "episodes": ["e3"]}],
               "operations": [
                 {"op": "add", "text": "A-B means subtract B from A.", "episodes": ["e4"]},
                 {"op": "add", "text": "a-b means: subtract b from a", "episodes": ["e5"]},
                 {"op": "edit", "id": "L2", "text": "Answer with a number only."},
                 {"op": "merge", "ids": ["L3", "L4"], "text": "Write units in full."},
                 {"op": "retire", "id": "L9", "reason": "gone"}]}"#,
        )
        .unwrap();
        let out = curate(&current, &reflection, &LIMITS, 5);
        let ids: Vec<&str> = out.lessons.iter().map(|l| l.id.as_str()).collect();
        // L1 is retired by its counts (harmful 2 ≥ helpful 0 + margin 2).
        assert_eq!(ids, ["L2", "L5", "L6"]);
        assert!(out.changed);
        assert_eq!(out.lessons[0].text, "Answer with a number only.");
        assert_eq!(out.lessons[0].helpful, 2);
        let added = &out.lessons[1];
        assert_eq!(added.text, "A-B means subtract B from A.");
        assert_eq!(added.helpful, 1, "the repeated add counted for it");
        assert_eq!(added.sources, ["e4", "e5"]);
        assert_eq!(out.lessons[2].text, "Write units in full.");
        assert_eq!(
            out.log,
            [
                "+ L5 \"A-B means subtract B from A.\" (from e4)",
                "= L5 already says \"a-b means: subtract b from a\"",
                "~ L2 \"Answer with a number.\" → \"Answer with a number only.\"",
                "⊕ L6 merges L3, L4: \"Write units in full.\"",
                "ignored retiring unknown lesson L9",
                "− L1 retired: more harmful than helpful (helpful 0, harmful 2; on e1, e2)",
            ]
        );
    }

    #[test]
    fn operations_beyond_max_ops_are_dropped_and_the_size_budget_retires_the_least_useful() {
        let current = vec![lesson("L1", "Keep it short.", 3, 0), lesson("L2", "Say hello.", 0, 1)];
        let reflection = Reflection {
            tags: Vec::new(),
            operations: (0..4)
                .map(|i| Op::Add {
                    text: format!("Rule number {i} about topic {i}."),
                    episodes: Vec::new(),
                })
                .collect(),
        };
        let limits = Limits {
            max_lessons: 3,
            max_ops: 2,
            ..LIMITS
        };
        let out = curate(&current, &reflection, &limits, 3);
        let ids: Vec<&str> = out.lessons.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(ids, ["L1", "L3", "L4"], "{:?}", out.log);
        assert_eq!(out.log[0], "kept the first 2 of 4 operations (max_ops)");
        assert!(out.log.last().unwrap().starts_with("− L2 retired for space"));
        // Only counts moved: no change worth a version.
        let tags = Reflection {
            tags: vec![Tag {
                id: "L1".into(),
                verdict: "helpful".into(),
                episodes: vec!["e1".into()],
            }],
            operations: Vec::new(),
        };
        assert!(!curate(&current, &tags, &LIMITS, 3).changed);
        assert!(parse(r#"{"tags": [{"id": "L1", "verdict": "great"}]}"#).is_err());
        assert!(parse(r#"{"operations": [{"op": "rewrite", "text": "all new"}]}"#).is_err());
    }
}
