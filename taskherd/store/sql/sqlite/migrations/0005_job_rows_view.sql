-- The job row as callers see it, in one place for every statement that reads jobs:
-- open_fires (tasks of this job not finished), the variant of the fire a pending retry
-- repeats, and the planned time of the held fire a release would hand its task, so the
-- scheduler plans from one read. release_for is looked up only when a release can happen
-- (fires held, none open): finding the oldest held fire walks the job's fire history.
-- SQLite expands j.* each time the view is read, so columns added to jobs later appear here.
CREATE VIEW job_rows AS
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
FROM jobs j;
