-- The dashboard's lists of tasks: any state, role, priority, node, job, text and finished
-- range, a page at a time (limit/offset: a person pages a few pages deep, and sorts).

-- name: filtered_tasks
-- The candidates are the open tasks in :state through the indexes that hold them only
-- (open_tasks_in_state), the finished ones in :state through the finished side of
-- tasks_clock (from :finished_from on), the one task :only_id by its key, or, with no :state,
-- the whole table: an arm not asked for reads nothing (its parameter-only test fails before
-- any row). The other filters are NULL-or-equal: they narrow the rows read, and the sort
-- blocks below stop after :limit of them. A node is any node that ran the task (looked up
-- per task through runs_task, so a page of a busy node stops early); a job, any fire that
-- made it. :pattern is lower-cased with %, _ and \ escaped by the caller; :text_id is the
-- text read as an id (a task's number matches as well as its title).
-- A text of three characters or more (:trigrams given) reads the tasks the dialect's trigram
-- index finds (tasks_with_text) in place of the whole table or every finished task of
-- :state; the LIKE below keeps the real matches. A shorter text has no trigram: it reads
-- the newest :short_scan tasks only (ids are given in order), so a search of one letter
-- stays bounded at a million tasks. The task :text_id names is read by its key, its own arm
-- (the others leave it out, so it is never listed twice).
SELECT * FROM (
    {open_tasks_in_state}
    UNION ALL
    SELECT * FROM tasks
    WHERE (CASE WHEN finished_at IS NULL THEN 1 ELSE 0 END) = 0 AND finished_at IS NOT NULL
      AND coalesce(finished_at, lease_expires_at)
          >= coalesce(CAST(:finished_from AS DOUBLE PRECISION), 0)
      AND CAST(:state AS TEXT) IN ('completed', 'dead', 'cancelled') AND state = :state
      AND CAST(:only_id AS BIGINT) IS NULL AND CAST(:trigrams AS TEXT) IS NULL
      AND (CAST(:pattern AS TEXT) IS NULL
           OR id > coalesce((SELECT max(id) FROM tasks), 0) - CAST(:short_scan AS BIGINT))
      AND id IS DISTINCT FROM CAST(:text_id AS BIGINT)
    UNION ALL
    SELECT * FROM tasks WHERE id = :only_id
      AND (CAST(:state AS TEXT) IS NULL
           OR CAST(:state AS TEXT) IN ('completed', 'dead', 'cancelled'))
    UNION ALL
    SELECT * FROM tasks WHERE CAST(:state AS TEXT) IS NULL AND CAST(:only_id AS BIGINT) IS NULL
      AND CAST(:trigrams AS TEXT) IS NULL
      AND (CAST(:pattern AS TEXT) IS NULL
           OR id > coalesce((SELECT max(id) FROM tasks), 0) - CAST(:short_scan AS BIGINT))
      AND id IS DISTINCT FROM CAST(:text_id AS BIGINT)
    UNION ALL
    SELECT * FROM ({tasks_with_text}) AS found
    WHERE CAST(:trigrams AS TEXT) IS NOT NULL AND CAST(:only_id AS BIGINT) IS NULL
      AND (CAST(:state AS TEXT) IS NULL
           OR CAST(:state AS TEXT) IN ('completed', 'dead', 'cancelled'))
      AND id IS DISTINCT FROM CAST(:text_id AS BIGINT)
    UNION ALL
    SELECT * FROM tasks WHERE id = :text_id AND CAST(:pattern AS TEXT) IS NOT NULL
      AND CAST(:only_id AS BIGINT) IS NULL
      AND (CAST(:state AS TEXT) IS NULL
           OR CAST(:state AS TEXT) IN ('completed', 'dead', 'cancelled'))
) AS candidates
WHERE (CAST(:state AS TEXT) IS NULL OR state = :state)
  AND (CAST(:only_id AS BIGINT) IS NULL OR id = :only_id)
  AND (CAST(:role AS TEXT) IS NULL OR role = :role)
  AND (CAST(:priority AS INTEGER) IS NULL OR priority = :priority)
  AND (CAST(:node AS TEXT) IS NULL
       OR EXISTS (SELECT 1 FROM runs WHERE runs.task_id = candidates.id AND runs.node = :node))
  AND (CAST(:job AS TEXT) IS NULL
       OR id IN (SELECT task_id FROM job_fires WHERE job_name = :job AND task_id IS NOT NULL))
  AND (CAST(:pattern AS TEXT) IS NULL OR id = CAST(:text_id AS BIGINT)
       OR lower(title) LIKE :pattern ESCAPE '\' OR lower(prompt) LIKE :pattern ESCAPE '\')
  AND (CAST(:finished_from AS DOUBLE PRECISION) IS NULL OR finished_at >= :finished_from)
  AND (CAST(:finished_to AS DOUBLE PRECISION) IS NULL OR finished_at < :finished_to)

-- name: filter_tasks_newest
SELECT * FROM ({filtered_tasks}) AS found ORDER BY id DESC LIMIT :limit OFFSET :offset;

-- name: filter_tasks_oldest
SELECT * FROM ({filtered_tasks}) AS found ORDER BY id LIMIT :limit OFFSET :offset;

-- name: filter_tasks_priority
SELECT * FROM ({filtered_tasks}) AS found ORDER BY priority, id LIMIT :limit OFFSET :offset;

-- name: count_filtered_tasks
-- How many match, counted up to :cap: past it the page says "more than", rather than read a
-- million rows to print one number.
SELECT count(*) AS n FROM (SELECT id FROM ({filtered_tasks}) AS found LIMIT :cap) AS capped;

-- name: set_task_priority
-- A person's change of an open task's priority (a finished one has no queue place left).
-- The ready index is (priority, id): the task takes its place in the new priority at once.
UPDATE tasks SET priority = :priority, updated_at = :now
WHERE id = :task_id AND finished_at IS NULL
RETURNING *;
