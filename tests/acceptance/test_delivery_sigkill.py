"""A delivery survives `kill -9` of the daemon between the settle's commit and the target's
acknowledgement: the outbox row written with the settle is sent by the next daemon, and the
event is acknowledged exactly once."""

from __future__ import annotations

import signal

from taskherd.model import TaskState
from taskherd.policy.admission import ClaimRequest
from tests.e2e.fake_webhook import HANG, FakeWebhook
from tests.fleet import Fleet


def test_sigkill_between_commit_and_send_loses_no_delivery(tmp_path):
    hook = FakeWebhook([HANG]).start()  # the first send never gets its answer
    fleet = Fleet(tmp_path, """
        [daemon]
        data_dir = "data"
        poll_interval = "0.2s"
        [delivery]
        timeout = "1s"
        backoff = "0.5s"
        [roles.worker]
        command = ["true"]
        deliver_to = ["@ops"]
        on = ["completed"]
    """)
    try:
        fleet.cli("alias", "add", "ops", "webhook", hook.url)
        task = fleet.add("report me")
        fleet.up()
        assert fleet.wait_final(task.id).state is TaskState.COMPLETED
        hook.wait_for(lambda: hook.requests, timeout=20)  # the send is under way
        fleet.stop(signal.SIGKILL)
        pending = fleet.store.list_deliveries()
        assert [(d.state, d.attempts) for d in pending] == [("pending", 1)]

        fleet.up()
        fleet.wait_until(lambda: fleet.store.list_deliveries()[0].state == "sent",
                         what="the delivery to be sent after the restart")
        assert [body["task"]["id"] for body in hook.acknowledged] == [task.id]
        ids = {request.body["delivery_id"] for request in hook.requests}
        assert ids == {pending[0].id}  # the retry says it is the same delivery
        status = fleet.cli("alias", "status", "--json").stdout
        assert '"sent": 1' in status
    finally:
        fleet.close()
        hook.stop()


def test_doctor_names_failed_deliveries_and_missing_aliases(tmp_path):
    from taskherd.model import NewTask, Outcome, RunResult
    from taskherd.model.settings import RetryPolicy
    from taskherd.services.delivery import Deliverer, DeliverySettings

    fleet = Fleet(tmp_path, """
        [daemon]
        data_dir = "data"
        [roles.worker]
        command = ["true"]
        deliver_to = ["@gone"]
    """)
    try:
        doctor = fleet.cli("doctor", check=False)
        assert "roles name alias(es) that do not exist: @gone" in doctor.stdout
        fleet.cli("alias", "add", "gone", "command", "false")
        task = fleet.store.enqueue(NewTask(role="worker", title="t",
                                           meta={"deliver_to": ["gone"]}), 1.0).task
        claim = fleet.store.claim(ClaimRequest("n1", 1.0, 60.0))
        fleet.store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, 0), RetryPolicy(), 2.0)
        Deliverer(fleet.store, lambda: 3.0, DeliverySettings(max_attempts=1)).run_once(3.0)
        doctor = fleet.cli("doctor", check=False)
        assert "deliveries kept as failed: @gone 1" in doctor.stdout
        assert task.id == fleet.store.list_deliveries()[0].task_id
    finally:
        fleet.close()
