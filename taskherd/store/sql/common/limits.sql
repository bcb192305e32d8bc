-- Named SQL blocks of a claim within limits counted across every node (taskherd/policy/limits.py).
-- The claim runs them in one transaction: pick a candidate, order the claims (PostgreSQL's
-- advisory lock; SQLite's write lock is already held), count, then claim it or pass it by.
-- claim_candidate differs by dialect as claim_next does, and lives beside it.

-- name: claim_task
-- The candidate, claimed. `state = 'ready'` again: on PostgreSQL the candidate's row is
-- locked, so this always holds there; it is the guard that makes the claim safe regardless.
UPDATE tasks
SET state = 'claimed', lease_node = :node, lease_expires_at = :lease_until, updated_at = :now
WHERE id = :id AND state = 'ready'
RETURNING *;

-- name: limit_usage
-- What the limits of one candidate count, read after the claims were ordered so that every
-- claim committed before this one is seen: the role's open runs and latest claim (on one node
-- when its scope is node, :role_node), the open runs in up to two pools (the role's and the
-- task's; NULL matches nothing) with their own node filters, and the runtime's cooldown.
-- An open run holds its place until it ends, on whatever node, live or not: an agent on a
-- node that went silent may still be working, until the node is declared down.
-- A pool that is NULL is not counted at all (the constant test skips the scan), and the role's
-- runs are a range of runs_open: a claim costs the same with a thousand agents running.
SELECT
    (SELECT count(*) FROM runs
     WHERE ended_at IS NULL AND role = :role
       AND (CAST(:role_node AS TEXT) IS NULL OR node = :role_node)) AS role_running,
    (SELECT max(claimed_at) FROM role_claims
     WHERE role = :role
       AND (CAST(:role_node AS TEXT) IS NULL OR node = :role_node)) AS role_last_claim,
    (SELECT count(*) FROM runs JOIN tasks ON tasks.id = runs.task_id
     WHERE CAST(:pool_a AS TEXT) IS NOT NULL
       AND runs.ended_at IS NULL AND (runs.pool = :pool_a OR tasks.pool = :pool_a)
       AND (CAST(:pool_a_node AS TEXT) IS NULL OR runs.node = :pool_a_node)) AS pool_a_running,
    (SELECT count(*) FROM runs JOIN tasks ON tasks.id = runs.task_id
     WHERE CAST(:pool_b AS TEXT) IS NOT NULL
       AND runs.ended_at IS NULL AND (runs.pool = :pool_b OR tasks.pool = :pool_b)
       AND (CAST(:pool_b_node AS TEXT) IS NULL OR runs.node = :pool_b_node)) AS pool_b_running,
    (SELECT until FROM cooldowns WHERE runtime = :runtime AND until > :now) AS cooldown_until;

-- name: note_role_claim
-- A staggered role's latest claim on this node: the next one, here or anywhere, waits for it.
INSERT INTO role_claims (role, node, claimed_at) VALUES (:role, :node, :now)
ON CONFLICT (role, node) DO UPDATE SET claimed_at = excluded.claimed_at;
