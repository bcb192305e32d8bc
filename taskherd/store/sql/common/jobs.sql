-- Named SQL blocks of jobs that read the same in every dialect.
-- A dialect's folder overrides a block by defining the same name, with the reason above it.
-- A parameter that is only tested for NULL is cast (`CAST(:x AS TEXT) IS NULL`): PostgreSQL
-- must know each parameter's type when it plans a statement ("could not determine data type
-- of parameter" otherwise), and SQLite reads the cast as a no-op on a text or NULL value.

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

-- name: settle_job_fire
UPDATE job_fires
SET status = :status, duration = :duration, summary = :summary, error = :error,
    finished_at = :now
WHERE id = :id AND status = 'open'
RETURNING *;

-- name: get_job_fire
SELECT * FROM job_fires WHERE id = :id;

-- name: prune_job_fires
DELETE FROM job_fires WHERE finished_at IS NOT NULL AND finished_at < :before;

-- name: claim_job_fire
-- The fire claim: compare-and-set on next_run_at (plus the row version, so a plan made from
-- any stale column loses). Zero rows changed: another scheduler fired it, or the job changed.
-- With several nodes (PostgreSQL), a second scheduler's UPDATE waits for the first's row lock, then
-- re-checks this WHERE against the committed row: the bumped version makes it change nothing.
UPDATE jobs
SET next_run_at = :next_run_at, schedule_at = :schedule_at, backoff_until = :backoff_until,
    failures = :failures, variant_cursor = :variant_cursor, queued = :queued,
    run_now_at = :run_now_at, retry_at = :retry_at, retry_of = :retry_of,
    retry_count = :retry_count, enabled = :enabled, version = version + 1, updated_at = :now
WHERE id = :id AND next_run_at = :expected AND version = :version AND enabled = 1;

-- name: list_job_fires
SELECT * FROM job_fires
WHERE (CAST(:job_name AS TEXT) IS NULL OR job_name = :job_name)
  AND (CAST(:status AS TEXT) IS NULL OR status = :status)
ORDER BY id DESC
LIMIT :limit;

-- name: list_jobs
SELECT * FROM job_rows
WHERE (CAST(:source AS TEXT) IS NULL OR source = :source)
  AND (CAST(:enabled AS INTEGER) IS NULL OR enabled = :enabled)
ORDER BY name;

-- name: runs_of_job
SELECT r.* FROM runs r JOIN job_fires f ON f.task_id = r.task_id
WHERE f.job_name = :job_name AND (CAST(:since AS DOUBLE PRECISION) IS NULL OR r.claimed_at >= :since)
ORDER BY r.id DESC
LIMIT :limit;

-- name: release_queued_fire
-- overlap = queue: the oldest held fire of the job gets its task now (status open), or ends
-- now when that task could not be made (error, or skipped for an open duplicate).
-- The outer `status = 'queued'` matters to PostgreSQL (SQLite runs one writer at a time): a
-- release that waited for another's row lock re-checks the fire it picked, so it cannot hand
-- a second task to a fire the other transaction already released.
UPDATE job_fires
SET status = :status, task_id = :task_id, fired_at = :now, variant = :variant, error = :error,
    finished_at = :finished_at
WHERE id = (SELECT id FROM job_fires WHERE job_id = :job_id AND status = 'queued'
            ORDER BY id LIMIT 1)
  AND status = 'queued'
RETURNING *;

-- name: chained_jobs
-- Jobs that follow another (their template holds an `after` link): a settled fire looks for
-- its job's children among them. The LIKE keeps most jobs out before any JSON is parsed.
SELECT * FROM job_rows WHERE enabled = 1 AND template LIKE '%"after"%' ORDER BY name;

-- name: open_tasks_of_job
SELECT tasks.* FROM tasks JOIN job_fires ON job_fires.task_id = tasks.id
WHERE job_fires.job_name = :job_name AND tasks.finished_at IS NULL
ORDER BY tasks.id;
