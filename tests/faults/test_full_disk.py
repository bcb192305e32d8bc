"""A full disk is the machine's fault, not the agent's: on a real tmpfs that agents fill, the
node pauses with its reason shown, no task takes a strike or dies, what is added meanwhile
waits, and dispatch resumes in the first pass after space is freed. Real daemon, real
processes, real ENOSPC; the tmpfs needs root (as these tests run here and in CI)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, TaskState
from taskherd.policy.admission import ClaimRequest
from taskherd.services.dispatcher import Dispatcher
from taskherd.services.supervisor import SWEEP_EVERY, Supervisor
from taskherd.store import StoreDiskFull, StoreError, open_store
from tests.fleet import PYTHON, Fleet, agent, until

MIB = 1 << 20

# Fills the data disk once per task (a flag outside the disk says it did), as a build's output
# would, then fails on it: exit 1 without a word, its shim perhaps unable to write its exit
# status. Every other time it does its work.
FILLER = """
    import os, sys
    flags, disk = sys.argv[1], sys.argv[2]
    task = os.environ["TASKHERD_TASK_ID"]
    prompt = sys.stdin.read()
    flag = os.path.join(flags, "filled-" + task)
    if "fill" in prompt and not os.path.exists(flag):
        open(flag, "w").close()
        with open(os.path.join(disk, "filler-" + task), "ab", buffering=0) as filler:
            try:
                while True:
                    filler.write(bytes(1 << 16))
            except OSError:
                pass
        open(os.path.join(flags, "full-" + task), "w").close()
        sys.exit(1)
    print("TASK_COMPLETE: done")
"""


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 16 MiB tmpfs, unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the fault tests run as root in CI)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mount)],
                   check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path, leave: int = 0) -> None:
    """Write zeros to `path` until the disk refuses (ENOSPC), then give back `leave` bytes."""
    with open(path, "ab", buffering=0) as file:
        try:
            while True:
                file.write(bytes(1 << 16))
        except OSError:
            pass
        file.truncate(file.tell() - leave)


def dispatch_passes(log: str) -> list[str]:
    return [line for line in log.splitlines() if "dispatch pass:" in line]


def test_agents_fill_the_disk_and_nothing_is_lost(tmp_path: Path, small_disk: Path):
    flags = tmp_path / "flags"
    flags.mkdir()
    told = tmp_path / "told.jsonl"
    program = agent(tmp_path, "filler", FILLER)
    fleet = Fleet(tmp_path, f"""
        [daemon]
        data_dir = "{small_disk}"
        timezone = "UTC"
        max_concurrent = 2
        min_free_disk = "4MiB"

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}", "{flags}", "{small_disk}"]
        deliver_to = ["@ops"]
        on = ["node_paused", "node_resumed"]
    """)
    # Room the disk gets back before the agents' files go: enough for the database, not
    # enough to pass the floor.
    ballast = small_disk / "ballast"
    ballast.write_bytes(bytes(MIB))
    fleet.cli("alias", "add", "ops", "file", str(told))
    try:
        # One agent fills it: a second one started meanwhile could find the disk full before
        # its start was recorded (the database shares the disk), a race no run of this
        # test should depend on.
        fillers = [fleet.add("fill 1", prompt="fill the disk").id]
        fleet.up()
        fleet.wait_until(lambda: all((flags / f"full-{t}").exists() for t in fillers),
                         what="the agent to fill the disk")
        ballast.unlink()  # the database can write again; the disk stays below its floor
        node = fleet.wait_until(
            lambda: next((n for n in fleet.store.list_nodes() if n.paused_reason), None),
            what="the pause on the node's record")
        assert "below min_free_disk 4.0 MiB" in node.paused_reason
        fleet.wait_until(lambda: all(fleet.store.get_task(t).state is TaskState.READY
                                     for t in fillers), what="the fillers' runs to settle")

        added = [fleet.add(f"while full {n}", prompt="work").id for n in range(5)]
        status = fleet.cli("status")
        assert "PAUSED since" in status.stdout and "below min_free_disk" in status.stdout
        as_json = json.loads(fleet.cli("status", "--json").stdout)
        assert as_json["nodes"][0]["paused_reason"] == node.paused_reason
        doctor = fleet.cli("doctor", check=False).stdout
        assert any(line.startswith("problem disk") and "below min_free_disk" in line
                   for line in doctor.splitlines()), doctor

        freed_at = time.time()
        before = fleet.daemon_log.read_text()
        for filler in small_disk.glob("filler-*"):
            filler.unlink()
        for task_id in fillers + added:
            assert fleet.wait_final(task_id).state is TaskState.COMPLETED
        assert fleet.daemon.poll() is None  # it rode it out: no crash, no restart
        # Notifications go out from the delivery loop, after the change that made them: the
        # resume is told once that loop has come round (a stop before would keep it, to be
        # sent by the next daemon).
        fleet.wait_until(lambda: told.exists() and "node_resumed" in told.read_text(),
                         what="the resume to be told")
    finally:
        fleet.stop()
        fleet.close()

    after = fleet.daemon_log.read_text()[len(before):]
    passes = dispatch_passes(after)
    started = next(i for i, line in enumerate(passes) if "paused" not in line)
    # At most the pass under way as the files went still found the disk short.
    assert started <= 1, passes[:started + 1]

    store = sqlite3.connect(small_disk / "taskherd.db")
    try:
        tasks = store.execute("SELECT id, attempts, rescues, state FROM tasks").fetchall()
        assert store.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        runs = store.execute("SELECT task_id, outcome, error, claimed_at FROM runs "
                             "ORDER BY id").fetchall()
    finally:
        store.close()
    assert [(attempts, rescues, state) for _, attempts, rescues, state in tasks] == [
        (0, 0, "completed")] * (len(fillers) + len(added))  # no strike, no counter, none dead
    first_runs = [run for run in runs if run[0] in fillers][:1]
    assert all("not the agent's fault" in (error or "") for _, _, error, _ in first_runs)
    assert all(claimed >= freed_at for task_id, _, _, claimed in runs if task_id in added)
    events = [json.loads(line)["event"] for line in told.read_text().splitlines()]
    assert events == ["node_paused", "node_resumed"]


# Waits for its release file (outside the disk), then fails without a word: a run that ends
# while the disk is full.
WAITER = """
    import os, sys, time
    release = sys.argv[1]
    while not os.path.exists(release):
        time.sleep(0.02)
    sys.exit(1)
