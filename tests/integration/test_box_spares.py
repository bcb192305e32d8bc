"""Box spares (taskherd.host.forkserver, shim.in_box): a boxed role's box made before the
claim, with real bwrap, a real fork server and real cgroups.

A run through a spare must be the run a cold box gives: its own files and nothing else of
the log dir, no capability left, in its run's cgroups; a spare that is gone or made of
other options leaves the run to the cold box, which starts it once.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path

import psutil
import pytest

from taskherd.host import cgroups, forkserver, procs
from taskherd.host.cgroups import Caps
from taskherd.host.sandbox import AgentBox, Bubblewrap
from taskherd.model.settings import IsolationSettings
from tests.integration.test_forkserver import TIMEOUT, until, wait_gone

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("CI"),
    reason="bubblewrap is not installed (apt install bubblewrap)")

LOOKS = """
grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status
stage="$(dirname "$(dirname "$1")")/.box-stage"
echo "stage holds: $(ls -A "$stage" 2>/dev/null | tr '\n' ' ')."
echo "stage uncovered: $(unshare -Um sh -c "umount '$stage' && ls -A '$stage/logs'" 2>&1 \
    | tr '\n' ' ')."
grep " $1 " /proc/self/mountinfo | cut -d' ' -f6 | sed 's/^/prompt mount: /'
echo "logs: $(ls "$(dirname "$1")" | tr '\\n' ' ')"
cat "$1"
echo x >> "$1" 2>/dev/null || echo "prompt not writable"
echo ran >> "$2"
"""


BOXED = IsolationSettings(mode="bwrap")


class Boxed:
    """A data dir, its log dir and a workdir, and the plans of a boxed role's runs there."""

    def __init__(self, root: Path):
        self.data = root / "data"
        self.logs = self.data / "logs"
        self.work = root / "work"
        for folder in (self.logs, self.work, self.data / "door"):
            folder.mkdir(parents=True)
        self.bwrap = Bubblewrap().path()
        self.env = procs.agent_env(os.environ["PATH"], {}, {"TASKHERD_RUN_ID": "1"})
        self.ran = self.work / "ran"  # writable in the box

    def box(self, run: int, settings: IsolationSettings) -> AgentBox:
        files = (self.logs / f"run-{run}.log", self.logs / f"run-{run}.prompt")
        files[1].write_text(f"the prompt of run {run}\n")
        return AgentBox(settings, "command", self.work, self.data,
                        self.data / "door" / "agent.sock", run_files=files)

    def argv(self, run: int, program: str = LOOKS) -> list[str]:
        return ["sh", "-c", program, "sh", str(self.logs / f"run-{run}.prompt"), str(self.ran)]

    def plan(self, run: int, settings: IsolationSettings = BOXED,
             argv: list[str] | None = None, cgroup_bases: tuple[Path, ...] = ()):
        return self.box(run, settings).spare_plan("worker", argv or self.argv(run), self.env,
                                                  self.bwrap, self.logs, cgroup_bases)

    def spawn(self, run: int, settings: IsolationSettings = BOXED,
              argv: list[str] | None = None, cgroup_bases: tuple[Path, ...] = (),
              **given) -> procs.SpawnedProcess:
        argv = argv or self.argv(run)
        box = self.box(run, settings)
        log_path = self.logs / f"run-{run}.log"
        log_path.touch(mode=0o600)  # as the runtime makes it: a run file bound in
        return procs.spawn(box.wrap(argv, self.env, self.bwrap), env=self.env,
                           cwd=str(self.work), log_path=log_path, header={"run": run},
                           box=box.spare_plan("worker", argv, self.env, self.bwrap, self.logs,
                                              cgroup_bases),
                           **given)


@pytest.fixture
def boxed(tmp_path):
    forkserver.start()
    assert forkserver.wait_until_up(TIMEOUT), "the fork server did not start"
    yield Boxed(tmp_path)
    forkserver.stop()


