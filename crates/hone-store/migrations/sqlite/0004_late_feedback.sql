-- Late feedback: a reward remembers how many of its episode's signals it
-- was computed from, and is marked stale when a signal arrives after it
-- (in the signal's own transaction), so the next reward step re-scores it.

ALTER TABLE rewards ADD COLUMN signals_seen INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rewards ADD COLUMN stale INTEGER NOT NULL DEFAULT 0;
CREATE INDEX rewards_stale ON rewards (agent, spec_version) WHERE stale = 1;

-- Rewards from before this migration: what they saw is judged by time.
UPDATE rewards SET
    signals_seen = (SELECT COUNT(*) FROM signals s
                    WHERE s.episode_id = rewards.episode_id AND s.created_at <= rewards.computed_at),
    stale = EXISTS (SELECT 1 FROM signals s
                    WHERE s.episode_id = rewards.episode_id AND s.created_at > rewards.computed_at);