"""


def disk_config(tmp_path: Path, data_dir: Path, database: Path, argv: list[str]):
    """A node whose data dir is `data_dir`, with no floor: only what writing says stops it."""
    return parse_config({
        "daemon": {"database": str(database), "data_dir": str(data_dir), "timezone": "UTC",
                   "node": "n1", "min_free_disk": "0"},
        "roles": {"worker": {"command": argv}},
    }, base_dir=tmp_path)


def test_a_start_that_meets_a_full_disk_releases_the_claim_as_it_was(
        tmp_path: Path, small_disk: Path):
    """ENOSPC while starting: a disk with one page free passes a floor of 0, and the run's
    prompt does not fit. The claim goes back untouched, the node starts nothing while a probe
    write fails, and its first pass after space returns (and the fault's hold) starts it."""
    done = agent(tmp_path, "done", 'print("TASK_COMPLETE: done")\n')
    config = disk_config(tmp_path, small_disk, tmp_path / "q.db", [PYTHON, "-S", done])
    store = open_store(str(tmp_path / "q.db"), durability="normal")

    async def scenario():
        supervisor = Supervisor(config, store, time.time)
        dispatcher = Dispatcher(config, store, supervisor.view, supervisor.start,
                                disk=supervisor.disk)
        task = store.enqueue(NewTask(role="worker", title="t", prompt="the work " * 8000),
                             time.time()).task
        store.node_up("n1", host="vm", pid=os.getpid(), version="test", lease=60.0,
                      roles=["worker"], now=time.time())
        filler = small_disk / "filler"
        fill(filler, leave=4096)
        now = time.time()
        assert dispatcher.run_once(now) == {"started": 0}
        [run] = store.runs_of_task(task.id)
        assert run.outcome is Outcome.LOST and "disk full: [Errno 28]" in run.error
        released = store.get_task(task.id)
        assert (released.state, released.attempts, released.rescues) == (TaskState.READY, 0, 0)

        # What the start wrote took the last page: the disk reads full, and a probe would fail.
        assert dispatcher.run_once(now + 2)["disk_paused"] == 1
        [node] = store.list_nodes()
        assert node.paused_reason.endswith("disk is full")
        filler.unlink()
        assert dispatcher.run_once(now + 2.1) == {"started": 1}  # a probe went through
        assert store.list_nodes()[0].paused_reason is None
        finished = await until(lambda: (t := store.get_task(task.id)).finished_at and t)
        assert (finished.state, finished.attempts) == (TaskState.COMPLETED, 0)

    try:
        asyncio.run(scenario())
    finally:
        store.close()


def test_a_settle_the_full_database_refuses_is_kept_and_written_later(
        tmp_path: Path, small_disk: Path):
    """A run ends while the database's disk is full: SQLite answers "database or disk is
    full" to its settle. The run stays open, the settle judged then (the disk's fault, no
    strike) is written once space is back; a sweep of the node's open runs leaves it alone."""
    release = tmp_path / "release"
    waiter = agent(tmp_path, "waiter", WAITER)
    database = small_disk / "q.db"
    config = disk_config(tmp_path, small_disk, database, [PYTHON, "-S", waiter, str(release)])
    store = open_store(str(database), durability="normal")

    async def scenario():
        supervisor = Supervisor(config, store, time.time)
        task = store.enqueue(NewTask(role="worker", title="t"), time.time()).task
        claim = store.claim(ClaimRequest("n1", time.time(), 60.0))
        live = supervisor.start(claim, time.time())
        assert live is not None
        assert store.checkpoint(truncate=True)  # an empty WAL: the next write must grow it
        filler = small_disk / "filler"
        fill(filler)
        release.touch()
        await until(lambda: claim.run.id in supervisor.settles)
        assert store.get_run(claim.run.id).ended_at is None  # open, nothing lost
        later = time.time() + 2 * SWEEP_EVERY  # a pass that sweeps the node's open runs
        assert supervisor.run_once(later)["adopted"] == 0
        filler.unlink()
        assert supervisor.run_once(later + 1)["settled_late"] == 1
        settled = store.get_task(task.id)
        assert (settled.state, settled.attempts, settled.rescues) == (TaskState.READY, 0, 0)
        assert "not the agent's fault" in store.get_run(claim.run.id).error

    try:
        asyncio.run(scenario())
    finally:
        store.close()
    check = sqlite3.connect(database)
    try:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        check.close()


def test_a_large_task_on_a_full_disk_is_refused_as_disk_full(tmp_path: Path,
                                                              small_disk: Path):
    """`task add` with a large prompt on a full disk: the store raises its typed error that
    says "disk full" (the CLI prints it as one line), and adds nothing."""
    database = small_disk / "q.db"
    store = open_store(str(database), durability="normal")
    try:
        store.enqueue(NewTask(role="worker", title="before"), time.time())
        assert store.checkpoint(truncate=True)  # an empty WAL: the next write must grow it
        fill(small_disk / "filler")
        with pytest.raises(StoreDiskFull, match="^disk full") as refused:
            store.enqueue(NewTask(role="worker", title="big", prompt="x" * (1 << 20)),
                          time.time())
        assert isinstance(refused.value, StoreError)
        prompt = tmp_path / "prompt.txt"  # (outside the full disk)
        prompt.write_text("x" * (1 << 20))
        config = tmp_path / "taskherd.toml"
        config.write_text(f'[daemon]\ndatabase = "{database}"\n[roles.worker]\n'
                          'command = ["true"]\n')
        added = subprocess.run([PYTHON, "-m", "taskherd", "--config", str(config), "task",
                                "add", "big", "--role", "worker", "--prompt-file", str(prompt)],
                               capture_output=True, text=True, timeout=60, check=False)
        assert added.returncode != 0 and "Traceback" not in added.stderr
        assert [line for line in added.stderr.splitlines() if "disk full" in line]
        assert [t.title for t in store.list_tasks()] == ["before"]
    finally:
        store.close()
    fill(small_disk / "filler")  # what closing the last connection gave back (its WAL index)
    with pytest.raises(StoreDiskFull, match="^disk full"):
        open_store(str(database), durability="normal")
    (small_disk / "filler").unlink()
    check = sqlite3.connect(database)
    try:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        check.close()


def test_a_group_of_adds_whose_commit_meets_a_full_disk_keeps_none_and_tells_each(
        small_disk: Path, monkeypatch: pytest.MonkeyPatch):
    """The API's store thread commits a batch's tasks together: when that commit meets a full
    disk, every add of the group is answered with the disk's error (none was kept, though each
    one's own write had gone through), nothing is told to listeners, and once space is freed
    the next group is kept."""
    from taskherd.api.store_thread import StoreThread
    from taskherd.store import sqlite as sqlite_store
    from tests.integration.test_grouped_writes import run_batch

    database = small_disk / "q.db"
    store = open_store(str(database), durability="normal", autocheckpoint=False)
    worker = StoreThread(hold=store.events_held, group=store.writes_grouped)
    try:
        store.enqueue(NewTask(role="worker", title="before"), time.time())
        assert store.checkpoint(truncate=True)  # an empty WAL: the commit must grow it
        fill(small_disk / "filler")
        told: list[int | None] = []
        publish = sqlite_store.publish
        monkeypatch.setattr(sqlite_store, "publish", lambda folder, events: publish(
            folder, [told.append(event.task_id) or event for event in events]))
        answers = run_batch(worker, store, [
            NewTask(role="worker", title="small"),
            NewTask(role="worker", title="big", prompt="x" * (1 << 20)),
            NewTask(role="worker", title="small too")])
        assert all(isinstance(answer, StoreDiskFull) for answer in answers), answers
        assert "disk full" in str(answers[0]) and told == []
        (small_disk / "filler").unlink()
        assert [t.title for t in store.list_tasks()] == ["before"]
        after = run_batch(worker, store, [NewTask(role="worker", title="after")])[0]
        assert [t.title for t in store.list_tasks()] == ["before", "after"]
        assert told == [after.task.id]
    finally:
        store.close()
