-- hone's schema on PostgreSQL: the same tables, keys and guarantees as the
-- SQLite schema after its migrations 0001–0005, written once for this
-- engine. Whole records are kept as JSON text in `record`/`spec` (exactly
-- the bytes the recorder wrote, no parse on the recording path); the other
-- columns exist so that learning, datasets and monitors can filter without
-- parsing JSON. Text is compared byte by byte (`COLLATE "C"`), as SQLite
-- does, so every ordering is the same on both engines whatever the
-- database's locale.

CREATE TABLE versions (
    id          TEXT COLLATE "C" PRIMARY KEY,
    agent       TEXT COLLATE "C" NOT NULL,
    label       TEXT COLLATE "C",
    spec        TEXT COLLATE "C" NOT NULL,
    parent      TEXT COLLATE "C",
    created_by  TEXT COLLATE "C" NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX versions_agent ON versions (agent, created_at);

CREATE TABLE episodes (
    seq           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id            TEXT COLLATE "C" NOT NULL UNIQUE,
    agent         TEXT COLLATE "C" NOT NULL,
    started_at    BIGINT NOT NULL,
    last_call_at  BIGINT NOT NULL,
    call_count    BIGINT NOT NULL
);
CREATE INDEX episodes_agent_seq ON episodes (agent, seq);
CREATE INDEX episodes_started ON episodes (started_at);

CREATE TABLE calls (
    id                   TEXT COLLATE "C" PRIMARY KEY,
    episode_id           TEXT COLLATE "C" NOT NULL,
    agent                TEXT COLLATE "C" NOT NULL,
    version_id           TEXT COLLATE "C" NOT NULL,
    started_at           BIGINT NOT NULL,
    outcome              TEXT COLLATE "C" NOT NULL,
    stream               BOOLEAN NOT NULL,
    provider             TEXT COLLATE "C",
    model                TEXT COLLATE "C",
    prompt_tokens        BIGINT,
    completion_tokens    BIGINT,
    cost_usd             DOUBLE PRECISION,
    latency_ms           DOUBLE PRECISION NOT NULL,
    ttft_ms              DOUBLE PRECISION,
    upstream_ms          DOUBLE PRECISION NOT NULL,
    invalid_tool_call    BOOLEAN NOT NULL,
    clarifying_question  BOOLEAN NOT NULL,
    refusal              BOOLEAN NOT NULL,
    empty                BOOLEAN NOT NULL,
    truncated            BOOLEAN NOT NULL,
    record               TEXT COLLATE "C" NOT NULL
);
CREATE INDEX calls_episode ON calls (episode_id, started_at);
CREATE INDEX calls_version ON calls (version_id, started_at);
CREATE INDEX calls_agent_episode ON calls (agent, episode_id);

CREATE TABLE signals (
    id          TEXT COLLATE "C" PRIMARY KEY,
    episode_id  TEXT COLLATE "C" NOT NULL,
    call_id     TEXT COLLATE "C",
    name        TEXT COLLATE "C" NOT NULL,
    value       TEXT COLLATE "C" NOT NULL,
    source      TEXT COLLATE "C" NOT NULL,
    comment     TEXT COLLATE "C",
    created_at  BIGINT NOT NULL
);
CREATE INDEX signals_episode ON signals (episode_id, created_at);

-- Rewards per spec version; `stale` is set in a late signal's own
-- transaction so the next reward step re-scores the episode.
CREATE TABLE rewards (
    episode_id    TEXT COLLATE "C" NOT NULL,
    agent         TEXT COLLATE "C" NOT NULL,
    spec_version  TEXT COLLATE "C" NOT NULL,
    value         DOUBLE PRECISION NOT NULL,
    passed        BOOLEAN NOT NULL,
    record        TEXT COLLATE "C" NOT NULL,
    computed_at   BIGINT NOT NULL,
    signals_seen  BIGINT NOT NULL DEFAULT 0,
    stale         BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (episode_id, spec_version)
);
CREATE INDEX rewards_agent ON rewards (agent, spec_version);
CREATE INDEX rewards_agent_value ON rewards (agent, spec_version, value);
CREATE INDEX rewards_stale ON rewards (agent, spec_version) WHERE stale;

CREATE TABLE datasets (
    id            TEXT COLLATE "C" PRIMARY KEY,
    name          TEXT COLLATE "C" NOT NULL,
    version       BIGINT NOT NULL,
    agent         TEXT COLLATE "C" NOT NULL,
    builder       TEXT COLLATE "C" NOT NULL,
    params        TEXT COLLATE "C" NOT NULL,
    item_count    BIGINT NOT NULL,
    content_hash  TEXT COLLATE "C" NOT NULL,
    created_at    BIGINT NOT NULL,
    UNIQUE (name, version)
);

CREATE TABLE dataset_items (
    dataset_id   TEXT COLLATE "C" NOT NULL,
    idx          BIGINT NOT NULL,
    instance_id  TEXT COLLATE "C" NOT NULL,
    item         TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (dataset_id, idx),
    UNIQUE (dataset_id, instance_id)
);

-- What the database itself refuses: a trigger function raising its argument.
CREATE FUNCTION hone_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'restrict_violation';
END
$$;

-- Snapshots are immutable: no update, delete or truncate.
CREATE TRIGGER datasets_immutable BEFORE UPDATE OR DELETE ON datasets
    FOR EACH ROW EXECUTE FUNCTION hone_refuse('dataset snapshots are immutable');
CREATE TRIGGER datasets_untruncatable BEFORE TRUNCATE ON datasets
    FOR EACH STATEMENT EXECUTE FUNCTION hone_refuse('dataset snapshots are immutable');
CREATE TRIGGER dataset_items_immutable BEFORE UPDATE OR DELETE ON dataset_items
    FOR EACH ROW EXECUTE FUNCTION hone_refuse('dataset snapshots are immutable');
CREATE TRIGGER dataset_items_untruncatable BEFORE TRUNCATE ON dataset_items
    FOR EACH STATEMENT EXECUTE FUNCTION hone_refuse('dataset snapshots are immutable');

CREATE TABLE eval_runs (
    id           TEXT COLLATE "C" PRIMARY KEY,
    dataset_id   TEXT COLLATE "C" NOT NULL,
    agent        TEXT COLLATE "C" NOT NULL,
    version_id   TEXT COLLATE "C" NOT NULL,
    target       TEXT COLLATE "C" NOT NULL,
    created_at   BIGINT NOT NULL,
    finished_at  BIGINT
);

CREATE TABLE eval_results (
    run_id       TEXT COLLATE "C" NOT NULL,
    instance_id  TEXT COLLATE "C" NOT NULL,
    attempt      BIGINT NOT NULL,
    result       TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, instance_id, attempt)
);

