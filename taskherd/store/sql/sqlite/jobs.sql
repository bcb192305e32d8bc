-- Named statements of the job store (taskherd/store/sql_jobs.py). Same rules as queries.sql.

-- name: get_job_by_name
-- job_rows (migration 0005): the job with what the scheduler plans from.
SELECT * FROM job_rows WHERE name = :name;

-- name: get_job_by_id
SELECT * FROM job_rows WHERE id = :id;

-- name: due_jobs
-- Walks jobs_due from its low end and stops at :now: with 100,000 jobs and none due it reads
-- one index entry. INDEXED BY keeps the planner from a full scan before ANALYZE has run; a
-- view takes no INDEXED BY, so the due ids are found in jobs itself.
SELECT * FROM job_rows
WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_due
             WHERE enabled = 1 AND next_run_at <= :now
             ORDER BY next_run_at LIMIT :limit)
ORDER BY next_run_at;

-- name: earliest_next_run
SELECT min(next_run_at) AS earliest FROM jobs INDEXED BY jobs_due WHERE enabled = 1;

-- name: lock_fires_of_job
-- PostgreSQL takes row locks here (see its file); SQLite's write transaction already holds
-- the whole database, so this only reads.
SELECT id FROM job_fires WHERE job_id = (SELECT id FROM jobs WHERE name = :name);

-- name: finished_open_fires
-- Open fires whose task has ended (or vanished). The last run's outcome tells a timeout apart.
SELECT f.id AS fire_id, t.state AS task_state, t.summary AS task_summary,
       coalesce(t.last_error, t.reason) AS task_error, t.finished_at AS task_finished_at,
       (SELECT min(r.claimed_at) FROM runs r WHERE r.task_id = t.id) AS started_at,
       (SELECT r.outcome FROM runs r WHERE r.task_id = t.id ORDER BY r.id DESC LIMIT 1)
           AS last_outcome
FROM job_fires f INDEXED BY job_fires_open
LEFT JOIN tasks t ON t.id = f.task_id
WHERE f.status = 'open' AND (t.id IS NULL OR t.finished_at IS NOT NULL)
ORDER BY f.id
LIMIT :limit;

