-- A node that starts nothing new because the machine is at fault (its disk full, or below
-- [daemon] min_free_disk): since when, and why, for `taskherd status` and the board in any
-- process. NULL while the node may start runs.
ALTER TABLE nodes ADD COLUMN paused_at REAL;
ALTER TABLE nodes ADD COLUMN paused_reason TEXT;
