"""REST v1 against a real server: every route answers what the OpenAPI document says, and
does what the matching CLI command does."""

from __future__ import annotations

import json
import re

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from taskherd.api.app import ROUTES
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from tests.api_server import served


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with served(tmp_path_factory.mktemp("rest")) as running:
        yield running


def validator_for(document: dict, schema: dict) -> Draft202012Validator:
    resource = Resource.from_contents(
        {**document, "$schema": "https://json-schema.org/draft/2020-12/schema"})
    registry = Registry().with_resource("urn:openapi", resource)
    return Draft202012Validator({"$ref": "urn:openapi#" + schema["$ref"][1:]}
                                if "$ref" in schema else schema, registry=registry)


def check(document: dict, path: str, method: str, response) -> None:
    """The answer's status is documented for this route and its body fits the schema."""
    operation = document["paths"][path][method.lower()]
    documented = operation["responses"].get(str(response.status_code))
    assert documented, f"{method} {path} answered {response.status_code}, not documented"
    schema = documented["content"]["application/json"]["schema"]
    errors = sorted(validator_for(document, schema).iter_errors(response.json()),
                    key=lambda e: list(e.path))
    assert not errors, f"{method} {path}: {errors[0].message} at {list(errors[0].path)}"


def seed_run(api) -> tuple[int, int]:
    """A task with a finished run and a log inside the data dir; returns (task, run)."""
    store = api.queue.store
    task = store.enqueue(NewTask(role="qa", title="reviewed"), 1000.0).task
    claim = store.claim(ClaimRequest("n1", 1000.0, 60, roles=["qa"]))
    log_dir = api.queue.config.daemon.log_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"run-{claim.run.id}.log"
    log.write_text("one\ntwo\nthree\n")
    store.mark_spawned(claim.run.id, 1001.0, 60, pid=1, pid_started_at=1.0, log_path=str(log))
    store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, cost_usd=0.5), RetryPolicy(),
                     1002.0)
    return task.id, claim.run.id


def test_every_route_answers_as_the_openapi_document_says(api):
    admin = api.client("admin")
    document = admin.get("/v1/openapi.json").json()
    task_id, run_id = seed_run(api)
    calls = [
        ("GET", "/v1/status", None),
        ("POST", "/v1/tasks", {"role": "coder", "title": "from http", "priority": "P1"}),
        ("POST", "/v1/tasks/import", {"tasks": [{"role": "coder", "title": "a"},
                                                {"role": "qa", "title": "b"}]}),
        ("GET", "/v1/tasks?limit=2", None),
        ("GET", f"/v1/tasks/{task_id}", None),
        ("POST", f"/v1/tasks/{task_id}/requeue", None),  # completed: refused (409)
        ("POST", "/v1/tasks/2/block", {"reason": "wait"}),
        ("POST", "/v1/tasks/2/unblock", None),
        ("POST", "/v1/tasks/2/cancel", {"reason": "no"}),
        ("POST", "/v1/tasks/2/requeue", None),
        ("POST", "/v1/tasks/2/approve", None),  # ready: refused
        ("POST", "/v1/tasks/2/reject", None),
        ("POST", "/v1/tasks/2/priority", {"priority": 0}),
        ("POST", "/v1/tasks/2/priority", {"priority": "P0"}),  # refused: 422
        ("GET", "/v1/runs", None),
        ("GET", f"/v1/runs/{run_id}", None),
        ("GET", f"/v1/runs/{run_id}/log?lines=2", None),
        ("GET", "/v1/jobs", None),
        ("POST", "/v1/jobs", {"name": "hourly", "every": "1h", "role": "coder",
                              "title": "hourly check"}),
        ("GET", "/v1/jobs/hourly", None),
        ("GET", "/v1/jobs/hourly/next?count=3", None),
        ("PATCH", "/v1/jobs/hourly", {"title": "hourly look"}),
        ("POST", "/v1/jobs/hourly/disable", None),
        ("POST", "/v1/jobs/hourly/enable", None),
        ("POST", "/v1/jobs/hourly/run", None),
        ("GET", "/v1/cost?by=role", None),
        ("GET", "/v1/cost?by=day", None),
        ("GET", "/v1/cooldowns", None),
        *[("GET", f"/v1/charts/{chart}?range={span}", None)
          for chart, span in (("finished", "1h"), ("latency", "24h"), ("depth", "7d"),
                              ("cost", "24h"))],
        ("GET", "/v1/tokens", None),
        ("POST", "/v1/tokens", {"name": "scraper", "scope": "read", "expires": "30d"}),
        ("DELETE", "/v1/tokens/scraper", None),
        ("GET", "/v1/tasks/99999", None),
    ]
    seen = set()
    for method, url, body in calls:
        response = admin.request(method, url, json=body)
        assert response.status_code < 500, response.text
        path = url.split("?")[0]
        template = next(spec.path for spec in ROUTES if spec.method == method and re.fullmatch(
            re.sub(r"{\w+}", r"[^/]+", spec.path), path) and (spec.path != "/v1/tasks/{task_id}"
                                                               or path.split("/")[-1].isdigit()))
        check(document, template, method, response)
        seen.add((method, template))
    agent_routes = {(spec.method, spec.path) for spec in ROUTES if spec.need == "run"}
    assert {(spec.method, spec.path) for spec in ROUTES} - seen == agent_routes  # test_agent_http