def spare_of(plan) -> int:
    """The pid of the box spare `plan` would take, once there is one."""
    until(lambda: forkserver.box_spare_pid(plan) is not None, "a box spare")
    pid = forkserver.box_spare_pid(plan)
    assert pid is not None
    return pid


def in_box(spare: int) -> list[psutil.Process]:
    """The spare's in-box starter, once bwrap has started it."""
    return [process for process in psutil.Process(spare).children(recursive=True)
            if "--in-box" in process.cmdline() and process.name() != "bwrap"]


def spare_made(plan) -> int:
    """A spare for `plan`, its box up (a capped run finds a box not yet up, and goes cold)."""
    forkserver.want_box_spare(plan)
    spare = spare_of(plan)
    until(lambda: in_box(spare), "the in-box starter")
    return spare


def ended(process: procs.SpawnedProcess) -> procs.ExitStatus:
    return asyncio.run(asyncio.wait_for(process.handle.wait_exit(), TIMEOUT))


def header(boxed: Boxed, run: int) -> dict:
    """The run's log header, once its starter wrote it (before its agent's exec)."""
    log_path = boxed.logs / f"run-{run}.log"
    until(lambda: procs.read_header(log_path) is not None, "the log's header")
    found = procs.read_header(log_path)
    assert found is not None
    return found


def test_a_run_through_a_box_spare_sees_its_own_files_alone_and_holds_no_capability(boxed):
    (boxed.logs / "run-7.prompt").write_text("another run's prompt")
    spare = spare_made(boxed.plan(0))
    process = boxed.spawn(1)
    assert process.pid == spare  # the spare's shim is the run's
    assert ended(process).code == 0
    said = (boxed.logs / "run-1.log").read_text()
    assert header(boxed, 1)["box"] == "spare"
    for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert f"{field}:\t0000000000000000" in said, said
    # The stage (the whole log dir) is covered before the exec, and the cover cannot be
    # taken off, not even from a user namespace of the agent's own (the kernel refuses).
    assert "stage holds: ." in said, said
    uncovered = next(line for line in said.splitlines() if line.startswith("stage uncovered: "))
    assert "run-" not in uncovered and "umount" in uncovered, uncovered
    assert "prompt mount: ro," in said and "prompt not writable" in said
    assert "the prompt of run 1" in said
    logs_line = next(line for line in said.splitlines() if line.startswith("logs: "))
    assert set(logs_line.split()[1:]) == {"run-1.log", "run-1.prompt"}
    assert boxed.ran.read_text() == "ran\n"


def test_without_a_spare_the_same_run_goes_the_cold_way(boxed):
    process = boxed.spawn(1)
    assert ended(process).code == 0
    said = (boxed.logs / "run-1.log").read_text()
    assert "box" not in header(boxed, 1)
    assert "prompt mount: ro," in said and "the prompt of run 1" in said
    assert set(next(line for line in said.splitlines() if line.startswith("logs: "))
               .split()[1:]) == {"run-1.log", "run-1.prompt"}
    # and asked for one, which the next run takes
    spare = spare_of(boxed.plan(2))
    second = boxed.spawn(2)
    assert second.pid == spare and ended(second).code == 0
    assert header(boxed, 2)["box"] == "spare"


HOST = cgroups.host()


@pytest.mark.skipif(not HOST.bases and not os.environ.get("CI"),
                    reason=f"this host has no cgroup this user may write: {HOST.missing}")
