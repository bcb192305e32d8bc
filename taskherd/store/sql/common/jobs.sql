-- Named SQL blocks of jobs that read the same in every dialect.
-- A dialect's folder overrides a block by defining the same name, with the reason above it.

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
