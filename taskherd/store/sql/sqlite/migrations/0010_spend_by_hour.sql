-- The status board's spend (runs, cost and tokens per role, today and over 7 days) summed
-- every row of the week's runs: hundreds of milliseconds once a fleet keeps a million runs.
-- So a finished run adds itself, when it ends, to one small row per (role, hour it was
-- claimed in), and the board adds up at most 168 rows a role. Counted at the end, when cost
-- and tokens are known, so a claim pays nothing new; a prune takes its runs back out.
CREATE TABLE spend_hours (
    role          TEXT    NOT NULL,
    hour          REAL    NOT NULL,  -- unix seconds of the hour's start (UTC)
    runs          INTEGER NOT NULL,
    cost_usd      REAL    NOT NULL,
    input_tokens  INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    PRIMARY KEY (role, hour)
);

INSERT INTO spend_hours (role, hour, runs, cost_usd, input_tokens, output_tokens)
SELECT role, CAST(claimed_at / 3600 AS INTEGER) * 3600.0, count(*), coalesce(sum(cost_usd), 0),
       coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0)
FROM runs WHERE ended_at IS NOT NULL
GROUP BY 1, 2;

CREATE TRIGGER spend_hours_run_ended AFTER UPDATE OF ended_at ON runs
WHEN old.ended_at IS NULL AND new.ended_at IS NOT NULL
BEGIN
    INSERT INTO spend_hours (role, hour, runs, cost_usd, input_tokens, output_tokens)
    VALUES (new.role, CAST(new.claimed_at / 3600 AS INTEGER) * 3600.0, 1,
            coalesce(new.cost_usd, 0), coalesce(new.input_tokens, 0),
            coalesce(new.output_tokens, 0))
    ON CONFLICT (role, hour) DO UPDATE
    SET runs = runs + 1, cost_usd = cost_usd + excluded.cost_usd,
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens;
END;

CREATE TRIGGER spend_hours_run_deleted AFTER DELETE ON runs
WHEN old.ended_at IS NOT NULL
BEGIN
    UPDATE spend_hours
    SET runs = runs - 1, cost_usd = cost_usd - coalesce(old.cost_usd, 0),
        input_tokens = input_tokens - coalesce(old.input_tokens, 0),
        output_tokens = output_tokens - coalesce(old.output_tokens, 0)
    WHERE role = old.role AND hour = CAST(old.claimed_at / 3600 AS INTEGER) * 3600.0;
END;

