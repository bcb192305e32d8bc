"""The API's guards: no token, no answer; each scope only its own actions; a run
credential only its own run; no file outside the log folder; bounded bodies; guessing
tokens slowed down; no secret in the logs."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest

from taskherd.api.app import ROUTES
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.ops import tokens as token_ops
from taskherd.policy.admission import ClaimRequest
from tests.api_server import CONFIG, served


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


def test_a_token_revoked_by_another_process_is_refused_at_the_next_request(api):
    """The server keeps the tokens it has checked (SQLite); a revoke committed by the CLI,
    another process and connection, still counts at the very next request."""
    reader = api.client("read")
    assert [reader.get("/v1/status").status_code for _ in range(3)] == [200] * 3
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHERD_")}
    revoked = subprocess.run(
        [sys.executable, "-m", "taskherd", "--config", str(api.folder / "taskherd.toml"),
         "token", "revoke", "read"], env=env, capture_output=True, text=True, timeout=60)
    assert revoked.returncode == 0, revoked.stderr
    assert reader.get("/v1/status").status_code == 401
    assert api.client("operator").get("/v1/status").status_code == 200  # the others stand


def test_a_kept_token_expires_at_its_time(tmp_path):
    moment = [1_000_000.0]
    with served(tmp_path, now=moment[0], clock=lambda: moment[0]) as api:
        made = token_ops.create_token(api.queue, "brief", "read", moment[0], expires="1h")
        brief = api.client(**{"Authorization": f"Bearer {made.token}"})
        assert brief.get("/v1/status").status_code == 200  # checked, and kept
        moment[0] += 3599
        assert brief.get("/v1/status").status_code == 200
        moment[0] += 2
        assert brief.get("/v1/status").status_code == 401


def started_run(api, title: str, log_path: str | None):
    store = api.queue.store
    store.enqueue(NewTask(role="qa", title=title), 1000.0)
    # The credential as the daemon's claim records it: `<run_id>.<secret>`.
    claim = store.claim(ClaimRequest("n1", 1000.0, 600, roles=["qa"],
                                     credential=f"secret-{title}"))
    store.mark_spawned(claim.run.id, 1000.0, 600, pid=1, pid_started_at=1.0, log_path=log_path)
    return claim.run, claim.credential


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


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_hundred_bad_tokens_in_a_row_are_slowed_down_but_a_valid_token_is_served(api):
    client = api.client()
    answers = [client.get("/v1/status", headers=bearer(f"thk_guess{n}")).status_code
               for n in range(100)]
    assert answers[:20] == [401] * 20
    assert set(answers[20:]) == {429}
    refused = client.get("/v1/status", headers=bearer("thk_guess-again"))
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
    assert "valid token is still served" in refused.json()["error"]
    # Every agent and local process shares this address: a valid token is never refused.
    assert client.get("/v1/status", headers=bearer(api.tokens["read"])).status_code == 200
    assert client.get("/metrics", headers=bearer(api.tokens["read"])).status_code == 200
    run, credential = started_run(api, "throttled", None)
    assert client.post("/v1/agent/heartbeat", headers=bearer(credential),
                       json={}).status_code == 200
    login = client.post("/login", data={"token": api.tokens["read"]}, follow_redirects=False)
    assert login.status_code == 303


def test_wrong_credentials_on_the_busiest_routes_are_guesses_too(api):
    """POST /v1/tasks and the agent's routes are answered ahead of Starlette: a wrong token
    or run credential there is counted as a guess as anywhere else."""
    client = api.client()
    answers = [client.post("/v1/tasks", headers=bearer(f"thk_guess{n}"),
                           json={"role": "qa", "title": "t"}).status_code for n in range(12)]
    answers += [client.post("/v1/agent/heartbeat", headers=bearer(f"run-guess{n}"),
                            json={}).status_code for n in range(12)]
    assert answers[:20] == [401] * 20 and set(answers[20:]) == {429}
    assert client.post("/v1/tasks", headers=bearer(api.tokens["operator"]),
                       json={"role": "qa", "title": "served"}).status_code == 201


def test_a_good_token_does_not_wipe_the_count_of_wrong_ones(api):
    client = api.client()
    answers = []
    for _ in range(3):
        answers += [client.get("/v1/status", headers=bearer(f"thk_guess{n}")).status_code
                    for n in range(19)]
        good = client.get("/v1/status", headers=bearer(api.tokens["admin"]))
        assert good.status_code == 200
    assert answers[:20] == [401] * 20 and set(answers[20:]) == {429}


def test_a_forged_run_credential_is_refused_as_an_unknown_one_and_counted_as_a_guess(api):
    """A credential names its run: another run's id, a wrong secret, or a run that ended are
    refused as an unknown credential is, each a guess to the throttle."""
    client = api.client()
    mine, my_credential = started_run(api, "mine", None)
    theirs, their_credential = started_run(api, "theirs", None)
    ended, ended_credential = started_run(api, "ended", None)
    api.queue.store.finish_run(ended.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), 1001.0)
    secret = my_credential.partition(".")[2]
    forged = [f"{theirs.id}.{secret}", f"{mine.id}.{secret}x", f"{mine.id + 100}.{secret}",
              f"0{mine.id}.{secret}", ended_credential]
    before = api.queue.store.get_run(theirs.id)
    unknown = client.post("/v1/agent/heartbeat", headers=bearer("no-such-credential"), json={})
    assert unknown.status_code == 401
    answers = []
    for n in range(21):
        answer = client.post("/v1/agent/heartbeat", headers=bearer(forged[n % len(forged)]),
                             json={})
        if answer.status_code == 401:
            assert answer.json() == unknown.json()
        answers.append(answer.status_code)
    assert answers[:19] == [401] * 19 and answers[19:] == [429] * 2
    assert api.queue.store.get_run(theirs.id) == before
    # Nobody holding a valid credential is refused.
    for run, credential in ((mine, my_credential), (theirs, their_credential)):
        assert client.post("/v1/agent/heartbeat", headers=bearer(credential),
                           json={}).json() == {"run_id": run.id}


def test_a_valid_credential_of_the_wrong_kind_is_refused_but_no_guess(api):
    client = api.client()
    run, credential = started_run(api, "kinds", None)
    for _ in range(30):
        answer = client.post("/v1/agent/heartbeat", headers=bearer(api.tokens["admin"]),
                             json={})
        assert answer.status_code == 401 and "run credential" in answer.json()["error"]
        assert client.get("/v1/status", headers=bearer(credential)).status_code == 401
    assert client.get("/v1/status", headers=bearer("thk_first-guess")).status_code == 401
    login = client.post("/login", data={"token": credential})
    assert login.status_code == 401 and "a run credential" in login.text


def test_the_throttle_forgets_an_address_a_minute_after_its_last_wrong_token(tmp_path):
    clock = Clock(1_700_000_000.0)
    with served(tmp_path, clock=clock, now=clock.now) as running:
        client = running.client()
        assert {client.get("/v1/status", headers=bearer(f"thk_g{n}")).status_code
                for n in range(20)} == {401}
        clock.now += 30
        assert client.get("/v1/status", headers=bearer("thk_late")).status_code == 429
        clock.now += 59  # a minute counts from the last wrong token, not the first
        assert client.get("/v1/status", headers=bearer("thk_later")).status_code == 429
        clock.now += 61
        assert client.get("/v1/status", headers=bearer("thk_rested")).status_code == 401


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_dashboard_login_counts_wrong_tokens_and_never_refuses_a_right_one(api):
    client = api.client()
    answers = [client.post("/login", data={"token": f"thk_guess{n}"}).status_code
               for n in range(25)]
    assert answers == [401] * 20 + [429] * 5
    assert client.get("/v1/status", headers=bearer("thk_api-guess")).status_code == 429
    login = client.post("/login", data={"token": api.tokens["operator"]},
                        follow_redirects=False)
    assert login.status_code == 303


def test_x_forwarded_for_is_believed_from_trusted_proxies_only(tmp_path):
    # No proxy trusted: a local guesser cannot pass for many clients (uvicorn's default
    # believed X-Forwarded-For from 127.0.0.1).
    (tmp_path / "plain").mkdir()
    with served(tmp_path / "plain") as running:
        client = running.client()
        answers = [client.get("/v1/status", headers=bearer("thk_g") | {
            "X-Forwarded-For": f"198.51.100.{n}"}).status_code for n in range(25)]
        assert answers == [401] * 20 + [429] * 5
    behind = CONFIG.replace("max_body_bytes = 65536",
                            'max_body_bytes = 65536\ntrusted_proxies = ["127.0.0.1"]')
    (tmp_path / "proxied").mkdir()
    with served(tmp_path / "proxied", behind) as running:
        client = running.client()

        def guess(forwarded: str) -> int:
            return client.get("/v1/status", headers=bearer("thk_g") | {
                "X-Forwarded-For": forwarded}).status_code

        # One client behind the proxy guesses; what it writes left of the proxy's hop is
        # its own and not believed.
        assert [guess(f"10.9.9.{n}, 203.0.113.7") for n in range(25)] == [401] * 20 + [429] * 5
        assert guess("203.0.113.8") == 401  # another client behind the same proxy
        assert guess("203.0.113.7") == 429


def test_the_last_admin_token_cannot_be_revoked_and_a_self_revoke_is_said(api):
    admin = api.client("admin")
    refused = admin.delete("/v1/tokens/admin")
    assert refused.status_code == 409 and "last live admin token" in refused.json()["error"]
    assert admin.get("/v1/tokens").status_code == 200  # still in
    other = admin.post("/v1/tokens", json={"name": "second", "scope": "admin"}).json()
    gone = admin.delete("/v1/tokens/admin")
    assert gone.status_code == 200
    assert gone.json()["revoked_itself"] is True and "revoked" in gone.json()["note"]
    assert admin.get("/v1/tokens").status_code == 401
    second = api.client(**bearer(other["token"]))
    assert second.delete("/v1/tokens/read").json()["revoked_itself"] is False
    assert second.delete("/v1/tokens/second").status_code == 409


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


def test_every_answer_carries_the_security_headers_the_busiest_routes_too(api):
    """Nothing is cached, framed or sniffed, whichever way an answer was made: the routes
    agents call by the thousand (answered in front of the router) as the others, and their
    refusals as their answers."""
    from taskherd.api.asgi import SECURITY_HEADERS

    with api.client("admin") as admin, api.client() as nobody:
        _, run_token = started_run(api, "headers", None)
        answers = {
            "task added": admin.post("/v1/tasks", json={"role": "coder", "title": "sec"}),
            "task refused": admin.post("/v1/tasks", json={"role": "coder"}),
            "no token": nobody.post("/v1/tasks", json={"role": "coder", "title": "x"}),
            "heartbeat": nobody.post("/v1/agent/heartbeat", json={},
                                     headers={"Authorization": f"Bearer {run_token}"}),
            "no such op": nobody.post("/v1/agent/fly", json={},
                                      headers={"Authorization": f"Bearer {run_token}"}),
            "not json": admin.post("/v1/tasks", content=b"{", headers={
                "content-type": "application/json"}),
            "status": admin.get("/v1/status"),
            "no such route": admin.post("/v1/tasks/x/y"),
        }
    for name, answer in answers.items():
        for header, value in SECURITY_HEADERS.items():
            assert answer.headers.get(header) == value, (name, answer.status_code, header)
    assert [answers[name].status_code for name in answers] == [201, 422, 401, 200, 422, 400,
                                                              200, 404]
