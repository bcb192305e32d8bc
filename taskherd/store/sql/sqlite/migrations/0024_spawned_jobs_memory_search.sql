-- Jobs an agent's run asked for with a spawn message. They count, with the tasks the run
-- added, against its [monitor] max_spawn (children_since). No foreign key: a job deleted
-- later was still spawned by that run, and still counts.
CREATE TABLE spawned_jobs (
    job_id     INTEGER PRIMARY KEY,
    task_id    INTEGER NOT NULL,  -- the task whose run sent the request
    created_at REAL    NOT NULL
);
CREATE INDEX spawned_jobs_by_task ON spawned_jobs (task_id, created_at);

-- (Memory search: nothing to change here. FTS5 keeps each entry's terms and sizes in its
-- index, so ranking reads no text; PostgreSQL gets the same in this migration.)
