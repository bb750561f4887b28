-- The dashboard's reward summary reads only this index, not the rows with
-- their records.
CREATE INDEX rewards_agent_value ON rewards (agent, spec_version, value);
