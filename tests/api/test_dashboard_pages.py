"""The dashboard's pages over HTTP (the browser test drives them live): a session only
after a good token, text of others escaped, a chain shown as a tree, CSRF on actions."""

from __future__ import annotations

import re
import time

import pytest

from taskherd.model import NewTask, TaskState
from taskherd.policy.admission import ClaimRequest
from tests.api_server import served

PAGES = ("/", "/dead", "/review", "/blocked", "/jobs", "/cooldowns", "/cost")


@pytest.fixture
def api(tmp_path):
    with served(tmp_path) as running:
        yield running


def logged_in(api, scope: str = "operator"):
    client = api.client()
    answer = client.post("/login", data={"token": api.tokens[scope]}, follow_redirects=False)
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert api.tokens[scope] not in cookie  # the cookie names a session, not the token
    return client


def test_pages_need_a_login_and_an_intake_token_gets_none(api):
    client = api.client()
    for page in PAGES:
        answer = client.get(page, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == "/login"
    assert client.post("/login", data={"token": "thk_wrong"}).status_code == 401
    assert client.post("/login", data={"token": api.tokens["intake"]}).status_code == 401
    assert "taskherd_session" not in client.cookies


def test_every_page_renders_and_escapes_what_others_wrote(api):
    store = api.queue.store
    store.enqueue(NewTask(role="coder", title="<script>alert(1)</script>", priority=0), 1000.0)
    client = logged_in(api)
    for page in (*PAGES, "/tasks/1"):
        answer = client.get(page)
        assert answer.status_code == 200, page
        assert "<script>alert(1)" not in answer.text
        assert "default-src 'self'" in answer.headers["content-security-policy"]
    board = client.get("/").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in board  # the P0 list shows it, escaped
    assert "no node that is up runs role coder" in board  # why the P0 task waits
    assert client.get("/tasks/99").status_code == 404


def test_the_board_says_which_node_starts_nothing_new_and_why(api):
    store = api.queue.store
    store.node_up("n1", host="h", pid=1, version="t", lease=60.0, roles=["coder"],
                  now=time.time())
    store.enqueue(NewTask(role="coder", title="urgent", priority=0), 1000.0)
    client = logged_in(api)
    assert 'id="paused"' not in client.get("/").text
    store.pause_node("n1", "0 B free at /data/<logs>, below min_free_disk 512 MiB", [],
                     time.time())
    board = client.get("/").text
    assert "Node n1 starts nothing new since" in board
    assert "0 B free at /data/&lt;logs&gt;, below min_free_disk 512 MiB" in board
    assert "node n1 starts nothing new: 0 B free" in board  # why the P0 task waits
    store.resume_node("n1", [], time.time())
    assert 'id="paused"' not in client.get("/").text


def test_the_board_says_whose_endpoint_is_down_since_when(api):
    store = api.queue.store
    runtime = api.queue.config.roles["coder"].runtime
    store.node_up("n1", host="h", pid=1, version="t", lease=60.0, roles=["coder"],
                  now=time.time())
    store.enqueue(NewTask(role="coder", title="urgent", priority=0), 1000.0)
    client = logged_in(api)
    now = time.time()
    store.endpoint_down(runtime, now + 30, "endpoint down: HTTP 502 <bad gateway>", 30.0, [],
                        now)
    board = client.get("/").text
    assert f"Runtime {runtime}: endpoint down since " in board and ", next probe " in board
    assert "HTTP 502 &lt;bad gateway&gt;" in board
    assert f"runtime {runtime}&#x27;s endpoint is down since " in board  # why the P0 waits
    store.clear_cooldown(runtime)
    assert 'id="paused"' not in client.get("/").text


def test_a_chain_is_shown_as_a_tree(api):
    store = api.queue.store
    root = store.enqueue(NewTask(role="coder", title="plan"), 1000.0).task
    child = store.enqueue(NewTask(role="coder", title="build", parent_id=root.id), 1000.0).task
    store.enqueue(NewTask(role="qa", title="test it", parent_id=child.id), 1000.0)
    page = logged_in(api).get(f"/tasks/{child.id}").text
    chain = page[page.index('id="chain"'):]
    assert chain.index("plan") < chain.index("build") < chain.index("test it")
    assert f"<strong>#{child.id} build</strong>" in chain


def test_an_action_needs_the_pages_csrf_secret_and_an_acting_scope(api):
    task = api.queue.store.enqueue(NewTask(role="coder", title="stop me"), 1000.0).task
    operator = logged_in(api)
    csrf = re.search(r'name="csrf"\s+value="([^"]+)"', operator.get("/").text).group(1)
    assert operator.post(f"/ui/tasks/{task.id}/cancel", data={}).status_code == 403
    assert operator.post(f"/ui/tasks/{task.id}/cancel", data={"csrf": "forged"}
                         ).status_code == 403
    # The API's routes take the session only with the same secret in a header.
    assert operator.post(f"/v1/tasks/{task.id}/cancel").status_code == 403
    assert api.queue.store.get_task(task.id).state is TaskState.READY
    reader = logged_in(api, "read")
    reader_csrf = re.search(r'name="csrf"\s+value="([^"]+)"', reader.get("/").text).group(1)
    assert reader.post(f"/ui/tasks/{task.id}/cancel", data={"csrf": reader_csrf}
                       ).status_code == 403
    moved = operator.post(f"/ui/tasks/{task.id}/cancel",
                          data={"csrf": csrf, "back": "//evil.example/"}, follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == "/"
    assert api.queue.store.get_task(task.id).state is TaskState.CANCELLED
    header = operator.post(f"/v1/tasks/{task.id}/requeue", headers={"x-csrf-token": csrf})
    assert header.status_code == 200


def test_logging_out_ends_the_session(api):
    client = logged_in(api)
    csrf = re.search(r'name="csrf"\s+value="([^"]+)"', client.get("/").text).group(1)
    client.post("/logout", data={"csrf": csrf})
    assert client.get("/", follow_redirects=False).status_code == 303


def test_the_cost_page_charts_each_roles_spend_by_day(api):
    import time

    from taskherd.model import Outcome, RunResult
    from taskherd.model.settings import RetryPolicy

    store, now = api.queue.store, time.time()
    for role, dollars in (("coder", 0.5), ("qa", 0.25)):
        store.enqueue(NewTask(role=role, title=f"{role} work"), now - 60)
        claim = store.claim(ClaimRequest("n1", now - 60, 60, roles=[role]))
        store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, cost_usd=dollars),
                         RetryPolicy(), now - 30)
    page = logged_in(api).get("/cost").text
    assert page.count("<rect") == 2  # a bar part per role, today
    assert "coder" in page and "0.5000" in page and "0.2500" in page