@pytest.mark.parametrize("joined_by", ["its starter", "the daemon"])
def test_a_capped_run_through_a_box_spare_runs_in_its_cgroup(boxed, joined_by):
    # Its starter joins from inside where the cgroups' folder is bound in (v1), else the
    # daemon moves it in before giving the run.
    if joined_by == "its starter" and HOST.version != 1:
        pytest.skip("a box's starter joins its cgroups itself on cgroup v1 only")
    bases = (HOST.bases["pids"],) if joined_by == "its starter" else ()
    group = cgroups.create(boxed.data, 1, Caps(pids=64), HOST)
    try:
        spare_made(boxed.plan(0, cgroup_bases=bases))
        process = boxed.spawn(1, argv=["sh", "-c", f"ls -A {boxed.data}/.box-stage "
                                       "2>/dev/null | wc -l; exec sleep 60"],
                              cgroups=group.join_files,
                              cgroup_bases=bases)
        assert header(boxed, 1)["box"] == "spare"
        shim = psutil.Process(process.pid)

        def sleepers():
            return [child for child in shim.children(recursive=True) if child.name() == "sleep"]

        until(sleepers, "the agent's exec")
        [sleeper] = sleepers()
        for folder in group.folders:
            members = {int(pid) for pid in (folder / "cgroup.procs").read_text().split()}
            assert sleeper.pid in members
            assert process.pid not in members  # the shim records the exit: never capped
        # Neither the log dir's stage nor the cgroups' is left in the agent's reach.
        assert (boxed.logs / "run-1.log").read_text().splitlines()[1] == "0"
        procs.terminate(process.handle, grace=1)
    finally:
        cgroups.release(boxed.data, 1, HOST)


def test_a_changed_box_drops_the_old_spare_and_the_run_goes_cold(boxed):
    old = spare_made(boxed.plan(0))
    loopback = IsolationSettings(mode="bwrap", network="loopback")  # a reload changed it
    process = boxed.spawn(1, loopback)
    assert ended(process).code == 0
    assert "box" not in header(boxed, 1) and process.pid != old
    assert wait_gone(old)
    new = spare_of(boxed.plan(2, loopback))
    second = boxed.spawn(2, loopback)
    assert second.pid == new and ended(second).code == 0
    assert header(boxed, 2)["box"] == "spare"


def test_a_dead_spare_leaves_the_run_to_the_cold_box_which_starts_it_once(boxed):
    spare = spare_made(boxed.plan(0))
    os.killpg(spare, signal.SIGKILL)
    assert wait_gone(spare)
    process = boxed.spawn(1)
    assert ended(process).code == 0 and process.pid != spare
    assert "box" not in header(boxed, 1)
    assert boxed.ran.read_text() == "ran\n"


def test_a_spare_that_does_not_answer_is_killed_and_the_run_starts_cold_once(
        boxed, monkeypatch):
    monkeypatch.setattr(forkserver, "REPLY_TIMEOUT", 0.5)
    spare = spare_made(boxed.plan(0))
    for process in in_box(spare):
        process.suspend()  # wedged: it never answers
    process = boxed.spawn(1)
    assert wait_gone(spare)  # killed with its box before the run went cold
    assert ended(process).code == 0 and process.pid != spare
    assert "box" not in header(boxed, 1)
    assert boxed.ran.read_text() == "ran\n"


def test_a_reload_that_changes_the_box_replaces_the_spare_before_any_run(boxed):
    old = spare_made(boxed.plan(0))
    changed = boxed.plan(0, IsolationSettings(mode="bwrap", network="loopback"))
    new = spare_made(changed)  # what the daemon asks for at a reload
    assert new != old and wait_gone(old)
    assert forkserver.box_spare_pid(boxed.plan(0)) is None


def test_the_fifos_of_an_earlier_daemons_spares_are_removed(boxed):
    folder = boxed.data / "boxes"
    folder.mkdir()
    for name in ("box-1-1", f"box-{os.getpid()}-1"):
        os.mkfifo(folder / name, 0o600)
    forkserver.clear_box_channels(folder)
    assert os.listdir(folder) == [f"box-{os.getpid()}-1"]


def test_an_agent_its_box_cannot_start_ends_with_127_and_the_reason_in_its_log(boxed):
    argv = ["/work/no-such-program"]
    spare = spare_made(boxed.plan(0, argv=argv))
    process = boxed.spawn(1, argv=argv)
    assert process.pid == spare
    assert ended(process).code == 127
    said = (boxed.logs / "run-1.log").read_text()
    assert "# taskherd exec failed: /work/no-such-program:" in said
