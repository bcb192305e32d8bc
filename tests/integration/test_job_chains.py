"""Job chains against a real store and scheduler (once per store), with time passed in: a job
that names a parent fires when the parent's task settles, only once the parent's retries are
spent, after its delay, under its condition; loops are refused; cancels and deletes cascade."""

from __future__ import annotations

import pytest

from taskherd.model import Outcome, TaskState
from taskherd.model.settings import ConfigError
from taskherd.ops import BadInput, Queue
from taskherd.ops import jobs as job_ops
from tests.integration.test_scheduler import T0, Rig

BUILD = {"name": "build", "every": "1h", "max_retries": 1}
DEPLOY = {"name": "deploy", "parent": "build", "delay": "5m"}
ROLLBACK = {"name": "rollback", "parent": "build", "on": "failure"}
PAGE = {"name": "page", "parent": "deploy", "on": "complete", "when": "contains:PAGE"}


@pytest.fixture
def rig(tmp_path, database):
    made = Rig(tmp_path, database, jobs=[BUILD, DEPLOY, ROLLBACK, PAGE])
    made.sync(T0)
    yield made
    made.store.close()


def test_a_child_job_fires_after_its_parent_succeeds_and_its_delay(rig):
    rig.tick(T0 + 3600)
    [build] = rig.tasks("build")
    rig.finish(T0 + 3610, summary="built 1.2")
    rig.tick(T0 + 3611)  # the parent's fire settles here; the delay counts from it
    rig.tick(T0 + 3611 + 299)
    assert rig.tasks("deploy") == []  # the delay has not passed
    rig.tick(T0 + 3611 + 300)
    [deploy] = rig.tasks("deploy")
    assert deploy.state is TaskState.READY and rig.tasks("rollback") == []
    rig.finish(T0 + 4000, summary="deployed, nothing to PAGE about")
    rig.tick(T0 + 4001)
    assert len(rig.tasks("page")) == 1  # `complete`, and the condition held
    assert build.id != deploy.id


def test_failures_do_not_cascade_before_the_retries_are_spent(rig):
    rig.tick(T0 + 3600)
    rig.finish(T0 + 3610, outcome=Outcome.FAILED)
    rig.tick(T0 + 3611)
    assert rig.tasks("rollback") == []  # a retry of build is still to come
    rig.tick(T0 + 3611 + 30)  # the retry: 30 s after the failed fire settled
    assert len(rig.tasks("build")) == 2
    rig.finish(T0 + 3700, outcome=Outcome.FAILED)
    rig.tick(T0 + 3701)
    assert len(rig.tasks("rollback")) == 1 and rig.tasks("deploy") == []


def test_loops_and_unknown_parents_are_refused(rig, tmp_path, database):
    with pytest.raises(ConfigError, match="forever: build → deploy → build|forever: deploy"):
        rig.configure([{**BUILD, "parent": "deploy"}, DEPLOY])
    with pytest.raises(ConfigError, match="parent = 'nobody' is not a job"):
        rig.configure([BUILD, {"name": "x", "parent": "nobody"}])
    with pytest.raises(ConfigError, match="cannot follow itself"):
        rig.configure([{**BUILD, "parent": "build"}])
    queue = Queue(rig.config, rig.store)
    job_ops.add_job(queue, {"name": "a", "role": "worker", "manual": True}, T0)
    job_ops.add_job(queue, {"name": "b", "role": "worker", "parent": "a"}, T0)
    with pytest.raises(BadInput, match="forever: a → b → a|forever: b → a → b"):
        job_ops.update_job(queue, "a", {"parent": "b"}, T0)
    with pytest.raises(BadInput, match="'ghost' is not a job"):
        job_ops.add_job(queue, {"name": "c", "role": "worker", "parent": "ghost"}, T0)


def test_cancel_cascades_and_delete_disables_orphans(rig):
    queue = Queue(rig.config, rig.store)
    job_ops.add_job(queue, {"name": "nightly", "role": "worker", "manual": True}, T0)
    job_ops.add_job(queue, {"name": "report", "role": "worker", "parent": "nightly",
                            "on": "complete"}, T0)
    job_ops.run_job_now(queue, "nightly", T0)
    rig.tick(T0 + 1)
    [nightly] = rig.tasks("nightly")
    rig.finish(T0 + 2)
    rig.tick(T0 + 3)
    [report] = rig.tasks("report")
    job_ops.run_job_now(queue, "nightly", T0 + 4)
    rig.tick(T0 + 5)
    second = next(t for t in rig.tasks("nightly") if t.id != nightly.id)
    cancelled = job_ops.cancel_job(queue, "nightly", T0 + 6)
    assert sorted(t.id for t in cancelled) == sorted([second.id, report.id])
    tree = job_ops.job_tree(queue)
    nightly_node = next(node for node in tree if node["name"] == "nightly")
    assert [child["name"] for child in nightly_node["children"]] == ["report"]
    assert job_ops.delete_job(queue, "nightly", T0 + 7) == ["report"]
    assert rig.store.get_job("report").enabled is False
    [orphan] = [node for node in job_ops.job_tree(queue) if node["name"] == "report"]
    assert orphan["orphan"] is True
