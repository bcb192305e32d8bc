-- Agents act on their own run with a credential, never with the database: only the token's
-- sha256 is kept, so a copy of the database (a backup, a leaked file) holds no usable token.
CREATE TABLE run_credentials (
    token_sha256 TEXT    PRIMARY KEY,
    run_id       INTEGER NOT NULL UNIQUE REFERENCES runs (id) ON DELETE CASCADE,
    created_at   REAL    NOT NULL
);
