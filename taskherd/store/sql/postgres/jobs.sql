-- Named statements of the job store, PostgreSQL: the same names, parameters and returned
-- columns as sqlite/jobs.sql, which says what each is for. Same rules as queries.sql.
-- sqlite's INDEXED BY hints have no PostgreSQL counterpart and are left out: PostgreSQL keeps
-- statistics up to date itself (autovacuum's ANALYZE), which is what the hints stood in for.

-- name: get_job_by_name
-- job_rows (migration 0005): the job with what the scheduler plans from.
-- FOR UPDATE (PostgreSQL only; on the view it locks the jobs row): every write of a job reads
-- it first and writes it guarded by its version; under READ COMMITTED another node's
-- scheduler could change it in between, so the read locks the row until the transaction
-- ends. SQLite's write lock does the same.
SELECT * FROM job_rows WHERE name = :name
FOR UPDATE;

-- name: get_job_by_id
-- FOR UPDATE: as get_job_by_name.
SELECT * FROM job_rows WHERE id = :id
FOR UPDATE;

-- name: due_jobs
-- Walks jobs_due from its low end and stops at :now: with 100,000 jobs and none due it reads
-- one index entry (the planner pushes the conditions into the view).
SELECT * FROM job_rows
WHERE enabled = 1 AND next_run_at <= :now
ORDER BY next_run_at
LIMIT :limit;

-- name: earliest_next_run
SELECT min(next_run_at) AS earliest FROM jobs WHERE enabled = 1;

-- name: lock_fires_of_job
-- Deleting a job writes its fires (job_id set to NULL) after the job; a scheduler settling one
-- of them holds the fire and then wants the job. Taking the fires first, in id order, makes
-- a delete queue behind that settle instead of deadlocking with it.
SELECT id FROM job_fires WHERE job_id = (SELECT id FROM jobs WHERE name = :name)
ORDER BY id
FOR UPDATE;

-- name: finished_open_fires
-- Open fires whose task has ended (or vanished). The last run's outcome tells a timeout apart.
-- FOR UPDATE OF f SKIP LOCKED, unlike sqlite's (one writer at a time): every node's scheduler
-- settles fires, each fire then its job. Two of them reading at different moments saw
-- different fires of one job: one held a fire and waited for the job, the other held the job
-- and waited for that fire, a deadlock that cost one of them its pass. Locking the fires up
-- front and skipping those another scheduler holds leaves each fire to one settler.
SELECT f.id AS fire_id, t.state AS task_state, t.summary AS task_summary,
       coalesce(t.last_error, t.reason) AS task_error, t.finished_at AS task_finished_at,
       (SELECT min(r.claimed_at) FROM runs r WHERE r.task_id = t.id) AS started_at,
       (SELECT r.outcome FROM runs r WHERE r.task_id = t.id ORDER BY r.id DESC LIMIT 1)
           AS last_outcome
FROM job_fires f
LEFT JOIN tasks t ON t.id = f.task_id
WHERE f.status = 'open' AND (t.id IS NULL OR t.finished_at IS NOT NULL)
ORDER BY f.id
LIMIT :limit
FOR UPDATE OF f SKIP LOCKED;

