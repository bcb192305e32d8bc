-- Since when a runtime's endpoint has been down, for a cooldown that is an outage (a chat
-- gateway refusing connections or answering 502/503/504) rather than a rate limit: the first
-- call that found it down, kept while probes find it still down, shown as "endpoint down
-- since …". NULL for a rate limit.
ALTER TABLE cooldowns ADD COLUMN down_since double precision;
