-- Named SQL blocks of API tokens: what people and peers hold to use the HTTP API.

-- name: insert_api_token
INSERT INTO api_tokens (name, scope, token_sha256, roles, rate_per_minute, created_at,
                        expires_at)
VALUES (:name, :scope, :token_sha256, :roles, :rate_per_minute, :now, :expires_at)
RETURNING *;

-- name: list_api_tokens
SELECT * FROM api_tokens ORDER BY name;

-- name: api_token_by_name
SELECT * FROM api_tokens WHERE name = :name;

-- name: live_api_token
-- A revoked or expired token matches nothing.
SELECT * FROM api_tokens
WHERE token_sha256 = :token_sha256 AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > :now);

-- name: revoke_api_token
UPDATE api_tokens SET revoked_at = :now
WHERE name = :name AND revoked_at IS NULL
RETURNING *;

-- name: live_admin_tokens
-- Read before a revoke, which refuses to take the last one (an API nobody can manage).
-- PostgreSQL's locks them (its own block): two revokes at once cannot each leave the other's;
-- SQLite's write transaction already holds the whole database.
SELECT name FROM api_tokens
WHERE scope = 'admin' AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > :now)
ORDER BY id;
