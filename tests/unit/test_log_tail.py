"""The tail of a run log is read from its end: the right lines whatever the size or ending."""

from __future__ import annotations

import io

import pytest

from taskherd.cli.logs import CHUNK, _tail


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
