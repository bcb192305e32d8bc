-- Named statements of the job store (taskherd/store/sqlite_jobs.py). Same rules as queries.sql.

-- name: get_job_by_name
-- The job row as callers see it: open_fires (tasks of this job not finished), the variant
-- of the fire a pending retry repeats and the planned time of the held fire a release would
-- hand its task to ride along, so the scheduler plans from one read. release_for is looked up
-- only when a release can happen (fires held, none open): finding the oldest held fire walks
-- the job's fire history, as release_queued_fire does once more when it releases it.
SELECT j.*,
       (SELECT count(*) FROM job_fires f WHERE f.job_id = j.id AND f.status = 'open') AS open_fires,
       (SELECT max(f.task_id) FROM job_fires f WHERE f.job_id = j.id AND f.status = 'open')
           AS open_task_id,
       (SELECT f.variant FROM job_fires f WHERE f.id = j.retry_of) AS retry_variant,
       CASE WHEN j.queued > 0 AND NOT EXISTS (SELECT 1 FROM job_fires o
                                              WHERE o.job_id = j.id AND o.status = 'open')
            THEN (SELECT f.scheduled_for FROM job_fires f
                  WHERE f.job_id = j.id AND f.status = 'queued' ORDER BY f.id LIMIT 1)
       END AS release_for
FROM jobs j WHERE j.name = :name;

-- name: get_job_by_id
SELECT j.*,
       (SELECT count(*) FROM job_fires f WHERE f.job_id = j.id AND f.status = 'open') AS open_fires,
       (SELECT max(f.task_id) FROM job_fires f WHERE f.job_id = j.id AND f.status = 'open')
           AS open_task_id,
       (SELECT f.variant FROM job_fires f WHERE f.id = j.retry_of) AS retry_variant,
       CASE WHEN j.queued > 0 AND NOT EXISTS (SELECT 1 FROM job_fires o
                                              WHERE o.job_id = j.id AND o.status = 'open')
            THEN (SELECT f.scheduled_for FROM job_fires f
                  WHERE f.job_id = j.id AND f.status = 'queued' ORDER BY f.id LIMIT 1)
       END AS release_for
FROM jobs j WHERE j.id = :id;

-- name: list_jobs
SELECT j.*,
       (SELECT count(*) FROM job_fires f WHERE f.job_id = j.id AND f.status = 'open') AS open_fires,
       (SELECT max(f.task_id) FROM job_fires f WHERE f.job_id = j.id AND f.status = 'open')
           AS open_task_id,
       (SELECT f.variant FROM job_fires f WHERE f.id = j.retry_of) AS retry_variant,
       CASE WHEN j.queued > 0 AND NOT EXISTS (SELECT 1 FROM job_fires o
                                              WHERE o.job_id = j.id AND o.status = 'open')
            THEN (SELECT f.scheduled_for FROM job_fires f
                  WHERE f.job_id = j.id AND f.status = 'queued' ORDER BY f.id LIMIT 1)
       END AS release_for
FROM jobs j
WHERE (:source IS NULL OR j.source = :source)
  AND (:enabled IS NULL OR j.enabled = :enabled)
ORDER BY j.name;

-- name: due_jobs
-- Walks jobs_due from its low end and stops at :now: with 100,000 jobs and none due it reads
-- one index entry. INDEXED BY keeps the planner from a full scan before ANALYZE has run.
SELECT j.*,
       (SELECT count(*) FROM job_fires f WHERE f.job_id = j.id AND f.status = 'open') AS open_fires,
       (SELECT max(f.task_id) FROM job_fires f WHERE f.job_id = j.id AND f.status = 'open')
           AS open_task_id,
       (SELECT f.variant FROM job_fires f WHERE f.id = j.retry_of) AS retry_variant,
       CASE WHEN j.queued > 0 AND NOT EXISTS (SELECT 1 FROM job_fires o
                                              WHERE o.job_id = j.id AND o.status = 'open')
            THEN (SELECT f.scheduled_for FROM job_fires f
                  WHERE f.job_id = j.id AND f.status = 'queued' ORDER BY f.id LIMIT 1)
       END AS release_for
FROM jobs j INDEXED BY jobs_due
WHERE j.enabled = 1 AND j.next_run_at <= :now
ORDER BY j.next_run_at
LIMIT :limit;

-- name: earliest_next_run
SELECT min(next_run_at) AS earliest FROM jobs INDEXED BY jobs_due WHERE enabled = 1;

