-- The status board's spend (runs, cost and tokens per role, today and over 7 days) summed
-- every row of the week's runs: hundreds of milliseconds once a fleet keeps a million runs.
-- So a finished run adds itself, when it ends, to one small row per (role, hour it was
-- claimed in), and the board adds up at most 168 rows a role. Counted at the end, when cost
-- and tokens are known, so a claim pays nothing new (and nodes claiming at once contend for
-- no row); a prune takes its runs back out. The function body is single-quoted and the
-- trigger CREATE OR REPLACE for the reasons given in 0008.
CREATE TABLE spend_hours (
    role          text             NOT NULL,
    hour          double precision NOT NULL,  -- unix seconds of the hour's start (UTC)
    runs          bigint           NOT NULL,
    cost_usd      double precision NOT NULL,
    input_tokens  bigint           NOT NULL,
    output_tokens bigint           NOT NULL,
    PRIMARY KEY (role, hour)
);

INSERT INTO spend_hours (role, hour, runs, cost_usd, input_tokens, output_tokens)
SELECT role, floor(claimed_at / 3600) * 3600, count(*), coalesce(sum(cost_usd), 0),
       coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0)
FROM runs WHERE ended_at IS NOT NULL
GROUP BY 1, 2;

CREATE FUNCTION spend_hours_track() RETURNS trigger LANGUAGE plpgsql AS '
BEGIN
    IF TG_OP = ''UPDATE'' THEN
        INSERT INTO spend_hours (role, hour, runs, cost_usd, input_tokens, output_tokens)
        VALUES (NEW.role, floor(NEW.claimed_at / 3600) * 3600, 1, coalesce(NEW.cost_usd, 0),
                coalesce(NEW.input_tokens, 0), coalesce(NEW.output_tokens, 0))
        ON CONFLICT (role, hour) DO UPDATE
        SET runs = spend_hours.runs + 1,
            cost_usd = spend_hours.cost_usd + excluded.cost_usd,
            input_tokens = spend_hours.input_tokens + excluded.input_tokens,
            output_tokens = spend_hours.output_tokens + excluded.output_tokens;
    ELSE
        UPDATE spend_hours
        SET runs = runs - 1, cost_usd = cost_usd - coalesce(OLD.cost_usd, 0),
            input_tokens = input_tokens - coalesce(OLD.input_tokens, 0),
            output_tokens = output_tokens - coalesce(OLD.output_tokens, 0)
        WHERE role = OLD.role AND hour = floor(OLD.claimed_at / 3600) * 3600;
    END IF;
    RETURN NULL;
END';

CREATE OR REPLACE TRIGGER spend_hours_run_ended AFTER UPDATE OF ended_at ON runs
FOR EACH ROW WHEN (OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL)
EXECUTE FUNCTION spend_hours_track();

CREATE OR REPLACE TRIGGER spend_hours_run_deleted AFTER DELETE ON runs
FOR EACH ROW WHEN (OLD.ended_at IS NOT NULL)
EXECUTE FUNCTION spend_hours_track();

