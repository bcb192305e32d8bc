-- Named SQL blocks of budget pauses (store/sql_budgets.py); a pause is the cooldown
-- budget:SCOPE, begun with set_cooldown.

-- name: lift_budget_pause
-- Compare-and-set on the `until` the caller saw: a pause another node began or moved since
-- (a new one the same day, a month's limit reached) is not lifted by a stale look.
DELETE FROM cooldowns WHERE runtime = :runtime AND until = :until;
