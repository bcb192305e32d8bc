"""The dashboard's fleet pages over HTTP: the nodes with the agents they run, the slots each
role and pool uses across the fleet, the pauses with their reasons and ends; the jobs as a
tree, one job's next fires and fires with their tasks, and its actions (run now, enable,
disable) through the same operations as the CLI, each behind the session's CSRF secret."""

from __future__ import annotations

import re
import time

import pytest

from taskherd.model import NewTask
from taskherd.ops import jobs as job_ops
from taskherd.policy.admission import ClaimRequest
from taskherd.services.scheduler import Scheduler
from tests.api.test_dashboard_pages import logged_in
from tests.api_server import CONFIG, served

FLEET_CONFIG = CONFIG.replace('[roles.qa]\ncommand = ["true"]',
                              '[roles.qa]\ncommand = ["true"]\nmax_concurrent = 4\npool = "gpu"'
                              ).replace('[roles.coder]\ncommand = ["true"]',
                                        '[roles.coder]\ncommand = ["true"]\nscope = "node"'
                              ) + '\n[pools]\ngpu = 2\n'


@pytest.fixture
def api(tmp_path):
    with served(tmp_path, FLEET_CONFIG) as running:
        yield running


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf"\s+value="([^"]+)"', page).group(1)


def test_the_nodes_page_shows_each_node_its_agents_the_slots_in_use_and_the_pauses(api):
    store, now = api.queue.store, time.time()
    store.node_up("n<1>", host="h", pid=1, version="9.8.7", lease=60.0, roles=["qa"],
                  tags=["gpu<b>"], now=now)
    store.enqueue_many([NewTask(role="qa", title=f"t{n}") for n in range(3)], now)
    for _ in range(3):
        claim = store.claim(ClaimRequest("n<1>", now, 3600, roles=["qa"]))
        store.mark_spawned(claim.run.id, now, 3600, pid=None, pid_started_at=None,
                           log_path=None)
    store.set_cooldown("claude", now + 600, "rate limited <until 5>", now)
    store.pause_budget("qa", now + 3600, "qa spent $5.00 of $5.00 today", [], now)
    page = logged_in(api).get("/nodes").text
    assert "n&lt;1&gt;" in page and "<1>" not in page
    assert "9.8.7" in page and "gpu&lt;b&gt;" in page
    assert "3 (qa 3)" in page  # the node's agents by role
    assert "<td>qa</td><td>3 of 4</td><td>cluster</td><td>gpu</td>" in page  # and its pool
    assert "<td>gpu</td><td>3 of 2</td><td>cluster</td>" in page
    assert "<td>coder</td><td>0 (no limit)</td><td>node</td>" in page
    assert "rate limited &lt;until 5&gt;" in page
    assert "budget:qa" in page and "qa spent $5.00 of $5.00 today" in page
    assert "Nodes" in logged_in(api).get("/").text  # in the header of every page


def test_the_jobs_page_shows_the_tree_and_a_jobs_page_its_next_fires_and_fires(api):
    queue, now = api.queue, time.time()
    Scheduler(queue.config, queue.store).sync_config(now=now)
    job_ops.add_job(queue, {"name": "report:x", "role": "qa", "parent": "nightly",
                            "on": "complete"}, now)
    client = logged_in(api)
    jobs = client.get("/jobs").text
    tree = jobs[jobs.index('id="job-tree"'):]
    assert re.search(r'nightly</a><ul><li><a href="/jobs/report%3Ax">report:x</a>',
                     tree), tree
    page = client.get("/jobs/nightly")
    assert page.status_code == 200 and "<title>Job" in page.text
    assert page.text.count("03:00:00 UTC") == 5  # its next five fires, 03:00 each day
    assert "it has not fired yet" in page.text
    answer = client.post("/ui/jobs/nightly/run", data={"csrf": csrf_of(page.text),
                                                       "back": "/jobs/nightly"},
                         follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/jobs/nightly"
    Scheduler(queue.config, queue.store).run_once(time.time() + 1)
    [fire] = queue.store.list_fires(job="nightly", limit=10)
    page = client.get("/jobs/nightly").text
    assert f'<a href="/tasks/{fire.task_id}">#{fire.task_id}</a>' in page
    assert client.get("/jobs/nobody").status_code == 404


def test_a_job_is_disabled_and_enabled_from_the_dashboard_with_the_pages_csrf_secret(api):
    queue = api.queue
    Scheduler(queue.config, queue.store).sync_config(now=time.time())
    client = logged_in(api)
    csrf = csrf_of(client.get("/jobs").text)
    refused = client.post("/ui/jobs/nightly/disable", data={"csrf": "wrong"})
    assert refused.status_code == 403 and queue.store.get_job("nightly").enabled
    assert client.post("/ui/jobs/nightly/explode", data={"csrf": csrf}).status_code == 404
    client.post("/ui/jobs/nightly/disable", data={"csrf": csrf, "back": "/jobs"})
    assert queue.store.get_job("nightly").enabled is False
    assert "none: the job is disabled" in client.get("/jobs/nightly").text
    client.post("/ui/jobs/nightly/enable", data={"csrf": csrf, "back": "/jobs"})
    assert queue.store.get_job("nightly").enabled is True
    reader = logged_in(api, "read")
    assert "Disable" not in reader.get("/jobs").text  # a read token sees no buttons
    denied = reader.post("/ui/jobs/nightly/disable",
                         data={"csrf": csrf_of(reader.get("/jobs").text)})
    assert denied.status_code == 403 and queue.store.get_job("nightly").enabled
