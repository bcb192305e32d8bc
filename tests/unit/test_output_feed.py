"""What the supervisor reads of a run's output: a bounded share a second whatever the agent
writes, the latest output when it is behind, whole lines only, and the end read whole."""

from __future__ import annotations

from taskherd.services.output_feed import (
    FINAL_BYTES,
    LONGEST_LINE,
    READ_BYTES_PER_SECOND,
    READ_LINES_PER_SECOND,
    OutputFeed,
)


def grow(path, data):
    with open(path, "ab") as log:
        log.write(data)


def test_far_behind_it_reads_the_latest_share_from_a_line_and_says_what_it_passed_over(tmp_path):
    log = tmp_path / "run.log"
    rows = [b"row %08d %s\n" % (i, b"." * 50) for i in range(200_000)]  # 12.6 MB
    grow(log, b"".join(rows))
    feed = OutputFeed(log)
    feed.read(0.0)  # the first look: a burst's worth
    grow(log, b"".join(rows))
    fresh, _ = feed.read(1.0)  # a second later: a second's share
    assert len(fresh.data) <= READ_BYTES_PER_SECOND
    assert fresh.gap and fresh.passed_over > len(rows) * len(rows[0]) - READ_BYTES_PER_SECOND
    assert fresh.data.count(b"\n") <= READ_LINES_PER_SECOND
    assert fresh.data.endswith(rows[-1]) and fresh.data.startswith(b"row ")
    assert feed.offset == 2 * len(b"".join(rows))


def test_a_line_longer_than_the_longest_is_dropped_and_the_next_read_whole(tmp_path):
    log = tmp_path / "run.log"
    feed = OutputFeed(log)
    fed = []
    grow(log, b"before\n")
    for second in range(1, 12):  # half a MiB a second of one line, never ending
        grow(log, b"z" * (LONGEST_LINE // 8))
        fresh, _ = feed.read(float(second))
        fed.append(fresh)
    grow(log, b"z" * 10 + b"\nafter\n")
    fresh, _ = feed.read(12.0)
    assert fed[0].data.startswith(b"before\nzzz")  # a line begun: the reader holds it
    assert any(f.gap for f in fed if f is not None)  # the reader forgets the line it held
    assert all(b"z" * 100 not in f.data for f in fed[-3:] if f is not None)
    assert fresh.data == b"after\n"


def test_the_end_of_a_run_is_read_whole_even_far_behind(tmp_path):
    log = tmp_path / "run.log"
    result = b'{"type":"result","result":"' + b"r" * (2 << 20) + b'"}\n'
    grow(log, b"noise\n" * 2_000_000 + result)
    feed = OutputFeed(log)
    fresh, _ = feed.read(0.0, final=True)
    assert fresh.data.endswith(result) and len(fresh.data) <= FINAL_BYTES
    assert fresh.gap and fresh.passed_over > 0
