"""The API's guards: no token, no answer; each scope only its own actions; a run
credential only its own run; no file outside the log folder; bounded bodies; guessing
tokens slowed down; no secret in the logs."""

from __future__ import annotations

import logging
import os
import re

import pytest

from taskherd.api.app import ROUTES
from taskherd.model import NewTask
from taskherd.ops import tokens as token_ops
from tests.api_server import served


@pytest.fixture
def api(tmp_path):
    with served(tmp_path) as running:
        yield running


def concrete(path: str) -> str:
    return re.sub(r"{(\w+)}", lambda m: {"op": "heartbeat", "name": "nightly"}.get(m.group(1),
                                                                                  "1"), path)


def test_every_route_without_a_token_is_401(api):
    client = api.client()
    urls = [(spec.method, concrete(spec.path)) for spec in ROUTES]
    urls += [("GET", "/v1/events"), ("GET", "/v1/runs/1/log/stream"), ("GET", "/metrics")]
    for method, url in urls:
        response = client.request(method, url)
        assert response.status_code == 401, (method, url, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
    assert client.get("/v1/openapi.json").status_code == 200  # the document is public


def test_each_scope_is_refused_what_it_may_not_do(api):
    task = api.queue.store.enqueue(NewTask(role="qa", title="t"), 1000.0).task
    forbidden = {
        "read": [("POST", "/v1/tasks", {"role": "qa", "title": "x"}),
                 ("POST", f"/v1/tasks/{task.id}/cancel", None),
                 ("POST", "/v1/jobs/nightly/run", None), ("GET", "/v1/tokens", None)],
        "intake": [("GET", "/v1/tasks", None), ("GET", "/v1/status", None),
                   ("POST", f"/v1/tasks/{task.id}/cancel", None), ("GET", "/metrics", None)],
        "operator": [("POST", "/v1/jobs", {"name": "j", "every": "1h", "role": "qa",
                                          "title": "t"}),
                     ("POST", "/v1/tokens", {"name": "n", "scope": "admin"}),
                     ("DELETE", "/v1/tokens/read", None), ("PATCH", "/v1/jobs/x", {})],
        "intake-qa": [("POST", "/v1/tasks", {"role": "coder", "title": "x"}),
                      ("POST", "/v1/tasks/import", {"tasks": [{"role": "qa", "title": "a"},
                                                              {"role": "coder", "title": "b"}]})],
    }
    for scope, calls in forbidden.items():
        with api.client(scope) as client:
            for method, url, body in calls:
                response = client.request(method, url, json=body)
                assert response.status_code == 403, (scope, method, url, response.text)
    assert len(api.queue.store.list_tasks()) == 1  # nothing was added
    assert api.client("intake").post("/v1/tasks", json={"role": "coder", "title": "y"}
                                     ).status_code == 201
    assert api.client("operator").post(f"/v1/tasks/{task.id}/cancel").status_code == 200


def test_an_intake_token_keeps_to_its_rate(api):
    with api.client("intake-qa") as client:
        answers = [client.post("/v1/tasks", json={"role": "qa", "title": f"t{n}"}).status_code
                   for n in range(7)]
    assert answers == [201] * 5 + [429] * 2


def test_a_revoked_or_expired_token_is_refused(api):
    made = token_ops.create_token(api.queue, "brief", "read", 0.0, expires="1h")  # long gone
    assert api.client(**{"Authorization": f"Bearer {made.token}"}).get(
        "/v1/status").status_code == 401
    assert api.client("read").get("/v1/status").status_code == 200
    token_ops.revoke_token(api.queue, "read", 1.0)
    assert api.client("read").get("/v1/status").status_code == 401


def started_run(api, title: str, log_path: str | None):
    store = api.queue.store
    store.enqueue(NewTask(role="qa", title=title), 1000.0)
    claim = store.claim("n1", 1000.0, 600, roles=["qa"])
    store.mark_spawned(claim.run.id, 1000.0, 600, pid=1, pid_started_at=1.0, log_path=log_path)
    token = f"run-token-{title}"
    store.issue_run_credential(claim.run.id, token, 1000.0)
    return claim.run, token


def test_a_run_credential_acts_on_its_own_run_only(api):
    mine, my_token = started_run(api, "mine", None)
    theirs, _ = started_run(api, "theirs", None)
    agent = api.client(**{"Authorization": f"Bearer {my_token}"})
    assert agent.post("/v1/agent/heartbeat", json={"progress": "half"}).json() == {
        "run_id": mine.id}
    assert api.queue.store.get_run(mine.id).progress == "half"
    # No field names another run; a child names its own task as parent only.
    refused = agent.post("/v1/agent/add_child_task",
                         json={"task": {"role": "qa", "title": "c", "parent_id": theirs.task_id}})
    assert refused.status_code == 422 and "own task" in refused.json()["error"]
    before = api.queue.store.get_run(theirs.id)
    assert agent.post("/v1/agent/heartbeat", json={"run_id": theirs.id}).status_code == 422
    assert api.queue.store.get_run(theirs.id) == before
    # A run credential is not an API token, nor the other way round.
    assert agent.get("/v1/status").status_code == 401
    assert api.client("admin").post("/v1/agent/heartbeat", json={}).status_code == 401


def test_a_log_outside_the_log_folder_is_never_served(api, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root password\n")
    log_dir = api.queue.config.daemon.log_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    link = log_dir / "run-link.log"
    os.symlink(secret, link)
    escapes = [str(log_dir / ".." / ".." / "secret.txt"), str(link), str(secret)]
    reader = api.client("read")
    for number, path in enumerate(escapes):
        run, _ = started_run(api, f"escape{number}", path)
        for url in (f"/v1/runs/{run.id}/log", f"/v1/runs/{run.id}/log/stream"):
            response = reader.get(url)
            assert response.status_code == 409, (path, response.text)
            assert "root password" not in response.text
            assert "outside the log folder" in response.json()["error"]
    inside = log_dir / "run-ok.log"
    inside.write_text("fine\n")
    run, _ = started_run(api, "inside", str(inside))
    assert reader.get(f"/v1/runs/{run.id}/log").json()["text"] == "fine\n"


def test_a_body_over_the_limit_is_refused_before_it_is_read_whole(api):
    admin = api.client("admin")
    declared = admin.post("/v1/tasks", content=b"{" + b" " * 70_000 + b"}",
                          headers={"content-type": "application/json"})
    assert declared.status_code == 413

    def chunks():  # no content-length: the limit is counted as it arrives
        for _ in range(100):
            yield b" " * 1024

    streamed = admin.post("/v1/tasks", content=chunks(),
                          headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert api.queue.store.list_tasks() == []


def test_a_hundred_bad_tokens_in_a_row_are_slowed_down(api):
    client = api.client()
    answers = [client.get("/v1/status", headers={"Authorization": f"Bearer thk_guess{n}"}
                          ).status_code for n in range(100)]
    assert answers[:20] == [401] * 20
    assert set(answers[20:]) == {429}
    refused = client.get("/v1/status", headers={"Authorization": f"Bearer {api.tokens['read']}"})
    assert refused.status_code == 429  # even a right guess is not told apart now
    assert int(refused.headers["retry-after"]) > 0


def test_tokens_never_appear_in_the_logs(api, caplog):
    caplog.set_level(logging.DEBUG)
    secret = api.tokens["admin"]
    api.client("admin").post("/v1/tokens", json={"name": "logged", "scope": "read"})
    api.client(**{"Authorization": "Bearer thk_wrong-secret"}).get("/v1/status")
    api.client("admin").get("/v1/tasks?cursor=1")
    run, token = started_run(api, "logs", None)
    api.client(**{"Authorization": f"Bearer {token}"}).post(
        "/v1/agent/report", json={"verdict": "done", "summary": "ok"})
    text = caplog.text
    assert text  # the report was logged
    for leaked in (secret, "thk_wrong-secret", token):
        assert leaked not in text
