//! Simulated users: they read the hidden score of an answer and react the
//! way people do, with **implicit** signals only (kept the answer, complained,
//! asked again, left), sometimes wrongly (`noise`) and after a delay. The
//! score itself never reaches hone; these signals do, as the bodies of the
//! gateway's `POST /v1/feedback`.

use hone_types::{EpisodeId, FeedbackRequest, SignalSource};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// An implicit reaction to an answer; [`ImplicitSignal::name`] is the signal
/// name hone records (and a reward spec weighs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImplicitSignal {
    /// Kept the answer and moved on.
    Accepted,
    /// Re-asked or complained in the same conversation.
    DissatisfiedFollowup,
    /// Asked the same question again, afresh.
    Retry,
    /// Left without a word.
    Abandon,
}

/// How a dissatisfied user reacts: (signal, weight). Complaints are most
/// common, silent departures least.
const NEGATIVE_REACTIONS: [(ImplicitSignal, f64); 3] = [
    (ImplicitSignal::DissatisfiedFollowup, 0.5),
    (ImplicitSignal::Retry, 0.3),
    (ImplicitSignal::Abandon, 0.2),
];

impl ImplicitSignal {
    pub const ALL: [ImplicitSignal; 4] = [
        ImplicitSignal::Accepted,
        ImplicitSignal::DissatisfiedFollowup,
        ImplicitSignal::Retry,
        ImplicitSignal::Abandon,
    ];

    /// The signal's name in hone: `accepted`, `dissatisfied_followup`, `retry`, `abandon`.
    pub fn name(self) -> &'static str {
        match self {
            ImplicitSignal::Accepted => "accepted",
            ImplicitSignal::DissatisfiedFollowup => "dissatisfied_followup",
            ImplicitSignal::Retry => "retry",
            ImplicitSignal::Abandon => "abandon",
        }
    }

    /// Whether the user was satisfied.
    pub fn is_positive(self) -> bool {
        self == ImplicitSignal::Accepted
    }

    /// The message a user sends next: a complaint that repeats the question
    /// for [`ImplicitSignal::DissatisfiedFollowup`], the same question for
    /// [`ImplicitSignal::Retry`], nothing otherwise.
    pub fn follow_up_text(self, prompt: &str) -> Option<String> {
        match self {
            ImplicitSignal::DissatisfiedFollowup => Some(format!(
                "That doesn't look right. Please check again: {}",
                prompt.trim()
            )),
            ImplicitSignal::Retry => Some(prompt.trim().to_owned()),
            ImplicitSignal::Accepted | ImplicitSignal::Abandon => None,
        }
    }

    /// The signal as the body of `POST /v1/feedback` about an episode.
    pub fn feedback(self, episode: &EpisodeId) -> FeedbackRequest {
        FeedbackRequest {
            episode_id: Some(episode.to_string()),
            agent: None,
            call_id: None,
            name: self.name().to_owned(),
            value: serde_json::Value::Bool(true),
            source: Some(SignalSource::Implicit),
            comment: None,
        }
    }
}

/// A simulated user: satisfied iff the hidden score reaches `satisfied_at`,
/// with the reaction flipped with probability `noise`, after a delay drawn
/// from `delay_ms` (inclusive bounds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimulatedUser {
    /// Probability in [0, 1] that the reaction is the opposite of the score's.
    pub noise: f64,
    /// Least and most milliseconds before the user reacts.
    pub delay_ms: (u64, u64),
    /// Seeds [`SimulatedUser::rng`].
    pub seed: u64,
    /// The hidden score from which the user is satisfied.
    pub satisfied_at: f64,
    /// A blind spot: asked a clarifying question instead of answered, the
    /// user neither accepts nor complains; they say nothing at all.
    #[serde(default)]
    pub silent_on_questions: bool,
}

impl SimulatedUser {
    /// A user satisfied by a score of at least 0.5.
    pub fn new(noise: f64, delay_ms: (u64, u64), seed: u64) -> SimulatedUser {
        SimulatedUser {
            noise,
            delay_ms,
            seed,
            satisfied_at: 0.5,
            silent_on_questions: false,
        }
    }

    /// The user's reaction to `answer`, whose hidden score is `score`:
    /// nothing at all for a clarifying question when the user has that
    /// blind spot ([`SimulatedUser::silent_on_questions`]), else
    /// [`SimulatedUser::react`]'s.
    pub fn react_to<R: Rng + ?Sized>(&self, answer: &str, score: f64, rng: &mut R) -> Vec<ImplicitSignal> {
        if self.silent_on_questions && hone_types::behaviour::is_clarifying_question(answer.trim()) {
            return Vec::new();
        }
        self.react(score, rng)
    }

    /// The user's own reproducible random stream.
    pub fn rng(&self) -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(self.seed)
    }

    /// The user's reaction to an answer with this hidden score: `accepted`
    /// when satisfied, else one of `dissatisfied_followup`, `retry`,
    /// `abandon`; flipped with probability `noise`.
    pub fn react<R: Rng + ?Sized>(&self, score: f64, rng: &mut R) -> Vec<ImplicitSignal> {
        let noise = if self.noise.is_finite() {
            self.noise.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let mut satisfied = score >= self.satisfied_at;
        if rng.random::<f64>() < noise {
            satisfied = !satisfied;
        }
        if satisfied {
            return vec![ImplicitSignal::Accepted];
        }
        let total: f64 = NEGATIVE_REACTIONS.iter().map(|(_, w)| w).sum();
        let mut draw = rng.random::<f64>() * total;
        for (signal, weight) in NEGATIVE_REACTIONS {
            if draw < weight {
                return vec![signal];
            }
            draw -= weight;
        }
        vec![ImplicitSignal::Abandon]
    }

    /// How long the user takes to react.
    pub fn delay<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        let (low, high) = self.delay_ms;
        let (low, high) = (low.min(high), low.max(high));
        Duration::from_millis(rng.random_range(low..=high))
    }
}
