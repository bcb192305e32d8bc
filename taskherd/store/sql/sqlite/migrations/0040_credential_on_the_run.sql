-- A run's credential names its run (`<run_id>.<secret>`) and its secret's sha256 is kept on
-- the run's own row, written by the claim beside the run it inserts: the same page, where a
-- row of run_credentials and its two indexes (the digest's in random order) were three more
-- pages a claim. run_credentials stays for the credentials issued before this migration:
-- agents running across an upgrade still hold them.
ALTER TABLE runs ADD COLUMN credential_sha256 TEXT;
