-- The dashboard's lists of tasks: any state, role, priority, node, job, text and finished
-- range, a page at a time (limit/offset: a person pages a few pages deep, and sorts).

-- name: filtered_tasks
-- The candidates are the open tasks in :state through the indexes that hold them only
-- (open_tasks_in_state), the finished ones in :state through the finished side of
-- tasks_queue (from :finished_from on), the one task :only_id by its key, or, with no :state,
-- the whole table: an arm not asked for reads nothing (its parameter-only test fails before
-- any row). The other filters are NULL-or-equal: they narrow the rows read, and the sort
-- blocks below stop after :limit of them. A node is any node that ran the task (looked up
-- per task through runs_task, so a page of a busy node stops early); a job, any fire that
-- made it. :pattern is lower-cased with %, _ and \ escaped by the caller; :text_id is the
-- text read as an id (a task's number matches as well as its title).
-- A text of three characters or more is looked up in the trigram index instead
-- (search_tasks_*), unless the state is open (its own small index). A shorter one has no trigram:
-- with :short_scan given, the whole table and a finished state are read over the newest
-- :short_scan tasks only (ids are given in order; a range on the key, which NULL opens to
-- every id), so a search of one letter stays bounded at a million tasks; the task :text_id
-- names is then read by its key, in an arm of its own (the bounded arms leave it out, so it
-- is never listed twice).
SELECT * FROM (
    {open_tasks_in_state}
    UNION ALL
    SELECT * FROM tasks
    WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 0 AND finished_at IS NOT NULL
      AND coalesce(finished_at, lease_expires_at, priority)
          >= coalesce(CAST(:finished_from AS DOUBLE PRECISION), 0)
      AND CAST(:state AS TEXT) IN ('completed', 'dead', 'cancelled') AND state = :state
      AND CAST(:only_id AS BIGINT) IS NULL
      AND id > coalesce((SELECT max(id) FROM tasks) - CAST(:short_scan AS BIGINT), 0)
      AND (CAST(:short_scan AS BIGINT) IS NULL OR id IS DISTINCT FROM CAST(:text_id AS BIGINT))
    UNION ALL
    SELECT * FROM tasks WHERE id = :only_id
      AND (CAST(:state AS TEXT) IS NULL
           OR CAST(:state AS TEXT) IN ('completed', 'dead', 'cancelled'))
    UNION ALL
    SELECT * FROM tasks WHERE CAST(:state AS TEXT) IS NULL AND CAST(:only_id AS BIGINT) IS NULL
      AND id > coalesce((SELECT max(id) FROM tasks) - CAST(:short_scan AS BIGINT), 0)
      AND (CAST(:short_scan AS BIGINT) IS NULL OR id IS DISTINCT FROM CAST(:text_id AS BIGINT))
    UNION ALL
    SELECT * FROM tasks WHERE id = :text_id AND CAST(:short_scan AS BIGINT) IS NOT NULL
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

-- name: searched_tasks
-- The tasks holding a text of three characters or more, as filtered_tasks' filters would
-- list them, from the dialect's trigram index (tasks_with_text: candidates in id order).
-- The LIKE keeps the real matches (SQLite's index keeps no positions). The sort blocks order
-- by matched.id, the index's own order: SQLite then reads the index newest (or oldest)
-- first and stops after a page, where ordering by tasks.id would read and sort every match
-- of a common word first (seconds at a million tasks).
-- CROSS JOIN: SQLite keeps the index as the outer loop (PostgreSQL plans it as any join).
SELECT tasks.* FROM ({tasks_with_text}) AS matched CROSS JOIN tasks
WHERE tasks.id = matched.id
  AND (CAST(:state AS TEXT) IS NULL OR tasks.state = :state)
  AND (CAST(:role AS TEXT) IS NULL OR tasks.role = :role)
  AND (CAST(:priority AS INTEGER) IS NULL OR tasks.priority = :priority)
  AND (CAST(:node AS TEXT) IS NULL
       OR EXISTS (SELECT 1 FROM runs WHERE runs.task_id = tasks.id AND runs.node = :node))
  AND (CAST(:job AS TEXT) IS NULL
       OR tasks.id IN (SELECT task_id FROM job_fires
                       WHERE job_name = :job AND task_id IS NOT NULL))
  AND (lower(tasks.title) LIKE :pattern ESCAPE '\' OR lower(tasks.prompt) LIKE :pattern ESCAPE '\')
  AND (CAST(:finished_from AS DOUBLE PRECISION) IS NULL OR tasks.finished_at >= :finished_from)
  AND (CAST(:finished_to AS DOUBLE PRECISION) IS NULL OR tasks.finished_at < :finished_to)

-- name: searched_tail
-- The same list over the tasks the index does not hold yet (tasks_not_indexed: SQLite's
-- newest, added since its indexer's last pass; none in PostgreSQL), each read by its key and
-- checked by the LIKE. Its filters are searched_tasks' own, word for word (a test holds them
-- so). A block apart, not a UNION ALL inside tasks_with_text: SQLite would then sort every
-- match of a common word to find a page (it cannot tell a compound's rows come in order).
SELECT tasks.* FROM ({tasks_not_indexed}) AS matched CROSS JOIN tasks
WHERE tasks.id = matched.id
  AND (CAST(:state AS TEXT) IS NULL OR tasks.state = :state)
  AND (CAST(:role AS TEXT) IS NULL OR tasks.role = :role)
  AND (CAST(:priority AS INTEGER) IS NULL OR tasks.priority = :priority)
  AND (CAST(:node AS TEXT) IS NULL
       OR EXISTS (SELECT 1 FROM runs WHERE runs.task_id = tasks.id AND runs.node = :node))
  AND (CAST(:job AS TEXT) IS NULL
       OR tasks.id IN (SELECT task_id FROM job_fires
                       WHERE job_name = :job AND task_id IS NOT NULL))
  AND (lower(tasks.title) LIKE :pattern ESCAPE '\' OR lower(tasks.prompt) LIKE :pattern ESCAPE '\')
  AND (CAST(:finished_from AS DOUBLE PRECISION) IS NULL OR tasks.finished_at >= :finished_from)
  AND (CAST(:finished_to AS DOUBLE PRECISION) IS NULL OR tasks.finished_at < :finished_to)

-- name: search_tasks_newest
-- A page of the index's matches and the tail's, in one statement (one snapshot: a task the
-- indexer moves meanwhile is read once). Each side stops after :window (limit + offset) rows
-- in its own order; the page is cut from the two, at most 2 × :window rows sorted.
SELECT * FROM ({searched_tasks} ORDER BY matched.id DESC LIMIT :window) AS indexed
UNION ALL
SELECT * FROM ({searched_tail} ORDER BY matched.id DESC LIMIT :window) AS tail
ORDER BY id DESC LIMIT :limit OFFSET :offset;

-- name: search_tasks_oldest
SELECT * FROM ({searched_tasks} ORDER BY matched.id LIMIT :window) AS indexed
UNION ALL
SELECT * FROM ({searched_tail} ORDER BY matched.id LIMIT :window) AS tail
ORDER BY id LIMIT :limit OFFSET :offset;

-- name: count_searched_tasks
SELECT count(*) AS n FROM (
    SELECT id FROM ({searched_tasks} LIMIT :cap) AS indexed
    UNION ALL
    SELECT id FROM ({searched_tail} LIMIT :cap) AS tail
    LIMIT :cap
) AS capped;

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
