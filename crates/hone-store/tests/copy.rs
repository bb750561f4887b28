//! `hone store migrate`'s copy: a SQLite store filled by the stories is
//! copied to PostgreSQL and back to a new SQLite file; every table's row
//! count and content hash match at each hop, the typed reads agree, the
//! copies keep working (new rows get fresh keys), and a target that already
//! holds data is refused.

use crate::backends::Backend;
use hone_store::copy::{copy, summarise, Tables};
use hone_store::{CycleStore, LearnStore, SqliteStore, Store};
use hone_types::{EpisodeQuery, HistoryEvent, Signal, SignalSource, SignalValue};

#[test]
fn a_store_survives_sqlite_to_postgres_to_sqlite_unchanged() {
    let source = Backend::sqlite();
    // Every table gets rows: the cycle story (versions, calls, rewards,
    // cycles, candidates, deployments, alerts, history), the snapshots
    // story (datasets), then a signal and an evaluation run.
    crate::cycle_story::cycle_story(&source);
    crate::learn_story::snapshots_are_immutable_and_numbered_one_at_a_time(&source);
    let episode = source
        .store
        .episodes(&EpisodeQuery {
            limit: 1,
            ..Default::default()
        })
        .unwrap()
        .episodes[0]
        .summary
        .id
        .clone();
    source
        .store
        .insert_signal(&Signal {
            id: uuid::Uuid::now_v7(),
            episode_id: episode,
            call_id: None,
            name: "kept".into(),
            value: SignalValue::Float(0.5),
            source: SignalSource::User,
            comment: Some("ünïcode ✓".into()),
            created_at: 7,
        })
        .unwrap();
    let run = crate::common::eval_run();
    source.store.start_eval_run(&run).unwrap();
    source
        .store
        .put_eval_result("run-1", &crate::learn_story::result("q1", 0, true))
        .unwrap();
    let Some(pg) = Backend::postgres() else { return };
    let sqlite = SqliteStore::open(&source.dir().join("hone.db"), false).unwrap();
    let postgres = hone_test_support::connect(pg.url().unwrap(), 4).unwrap();

    let mut told = Vec::new();
    let (from, to) = copy(&sqlite, &postgres, &mut |table, copied, total| {
        told.push((table.to_owned(), copied, total))
    })
    .unwrap();
    assert_eq!(from, to, "every table's count and hash after the copy");
    let rows = |table: &str| from.iter().find(|s| s.table == table).unwrap().rows;
    for s in &from {
        assert!(s.rows > 0, "table {} has no rows to copy", s.table);
    }
    assert_eq!((rows("calls"), rows("dataset_items")), (4, 12), "{from:?}");
    assert!(told.iter().any(|(t, copied, total)| t == "calls" && copied == total));

    // What the traits read back is the same on both.
    let query = EpisodeQuery {
        limit: 100,
        ..Default::default()
    };
    assert_eq!(sqlite.episodes(&query).unwrap(), postgres.episodes(&query).unwrap());
    assert_eq!(
        sqlite.history("assistant", 100).unwrap(),
        postgres.history("assistant", 100).unwrap()
    );
    assert_eq!(
        sqlite.candidates("assistant", None).unwrap(),
        postgres.candidates("assistant", None).unwrap()
    );
    assert_eq!(sqlite.datasets().unwrap(), postgres.datasets().unwrap());
    assert_eq!(sqlite.alerts(None, 10).unwrap(), postgres.alerts(None, 10).unwrap());

    // The copy keeps working: a new event gets the next key, not a taken one.
    let last = postgres.history("assistant", 1).unwrap()[0].id;
    postgres
        .add_history(&[HistoryEvent::new("assistant", 9, "cycle", "after the move")])
        .unwrap();
    assert!(postgres.history("assistant", 1).unwrap()[0].id > last);

    // A target with data is refused, and nothing is written to it.
    let before = summarise(&postgres).unwrap();
    let refused = copy(&sqlite, &postgres, &mut |_, _, _| {}).unwrap_err();
    assert!(refused.to_string().contains("not empty"), "{refused}");
    assert_eq!(summarise(&postgres).unwrap(), before);

    // And back: PostgreSQL to a new SQLite file.
    let back_dir = tempfile::tempdir().unwrap();
    let back = SqliteStore::open(&back_dir.path().join("hone.db"), false).unwrap();
    let (from, to) = copy(&postgres, &back, &mut |_, _, _| {}).unwrap();
    assert_eq!(from, to);
    assert_eq!(
        back.history("assistant", 100).unwrap(),
        postgres.history("assistant", 100).unwrap()
    );
    let _: &dyn Tables = &back;
}
