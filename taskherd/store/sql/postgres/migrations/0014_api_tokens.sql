-- Tokens for people and peers at the HTTP API. Only the token's sha256 is kept: a copy of
-- the database (a backup, a leaked dump) holds no usable token. `roles` (a JSON list) and
-- `rate_per_minute` bound an intake token: which roles it may add tasks for, how fast.
CREATE TABLE api_tokens (
    id              bigserial        PRIMARY KEY,
    name            text             NOT NULL UNIQUE,
    scope           text             NOT NULL CHECK (scope IN ('admin', 'operator', 'read', 'intake')),
    token_sha256    text             NOT NULL UNIQUE,
    roles           text,
    rate_per_minute bigint           CHECK (rate_per_minute IS NULL OR rate_per_minute > 0),
    created_at      double precision NOT NULL,
    expires_at      double precision,
    revoked_at      double precision
);