def test_the_cost_page_and_a_task_page_name_the_runs_of_unknown_cost(api):
    import time

    from taskherd.model import Outcome, RunResult
    from taskherd.model.settings import RetryPolicy

    store, now = api.queue.store, time.time()
    tasks = []
    for role, dollars in (("coder", None), ("coder", None), ("qa", 0.25), ("qa", None)):
        tasks.append(store.enqueue(NewTask(role=role, title=f"{role} work"), now - 60).task)
        claim = store.claim(ClaimRequest("n1", now - 60, 60, roles=[role]))
        store.mark_spawned(claim.run.id, now - 60, 60, pid=1, pid_started_at=1.0,
                           log_path=None)
        store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, cost_usd=dollars),
                         RetryPolicy(), now - 30)
    client = logged_in(api)
    page = client.get("/cost").text
    rows = {cells[0]: cells[-2:] for cells in (re.findall(r"<td>(.*?)</td>", row)
                                               for row in re.findall(r"<tr>(<td>.*?)</tr>", page))}
    # Today's cell and the total: never $0 for runs of unknown cost.
    assert rows["coder"] == ["unknown (2 runs)", "unknown (2 runs)"]
    assert rows["qa"] == ["$0.2500 + 1 run of unknown cost"] * 2
    assert "unknown (1 run)" in client.get(f"/tasks/{tasks[0].id}").text


def test_the_board_lists_p0_tasks_ready_then_pending_each_bounded(api):
    from taskherd.ops.board import BOARD_ROWS

    store, now = api.queue.store, 1000.0
    store.enqueue_many([NewTask(role="coder", title=f"later {n}") for n in range(3)], now)
    urgent = [store.enqueue(NewTask(role="coder", title=f"urgent {n}", priority=0), now).task
              for n in range(BOARD_ROWS + 2)]
    asked = store.enqueue(NewTask(role="qa", title="approve me", priority=0, pending=True),
                          now).task
    page = logged_in(api).get("/").text
    p0 = page[page.index('id="p0"'):page.index('id="running"')]
    shown = re.findall(r'href="/tasks/(\d+)"', p0)
    # The oldest P0 tasks in claim order, as many as the board shows, then the pending one.
    assert shown == [str(task.id) for task in urgent[:BOARD_ROWS]] + [str(asked.id)]
    assert "approval (pending)" in p0 and "later" not in p0
    assert f"The first {BOARD_ROWS} ready" in p0


def test_every_statement_of_the_board_reads_tasks_and_runs_through_an_index(api):
    """A scan of `tasks` or `runs` costs the page 250 ms at a million tasks kept as history."""
    import time

    from taskherd.api import pages

    store, now = api.queue.store, time.time()
    store.enqueue(NewTask(role="coder", title="run me"), now)
    store.claim(ClaimRequest("n1", now, 600, roles=["coder"]))
    store.enqueue(NewTask(role="coder", title="urgent", priority=0), now)
    store.enqueue(NewTask(role="coder", title="ask", priority=0, pending=True), now)
    token = store.list_api_tokens()[0]
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    try:
        html = pages.board(pages.View(api.queue, now, token, "csrf", False, "/"))
    finally:
        store._conn.set_trace_callback(None)
    assert "urgent" in html and "run me" in html
    reads = [sql for sql in dict.fromkeys(statements) if sql.lstrip().upper().startswith(
        ("SELECT", "WITH"))]
    for sql in reads:
        plan = [row[3] for row in store._conn.execute("EXPLAIN QUERY PLAN " + sql)]
        scans = [step for step in plan if step in ("SCAN tasks", "SCAN runs")]
        assert not scans, f"{' '.join(sql.split())[:120]}: {plan}"


