-- Jobs an agent's run asked for with a spawn message. They count, with the tasks the run
-- added, against its [monitor] max_spawn (children_since). No foreign key: a job deleted
-- later was still spawned by that run, and still counts.
CREATE TABLE spawned_jobs (
    job_id     bigint           PRIMARY KEY,
    task_id    bigint           NOT NULL,  -- the task whose run sent the request
    created_at double precision NOT NULL
);
CREATE INDEX spawned_jobs_by_task ON spawned_jobs (task_id, created_at);
