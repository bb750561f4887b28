//! A version's playbook: itemised lessons the agent keeps about its task
//! (ACE's "evolving context"), grown and pruned by small deltas, never
//! rewritten whole. The lessons are part of the content-addressed version;
//! how they read in the prompt is written once, in [`render`].

use serde::{Deserialize, Serialize};

/// One lesson: what to do, how often it helped or hurt on the episodes a
/// reflector looked at, and the episodes it was learnt from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lesson {
    /// `L1`, `L2`, …: stable for the lesson's life, never reused.
    pub id: String,
    pub text: String,
    #[serde(default)]
    pub helpful: u32,
    #[serde(default)]
    pub harmful: u32,
    /// Episode ids the lesson came from (and was confirmed on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
}

/// The system text a playbook adds to the version's prompt; `None` when it
/// has no lessons. Counts and sources stay out: the model sees the lessons.
pub fn render(lessons: &[Lesson]) -> Option<String> {
    if lessons.is_empty() {
        return None;
    }
    let mut text = String::from("Playbook — lessons learnt from earlier conversations:");
    for lesson in lessons {
        text.push_str(&format!("\n- [{}] {}", lesson.id, lesson.text));
    }
    Some(text)
}

/// The number in a lesson id (`L12` → 12).
pub fn number(id: &str) -> Option<u32> {
    id.strip_prefix('L')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lessons_render_as_an_itemised_list_without_their_counts() {
        assert_eq!(render(&[]), None);
        let lessons = [
            Lesson {
                id: "L1".into(),
                text: "Dates are YYYY-MM-DD.".into(),
                helpful: 3,
                harmful: 1,
                sources: vec!["e1".into()],
            },
            Lesson {
                id: "L4".into(),
                text: "Ask for the city when none is given.".into(),
                helpful: 0,
                harmful: 0,
                sources: Vec::new(),
            },
        ];
        assert_eq!(
            render(&lessons).unwrap(),
            "Playbook — lessons learnt from earlier conversations:\n- [L1] Dates are YYYY-MM-DD.\n- [L4] Ask for the city when none is given."
        );
        assert_eq!(number("L12"), Some(12));
        assert_eq!(number("x"), None);
    }
}