def test_a_gathered_event_stream_tells_many_changes_in_few_messages(api):
    """The dashboard's stream (`gather`): every change counted, at most one message a gap."""
    import json
    import threading

    import httpx

    messages: list[dict] = []
    hello, all_told = threading.Event(), threading.Event()
    added = 30

    def read() -> None:
        with httpx.stream("GET", api.url + "/v1/events?gather=1", timeout=30,
                          headers={"Authorization": f"Bearer {api.tokens['read']}"}) as stream:
            kind = None
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind == "hello":
                    hello.set()
                elif line.startswith("data: ") and kind == "changed":
                    messages.append(json.loads(line[6:]))
                    if sum(message["events"] for message in messages) >= added:
                        all_told.set()
                        return

    threading.Thread(target=read, daemon=True).start()
    assert hello.wait(10)
    for number in range(added):
        api.queue.store.enqueue(NewTask(role="coder", title=f"task {number}"), 1000.0)
    assert all_told.wait(20), f"told {messages}"
    assert sum(message["events"] for message in messages) == added
    assert len(messages) < added and messages[0]["kinds"] == ["task_added"]


def test_the_board_comes_on_its_own_stream_until_the_token_is_revoked(api):
    """A page on the board needs no fetch: its stream carries the board's fragment after each
    change (gathered), and says `logout` once the session's token is revoked."""
    import json

    import httpx

    from taskherd.ops import tokens as token_ops

    assert api.client().get("/board/events").status_code == 401  # no session, no board
    assert 'data-stream="/board/events"' in logged_in(api, "read").get("/").text
    client = logged_in(api, "read")
    with httpx.stream("GET", api.url + "/board/events", timeout=30,
                      cookies=dict(client.cookies)) as stream:
        assert stream.status_code == 200
        told: list[tuple[str, str]] = []
        kind = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                told.append((kind, line[6:]))
                if kind == "hello":
                    api.queue.store.enqueue(
                        NewTask(role="coder", title="streamed", priority=0), 1000.0)
                elif kind == "board":
                    token_ops.revoke_token(api.queue, "read", 1001.0)
                    api.queue.store.enqueue(NewTask(role="coder", title="after"), 1001.0)
                elif kind == "logout":
                    break
    kinds = [kind for kind, _ in told]
    assert kinds == ["hello", "board", "logout"], kinds
    board = json.loads(told[1][1])
    assert "streamed" in board["html"] and board["seq"] >= 1
    assert "csrf" not in board["html"] and "<html" not in board["html"]  # the fragment only


def test_a_bad_gather_is_refused_and_names_the_parameter(api):
    client = api.client("read")
    for bad in ("0", "0.05", "61", "nan", "inf", "soon", ""):
        answer = client.get("/v1/events", params={"gather": bad})
        assert answer.status_code == 400, bad
        assert answer.json()["field"] == "gather" and "0.1 to 60" in answer.json()["error"]


def test_the_shared_board_fragment_shows_every_change_the_page_was_told(api):
    """Dashboards share one rendering of the board; a page asking with the number of the last
    change told to it (`seen`) always gets a fragment that shows that change."""
    import json

    import httpx

    client = logged_in(api, "read")
    assert "no P0 task is waiting" in client.get("/?fragment=1&seen=0").text
    with httpx.stream("GET", api.url + "/v1/events?gather=0.1", timeout=30,
                      headers={"Authorization": f"Bearer {api.tokens['read']}"}) as stream:
        lines = stream.iter_lines()
        for title in ("first", "second"):
            task = api.queue.store.enqueue(NewTask(role="coder", title=title, priority=0),
                                           1000.0).task
            told = None
            for line in lines:
                if line.startswith("data: ") and '"seq"' in line:
                    told = json.loads(line[6:])
                    break
            assert told is not None and told["kinds"] == ["task_added"]
            fragment = client.get(f"/?fragment=1&seen={told['seq']}").text
            assert f"#{task.id} {title}" in fragment
    # Any viewer gets the same fragment: it holds no action and no secret of a session.
    operator = logged_in(api, "operator").get(f"/?fragment=1&seen={told['seq']}").text
    assert "csrf" not in operator and "second" in operator
    assert client.get("/?fragment=1&seen=soon").status_code == 200  # renders, shares nothing


def test_the_hub_counts_the_changes_nobody_reads(api):
    """The run counters alone listen (no stream is open): a task added is passed over
    undecoded, yet counted, as the board's shared fragment reads its number from the count."""
    hub = api.server.api.hub
    before = hub.sequence
    for n in range(3):
        api.queue.store.enqueue(NewTask(role="qa", title=f"t{n}"), 1000.0)
    deadline = time.monotonic() + 20
    while hub.sequence < before + 3:
        assert time.monotonic() < deadline, f"counted {hub.sequence - before} of 3"
        time.sleep(0.01)
    assert hub.sequence == before + 3 and hub._listener.passed >= 3
