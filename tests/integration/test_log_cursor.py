"""A log followed while its shim cuts it: every read is whole (no byte from before a cut beside
one from after it), in order, and what was cut is passed over as a gap, never read as output."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import sys
import time

from taskherd.host import procs
from taskherd.host.logfile import CUT_LINE_SIZE, LogCursor, log_head, parse_cut_line, tail
from tests.integration.fifo_gate import release

LINES = 300_000
# 100,000 lines, a wait at the gate (the test reads meanwhile), then 200,000 more.
WRITER = f"""
import sys
for i in range({LINES}):
    if i == 100_000:
        sys.stdout.flush()
        open(sys.argv[1]).read()
    print(f'line {{i:07d}}')
"""


class Reader:
    """Reads the log through a cursor and keeps the numbers of the lines it read in order,
    None where the output was cut or passed over."""

    def __init__(self, log):
        self.log, self.cursor, self.pending = log, LogCursor(), b""
        self.numbers, self.skips, self.torn = [], 0, []

    def read_all_there_is(self):
        while (chunk := self.cursor.read(self.log, 512)).data or chunk.skipped or chunk.busy:
            data = chunk.data
            if chunk.skipped:
                self.skips += 1
                self.numbers.append(None)  # the next line may be any later one
                self.pending, data = b"", data[data.find(b"\n") + 1:]  # the line it cut into
            lines = (self.pending + data).split(b"\n")
            self.pending = lines.pop()
            for line in lines:
                if line.startswith(b"# taskherd cut "):
                    self.numbers.append(None)  # the line that says the head ends here
                elif re.fullmatch(rb"line \d{7}", line):
                    self.numbers.append(int(line[5:]))
                elif not line.startswith(b"# taskherd "):
                    self.torn.append(line)


def cuts(path):
    with open(path, "rb") as log:
        head = log_head(log.fileno())
        return parse_cut_line(os.pread(log.fileno(), CUT_LINE_SIZE, head)) or 0


def wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_cursor_reads_a_log_the_shim_cuts_under_it_in_order_with_its_gaps(tmp_path, gate):
    env = procs.agent_env(os.environ["PATH"], {}, {})
    spawned = procs.spawn([sys.executable, "-S", "-c", WRITER, str(gate)], env=env,
                          cwd=str(tmp_path), log_path=tmp_path / "run.log", header={"run": 1},
                          max_log_bytes=16 << 10)
    try:
        with open(spawned.log_path, "rb") as log:
            reader = Reader(log)
            wait_until(lambda: tail(log, 1) == b"line 0099999\n")  # the writer waits at the gate
            reader.read_all_there_is()
            cut_at_gate = cuts(spawned.log_path)
            release(gate)
            wait_until(lambda: cuts(spawned.log_path) > cut_at_gate + 2 * (16 << 10))
            while spawned.handle.is_alive():
                reader.read_all_there_is()  # behind at first, then as the writer writes
            reader.read_all_there_is()
    finally:
        if spawned.handle.is_alive():  # a failed test leaves no writer waiting at its gate
            procs.terminate(spawned.handle, grace=0.1)
    assert asyncio.run(spawned.handle.wait_exit()).code == 0
    numbers = reader.numbers
    assert reader.skips > 0
    assert numbers[0] == 0 and 99_999 in numbers and numbers[-1] == LINES - 1
    assert len(reader.torn) <= 1  # the head's last line, which the cut line follows
    for before, after in itertools.pairwise(numbers):
        if before is not None and after is not None:
            assert after == before + 1, f"line {after} read right after line {before}"


def test_a_cursor_that_looked_before_the_header_was_written_still_sees_the_cut(tmp_path):
    from taskherd.host import shim

    path = tmp_path / "run.log"
    path.touch()  # the daemon makes the file; the shim writes its header a moment later
    with open(path, "rb") as log:
        cursor = LogCursor()
        assert cursor.read(log, 1 << 20).data == b""
        header = b'# taskherd {"run": 1, "log_head": 100, "pid": 1, "time": 1}\n'
        head = header + b"h" * (100 - len(header))
        path.write_bytes(head + shim._cut_line(b"5000") + b"the latest line\n")
        chunk = cursor.read(log, 1 << 20)
        assert chunk.data == head + shim._cut_line(b"5000") + b"the latest line\n"
        assert cursor.offset == 100 + 5000 + len(b"the latest line\n")  # output, cut included
