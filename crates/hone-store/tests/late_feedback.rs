//! Late feedback: a signal stored after an episode's reward marks the reward
//! stale in the signal's own transaction, and a reward computed from fewer
//! signals than the episode has when it is stored stays stale (the signal
//! arrived while it was being computed). Rewards stored before the
//! migration are judged by time.

use crate::backends::Backend;
use crate::common::call;
use hone_store::{EpisodeFilter, LearnStore, SqliteStore, Store};
use hone_types::{EpisodeId, RewardRecord, Signal, SignalSource, SignalValue};

fn signal(episode: &EpisodeId, at: i64) -> Signal {
    Signal {
        id: uuid::Uuid::now_v7(),
        episode_id: episode.clone(),
        call_id: None,
        name: "kept".into(),
        value: SignalValue::Float(1.0),
        source: SignalSource::User,
        comment: None,
        created_at: at,
    }
}

fn reward(episode: &EpisodeId, value: f64, signals_seen: u32) -> RewardRecord {
    crate::common::reward(episode, value, signals_seen, 10)
}

/// `(reward, stale)` as the learner's scan sees it.
fn facts(store: &dyn LearnStore, episode: &EpisodeId) -> (Option<(f64, bool)>, bool) {
    let mut found = None;
    store
        .scan_episodes(
            &EpisodeFilter {
                agent: "assistant".into(),
                spec_version: Some("spec".into()),
                ..EpisodeFilter::default()
            },
            &mut |f| {
                if &f.id == episode {
                    found = Some((f.reward, f.reward_stale));
                }
                Ok(())
            },
        )
        .unwrap();
    found.unwrap()
}

crate::backend_tests!(a_signal_after_the_reward_makes_it_stale_until_rescored);

fn a_signal_after_the_reward_makes_it_stale_until_rescored(backend: &Backend) {
    let store = &*backend.store;
    let e = EpisodeId::new_v7();
    store.write_calls(&[call(&e, 1000)]).unwrap();

    store.put_rewards(&[reward(&e, 0.0, 0)]).unwrap();
    assert_eq!(facts(store, &e), (Some((0.0, false)), false));

    // Feedback an hour later: the reward is stale at once.
    store.insert_signal(&signal(&e, 3_600_000)).unwrap();
    assert_eq!(facts(store, &e), (Some((0.0, false)), true));

    // Re-scored from the episode as read before a second signal landed:
    // still stale, so that second signal is not lost either.
    store.insert_signal(&signal(&e, 3_700_000)).unwrap();
    store.put_rewards(&[reward(&e, 1.0, 1)]).unwrap();
    assert_eq!(facts(store, &e), (Some((1.0, true)), true));

    // Scored from both: fresh.
    store.put_rewards(&[reward(&e, 1.0, 2)]).unwrap();
    assert_eq!(facts(store, &e), (Some((1.0, true)), false));
    assert_eq!(store.reward(&e, "spec").unwrap().unwrap().signals_seen, 2);
}

/// A database from before late feedback was tracked: migration 4 judges
/// its rewards by time — a signal after a reward's computation makes it
/// stale, and the signals before it count as seen.
#[test]
fn rewards_from_before_the_migration_are_judged_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hone.db");
    let (early, late) = (EpisodeId::new_v7(), EpisodeId::new_v7());
    {
        let store = SqliteStore::open(&path, false).unwrap();
        store.write_calls(&[call(&early, 1), call(&late, 1)]).unwrap();
        for e in [&early, &late] {
            store.insert_signal(&signal(e, 5)).unwrap();
        }
        store
            .put_rewards(&[reward(&early, 1.0, 1), reward(&late, 1.0, 1)])
            .unwrap();
        store.insert_signal(&signal(&late, 3_600_000)).unwrap();
    }
    // Back to schema 3: the rewards as an older hone stored them.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP INDEX rewards_agent_value; DELETE FROM schema_migrations WHERE version = 5;
         DROP INDEX rewards_stale; ALTER TABLE rewards DROP COLUMN stale;
         ALTER TABLE rewards DROP COLUMN signals_seen; DELETE FROM schema_migrations WHERE version = 4;",
    )
    .unwrap();
    drop(conn);

    let store = &SqliteStore::open(&path, false).unwrap();
    assert_eq!(facts(store, &early), (Some((1.0, true)), false));
    assert_eq!(facts(store, &late), (Some((1.0, true)), true));
    let seen = |e: &EpisodeId| -> i64 {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.query_row(
            "SELECT signals_seen FROM rewards WHERE episode_id = ?1",
            [e.as_str()],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!((seen(&early), seen(&late)), (1, 1));
}
