-- Quality gates survive a daemon restart: the process of a check, so that a restarted daemon
-- re-adopts a gate still running (by pid and start time, as it re-adopts agents) and runs
-- again only the gates of a run that have not passed.
ALTER TABLE gate_checks ADD COLUMN pid integer;
ALTER TABLE gate_checks ADD COLUMN pid_started_at double precision;
