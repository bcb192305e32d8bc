-- tasks_clock (0012) put the two clocks of a task that moves in one index, so that a settle
-- moves the task's entry within one page: the newest finished tasks sit beside the leases.
-- The claim still wrote two indexes: its task left tasks_ready (priority, id) and entered
-- tasks_clock's lease side, a WAL page in each. tasks_queue is tasks_clock with the ready
-- tasks as a third side, after the leases, in claim order:
--   side 0, finished: by finished_at;  side 1, leased: by lease_expires_at;
--   side 2, ready:    by priority, then id (FIFO within a priority);
-- so a claim moves its task from the head of side 2 to the end of side 1, the next entry
-- over, and a claim and its completion each write one page of it.
-- Queries name the index's own expressions, the side
-- `(CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1
-- WHEN state = 'ready' THEN 2 ELSE 3 END)` (3: waiting for a person, in no side) and the
-- clock `coalesce(finished_at, lease_expires_at, priority)` (a priority on side 2 only), so
-- that the planner finds the index. id is a column of its own, before (state, role) that let
-- the board's counts read the index alone: SQLite orders side 2 by (clock, id) only when no
-- column lies between them.
DROP INDEX tasks_ready;
DROP INDEX tasks_clock;
-- Not partial, as tasks_clock was not (0012): PostgreSQL gathers statistics on an index's
-- expressions only for an index without a predicate. The tasks waiting for a person are
-- its side 3.
CREATE INDEX tasks_queue
ON tasks ((CASE WHEN finished_at IS NOT NULL THEN 0 WHEN lease_expires_at IS NOT NULL THEN 1
               WHEN state = 'ready' THEN 2 ELSE 3 END),
          coalesce(finished_at, lease_expires_at, priority), id, state, role);
