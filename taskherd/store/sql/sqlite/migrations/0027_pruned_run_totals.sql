-- /metrics' counters (taskherd_runs_total, _cost_usd_total, _tokens_total) were sums over the
-- runs still kept, open ones included: pruning lowered them, and Prometheus read each drop as
-- a reset. A counter is now this table plus the ended runs still kept: when pruning deletes
-- ended runs it adds them here, by the counters' labels, in its own transaction, so the sum
-- never goes down, and the claim and the settle write nothing new. It starts empty: what was
-- pruned before this version is not known, and the counters start from the runs kept.
CREATE TABLE pruned_run_totals (
    role          TEXT    NOT NULL,
    outcome       TEXT    NOT NULL,
    runs          INTEGER NOT NULL,
    cost_usd      REAL    NOT NULL,
    input_tokens  INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    PRIMARY KEY (role, outcome)
);
