//! When an episode's reward counts online: silence is not a zero. An
//! episode enters the canary's test and the monitors once its users have
//! reacted (it has one of the signals the spec weighs), or once the spec's
//! wait is over — then as its signals' `no_signal` says: left out
//! (`"skip"`) or counted with their defaults. Until then it is pending.

use hone_config::RewardSpec;
use hone_store::WindowEpisode;

/// Where one episode stands for the online stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Settled {
    /// Counted, with this reward.
    Counted(f64),
    /// Its users said nothing and the spec skips silent episodes.
    Skipped,
    /// Not scored yet, or its users may still react.
    Pending,
}

/// The rule, for one episode at `now` (unix ms).
pub fn settled(spec: &RewardSpec, episode: &WindowEpisode, now: i64) -> Settled {
    let Some(reward) = episode.reward else {
        return Settled::Pending;
    };
    let heard = spec.signals.is_empty()
        || spec
            .signals
            .iter()
            .any(|s| episode.signals.iter().any(|name| *name == s.name));
    if heard {
        Settled::Counted(reward)
    } else if now - episode.started_at < spec.wait_ms {
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
/// oldest pending one of either window, so what a later look counts only
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
        .filter(|e| in_order && settled(spec, e, now) == Settled::Pending)
        .map(|e| e.started_at)
        .min()
        .unwrap_or(i64::MAX);
    let keep = |side: &[WindowEpisode]| -> Vec<WindowEpisode> {
        let mut out: Vec<WindowEpisode> = side
            .iter()
            .filter(|e| e.started_at < cutoff)
            .filter_map(|e| match settled(spec, e, now) {
                Settled::Counted(r) => Some(WindowEpisode {
                    reward: Some(r),
                    ..e.clone()
                }),
                Settled::Skipped | Settled::Pending => None,
            })
            .collect();
        out.reverse();
        out
    };
    (keep(canary), keep(champion))
}
