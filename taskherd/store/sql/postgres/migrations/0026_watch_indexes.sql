-- What a node asks of its open runs every second, answered from what changed, not by reading
-- every open run: at a thousand running agents each of these scanned the thousand.
-- The runs that called in since the supervisor's last look (heartbeats_since).
CREATE INDEX runs_open_heartbeat ON runs (node, heartbeat_at) WHERE ended_at IS NULL;
-- A role's open runs, counted by every claim within limits (limit_usage).
CREATE INDEX runs_open_role ON runs (role) WHERE ended_at IS NULL;
-- Claimed but not spawned yet: the monitor's never-spawned rescue (unspawned_run_ids).
CREATE INDEX runs_unspawned ON runs (node) WHERE ended_at IS NULL AND spawned_at IS NULL;
