-- Named SQL blocks of delivery targets and their outbox (store/sql_delivery.py).

-- name: add_alias
INSERT INTO delivery_aliases (name, channel, target, format, description, created_at)
VALUES (:name, :channel, :target, :format, :description, :now)
RETURNING *;

-- name: get_alias
SELECT * FROM delivery_aliases WHERE name = :name;

-- name: list_aliases
SELECT * FROM delivery_aliases ORDER BY name;

-- name: remove_alias
DELETE FROM delivery_aliases WHERE name = :name;

-- name: insert_delivery
INSERT INTO deliveries (alias, event, task_id, payload, next_attempt_at, created_at)
VALUES (:alias, :event, :task_id, :payload, :now, :now);

-- name: due_deliveries
SELECT * FROM deliveries
WHERE state = 'pending' AND next_attempt_at <= :now
ORDER BY next_attempt_at, id
LIMIT :limit;

-- name: take_delivery
-- An attempt is taken before it is made: its next try moves past the sending time, so
-- another node (or the next pass) does not send it at the same moment. A daemon killed
-- while sending leaves it to be tried again once that time passes.
UPDATE deliveries SET attempts = attempts + 1, next_attempt_at = :retry_at
WHERE id = :id AND state = 'pending' AND attempts = :attempts
RETURNING *;

-- name: delivery_sent
UPDATE deliveries SET state = 'sent', sent_at = :now, last_error = NULL
WHERE id = :id AND state = 'pending';

-- name: delivery_failed
-- :state is 'pending' (tried again at :retry_at) or 'failed' (its attempts are spent).
UPDATE deliveries SET state = CAST(:state AS TEXT), next_attempt_at = :retry_at, last_error = :error
WHERE id = :id AND state = 'pending';

-- name: get_delivery
SELECT * FROM deliveries WHERE id = :id;

-- name: retry_deliveries
-- A failed row (:id, or every one when :id is NULL) is due again with its attempts counted
-- afresh (`taskherd alias retry`); its last error stays until the next attempt's.
UPDATE deliveries SET state = 'pending', attempts = 0, next_attempt_at = :now
WHERE state = 'failed' AND (CAST(:id AS BIGINT) IS NULL OR id = :id);

-- name: list_deliveries
SELECT * FROM deliveries
WHERE (CAST(:alias AS TEXT) IS NULL OR alias = :alias)
  AND (CAST(:state AS TEXT) IS NULL OR state = :state)
ORDER BY id DESC
LIMIT :limit;

-- name: delivery_counts
SELECT alias, state, count(*) AS n FROM deliveries GROUP BY alias, state ORDER BY alias, state;

-- name: prune_deliveries
DELETE FROM deliveries WHERE state <> 'pending' AND created_at < :before;
