-- runs_open (node) WHERE ended_at IS NULL is the leading column of runs_open_heartbeat (node,
-- heartbeat_at) on the same rows (0026): every lookup it served, the wider index serves the
-- same way. Each claim inserts into it and each completion deletes from it: a WAL page of
-- every claim and of every completion for nothing (bench/sqlite_queue.py's pages a cycle).
DROP INDEX runs_open;
