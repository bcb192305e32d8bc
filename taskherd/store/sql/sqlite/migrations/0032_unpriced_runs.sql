-- A run whose cost is unknown (a command that reports none, a model without a price) was
-- summed as $0 by every cost total: the board, `runs cost`, /v1/cost, /metrics and the
-- dashboard said $0.00 for work that cost something. The sums now count those runs beside
-- the dollars. "Unknown" is what budgets already call it (budget_spend): ended with no cost
-- after spawning, and not stopped by a rate limit (which fails before any paid work).
-- What was pruned before this version is not known: pruned_run_totals' count starts at 0.
ALTER TABLE spend_hours ADD COLUMN unpriced INTEGER NOT NULL DEFAULT 0;

ALTER TABLE pruned_run_totals ADD COLUMN unpriced INTEGER NOT NULL DEFAULT 0;

-- spend_hours holds the ended runs up to the mark (rolled up, or added by the trigger as they
-- ended after it passed them).
UPDATE spend_hours
SET unpriced = (SELECT count(*) FROM runs
                WHERE runs.role = spend_hours.role
                  AND CAST(runs.claimed_at / 3600 AS INTEGER) * 3600.0 = spend_hours.hour
                  AND runs.id <= (SELECT runs_through FROM rollup_marks)
                  AND runs.ended_at IS NOT NULL AND runs.cost_usd IS NULL
                  AND runs.spawned_at IS NOT NULL AND runs.outcome <> 'rate_limited');

DROP TRIGGER spend_hours_run_ended;

DROP TRIGGER spend_hours_run_deleted;

-- As 0013 left them, with the count of unpriced runs.
CREATE TRIGGER spend_hours_run_ended AFTER UPDATE OF ended_at ON runs
WHEN old.ended_at IS NULL AND new.ended_at IS NOT NULL
 AND new.id <= (SELECT runs_through FROM rollup_marks)
BEGIN
    INSERT INTO spend_hours (role, hour, runs, cost_usd, input_tokens, output_tokens, unpriced)
    VALUES (new.role, CAST(new.claimed_at / 3600 AS INTEGER) * 3600.0, 1,
            coalesce(new.cost_usd, 0), coalesce(new.input_tokens, 0),
            coalesce(new.output_tokens, 0),
            CASE WHEN new.cost_usd IS NULL AND new.spawned_at IS NOT NULL
                      AND new.outcome <> 'rate_limited' THEN 1 ELSE 0 END)
    ON CONFLICT (role, hour) DO UPDATE
    SET runs = runs + 1, cost_usd = cost_usd + excluded.cost_usd,
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        unpriced = unpriced + excluded.unpriced;
END;

CREATE TRIGGER spend_hours_run_deleted AFTER DELETE ON runs
WHEN old.ended_at IS NOT NULL AND old.id <= (SELECT runs_through FROM rollup_marks)
BEGIN
    UPDATE spend_hours
    SET runs = runs - 1, cost_usd = cost_usd - coalesce(old.cost_usd, 0),
        input_tokens = input_tokens - coalesce(old.input_tokens, 0),
        output_tokens = output_tokens - coalesce(old.output_tokens, 0),
        unpriced = unpriced - CASE WHEN old.cost_usd IS NULL AND old.spawned_at IS NOT NULL
                                        AND old.outcome <> 'rate_limited' THEN 1 ELSE 0 END
    WHERE role = old.role AND hour = CAST(old.claimed_at / 3600 AS INTEGER) * 3600.0;
END;
