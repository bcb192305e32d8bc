-- A run whose cost is unknown (a command that reports none, a model without a price) was
-- summed as $0 by every cost total: the board, `runs cost`, /v1/cost, /metrics and the
-- dashboard said $0.00 for work that cost something. The sums now count those runs beside
-- the dollars. "Unknown" is what budgets already call it (budget_spend): ended with no cost
-- after spawning, and not stopped by a rate limit (which fails before any paid work).
-- What was pruned before this version is not known: pruned_run_totals' count starts at 0.
ALTER TABLE spend_hours ADD COLUMN unpriced bigint NOT NULL DEFAULT 0;

ALTER TABLE pruned_run_totals ADD COLUMN unpriced bigint NOT NULL DEFAULT 0;

-- spend_hours holds the ended runs up to the mark (rolled up, or added by the trigger as they
-- ended after it passed them).
UPDATE spend_hours
SET unpriced = (SELECT count(*) FROM runs
                WHERE runs.role = spend_hours.role
                  AND floor(runs.claimed_at / 3600) * 3600 = spend_hours.hour
                  AND runs.id <= (SELECT runs_through FROM rollup_marks)
                  AND runs.ended_at IS NOT NULL AND runs.cost_usd IS NULL
                  AND runs.spawned_at IS NOT NULL AND runs.outcome <> 'rate_limited');

-- As 0012 left it, with the count of unpriced runs.
CREATE OR REPLACE FUNCTION spend_hours_track() RETURNS trigger LANGUAGE plpgsql AS '
BEGIN
    IF (CASE WHEN TG_OP = ''UPDATE'' THEN NEW.id ELSE OLD.id END)
       > (SELECT runs_through FROM rollup_marks) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = ''UPDATE'' THEN
        INSERT INTO spend_hours (role, hour, runs, cost_usd, input_tokens, output_tokens,
                                 unpriced)
        VALUES (NEW.role, floor(NEW.claimed_at / 3600) * 3600, 1, coalesce(NEW.cost_usd, 0),
                coalesce(NEW.input_tokens, 0), coalesce(NEW.output_tokens, 0),
                CASE WHEN NEW.cost_usd IS NULL AND NEW.spawned_at IS NOT NULL
                          AND NEW.outcome <> ''rate_limited'' THEN 1 ELSE 0 END)
        ON CONFLICT (role, hour) DO UPDATE
        SET runs = spend_hours.runs + 1,
            cost_usd = spend_hours.cost_usd + excluded.cost_usd,
            input_tokens = spend_hours.input_tokens + excluded.input_tokens,
            output_tokens = spend_hours.output_tokens + excluded.output_tokens,
            unpriced = spend_hours.unpriced + excluded.unpriced;
    ELSE
        UPDATE spend_hours
        SET runs = runs - 1, cost_usd = cost_usd - coalesce(OLD.cost_usd, 0),
            input_tokens = input_tokens - coalesce(OLD.input_tokens, 0),
            output_tokens = output_tokens - coalesce(OLD.output_tokens, 0),
            unpriced = unpriced - CASE WHEN OLD.cost_usd IS NULL AND OLD.spawned_at IS NOT NULL
                                            AND OLD.outcome <> ''rate_limited'' THEN 1 ELSE 0 END
        WHERE role = OLD.role AND hour = floor(OLD.claimed_at / 3600) * 3600;
    END IF;
    RETURN NULL;
END';
