"""A run's log and prompt are renamed from empty private files made between runs (the
supervisor's pass), not created between its claim and its agent's exec; real agents."""

from __future__ import annotations

import asyncio
import os
import stat
import time

from taskherd.config import parse_config
from taskherd.host.run_files import PREFIX, SpareFiles
from taskherd.model import NewTask, TaskState
from taskherd.policy.admission import ClaimRequest
from taskherd.runtimes.base import write_prompt
from taskherd.services.starts import SPARE_RUN_FILES
from taskherd.services.supervisor import Supervisor
from taskherd.store.sqlite import SQLiteStore
from tests.fleet import until


def spares(folder) -> dict[int, str]:
    """The spares waiting in `folder`, by inode."""
    return {entry.inode(): entry.name for entry in os.scandir(folder)
            if entry.name.startswith(PREFIX)}


def test_a_run_takes_its_log_and_prompt_from_files_made_ahead(tmp_path):
    config = parse_config({
        "daemon": {"database": "q.db", "data_dir": "data", "timezone": "UTC"},
        "roles": {"worker": {"command": ["cat", "{prompt_file}"]}},
    }, base_dir=tmp_path)
    store = SQLiteStore(tmp_path / "q.db", durability="normal")

    async def scenario():
        supervisor = Supervisor(config, store, time.time)
        supervisor.run_once(time.time())  # a pass has them made (in a thread)
        made = await until(lambda: len(found := spares(config.daemon.log_dir))
                           == SPARE_RUN_FILES and found)
        assert made and all(stat.S_IMODE(os.stat(config.daemon.log_dir / name).st_mode)
                            == 0o600 for name in made.values())
        task = store.enqueue(NewTask(role="worker", title="t", prompt="secret plan ✓"),
                             time.time()).task
        claim = store.claim(ClaimRequest("n1", time.time(), 60.0))
        assert supervisor.start(claim, time.time()) is not None
        await until(lambda: store.get_task(task.id).state is TaskState.COMPLETED)
        # The two taken are made again soon after the start, with no pass of the supervisor.
        await until(lambda: len(spares(config.daemon.log_dir)) == len(made))
        return claim.run.id, made

    try:
        run_id, made = asyncio.run(scenario())
        log, prompt = (config.daemon.log_dir / f"run-{run_id}.{kind}" for kind in ("log", "prompt"))
        assert {log.stat().st_ino, prompt.stat().st_ino} <= set(made)  # renamed, not made
        assert stat.S_IMODE(prompt.stat().st_mode) == 0o600
        assert prompt.read_text() == "secret plan ✓"
        assert log.read_text().splitlines()[1:] == ["secret plan ✓"]
    finally:
        store.close()


def test_spares_an_earlier_daemon_left_go_and_none_replaces_a_file(tmp_path):
    (tmp_path / f"{PREFIX}1-1").touch()  # an earlier daemon's
    files = SpareFiles(tmp_path, keep=2)
    assert files.fill() == 2 and files.fill() == 0
    assert len(spares(tmp_path)) == 2 and f"{PREFIX}1-1" not in spares(tmp_path).values()
    kept = tmp_path / "run-1.log"
    kept.write_text("an earlier run's output\n")
    assert not files.take(kept)
    assert kept.read_text() == "an earlier run's output\n" and len(spares(tmp_path)) == 2
    files.take_private(tmp_path / "run-2.prompt")
    assert len(spares(tmp_path)) == 1 and (tmp_path / "run-2.prompt").read_bytes() == b""


def test_a_prompt_is_written_whole_over_a_longer_file(tmp_path):
    path = tmp_path / "run-1.prompt"
    write_prompt(path, "first, and longer")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_prompt(path, "second")
    assert path.read_text() == "second"
