"""The API's contract holds: /v1/openapi.json is a valid OpenAPI document, and schemathesis,
generating requests from it against a real daemon (`taskherd up` with the API on), finds no
answer that breaks it: no server error, no undocumented status, content type or header, no
body off its schema, no request the document calls invalid accepted, no method the document
does not list answered but with 405 and Allow, no operation served without a token. With a
read token every change is refused (403, documented): no failure either.

Not checked: that every request the document calls valid is accepted (schemathesis's
positive_data_acceptance): a role, a pool or a job's trigger is valid only if the config
defines it, which a document served to anyone does not list. The event stream (/v1/events)
never ends, so it cannot be fuzzed a request at a time; tests/api/test_daemon_api.py reads
it. The agent route takes a run's credential, not an API token (tests/integration).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator

from taskherd.ops import open_queue
from taskherd.ops import tokens as token_ops
from tests.api.test_daemon_api import free_port
from tests.api_server import served
from tests.fleet import Fleet

# Bounded and repeatable: few examples an operation, one seed, no shrinking, one worker.
SCHEMATHESIS = ("--checks", "all", "--exclude-checks", "positive_data_acceptance",
                "--phases", "coverage,fuzzing", "--max-examples", "5", "--seed", "28",
                "--no-shrink", "--workers", "1", "--request-timeout", "10",
                "--exclude-operation-id", "stream_events", "--exclude-operation-id", "agent_op",
                "--suppress-health-check", "all", "--warnings", "off")


def test_the_document_is_valid_openapi(tmp_path):
    with served(tmp_path) as api:
        document = api.client().get("/v1/openapi.json").json()
    errors = [str(error).splitlines()[0] for error in
              OpenAPIV31SpecValidator(document).iter_errors()]
    assert errors == []
    # What the validator does not judge, and a client relies on.
    operations = [operation for path in document["paths"].values()
                  for operation in path.values()]
    ids = [operation["operationId"] for operation in operations]
    assert len(ids) == len(set(ids)) == len(operations)
    assert document["components"]["schemas"]["NewTask"]["additionalProperties"] is False
    assert "role" in document["components"]["schemas"]["JobTable"]["required"]


# A daemon for each token: wrong tokens (schemathesis tries some) are throttled per address,
# and one run's guesses would have the next one's answered 429.
def test_a_path_says_every_method_it_takes(tmp_path):
    with served(tmp_path) as api, api.client("admin") as client:
        options = client.options("/v1/tasks")
        put = client.put("/v1/tasks", json={})
        import_by_get = client.get("/v1/tasks/import")
        not_an_id = client.post("/v1/tasks/abc/cancel")
    assert options.status_code == 204
    assert set(options.headers["allow"].split(", ")) == {"GET", "HEAD", "POST", "OPTIONS"}
    assert put.status_code == 405
    assert set(put.headers["allow"].split(", ")) == set(options.headers["allow"].split(", "))
    assert put.json()["status"] == 405  # a JSON error, as every refusal under /v1/
    # /v1/tasks/import is its own path (POST), not task "import".
    assert import_by_get.status_code == 405 and "POST" in import_by_get.headers["allow"]
    assert not_an_id.status_code == 404 and not_an_id.json()["field"] == "task_id"


@pytest.fixture(params=["admin", "read"])
def daemon(request, tmp_path_factory):
    scope = request.param
    root = tmp_path_factory.mktemp(f"contract-{scope}")
    port = free_port()
    fleet = Fleet(root, f"""
        [daemon]
        database = "q.db"
        durability = "normal"
        timezone = "UTC"

        [roles.worker]
        command = ["true"]

        [[jobs]]
        name = "nightly"
        cron = "0 3 * * *"
        role = "worker"
        title = "nightly"

        [api]
        listen = "127.0.0.1:{port}"
        max_body_bytes = 65536
        """)
    fleet.url = f"http://127.0.0.1:{port}"
    # A name no generated request will hit: DELETE /v1/tokens/{name} must not revoke it.
    with open_queue(fleet.config_path) as queue:
        fleet.token = token_ops.create_token(queue, f"contract-{scope}-q7x", scope, 0.0).token
    fleet.up()
    fleet.wait_until(lambda: _answers(fleet.url), what="the API to listen")
    yield fleet
    fleet.stop()
    fleet.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/v1/openapi.json", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_schemathesis_finds_no_failure(daemon, tmp_path):
    command = [str(Path(sys.executable).parent / "st"), "run", f"{daemon.url}/v1/openapi.json",
               "--header", f"Authorization: Bearer {daemon.token}", *SCHEMATHESIS]
    # Its reports and cache go to this test's folder, never the checkout.
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=150,
                            check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failure" not in result.stdout.split("SUMMARY")[-1]
