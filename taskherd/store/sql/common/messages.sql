-- Named SQL blocks of messages between agents and people (store/sql_messages.py).

-- name: insert_message
INSERT INTO messages (sender, sender_role, sender_run_id, recipient, kind, priority, body,
                      reply_to, thread_id, created_at, expires_at)
VALUES (:sender, :sender_role, :sender_run_id, :recipient, :kind, :priority, :body,
        :reply_to, :thread_id, :now, :expires_at)
RETURNING *;

-- name: get_message
SELECT * FROM messages WHERE id = :id;

-- name: undelivered_for_run
-- What a starting run of a role receives: its role's messages and its task's, urgent first,
-- then oldest first. Each half walks messages_undelivered in index order and stops at
-- :limit, so 10,000 waiting messages cost what 20 do.
SELECT * FROM (
    SELECT * FROM messages
    WHERE recipient = :role AND delivered_at IS NULL AND read_at IS NULL
      AND (expires_at IS NULL OR expires_at > :now)
    ORDER BY priority DESC, id LIMIT :limit
) AS for_role
UNION ALL
SELECT * FROM (
    SELECT * FROM messages
    WHERE recipient = :task_address AND delivered_at IS NULL AND read_at IS NULL
      AND (expires_at IS NULL OR expires_at > :now)
    ORDER BY priority DESC, id LIMIT :limit
) AS for_task
ORDER BY priority DESC, id
LIMIT :limit;

-- name: mark_message_delivered
-- Guarded: on PostgreSQL two nodes starting runs of one role may pick the same message; the
-- second finds it delivered and leaves it to the first.
UPDATE messages SET delivered_at = :now, delivered_run_id = :run_id
WHERE id = :id AND delivered_at IS NULL AND read_at IS NULL
RETURNING *;

-- name: unread_messages
-- An inbox: unread and unexpired, urgent first, then oldest first.
SELECT * FROM messages
WHERE recipient IN (:recipient, :also) AND read_at IS NULL
  AND (expires_at IS NULL OR expires_at > :now)
ORDER BY priority DESC, id
LIMIT :limit;

-- name: count_unread_messages
SELECT count(*) AS n FROM messages
WHERE recipient = :recipient AND read_at IS NULL
  AND (expires_at IS NULL OR expires_at > :now);

-- name: sent_messages
SELECT * FROM messages
WHERE sender = :sender OR sender_role = :sender
ORDER BY id DESC
LIMIT :limit;

-- name: message_thread
SELECT * FROM messages WHERE id = :root OR thread_id = :root ORDER BY id;

-- name: mark_message_read
UPDATE messages SET read_at = :now WHERE id = :id AND read_at IS NULL RETURNING *;

-- name: mark_all_messages_read
UPDATE messages SET read_at = :now WHERE recipient = :recipient AND read_at IS NULL;

-- name: ready_tasks_of_role
-- The ready side of tasks_queue (migration 0036), by its own expression, holds the role.
SELECT count(*) AS n FROM tasks WHERE (CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1 WHEN state = 'ready' THEN 2 ELSE 3 END) = 2 AND role = :role AND state = 'ready';

-- name: prune_messages
-- Pruned with history: read, delivered into a prompt, or expired before :before. A message
-- nobody has received yet is kept, however old: nothing is lost unread.
DELETE FROM messages
WHERE created_at < :before
  AND (read_at IS NOT NULL OR delivered_at IS NOT NULL
       OR (expires_at IS NOT NULL AND expires_at < :before));
