//! When an episode's reward counts online: silence is not a zero. An
//! episode enters the canary's test and the monitors once its users have
//! reacted (it has one of the signals the spec weighs), or once the spec's
//! wait is over — then as its signals' `no_signal` says: left out
//! (`"skip"`) or counted with their defaults. Until then it is pending.
//! Training on production episodes follows the same rule.

use hone_config::RewardSpec;
use hone_store::WindowEpisode;
use hone_types::EpisodeDetail;

/// Where one episode stands for the online stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Settled {
    /// Counted, with this reward (none yet: not scored, which the
    /// behaviour monitors do not need and the online test waits for).
    Counted(Option<f64>),
    /// Its users said nothing and the spec skips silent episodes.
    Skipped,
    /// Its users may still react.
    Pending,
}

/// The rule, for one episode of a window at `now` (unix ms).
pub fn settled(spec: &RewardSpec, episode: &WindowEpisode, now: i64) -> Settled {
    let heard = spec.signals.iter().any(|s| episode.signals.contains(&s.name));
    rule(spec, episode.started_at, episode.reward, heard, now)
}

/// The rule, for a recorded episode and its reward (training sets).
pub fn settled_episode(spec: &RewardSpec, episode: &EpisodeDetail, reward: Option<f64>, now: i64) -> Settled {
    let heard = spec
        .signals
        .iter()
        .any(|s| episode.signals.iter().any(|x| x.name == s.name));
    rule(spec, episode.summary.started_at, reward, heard, now)
}

/// `heard`: the episode has one of the signals the spec weighs.
fn rule(spec: &RewardSpec, started_at: i64, reward: Option<f64>, heard: bool, now: i64) -> Settled {
    if spec.signals.is_empty() || heard {
        Settled::Counted(reward)
    } else if now - started_at < spec.wait_ms {
        Settled::Pending
    } else if spec.signals.iter().any(|s| s.skip_when_silent) {
        Settled::Skipped
    } else {
        Settled::Counted(reward)
    }
}

/// The episodes of two windows (newest first, as the store gives them)
/// that count, each with its counted reward as its `reward`, oldest first.
/// With `in_order` (a sequential test), only those started before the
/// oldest pending or unscored one of either window, so what a later look counts only
/// ever extends what an earlier one did: the test sees one stream, growing
/// at its end.
pub fn counted(
    spec: &RewardSpec,
    now: i64,
    in_order: bool,
    canary: &[WindowEpisode],
    champion: &[WindowEpisode],
) -> (Vec<WindowEpisode>, Vec<WindowEpisode>) {
    let cutoff = canary
        .iter()
        .chain(champion)
        .filter(|e| in_order && matches!(settled(spec, e, now), Settled::Pending | Settled::Counted(None)))
        .map(|e| e.started_at)
        .min()
        .unwrap_or(i64::MAX);
    let keep = |side: &[WindowEpisode]| -> Vec<WindowEpisode> {
        let mut out: Vec<WindowEpisode> = side
            .iter()
            .filter(|e| e.started_at < cutoff)
            .filter_map(|e| match settled(spec, e, now) {
                Settled::Counted(reward) => Some(WindowEpisode { reward, ..e.clone() }),
                Settled::Skipped | Settled::Pending => None,
            })
            .collect();
        out.reverse();
        out
    };
    (keep(canary), keep(champion))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episode(started_at: i64, reward: Option<f64>, signals: &[&str]) -> WindowEpisode {
        WindowEpisode {
            id: hone_types::EpisodeId::new_v7(),
            started_at,
            calls: 1,
            error: false,
            invalid_tool_call: false,
            clarifying_question: false,
            refusal: false,
            empty: false,
            tool_use: false,
            answer_chars: 1.0,
            cost_usd: 0.0,
            latency_ms: 1.0,
            reward,
            signals: signals.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn spec(skip: bool) -> RewardSpec {
        let mut spec = RewardSpec::default();
        spec.signals.push(hone_config::SignalWeight {
            name: "accepted".into(),
            weight: 1.0,
            default: 0.0,
            skip_when_silent: skip,
        });
        spec.wait_ms = 1_000;
        spec
    }

    #[test]
    fn an_episode_counts_once_heard_or_once_the_wait_is_over() {
        let (counting, skipping) = (spec(false), spec(true));
        let heard = episode(0, Some(1.0), &["accepted"]);
        let silent = episode(0, Some(0.0), &["other"]);
        assert_eq!(settled(&counting, &heard, 10), Settled::Counted(Some(1.0)));
        assert_eq!(
            settled(&counting, &silent, 999),
            Settled::Pending,
            "users may still react"
        );
        assert_eq!(
            settled(&counting, &silent, 1_000),
            Settled::Counted(Some(0.0)),
            "its default, after the wait"
        );
        assert_eq!(settled(&skipping, &silent, 1_000), Settled::Skipped);
        assert_eq!(
            settled(&counting, &episode(0, None, &["accepted"]), 5_000),
            Settled::Counted(None),
            "heard, not scored yet"
        );
        assert_eq!(
            settled(&RewardSpec::default(), &episode(0, Some(0.5), &[]), 0),
            Settled::Counted(Some(0.5)),
            "a spec weighing no signal waits for nobody"
        );
    }

    #[test]
    fn in_order_only_what_started_before_the_oldest_pending_episode_counts() {
        let spec = spec(false);
        // Newest first, as the store gives windows.
        let canary = [
            episode(30, Some(1.0), &["accepted"]),
            episode(10, Some(1.0), &["accepted"]),
        ];
        let champion = [
            episode(40, Some(1.0), &["accepted"]),
            episode(20, Some(0.0), &[]),
            episode(5, Some(0.0), &["accepted"]),
        ];
        let (c, h) = counted(&spec, 100, true, &canary, &champion);
        assert_eq!(c.iter().map(|e| e.started_at).collect::<Vec<_>>(), vec![10]);
        assert_eq!(h.iter().map(|e| e.started_at).collect::<Vec<_>>(), vec![5]);
        let (c, h) = counted(&spec, 100, false, &canary, &champion);
        assert_eq!((c.len(), h.len()), (2, 2), "each on its own without an order to keep");
    }
}
