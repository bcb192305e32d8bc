"""The tail of a run log is read from its end: the right lines whatever the size or ending."""

from __future__ import annotations

import io

import pytest

from taskherd.cli.logs import CHUNK, _tail
from taskherd.host.logfile import MAX_LINE


@pytest.mark.parametrize(("text", "lines", "expected"), [
    (b"a\nb\nc\n", 2, b"b\nc\n"),
    (b"a\nb\nc", 2, b"b\nc"),  # the last line need not end with a newline
    (b"a\nb\n", 5, b"a\nb\n"),  # fewer lines than asked: all of them
    (b"", 3, b""),
    (b"a\nb\n", 0, b""),
    (b"\n\nx\n", 2, b"\nx\n"),  # blank lines count as lines
])
def test_tail_returns_the_last_lines(text, lines, expected):
    assert _tail(io.BytesIO(text), lines) == expected


def test_tail_of_a_log_longer_than_one_read_crosses_chunk_borders():
    rows = [f"line {i:06d} ".encode() + b"x" * 90 + b"\n" for i in range(3 * CHUNK // 100)]
    log = io.BytesIO(b"".join(rows))
    assert _tail(log, 1000) == b"".join(rows[-1000:])
    assert log.tell() == len(log.getvalue())  # a follow goes on from the end


class CountingLog(io.BytesIO):
    """A log in memory that counts the bytes read from it."""

    bytes_read = 0

    def read(self, size=-1):
        data = super().read(size)
        self.bytes_read += len(data)
        return data


def test_tail_of_a_single_line_log_reads_a_bounded_window_and_marks_the_cut():
    log = CountingLog(b"# taskherd {}\n" + b"x" * (8 << 20) + b"END")
    shown = _tail(log, 5)
    assert shown.endswith(b"x" * 100 + b"END")  # the end of the line, as written
    assert shown.startswith("[… line cut".encode())  # a visible marker, not a silent cut
    assert len(shown) < MAX_LINE + 100
    assert log.bytes_read <= 5 * (MAX_LINE + 1) + 2  # not the 8 MiB behind it
    assert log.tell() == len(log.getvalue())


def test_tail_cuts_a_long_line_among_short_ones_and_says_how_much():
    long_line = b"y" * (MAX_LINE + 500)
    log = io.BytesIO(b"first\n" + long_line + b"\nlast\n")
    assert _tail(log, 3) == (b"first\n" + "[… line cut: 500 bytes cut] ".encode()
                             + long_line[-MAX_LINE:] + b"\nlast\n")


@pytest.mark.parametrize("lines", [1, 2, 7])
def test_tail_reads_in_proportion_to_the_lines_asked_not_the_log(lines):
    rows = [b"%06d\n" % i for i in range(200_000)]  # 1.4 MB
    log = CountingLog(b"".join(rows))
    assert _tail(log, lines) == b"".join(rows[-lines:])
    assert log.bytes_read <= CHUNK + 1


def test_tail_of_only_newlines_and_of_a_lone_newline():
    assert _tail(io.BytesIO(b"\n" * 100), 3) == b"\n\n\n"
    assert _tail(io.BytesIO(b"\n"), 1) == b"\n"
    assert _tail(io.BytesIO(b"no newline at all"), 1) == b"no newline at all"
