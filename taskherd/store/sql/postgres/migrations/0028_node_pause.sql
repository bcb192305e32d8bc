-- A node that starts nothing new because the machine is at fault (its disk full, or below
-- [daemon] min_free_disk): since when, and why, for `taskherd status` and the board on any
-- node. NULL while the node may start runs.
ALTER TABLE nodes ADD COLUMN paused_at double precision;
ALTER TABLE nodes ADD COLUMN paused_reason text;
