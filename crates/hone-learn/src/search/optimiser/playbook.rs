//! `playbook`: a self-curated playbook of lessons (ACE). A reflection model
//! reads the train set's episodes and the champion's lessons, tags the
//! lessons that helped or hurt, and proposes delta operations; the
//! [curator](crate::search::optimiser::reflect::curator) applies them by rule. A candidate is
//! the champion with the curated playbook; its diff lists each lesson
//! added, edited, merged or retired and the episodes it came from.

use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use crate::search::optimiser::reflect::curator::{self, Limits};
use crate::search::optimiser::reflect::evidence::{self, Evidence};
use crate::search::optimiser::reflect::Reflector;
use futures::future::BoxFuture;
use hone_config::PlaybookSpec;
use hone_types::Lesson;

pub struct PlaybookOptimiser {
    pub spec: PlaybookSpec,
}

impl Optimiser for PlaybookOptimiser {
    fn name(&self) -> &'static str {
        "playbook"
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>> {
        Box::pin(async move {
            let evidence = evidence::of(ctx)?;
            if evidence.is_empty() {
                (ctx.progress)("playbook: no episodes in the train set");
                return Ok(Vec::new());
            }
            let batch = evidence::minibatch(evidence, self.spec.minibatch, 0, &ctx.cycle.id);
            let reflector = Reflector::of(ctx, self.name());
            let before = ctx.meter.spent();
            let prompt = reflection_prompt(&ctx.champion.playbook, &batch);
            let reflection = match reflector.ask(&prompt, curator::parse).await {
                Ok(r) => r,
                Err(f) => {
                    (ctx.progress)(&format!(
                        "playbook: no usable reflection ({}; episode {})",
                        f.last_error, f.episode
                    ));
                    return Ok(Vec::new());
                }
            };
            let next_id = next_lesson_id(ctx)?;
            let limits = Limits {
                max_lessons: self.spec.max_lessons,
                max_chars: self.spec.max_chars,
                max_ops: self.spec.max_ops,
                retire_margin: self.spec.retire_margin,
            };
            let curated = curator::curate(&ctx.champion.playbook, &reflection, &limits, next_id);
            if !curated.changed {
                (ctx.progress)(&format!(
                    "playbook: the reflection changed no lesson ({})",
                    if curated.log.is_empty() {
                        "nothing to do".to_owned()
                    } else {
                        curated.log.join("; ")
                    }
                ));
                return Ok(Vec::new());
            }
            let mut spec = ctx.champion.clone();
            spec.playbook = curated.lessons;
            let mut proposal = Proposal::of(ctx.champion, spec);
            proposal.diff = format!("{}\n{}", proposal.diff, curated.log.join("\n"));
            proposal.spend = Some(ctx.meter.spent().since(before));
            Ok(vec![proposal])
        })
    }
}

/// One past the highest lesson number any version of the agent ever held.
fn next_lesson_id(ctx: &ProposeContext<'_>) -> Result<u32, LearnError> {
    let versions = ctx.store.versions(Some(&ctx.agent.name))?;
    let highest = versions
        .iter()
        .map(|v| &v.spec)
        .chain(std::iter::once(ctx.champion))
        .flat_map(|s| s.playbook.iter())
        .filter_map(|l| hone_types::playbook::number(&l.id))
        .max()
        .unwrap_or(0);
    Ok(highest + 1)
}

fn reflection_prompt(lessons: &[Lesson], batch: &[&Evidence]) -> String {
    let mut text = String::from("The assistant's playbook (lessons it is shown with every request):\n<playbook>\n");
    if lessons.is_empty() {
        text.push_str("(empty)\n");
    }
    for l in lessons {
        text.push_str(&format!(
            "[{}] {} (helpful {}, harmful {})\n",
            l.id, l.text, l.helpful, l.harmful
        ));
    }
    text.push_str("</playbook>\n\nRecent episodes, failures first:\n");
    for (i, e) in batch.iter().enumerate() {
        text.push_str(&e.render(i + 1));
    }
    text.push_str(
        "\nTag each lesson you see at work as helpful, harmful or neutral, naming the episodes. Then propose \
small delta operations — never a rewrite of the whole playbook: add a lesson the failures show is missing \
(general, one sentence), edit one that is unclear, merge ones that say the same, retire one that hurts. \
Reply with JSON only: {\"tags\": [{\"id\": \"L1\", \"verdict\": \"helpful|harmful|neutral\", \"episodes\": [\"<id>\"]}], \
\"operations\": [{\"op\": \"add\", \"text\": \"…\", \"episodes\": [\"<id>\"]}, {\"op\": \"edit\", \"id\": \"L2\", \"text\": \"…\"}, \
{\"op\": \"merge\", \"ids\": [\"L3\", \"L4\"], \"text\": \"…\"}, {\"op\": \"retire\", \"id\": \"L5\", \"reason\": \"…\", \"episodes\": [\"<id>\"]}]}",
    );
    text
}
