-- Named SQL blocks of run credentials: the token an agent holds instead of the database.

-- name: issue_run_credential
-- A token that names no run (`<run_id>.<secret>` is on the run's row: note_run_credential).
INSERT INTO run_credentials (token_sha256, run_id, created_at)
VALUES (:token_sha256, :run_id, :now);

-- name: open_run_of_credential
-- A credential dies with its run: an ended run's token matches nothing.
SELECT runs.*
FROM run_credentials JOIN runs ON runs.id = run_credentials.run_id
WHERE run_credentials.token_sha256 = :token_sha256 AND runs.ended_at IS NULL;

-- name: note_run_credential
-- The digest of the secret of a credential that names its run (`<run_id>.<secret>`), on
-- the run's row: in a claim, the row it has just inserted (the same page, no index of its
-- own).
UPDATE runs SET credential_sha256 = :token_sha256 WHERE id = :run_id;

-- name: open_run_named
-- The open run a credential names, by its key; its digest is compared by the caller.
SELECT * FROM runs WHERE id = :run_id AND ended_at IS NULL;

-- name: record_reported_usage
-- What a command agent says it spent; a runtime that measures usage itself overrides it at
-- the end of the run. An unknown figure stays NULL: "unknown" is not "$0".
UPDATE runs
SET cost_usd = coalesce(:cost_usd, cost_usd),
    input_tokens = coalesce(:input_tokens, input_tokens),
    output_tokens = coalesce(:output_tokens, output_tokens)
WHERE id = :run_id AND ended_at IS NULL
RETURNING id;
