-- Tokens for people and peers at the HTTP API. Only the token's sha256 is kept: a copy of
-- the database (a backup, a leaked file) holds no usable token. `roles` (a JSON list) and
-- `rate_per_minute` bound an intake token: which roles it may add tasks for, how fast.
CREATE TABLE api_tokens (
    id              INTEGER PRIMARY KEY,
    name            TEXT    NOT NULL UNIQUE,
    scope           TEXT    NOT NULL CHECK (scope IN ('admin', 'operator', 'read', 'intake')),
    token_sha256    TEXT    NOT NULL UNIQUE,
    roles           TEXT,
    rate_per_minute INTEGER CHECK (rate_per_minute IS NULL OR rate_per_minute > 0),
    created_at      REAL    NOT NULL,
    expires_at      REAL,
    revoked_at      REAL
);
