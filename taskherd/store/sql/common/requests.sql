-- Named SQL blocks of agent requests a daemon may be asked twice (store/requests.py).

-- name: note_request
INSERT INTO agent_requests (run_id, request_id, made) VALUES (:run_id, :request_id, :made);

-- name: request_made
SELECT made FROM agent_requests WHERE run_id = :run_id AND request_id = :request_id;
