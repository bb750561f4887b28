//! Simulated users: reactions, the noise rate, delays, feedback bodies.

use hone_envs::{FeedbackRequest, ImplicitSignal, SimulatedUser};
use hone_types::EpisodeId;
use rand::SeedableRng;
use serde_json::json;
use std::collections::HashSet;
use std::time::Duration;

#[test]
fn without_noise_the_reaction_follows_the_score() {
    let user = SimulatedUser::new(0.0, (0, 0), 1);
    let mut rng = user.rng();
    let mut negatives = HashSet::new();
    for _ in 0..1_000 {
        assert_eq!(user.react(1.0, &mut rng), vec![ImplicitSignal::Accepted]);
        let reaction = user.react(0.0, &mut rng);
        assert_eq!(reaction.len(), 1);
        assert!(!reaction[0].is_positive(), "{reaction:?}");
        negatives.insert(reaction[0]);
    }
    // Every kind of dissatisfaction shows up.
    assert_eq!(negatives.len(), 3, "{negatives:?}");
}

/// Flips out of `draws` with noise 0.2 stay within the binomial 99% interval:
/// mean n·p = 400, sd √(n·p·(1−p)) ≈ 17.9, ±2.576 sd → [354, 446].
#[test]
fn the_flip_rate_matches_the_noise() {
    let user = SimulatedUser::new(0.2, (0, 0), 2024);
    let mut rng = user.rng();
    let draws = 2_000;
    let flipped_good = (0..draws)
        .filter(|_| !user.react(1.0, &mut rng)[0].is_positive())
        .count();
    let flipped_bad = (0..draws)
        .filter(|_| user.react(0.0, &mut rng)[0].is_positive())
        .count();
    for flips in [flipped_good, flipped_bad] {
        assert!((354..=446).contains(&flips), "{flips} flips of {draws}");
    }
    let always = SimulatedUser::new(1.0, (0, 0), 3);
    let mut rng = always.rng();
    assert!((0..100).all(|_| always.react(1.0, &mut rng) != vec![ImplicitSignal::Accepted]));
}

#[test]
fn reactions_are_reproducible_and_delays_in_range() {
    let user = SimulatedUser::new(0.3, (200, 1_500), 9);
    let (mut a, mut b) = (user.rng(), user.rng());
    let run = |rng: &mut rand::rngs::StdRng| (0..50).map(|i| user.react(f64::from(i % 2), rng)).collect::<Vec<_>>();
    assert_eq!(run(&mut a), run(&mut b));
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    for _ in 0..500 {
        let delay = user.delay(&mut rng);
        assert!((Duration::from_millis(200)..=Duration::from_millis(1_500)).contains(&delay));
    }
}

/// The fields of the gateway's `FeedbackRequest`
/// (crates/hone-gateway/src/routes/feedback.rs, `deny_unknown_fields`).
const GATEWAY_FEEDBACK_FIELDS: [&str; 6] = ["episode_id", "call_id", "name", "value", "source", "comment"];

#[test]
fn signals_are_the_bodies_of_post_v1_feedback() {
    let names: Vec<&str> = ImplicitSignal::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["accepted", "dissatisfied_followup", "retry", "abandon"]);
    let episode = EpisodeId::parse("demo-7").unwrap();
    for signal in ImplicitSignal::ALL {
        let body = serde_json::to_value(signal.feedback(&episode)).unwrap();
        assert_eq!(
            body,
            json!({"episode_id": "demo-7", "name": signal.name(), "value": true, "source": "implicit"})
        );
        assert!(body
            .as_object()
            .unwrap()
            .keys()
            .all(|k| GATEWAY_FEEDBACK_FIELDS.contains(&k.as_str())));
        // The serde name of the signal is its hone name too.
        assert_eq!(serde_json::to_value(signal).unwrap(), json!(signal.name()));
    }
    let mut full = ImplicitSignal::DissatisfiedFollowup.feedback(&episode);
    full.comment = ImplicitSignal::DissatisfiedFollowup.follow_up_text("What is 2 + 2?");
    let text = serde_json::to_string(&full).unwrap();
    let back: FeedbackRequest = serde_json::from_str(&text).unwrap();
    assert_eq!(back, full);
}

#[test]
fn follow_ups_repeat_the_question() {
    let prompt = "What plan is Dana Okafor on?";
    let complaint = ImplicitSignal::DissatisfiedFollowup.follow_up_text(prompt).unwrap();
    assert!(complaint.contains(prompt) && complaint.contains("right"), "{complaint}");
    assert_eq!(ImplicitSignal::Retry.follow_up_text(prompt).as_deref(), Some(prompt));
    assert_eq!(ImplicitSignal::Accepted.follow_up_text(prompt), None);
    assert_eq!(ImplicitSignal::Abandon.follow_up_text(prompt), None);
}

/// The blind spot of `hone demo --scenario hack`: a clarifying question
/// gets no reaction at all, whatever its score; answers get the usual one.
#[test]
fn a_user_silent_on_questions_says_nothing_to_a_question_and_reacts_to_answers() {
    let user = SimulatedUser {
        silent_on_questions: true,
        ..SimulatedUser::new(0.0, (0, 0), 4)
    };
    let mut rng = user.rng();
    for question in [
        "Do you want the exact number, or is an estimate fine?",
        "Which one? ",
        "Apples?\"",
    ] {
        assert_eq!(user.react_to(question, 0.0, &mut rng), Vec::<ImplicitSignal>::new());
    }
    assert_eq!(
        user.react_to("The answer is 12.", 1.0, &mut rng),
        vec![ImplicitSignal::Accepted]
    );
    assert!(!user.react_to("The answer is 13.", 0.0, &mut rng)[0].is_positive());
    // Without the blind spot a question is a wrong answer like any other.
    let plain = SimulatedUser::new(0.0, (0, 0), 4);
    let reaction = plain.react_to("Do you want the exact number?", 0.0, &mut rng);
    assert_eq!(reaction.len(), 1);
    assert!(!reaction[0].is_positive(), "{reaction:?}");
}
