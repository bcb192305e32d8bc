-- Named SQL blocks of run credentials: the token an agent holds instead of the database.

-- name: issue_run_credential
INSERT INTO run_credentials (token_sha256, run_id, created_at)
VALUES (:token_sha256, :run_id, :now);

-- name: open_run_of_credential
-- A credential dies with its run: an ended run's token matches nothing.
SELECT runs.*
FROM run_credentials JOIN runs ON runs.id = run_credentials.run_id
WHERE run_credentials.token_sha256 = :token_sha256 AND runs.ended_at IS NULL;

-- name: record_reported_usage
-- What a command agent says it spent; a runtime that measures usage itself overrides it at
-- the end of the run. An unknown figure stays NULL: "unknown" is not "$0".
UPDATE runs
SET cost_usd = coalesce(:cost_usd, cost_usd),
    input_tokens = coalesce(:input_tokens, input_tokens),
    output_tokens = coalesce(:output_tokens, output_tokens)
WHERE id = :run_id AND ended_at IS NULL
RETURNING id;
