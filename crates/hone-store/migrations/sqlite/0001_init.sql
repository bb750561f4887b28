-- hone's first schema: versions, episodes, calls, signals.
-- Whole records are kept as JSON in `record`/`spec`; the other columns exist
-- so that learning, datasets and monitors can filter without parsing JSON.

CREATE TABLE versions (
    id          TEXT PRIMARY KEY,
    agent       TEXT NOT NULL,
    label       TEXT,
    spec        TEXT NOT NULL,
    parent      TEXT,
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX versions_agent ON versions (agent, created_at);

CREATE TABLE episodes (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    agent         TEXT NOT NULL,
    started_at    INTEGER NOT NULL,
    last_call_at  INTEGER NOT NULL,
    call_count    INTEGER NOT NULL
);
CREATE INDEX episodes_agent_seq ON episodes (agent, seq);
CREATE INDEX episodes_started ON episodes (started_at);

CREATE TABLE calls (
    id                   TEXT PRIMARY KEY,
    episode_id           TEXT NOT NULL,
    agent                TEXT NOT NULL,
    version_id           TEXT NOT NULL,
    started_at           INTEGER NOT NULL,
    outcome              TEXT NOT NULL,
    stream               INTEGER NOT NULL,
    provider             TEXT,
    model                TEXT,
    prompt_tokens        INTEGER,
    completion_tokens    INTEGER,
    cost_usd             REAL,
    latency_ms           REAL NOT NULL,
    ttft_ms              REAL,
    upstream_ms          REAL NOT NULL,
    invalid_tool_call    INTEGER NOT NULL,
    clarifying_question  INTEGER NOT NULL,
    refusal              INTEGER NOT NULL,
    empty                INTEGER NOT NULL,
    truncated            INTEGER NOT NULL,
    record               TEXT NOT NULL
);
CREATE INDEX calls_episode ON calls (episode_id, started_at);
CREATE INDEX calls_version ON calls (version_id, started_at);

CREATE TABLE signals (
    id          TEXT PRIMARY KEY,
    episode_id  TEXT NOT NULL,
    call_id     TEXT,
    name        TEXT NOT NULL,
    value       TEXT NOT NULL,
    source      TEXT NOT NULL,
    comment     TEXT,
    created_at  INTEGER NOT NULL
);
CREATE INDEX signals_episode ON signals (episode_id, created_at);
