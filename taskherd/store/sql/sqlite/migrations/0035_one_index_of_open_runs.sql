-- The open runs had three partial indexes (0026): by node and heartbeat, by role, and the
-- unspawned by node. Each claim inserted into all three and each completion deleted from all
-- three: six WAL pages of every claim+complete (bench/sqlite_queue.py), more than any read
-- they sped up saved. One index holds the open runs now, by role first: the claim within
-- limits counts a role's open runs on every claim (limit_usage), so that count stays a range
-- of the index however many agents run. The supervisor's and the monitor's reads by node
-- (heartbeats_since, unspawned_run_ids) find node, heartbeat and spawn in the index itself:
-- they read every open run's entry, not its row, a few pages at a thousand agents. ended_at
-- (NULL in every entry) is a column only so that SQLite sees those reads covered by the index:
-- without it each one looked up every open run's row to test `ended_at IS NULL` again.
DROP INDEX runs_open_heartbeat;
DROP INDEX runs_open_role;
DROP INDEX runs_unspawned;
CREATE INDEX runs_open ON runs (role, node, heartbeat_at, spawned_at, ended_at) WHERE ended_at IS NULL;
