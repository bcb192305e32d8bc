"""Where a forked shim's private memory comes from: the pages copied per run, by side.

    .venv/bin/python bench/shim_pages.py --runs 5 [--boxed]

A forked shim shares its fork server's pages copy-on-write; each page either side writes
after the fork is copied, and the copy that stays with the shim is its own (private) from
then on. This starts the real fork server (``shim.py --serve``), hands it --runs runs of
`sleep 60` one at a time (their logs capped, as a role's is by default: the shim copies the
output), and reads /proc/PID/pagemap (needs root: page frame numbers) before and after
each: a writable page whose frame changed was copied. It prints, per run, the KiB copied by
the server (forking the next spare: the old frames stay with the spare forked before) and
by the waiting shim (its run taken, its agent started), by mapping; then Private_Dirty and
Pss of the last shim (smaps_rollup) and of its processes. With --boxed each run is a
sandboxed agent's (`bwrap OPTIONS -- sleep 60`, the options taskherd.host.sandbox builds
for a role with mode = "bwrap", and an agent's environment): its box's two bwrap processes
are shown too. Beside them, the floor: a minimal Python loop that only forks (`os.fork`,
one byte read and written), whose copies per fork are what any Python fork server pays.
"""

from __future__ import annotations

import argparse
import collections
import marshal
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taskherd.host import forkserver, logfile, procs, sandbox
from taskherd.model.settings import DEFAULT_MAX_LOG_BYTES, IsolationSettings

FRAME = (1 << 55) - 1  # pagemap: bits 0-54 the page frame number, bit 63 present
MINIMAL_LOOP = """
import gc, os, sys
gc.collect(); gc.freeze()
go, answer = int(sys.argv[1]), int(sys.argv[2])
while os.read(go, 1):
    pid = os.fork()
    if pid == 0:
        os.close(go)
        os.read(0, 1)  # a spare waiting, until the bench closes its input
        os._exit(0)
    os.write(answer, b"%d\\n" % pid)
"""


def frames(pid: int) -> dict[int, tuple[int, str]]:
    """Each present writable page of `pid`: address → (frame, mapping's name)."""
    found = {}
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in maps:
            fields = line.split()
            if "w" not in fields[1]:
                continue
            start, end = (int(text, 16) for text in fields[0].split("-"))
            name = fields[5].rsplit("/", 1)[-1] if len(fields) > 5 else "[anon]"
            pagemap.seek(start // 4096 * 8)
            data = pagemap.read((end - start) // 4096 * 8)
            for index, (entry,) in enumerate(struct.iter_unpack("Q", data)):
                if entry >> 63:
                    found[start + index * 4096] = (entry & FRAME, name)
    return found


def copied(before: dict[int, tuple[int, str]], after: dict[int, tuple[int, str]]) -> dict:
    kib: collections.Counter[str] = collections.Counter()
    for address, (frame, name) in after.items():
        if before.get(address, (None,))[0] != frame:
            kib[name] += 4
    return kib


def shown(kib: dict) -> str:
    top = ", ".join(f"{name} {size}" for name, size in sorted(kib.items(), key=lambda i: -i[1])
                    if size)
    return f"{sum(kib.values()):5d} KiB ({top})"


def rollup(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/smaps_rollup") as file:
        return {fields[0].rstrip(":"): int(fields[1]) for fields in map(str.split, file)
                if len(fields) == 3 and fields[2] == "kB"}


def children(pid: int) -> list[int]:
    return [int(text) for text in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def agent_run(folder: Path, boxed: bool) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of an idle agent, in its box when `boxed`."""
    argv = ["sleep", "60"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/"}
    if not boxed:
        return argv, env
    env = procs.agent_env(env["PATH"], {}, {"TASKHERD_TASK_ID": "1", "TASKHERD_RUN_ID": "1",
                                            "TASKHERD_ROLE": "boxed",
                                            "TASKHERD_HOME": str(folder / "data")})
    data = folder / "data"
    (data / "doors").mkdir(parents=True, exist_ok=True)
    (folder / "work").mkdir(exist_ok=True)
    box = sandbox.AgentBox(IsolationSettings(mode="bwrap"), "command", folder / "work", data,
                           data / "doors" / "1.sock", run_files=(folder / "0.log",))
    bwrap, problem = sandbox.probe()
    if bwrap is None:
        raise SystemExit(f"no sandbox to measure: {problem}")
    return box.wrap(argv, env, bwrap), env


def tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children(found[-1])
    return found


def fork_server(runs: int, folder: Path, boxed: bool) -> None:
    server = subprocess.Popen(forkserver.shim_command("--serve"), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, bufsize=0, env={},
                              start_new_session=True)
    shims: list[int] = []
    try:
        assert server.stdout.readline() == forkserver.UP  # its first spare forked
        for index in range(runs):
            spare = next(pid for pid in children(server.pid) if pid not in shims)
            spare_before, server_before = frames(spare), frames(server.pid)
            argv, env = agent_run(folder, boxed)
            # The log capped as a role's is by default: the shim copies the agent's output.
            head, tail = logfile.layout(DEFAULT_MAX_LOG_BYTES, 128)
            run = {"log": str(folder / f"{index}.log"), "input": None, "stdin": None,
                   "exit_path": str(folder / f"{index}.exit"), "header": '{"run": 0',
                   "env": env, "argv": argv, "cwd": "/", "log_head": head, "log_tail": tail,
                   "cgroups": [], "files": [], "copier_cgroups": []}
            server.stdin.write(marshal.dumps(run).hex().encode() + b"\n")
            shims.append(int(server.stdout.readline().split()[0]))
            time.sleep(0.3)  # the agent started, the next spare forked
            print(f"run {index}: server copied {shown(copied(server_before, frames(server.pid)))}"
                  f"; shim copied {shown(copied(spare_before, frames(spare)))}")
        use = rollup(shims[-1])
        print(f"last shim: Private_Dirty {use['Private_Dirty']} KiB, Pss {use['Pss']} KiB")
        for pid in tree(shims[-1])[1:]:
            use = rollup(pid)
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            print(f"  its {name} ({pid}): Private_Dirty {use['Private_Dirty']} KiB, Pss "
                  f"{use['Pss']} KiB")
    finally:
        server.stdin.close()
        server.wait()
        for shim in shims:
            os.killpg(shim, 15)


def minimal_loop(forks: int) -> None:
    go_read, go_write = os.pipe()
    answer_read, answer_write = os.pipe()
    loop = subprocess.Popen([sys.executable, "-I", "-S", "-c", MINIMAL_LOOP, str(go_read),
                             str(answer_write)], pass_fds=(go_read, answer_write),
                            stdin=subprocess.PIPE)
    try:
        time.sleep(0.3)
        for index in range(forks):
            before = frames(loop.pid)
            os.write(go_write, b"x")
            os.read(answer_read, 64)
            time.sleep(0.2)
            kib = copied(before, frames(loop.pid))
            print(f"fork {index}: the minimal loop copied {shown(kib)}")
    finally:
        os.close(go_write)
        loop.stdin.close()  # its children read their end of input and exit
        loop.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--boxed", action="store_true",
                        help="each run a sandboxed agent's (bwrap, an agent's environment)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("page frame numbers are read as root only")
    print(f"load average {os.getloadavg()[0]:.2f}; Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="taskherd-shim-pages-") as folder:
        fork_server(args.runs, Path(folder), args.boxed)
    minimal_loop(args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