def test_the_answers_carry_what_the_cli_shows(api):
    admin = api.client("admin")
    added = admin.post("/v1/tasks", json={"role": "coder", "title": "same", "dedup_key": "k"})
    again = admin.post("/v1/tasks", json={"role": "coder", "title": "same", "dedup_key": "k"})
    assert added.status_code == 201 and added.json()["created"] is True
    assert again.json() == {"task": added.json()["task"], "created": False}
    task_id = added.json()["task"]["id"]
    assert api.queue.store.get_task(task_id).title == "same"
    urgent = admin.post(f"/v1/tasks/{task_id}/priority", json={"priority": 0})
    assert urgent.status_code == 200 and urgent.json()["priority"] in (0, "P0")
    assert int(api.queue.store.get_task(task_id).priority) == 0
    wrong = admin.post(f"/v1/tasks/{task_id}/priority", json={"priority": 7})
    assert wrong.status_code == 422 and "expected 0, 1, 2 or 3" in wrong.text
    assert int(api.queue.store.get_task(task_id).priority) == 0  # nothing changed
    moved = admin.post(f"/v1/tasks/{task_id}/block", json={"reason": "needs a person"})
    assert moved.json()["state"] == "blocked" and moved.json()["reason"] == "needs a person"
    assert api.queue.store.get_task(task_id).state.value == "blocked"
    status = admin.get("/v1/status").json()
    assert status["by_role"]["coder"]["blocked"] >= 1


def test_task_pages_follow_their_cursor_to_the_end(api):
    admin = api.client("admin")
    made = [admin.post("/v1/tasks", json={"role": "qa", "title": f"page {n}"}).json()["task"]["id"]
            for n in range(7)]
    seen, cursor = [], None
    while True:
        query = {"role": "qa", "limit": 3} | ({"cursor": cursor} if cursor else {})
        page = admin.get("/v1/tasks", params=query).json()
        seen += [task["id"] for task in page["tasks"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [task_id for task_id in seen if task_id in made] == sorted(made, reverse=True)
    assert len(seen) == len(set(seen))


def test_openapi_lists_every_route_the_app_serves(api):
    document = api.client().get("/v1/openapi.json").json()
    for spec in ROUTES:
        assert spec.method.lower() in document["paths"][spec.path], spec.path
    assert json.dumps(document)  # serialisable as served


def test_the_end_of_a_log_without_newlines_is_read_from_a_window_with_a_marker(api):
    _, run_id = seed_run(api)
    log = api.queue.config.daemon.log_dir / f"run-{run_id}.log"
    log.write_bytes(b"x" * (16 << 20) + b" the end")  # one line of 16 MiB, no newline
    for lines in (1, 5):
        text = api.client("read").get(f"/v1/runs/{run_id}/log?lines={lines}").json()["text"]
        assert text.startswith("[… line cut") and text.endswith("x the end")
        assert len(text) < 20_000  # the line's end, not 16 MiB of it
