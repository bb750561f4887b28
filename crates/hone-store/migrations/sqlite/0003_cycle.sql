-- The learning cycle: cycles and their step, candidates, live deployments,
-- alerts, and the append-only history that explains every change.
-- Whole records are JSON in `record`; the other columns are for lookups.

CREATE TABLE cycles (
    id          TEXT PRIMARY KEY,
    agent       TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    state       TEXT NOT NULL,
    record      TEXT NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (agent, seq)
);
-- At most one unfinished cycle per agent: a second start finds the first.
CREATE UNIQUE INDEX cycles_open ON cycles (agent) WHERE state NOT IN ('done', 'failed');

CREATE TABLE candidates (
    cycle_id    TEXT NOT NULL REFERENCES cycles (id),
    version_id  TEXT NOT NULL REFERENCES versions (id),
    agent       TEXT NOT NULL,
    status      TEXT NOT NULL,
    record      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (cycle_id, version_id)
);
CREATE INDEX candidates_agent ON candidates (agent, created_at);
CREATE INDEX candidates_version ON candidates (version_id);

CREATE TABLE deployments (
    agent     TEXT PRIMARY KEY,
    revision  INTEGER NOT NULL,
    record    TEXT NOT NULL
);

CREATE TABLE alerts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    agent       TEXT NOT NULL,
    version_id  TEXT NOT NULL,
    at          INTEGER NOT NULL,
    record      TEXT NOT NULL
);
CREATE INDEX alerts_agent ON alerts (agent, id);

CREATE TABLE history (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    agent   TEXT NOT NULL,
    at      INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    record  TEXT NOT NULL
);
CREATE INDEX history_agent ON history (agent, id);
CREATE TRIGGER history_append_only_update BEFORE UPDATE ON history
BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;
CREATE TRIGGER history_append_only_delete BEFORE DELETE ON history
BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;
