"""The dashboard's task lists over HTTP: filters in the address, paging with totals, sorting,
bulk actions confirmed with their count, tasks added by form and by JSON Lines; a wrong
filter or form is a 400 saying why, and changes nothing."""

from __future__ import annotations

import json
import re

import pytest

from taskherd.model import NewTask, TaskState
from taskherd.store.task_lists import TaskFilter
from tests.api_server import served

NOW = 1_800_000_000.0


@pytest.fixture
def api(tmp_path):
    with served(tmp_path) as running:
        yield running


def logged_in(api, scope: str = "operator"):
    client = api.client()
    assert client.post("/login", data={"token": api.tokens[scope]}).status_code == 303
    return client


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf"\s+value="([^"]+)"', page).group(1)


def ids_on(page: str) -> list[int]:
    return [int(found) for found in re.findall(r'<td><a href="/tasks/(\d+)">#\d+</a></td>', page)]


def seed(store, n: int, **fields) -> list[int]:
    made = [store.enqueue(NewTask(**({"role": "coder", "title": f"task {i}"} | fields)), NOW)
            for i in range(n)]
    return [enqueued.task.id for enqueued in made]


def test_a_list_filters_by_what_the_address_says_and_pages_with_the_total(api):
    store = api.queue.store
    coder = seed(store, 7)
    qa = seed(store, 3, role="qa", priority=0, prompt="check the Widget_frame")
    store.cancel(coder[0], NOW + 1, "no longer wanted")
    client = logged_in(api)

    first = client.get("/tasks?role=coder&per_page=3")
    assert first.status_code == 200
    assert ids_on(first.text) == [coder[6], coder[5], coder[4]]  # newest first
    assert "1–3 of 7 tasks" in first.text
    assert 'href="/tasks?role=coder&amp;per_page=3&amp;page=2"' in first.text
    last = client.get("/tasks?role=coder&per_page=3&page=3")
    assert ids_on(last.text) == [coder[0]] and 'id="next"' not in last.text

    assert ids_on(client.get("/tasks?role=coder&sort=oldest&per_page=2").text) == coder[:2]
    assert ids_on(client.get("/tasks?state=cancelled").text) == [coder[0]]
    assert ids_on(client.get("/tasks?state=ready&role=qa").text) == qa[::-1]
    assert ids_on(client.get("/tasks?priority=P0&q=widget_FRAME").text) == qa[::-1]
    assert ids_on(client.get("/tasks?q=get%25fr").text) == []  # `%` matches itself only
    assert ids_on(client.get(f"/tasks?q=%23{coder[3]}").text) == [coder[3]]
    assert ids_on(client.get("/tasks?state=cancelled&finished_from=2027-01-15T08:00"
                             "&finished_to=2027-01-15T08:30").text) == [coder[0]]
    assert ids_on(client.get("/tasks?state=cancelled&finished_from=2027-01-15T09:00").text) \
        == []


@pytest.mark.parametrize("query, reason", [
    ("state=sleeping", "state = 'sleeping': expected one of"),
    ("priority=7", "priority = '7': expected 0, 1, 2 or 3"),
    ("page=0", "page = '0': expected a whole number"),
    ("sort=random", "sort = 'random': expected one of newest, oldest, priority"),
    ("sort=priority&state=dead", "sort = 'priority' orders the tasks of one open state"),
    ("colour=red", "'colour' is not a filter of the task list"),
    ("finished_from=yesterday", "finished_from = 'yesterday': expected a date"),
    ("finished_from=2027-02-01&finished_to=2027-01-01", "the range is empty"),
])
def test_a_wrong_filter_is_refused_with_its_reason(api, query, reason):
    answer = logged_in(api).get(f"/tasks?{query}")
    assert answer.status_code == 400
    assert reason in answer.text.replace("&#x27;", "'")


def test_the_boards_counts_link_to_their_lists(api):
    seed(api.queue.store, 2, role="qa")
    board = logged_in(api).get("/").text
    assert '<a href="/tasks?state=ready&amp;role=qa"' in board
    assert '<a href="/tasks?state=ready"' in board  # the fleet's total


def test_a_bulk_action_says_how_many_before_it_acts(api):
    store = api.queue.store
    dead = seed(store, 3, role="qa", max_attempts=1)
    for task_id in dead:
        store.cancel(task_id, NOW)  # then requeued below, as the dead of a role would be
    other = seed(store, 1)
    store.cancel(other[0], NOW)
    client = logged_in(api)
    listed = client.get("/tasks?state=cancelled&role=qa").text
    asked = client.post("/ui/bulk", data={"csrf": csrf_of(listed), "action": "requeue",
                                          "scope": "all",
                                          "filter": "state=cancelled&role=qa"})
    assert asked.status_code == 200 and "Requeue 3 tasks?" in asked.text
    assert all(store.get_task(i).state is TaskState.CANCELLED for i in dead)  # asked only

    confirm = dict(re.findall(r'name="(\w+)" value="([^"]*)"', asked.text))
    done = client.post("/ui/bulk", data={**confirm, "task": [str(i) for i in dead]})
    assert "Requeue: 3 done" in done.text
    assert all(store.get_task(i).state is TaskState.READY for i in dead)
    assert store.get_task(other[0]).state is TaskState.CANCELLED


def test_a_bulk_action_needs_csrf_and_an_acting_scope_and_reports_what_it_refused(api):
    store = api.queue.store
    ready, done = seed(store, 2)
    store.cancel(done, NOW)
    client = logged_in(api)
    csrf = csrf_of(client.get("/tasks").text)
    ticked = {"action": "cancel", "scope": "ticked", "confirmed": "yes",
              "task": [str(ready), str(done)]}
    assert client.post("/ui/bulk", data={**ticked, "csrf": "forged"}).status_code == 403
    reader = logged_in(api, "read")
    assert reader.post("/ui/bulk", data={**ticked, "csrf": csrf_of(reader.get("/tasks").text)}
                       ).status_code == 403
    assert store.get_task(ready).state is TaskState.READY

    answer = client.post("/ui/bulk", data={**ticked, "csrf": csrf})
    assert "Cancel: 1 done, 1 refused" in answer.text and f"#{done}</a>:" in answer.text
    assert store.get_task(ready).state is TaskState.CANCELLED


def test_tasks_are_added_by_the_form_and_by_json_lines_all_or_nothing(api):
    store = api.queue.store
    client = logged_in(api)
    csrf = csrf_of(client.get("/tasks/new").text)
    added = client.post("/ui/add", data={
        "csrf": csrf, "role": "qa", "priority": "1", "title": "look at it",
        "prompt": "look closely", "dedup_key": "look-1",
        "chain": json.dumps([{"role": "coder", "title": "then fix it"}])},
        follow_redirects=False)
    assert added.status_code == 303
    task = store.get_task(int(added.headers["location"].rsplit("/", 1)[1]))
    assert (task.role, task.priority, task.dedup_key, task.prompt) == ("qa", 1, "look-1",
                                                                       "look closely")
    refused = client.post("/ui/add", data={"csrf": csrf, "role": "qa", "title": "x",
                                           "chain": "[{"})
    assert refused.status_code == 422 and "chain: not valid JSON" in refused.text

    lines = "\n".join([json.dumps({"role": "coder", "title": "one"}),
                       json.dumps({"role": "nobody", "title": "two"}), "{not json",
                       json.dumps({"role": "qa", "title": "three"})])
    before = len(store.filter_tasks(TaskFilter()))
    wrong = client.post("/ui/import", data={"csrf": csrf, "jsonl": lines})
    assert wrong.status_code == 422 and "2 lines are wrong" in wrong.text
    assert "<li>line 2: " in wrong.text and "<li>line 3: not valid JSON" in wrong.text
    fixed = lines.replace("nobody", "qa").replace("{not json", "")
    good = client.post("/ui/import", data={"csrf": csrf, "jsonl": fixed})
    assert good.status_code == 200 and "3 tasks read, 3 added" in good.text
    assert len(store.filter_tasks(TaskFilter())) == before + 3


def test_the_task_page_blocks_with_a_reason_changes_priority_and_refuses_what_it_cannot(api):
    store = api.queue.store
    task_id = seed(store, 1, priority=2)[0]
    client = logged_in(api)
    page = client.get(f"/tasks/{task_id}").text
    assert "strikes" in page and f'id="priority-{task_id}"' in page
    csrf = csrf_of(page)

    moved = client.post(f"/ui/tasks/{task_id}/priority", data={"csrf": csrf, "priority": "0"},
                        follow_redirects=False)
    assert moved.status_code == 303 and store.get_task(task_id).priority == 0
    wrong = client.post(f"/ui/tasks/{task_id}/priority", data={"csrf": csrf, "priority": "9"})
    assert wrong.status_code == 422 and "expected 0, 1, 2 or 3" in wrong.text
    assert store.get_task(task_id).priority == 0

    client.post(f"/ui/tasks/{task_id}/block", data={"csrf": csrf, "reason": "wait for legal"})
    held = store.get_task(task_id)
    assert held.state is TaskState.BLOCKED and held.reason == "wait for legal"
    assert f'id="unblock-{task_id}"' in client.get(f"/tasks/{task_id}").text

    store.cancel(task_id, NOW)
    late = client.post(f"/ui/tasks/{task_id}/priority", data={"csrf": csrf, "priority": "3"})
    assert late.status_code == 409 and "it is cancelled" in late.text
    not_running = client.post(f"/ui/tasks/{task_id}/answer", data={"csrf": csrf, "text": "y"})
    assert not_running.status_code == 409 and store.get_task(task_id).priority == 0


def test_the_task_page_shows_its_chain_its_job_and_its_runs_apart_from_its_strikes(api):
    store = api.queue.store
    parent = seed(store, 1, title="<b>parent</b>")[0]
    child = seed(store, 1, title="child", parent_id=parent,
                 meta={"job": "nightly & more"})[0]
    page = logged_in(api).get(f"/tasks/{child}").text
    assert f'parent <a href="/tasks/{parent}">#{parent}</a>' in page
    assert 'href="/tasks?job=nightly+%26+more"' in page and "<b>parent</b>" not in page
    assert "<td>runs</td><td>0</td>" in page and "<td>strikes</td><td>0 of 3</td>" in page
