-- Jobs an agent's run asked for with a spawn message. They count, with the tasks the run
-- added, against its [monitor] max_spawn (children_since). No foreign key: a job deleted
-- later was still spawned by that run, and still counts.
CREATE TABLE spawned_jobs (
    job_id     bigint           PRIMARY KEY,
    task_id    bigint           NOT NULL,  -- the task whose run sent the request
    created_at double precision NOT NULL
);
CREATE INDEX spawned_jobs_by_task ON spawned_jobs (task_id, created_at);

-- Memory search keeps each entry's tsvector, as FTS5 keeps its terms: ranking over the
-- expression index parsed every ranked match's text again, and the scope filter joined every
-- entry, so a search over 100,000 entries took 50-100 ms (bench/memory.py). A search now
-- reads this table alone, the scope beside the tsvector (an entry's scope never changes),
-- and reads memories for the few entries it returns. The GIN index moves here from the
-- expression; a row is added with its entry (insert_memory) and goes with it (cascade).
CREATE TABLE memories_fts (
    memory_id bigint   PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
    scope     text     NOT NULL,
    document  tsvector NOT NULL
);
INSERT INTO memories_fts (memory_id, scope, document)
SELECT id, scope, to_tsvector('english', text) FROM memories;
CREATE INDEX memories_fts_document ON memories_fts USING GIN (document);
DROP INDEX memories_text_search;
