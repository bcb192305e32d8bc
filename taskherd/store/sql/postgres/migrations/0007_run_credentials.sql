-- Agents act on their own run with a credential, never with the database: only the token's
-- sha256 is kept, so a copy of the database (a backup, a leaked dump) holds no usable token.
CREATE TABLE run_credentials (
    token_sha256 text             PRIMARY KEY,
    run_id       bigint           NOT NULL UNIQUE REFERENCES runs (id) ON DELETE CASCADE,
    created_at   double precision NOT NULL
);
