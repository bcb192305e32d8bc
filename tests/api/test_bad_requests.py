"""Bad requests of every kind: a 4xx whose JSON names the field and the reason, and the
database byte-for-byte as it was (the file and its write-ahead log)."""

from __future__ import annotations

import hashlib

import pytest

from taskherd.model import NewTask
from tests.api_server import served

JSON = {"content-type": "application/json"}
# (case, scope, method, url, body as bytes or JSON, status, field or None, words in the error)
CASES = [
    ("no body", "admin", "POST", "/v1/tasks", b"", 422, "body", "JSON object"),
    ("not JSON", "admin", "POST", "/v1/tasks", b'{"role": "coder",', 400, "body", "not valid JSON"),
    ("not UTF-8", "admin", "POST", "/v1/tasks", b'{"role": "\xff\xfe"}', 400, "body", "UTF-8"),
    ("an array", "admin", "POST", "/v1/tasks", [1, 2], 422, "body", "JSON object"),
    ("no title", "admin", "POST", "/v1/tasks", {"role": "coder"}, 422, "title", "required"),
    ("unknown field", "admin", "POST", "/v1/tasks",
     {"role": "coder", "title": "t", "colour": "red"}, 422, "colour", "colour"),
    ("bad priority", "admin", "POST", "/v1/tasks",
     {"role": "coder", "title": "t", "priority": "P9"}, 422, "priority", "P9"),
    ("unknown role", "admin", "POST", "/v1/tasks", {"role": "painter", "title": "t"},
     422, "role", "painter"),
    ("NaN", "admin", "POST", "/v1/tasks", b'{"role": "coder", "title": "t", "run_after": NaN}',
     400, "body", "NaN"),
    ("title with a newline", "admin", "POST", "/v1/tasks", {"role": "coder", "title": "a\nb"},
     422, "title", "one line"),
    ("one bad item of an import", "admin", "POST", "/v1/tasks/import",
     {"tasks": [{"role": "coder", "title": "ok"}, {"role": "coder"}]}, 422, "title", "item 2"),
    ("too large", "admin", "POST", "/v1/tasks",
     {"role": "coder", "title": "t", "prompt": "x" * 70_000}, 413, "body", "at most 65536"),
    ("not JSON content", "admin", "POST", "/v1/tasks", ("text/plain", b"hello"), 415,
     "content-type", "application/json"),
    ("unknown task", "admin", "POST", "/v1/tasks/9999/cancel", None, 404, None, "9999"),
    ("wrong state", "admin", "POST", "/v1/tasks/1/approve", None, 409, None, "it is ready"),
    ("unknown transition field", "admin", "POST", "/v1/tasks/1/cancel", {"why": "x"}, 422,
     "why", "accepted: reason"),
    ("reason not text", "admin", "POST", "/v1/tasks/1/block", {"reason": 5}, 422, "reason", "5"),
    ("limit not a number", "read", "GET", "/v1/tasks?limit=lots", None, 400, "limit", "lots"),
    ("unknown state", "read", "GET", "/v1/tasks?state=sleeping", None, 422, "state", "sleeping"),
    ("bad cron", "admin", "POST", "/v1/jobs", {"name": "j", "cron": "61 * * * *",
                                              "role": "coder", "title": "t"}, 422, None, "61"),
    ("a config job changed here", "admin", "PATCH", "/v1/jobs/nightly", {"title": "x"}, 404,
     None, "nightly"),
    ("bad token scope", "admin", "POST", "/v1/tokens", {"name": "x", "scope": "root"}, 422,
     "scope", "root"),
    ("intake for another role", "intake-qa", "POST", "/v1/tasks",
     {"role": "coder", "title": "t"}, 403, None, "qa"),
    ("read token adding", "read", "POST", "/v1/tasks", {"role": "coder", "title": "t"}, 403,
     None, "scope 'read'"),
    ("id not a number", "admin", "POST", "/v1/tasks/abc/cancel", None, 404, "task_id", "abc"),
    ("cost by what", "read", "GET", "/v1/cost?by=week", None, 422, "by", "week"),
]


def digests(folder) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.glob("taskherd.db*")) if not path.name.endswith(".lock")
            and path.suffix != ".events" and path.is_file() and not path.name.endswith("-shm")}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with served(tmp_path_factory.mktemp("bad")) as running:
        running.queue.store.enqueue(NewTask(role="coder", title="ready one"), 1000.0)
        yield running


@pytest.mark.parametrize("case, scope, method, url, body, status, field, words", CASES,
                         ids=[case[0] for case in CASES])
def test_a_bad_request_is_refused_naming_the_field_and_changes_nothing(
        api, case, scope, method, url, body, status, field, words):
    before = digests(api.folder)
    with api.client(scope) as client:
        if isinstance(body, tuple):
            response = client.request(method, url, content=body[1],
                                      headers={"content-type": body[0]})
        elif isinstance(body, bytes):
            response = client.request(method, url, content=body, headers=JSON)
        else:
            response = client.request(method, url, json=body)
    assert response.status_code == status, response.text
    answer = response.json()
    assert answer["status"] == status
    assert words in answer["error"]
    if field is not None:
        assert answer.get("field") == field, answer
    assert digests(api.folder) == before


def test_there_are_at_least_twenty_kinds():
    assert len(CASES) >= 20