-- The learning cycle.
CREATE TABLE cycles (
    id          TEXT COLLATE "C" PRIMARY KEY,
    agent       TEXT COLLATE "C" NOT NULL,
    seq         BIGINT NOT NULL,
    state       TEXT COLLATE "C" NOT NULL,
    record      TEXT COLLATE "C" NOT NULL,
    updated_at  BIGINT NOT NULL,
    UNIQUE (agent, seq)
);
-- At most one unfinished cycle per agent: a second start finds the first.
CREATE UNIQUE INDEX cycles_open ON cycles (agent) WHERE state NOT IN ('done', 'failed');

CREATE TABLE candidates (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY,
    cycle_id    TEXT COLLATE "C" NOT NULL REFERENCES cycles (id),
    version_id  TEXT COLLATE "C" NOT NULL REFERENCES versions (id),
    agent       TEXT COLLATE "C" NOT NULL,
    status      TEXT COLLATE "C" NOT NULL,
    record      TEXT COLLATE "C" NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (cycle_id, version_id)
);
CREATE INDEX candidates_agent ON candidates (agent, created_at);
CREATE INDEX candidates_version ON candidates (version_id);

CREATE TABLE deployments (
    agent     TEXT COLLATE "C" PRIMARY KEY,
    revision  BIGINT NOT NULL,
    record    TEXT COLLATE "C" NOT NULL
);

CREATE TABLE alerts (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent       TEXT COLLATE "C" NOT NULL,
    version_id  TEXT COLLATE "C" NOT NULL,
    at          BIGINT NOT NULL,
    record      TEXT COLLATE "C" NOT NULL
);
CREATE INDEX alerts_agent ON alerts (agent, id);

CREATE TABLE history (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent   TEXT COLLATE "C" NOT NULL,
    at      BIGINT NOT NULL,
    kind    TEXT COLLATE "C" NOT NULL,
    record  TEXT COLLATE "C" NOT NULL
);
CREATE INDEX history_agent ON history (agent, id);
CREATE TRIGGER history_append_only BEFORE UPDATE OR DELETE ON history
    FOR EACH ROW EXECUTE FUNCTION hone_refuse('history is append-only');
CREATE TRIGGER history_untruncatable BEFORE TRUNCATE ON history
    FOR EACH STATEMENT EXECUTE FUNCTION hone_refuse('history is append-only');
