-- The length of a cooldown the daemon had to guess (the limit's text gave no reset time), so
-- the next guess doubles it while limits repeat; NULL when the text said when it lifts.
ALTER TABLE cooldowns ADD COLUMN span double precision;