-- name: insert_job
INSERT INTO jobs (name, template, trigger_spec, timezone, overlap, missed_fire, max_retries,
                  enabled, source, delete_after_run, next_run_at, schedule_at, created_at,
                  updated_at)
VALUES (:name, :template, :trigger_spec, :timezone, :overlap, :missed_fire, :max_retries,
        :enabled, :source, :delete_after_run, :next_run_at, :schedule_at, :now, :now);

-- name: update_job_definition
UPDATE jobs
SET template = :template, trigger_spec = :trigger_spec, timezone = :timezone,
    overlap = :overlap, missed_fire = :missed_fire, max_retries = :max_retries,
    enabled = :enabled, delete_after_run = :delete_after_run, schedule_at = :schedule_at,
    next_run_at = :next_run_at, version = version + 1, updated_at = :now
WHERE id = :id;

-- name: write_job_state
-- Used inside a write transaction right after reading the row, so the version always matches;
-- the guard is there so a caller that forgot to re-read fails loudly instead of clobbering.
UPDATE jobs
SET next_run_at = :next_run_at, schedule_at = :schedule_at, backoff_until = :backoff_until,
    failures = :failures, variant_cursor = :variant_cursor, queued = :queued,
    run_now_at = :run_now_at, retry_at = :retry_at, retry_of = :retry_of,
    retry_count = :retry_count, enabled = :enabled, version = version + 1, updated_at = :now
WHERE id = :id AND version = :version;

-- name: claim_job_fire
-- The fire claim: compare-and-set on next_run_at (plus the row version, so a plan made from
-- any stale column loses). Zero rows changed: another scheduler fired it, or the job changed.
UPDATE jobs
SET next_run_at = :next_run_at, schedule_at = :schedule_at, backoff_until = :backoff_until,
    failures = :failures, variant_cursor = :variant_cursor, queued = :queued,
    run_now_at = :run_now_at, retry_at = :retry_at, retry_of = :retry_of,
    retry_count = :retry_count, enabled = :enabled, version = version + 1, updated_at = :now
WHERE id = :id AND next_run_at = :expected AND version = :version AND enabled = 1;

-- name: lock_fires_of_job
-- PostgreSQL takes row locks here (see its file); SQLite's write transaction already holds
-- the whole database, so this only reads.
SELECT id FROM job_fires WHERE job_id = (SELECT id FROM jobs WHERE name = :name);

-- name: delete_job
DELETE FROM jobs WHERE id = :id;

-- name: skip_queued_fires
-- A deleted job's held fires will never be released: end them, or they stay 'queued' forever.
UPDATE job_fires SET status = 'skipped', error = :error, finished_at = :now
WHERE job_id = :job_id AND status = 'queued';

-- name: insert_job_fire
INSERT INTO job_fires (job_id, job_name, scheduled_for, fired_at, kind, status, task_id,
                       retry_of, retry_count, variant, error, finished_at)
VALUES (:job_id, :job_name, :scheduled_for, :now, :kind, :status, :task_id, :retry_of,
        :retry_count, :variant, :error, :finished_at)
RETURNING *;

-- name: release_queued_fire
-- overlap = queue: the oldest held fire of the job gets its task now (status open), or ends
-- now when that task could not be made (error, or skipped for an open duplicate).
UPDATE job_fires
SET status = :status, task_id = :task_id, fired_at = :now, variant = :variant, error = :error,
    finished_at = :finished_at
WHERE id = (SELECT id FROM job_fires WHERE job_id = :job_id AND status = 'queued'
            ORDER BY id LIMIT 1)
RETURNING *;

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

-- name: settle_job_fire
UPDATE job_fires
SET status = :status, duration = :duration, summary = :summary, error = :error,
    finished_at = :now
WHERE id = :id AND status = 'open'
RETURNING *;

-- name: get_job_fire
SELECT * FROM job_fires WHERE id = :id;

-- name: list_job_fires
SELECT * FROM job_fires
WHERE (:job_name IS NULL OR job_name = :job_name)
  AND (:status IS NULL OR status = :status)
ORDER BY id DESC
LIMIT :limit;

-- name: runs_of_job
SELECT r.* FROM runs r JOIN job_fires f ON f.task_id = r.task_id
WHERE f.job_name = :job_name AND (:since IS NULL OR r.claimed_at >= :since)
ORDER BY r.id DESC
LIMIT :limit;

-- name: prune_job_fires
DELETE FROM job_fires WHERE finished_at IS NOT NULL AND finished_at < :before;
