//! The judge through the gateway: relative (RULER) and absolute modes,
//! malformed and partial JSON retried, then recorded as a failure; the
//! judge's calls are episodes of `hone-judge`.

use crate::support::World;
use hone_learn::scoring::judge::{parse_relative, Judge};
use hone_store::Store;
use hone_types::EpisodeQuery;
use std::sync::Arc;

fn judge(w: &World, agent: &str) -> Judge {
    Judge {
        spec: w.config.agents[agent].reward.judge.clone().unwrap(),
        agent: agent.to_owned(),
        client: Arc::new(w.client()),
    }
}

#[tokio::test]
async fn relative_judging_ranks_a_group_and_retries_bad_output() {
    let w = World::start().await;
    for i in 0..3 {
        w.ask("ranked", &format!("r{i}"), "What is 1+1?").await;
    }
    let episodes = [w.episode("r0").await, w.episode("r1").await, w.episode("r2").await];
    let group: Vec<_> = episodes.iter().collect();
    // Malformed, then partial (trajectory 3 missing), then the default valid answer.
    w.upstream.judge_answers.lock().unwrap().extend([
        "Sure! Here are my scores: {\"scores\": [".to_owned(),
        r#"```json
{"scores": [{"trajectory_id": "1", "explanation": "a", "score": 0.2}, {"trajectory_id": "2", "explanation": "b", "score": 0.9}]}
```"#
            .to_owned(),
    ]);
    let scores = judge(&w, "ranked").relative(&group).await.unwrap();
    assert_eq!(
        scores.iter().map(|s| s.score).collect::<Vec<_>>(),
        vec![1.0 / 3.0, 2.0 / 3.0, 1.0]
    );
    let prompts = w.upstream.judge_prompts.lock().unwrap().clone();
    assert_eq!(prompts.len(), 3, "two bad answers were asked again");
    // The shared prefix (the user's question) appears once, each trajectory after it.
    assert_eq!(prompts[0].matches("What is 1+1?").count(), 1, "{}", prompts[0]);
    assert_eq!(prompts[0].matches("<trajectory id=").count(), 3);

    // The judge's calls are recorded as episodes of `hone-judge`, retries in the same episode.
    w.recorder.flush(std::time::Duration::from_secs(5)).await.unwrap();
    let page = w
        .store
        .episodes(&EpisodeQuery {
            agents: Some(vec!["hone-judge".into()]),
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(page.episodes.len(), 1);
    assert_eq!(page.episodes[0].calls.len(), 3);
    assert!(page.episodes[0].calls[1]
        .request
        .messages
        .iter()
        .any(|m| m.text().contains("cannot be used")));
}

#[tokio::test]
async fn a_judge_that_never_answers_properly_is_a_failure_not_a_score() {
    let w = World::start().await;
    w.ask("graded", "g1", "What is 1+1?").await;
    let episode = w.episode("g1").await;
    // retries = 1: two bad answers exhaust it.
    w.upstream.judge_answers.lock().unwrap().extend([
        r#"{"score": 1.7}"#.to_owned(),
        r#"{"explanation": "no score"}"#.to_owned(),
    ]);
    let failure = judge(&w, "graded").absolute(&episode).await.unwrap_err();
    assert_eq!(failure.attempts, 2);
    assert!(failure.last_error.contains("score is missing"), "{failure}");
    // And the next time it answers well.
    let ok = judge(&w, "graded").absolute(&episode).await.unwrap();
    assert_eq!(ok.score, 0.8);
}

#[test]
fn relative_output_must_score_every_trajectory_once_within_bounds() {
    let ok = r#"{"scores":[{"trajectory_id":2,"score":"0.5"},{"trajectory_id":"1","score":1}]}"#;
    let s = parse_relative(ok, 2).unwrap();
    assert_eq!((s[0].score, s[1].score), (1.0, 0.5));
    for (bad, why) in [
        (
            r#"{"scores":[{"trajectory_id":"1","score":0.5}]}"#,
            "trajectory 2 has no score",
        ),
        (
            r#"{"scores":[{"trajectory_id":"1","score":0.5},{"trajectory_id":"1","score":0.5}]}"#,
            "scored twice",
        ),
        (r#"{"scores":[{"trajectory_id":"3","score":0.5}]}"#, "there are 2"),
        (r#"{"scores":[{"trajectory_id":"1","score":-0.1}]}"#, "outside [0, 1]"),
        (r#"{"scores": "high"}"#, "not a list"),
        ("no json at all", "no JSON object"),
    ] {
        let e = parse_relative(bad, 2).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
}
