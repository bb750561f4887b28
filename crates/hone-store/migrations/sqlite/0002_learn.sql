-- Learning: rewards per spec version, immutable dataset snapshots, and
-- evaluation runs with per-instance results.

CREATE TABLE rewards (
    episode_id    TEXT NOT NULL,
    agent         TEXT NOT NULL,
    spec_version  TEXT NOT NULL,
    value         REAL NOT NULL,
    passed        INTEGER NOT NULL,
    record        TEXT NOT NULL,
    computed_at   INTEGER NOT NULL,
    PRIMARY KEY (episode_id, spec_version)
);
CREATE INDEX rewards_agent ON rewards (agent, spec_version);

-- Dataset selection scans one agent's calls grouped by episode.
CREATE INDEX calls_agent_episode ON calls (agent, episode_id);

CREATE TABLE datasets (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    version       INTEGER NOT NULL,
    agent         TEXT NOT NULL,
    builder       TEXT NOT NULL,
    params        TEXT NOT NULL,
    item_count    INTEGER NOT NULL,
    content_hash  TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    UNIQUE (name, version)
);

CREATE TABLE dataset_items (
    dataset_id   TEXT NOT NULL,
    idx          INTEGER NOT NULL,
    instance_id  TEXT NOT NULL,
    item         TEXT NOT NULL,
    PRIMARY KEY (dataset_id, idx),
    UNIQUE (dataset_id, instance_id)
);

-- Snapshots are immutable: the database itself refuses to change them.
CREATE TRIGGER datasets_immutable BEFORE UPDATE ON datasets
BEGIN SELECT RAISE(ABORT, 'dataset snapshots are immutable'); END;
CREATE TRIGGER datasets_undeletable BEFORE DELETE ON datasets
BEGIN SELECT RAISE(ABORT, 'dataset snapshots are immutable'); END;
CREATE TRIGGER dataset_items_immutable BEFORE UPDATE ON dataset_items
BEGIN SELECT RAISE(ABORT, 'dataset snapshots are immutable'); END;
CREATE TRIGGER dataset_items_undeletable BEFORE DELETE ON dataset_items
BEGIN SELECT RAISE(ABORT, 'dataset snapshots are immutable'); END;

CREATE TABLE eval_runs (
    id           TEXT PRIMARY KEY,
    dataset_id   TEXT NOT NULL,
    agent        TEXT NOT NULL,
    version_id   TEXT NOT NULL,
    target       TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    finished_at  INTEGER
);

CREATE TABLE eval_results (
    run_id       TEXT NOT NULL,
    instance_id  TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    result       TEXT NOT NULL,
    PRIMARY KEY (run_id, instance_id, attempt)
);
