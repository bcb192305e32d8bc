"""What an agent wrote: print a run's log, its last lines, or follow it until the run ends.

Shared by `taskherd task log TASK` (the task's latest run) and `taskherd runs log RUN`. The
log file is read straight from disk, so it works whether the daemon is up or not; `--follow`
asks the store, not the daemon, whether the run has ended.
"""

from __future__ import annotations

import codecs
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import BinaryIO

from taskherd.cli.common import Refused, for_json
from taskherd.host.logfile import Chunk, LogCursor, tail
from taskherd.model import Run
from taskherd.ops.logs import tail as _tail
from taskherd.runtimes.claude_render import StreamRenderer, looks_like_stream_json, render_text
from taskherd.store import Store

FOLLOW_POLL = 0.2  # seconds between looks at a followed log: quick to show, cheap to run
BUSY_WAIT = 0.005  # while the agent's shim cuts the log it reads
CHUNK = 64 * 1024
SNIFF_BYTES = 8192  # the start of a log, enough to hold its header and first event
# Events read per line asked for with --lines on a rendered log: most events render to one
# line, stream deltas and bookkeeping to none.
EVENTS_PER_LINE = 4
RENDERED_LINE = 1 << 20  # the longest event --lines shows rendered; a longer one is cut


def show_log(store: Store, run: Run, *, lines: int | None, follow: bool, as_json: bool,
             raw: bool = False) -> None:
    """Print `run`'s log (its last `lines` lines if given), then follow it if asked.

    A Claude Code run's stream-json is shown as text (what the assistant said, one line per
    tool call and result, the result) unless `raw`; JSON output always carries the log as is.
    """
    try:
        _show(store, run, lines=lines, follow=follow, as_json=as_json, raw=raw)
    except KeyboardInterrupt:
        pass  # the person stopped following; the run goes on
    except BrokenPipeError:
        # The reader (`| head`) has what it wanted; point stdout at nothing so the final
        # flush at exit does not complain about the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _show(store: Store, run: Run, *, lines: int | None, follow: bool, as_json: bool,
          raw: bool) -> None:
    if run.log_path is None and follow:
        run = _wait_for_process(store, run)
    if run.log_path is None:
        if run.ended_at is not None:
            outcome = run.outcome.value if run.outcome is not None else "no outcome"
            raise Refused(f"run {run.id} has no log: it ended ({outcome}) "
                          "before a process was started")
        raise Refused(f"run {run.id} has not started a process yet; "
                      "add --follow to wait for its output")
    with _open_log(run) as log_file:
        renderer = None if raw or as_json else _renderer_for(log_file)
        if renderer is not None:
            _show_rendered(store, run, log_file, renderer, lines, follow)
            return
        if as_json:
            _print_json(run, log_file, lines)
            return
        out = sys.stdout.buffer
        if lines is not None:
            out.write(_tail(log_file, lines))
            cursor = LogCursor.at(log_file, log_file.tell())
        else:
            cursor = _copy_to_end(log_file, out)
        out.flush()
        if follow:
            _follow(store, run.id, log_file, cursor, out)


def _copy_to_end(log_file: BinaryIO, out: BinaryIO,
                 renderer: StreamRenderer | None = None) -> LogCursor:
    """The log as it is now, a chunk at a time (never loaded whole); the cursor after it."""
    cursor = LogCursor()
    end = None
    while end is None:
        end = cursor.end(log_file)  # None only while the shim cuts it, for a moment
        if end is None:
            time.sleep(BUSY_WAIT)
    while cursor.offset < end:
        chunk = cursor.read(log_file, CHUNK)
        if chunk.busy:
            time.sleep(BUSY_WAIT)  # the shim is cutting the log: milliseconds
            continue
        if not chunk.data:
            break
        _write(out, chunk, renderer)
    return cursor


def _print_json(run: Run, log_file: BinaryIO, lines: int | None) -> None:
    """The --json object, its text streamed as it is read: a log of gigabytes (one written
    before logs were capped) is printed in constant memory."""
    fields = {"run_id": run.id, "task_id": run.task_id, "log_path": run.log_path,
              "ended": run.ended_at is not None}
    out = sys.stdout
    out.write(json.dumps(for_json(fields), indent=2, default=str)[:-2] + ',\n  "text": "')
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    if lines is not None:
        texts: Iterator[bytes] = iter([_tail(log_file, lines)])
    else:
        texts = _chunks(log_file)
    for data in texts:
        out.write(json.dumps(decoder.decode(data))[1:-1])
    out.write(json.dumps(decoder.decode(b"", final=True))[1:-1] + '"\n}\n')


def _chunks(log_file: BinaryIO) -> Iterator[bytes]:
    cursor, end = LogCursor(), None
    while end is None:
        end = cursor.end(log_file)
        if end is None:
            time.sleep(BUSY_WAIT)
    while cursor.offset < end:
        chunk = cursor.read(log_file, CHUNK)
        if chunk.busy:
            time.sleep(BUSY_WAIT)
            continue
        if not chunk.data:
            return
        if chunk.skipped:
            yield _cut_note(chunk.skipped)
        yield chunk.data


def _renderer_for(log_file: BinaryIO) -> StreamRenderer | None:
    """A renderer when the log is Claude Code's stream-json, else None (printed as is)."""
    start = log_file.read(SNIFF_BYTES)
    log_file.seek(0)
    first_lines = start.decode("utf-8", "replace").splitlines()[:3]
    return StreamRenderer() if looks_like_stream_json(first_lines) else None


def _show_rendered(store: Store, run: Run, log_file: BinaryIO, renderer: StreamRenderer,
                   lines: int | None, follow: bool) -> None:
    out = sys.stdout.buffer
    if lines is not None:
        # Events are long lines: the window lets each be read whole (up to RENDERED_LINE).
        events = tail(log_file, lines * EVENTS_PER_LINE, max_line=RENDERED_LINE)
        text = render_text(events).splitlines(keepends=True)
        out.write("".join(text[-lines:] if lines else []).encode())
        cursor = LogCursor.at(log_file, log_file.tell())
    else:
        cursor = _copy_to_end(log_file, out, renderer)
    out.flush()
    if follow:
        _follow(store, run.id, log_file, cursor, out, renderer)
    else:
        out.write(renderer.finish().encode())


def _open_log(run: Run) -> BinaryIO:
    assert run.log_path is not None
    try:
        return open(run.log_path, "rb")  # the caller's `with` closes it
    except FileNotFoundError:
        raise Refused(f"the log of run {run.id} is gone ({run.log_path}): logs are pruned "
                      "with their finished tasks") from None
    except OSError as error:
        raise Refused(f"cannot read the log of run {run.id}: {error}") from error


def _wait_for_process(store: Store, run: Run) -> Run:
    """A claimed run gets its log when its process starts; wait for that or for its end."""
    while run.log_path is None and run.ended_at is None:
        time.sleep(FOLLOW_POLL)
        run = store.get_run(run.id)
    return run


def _follow(store: Store, run_id: int, log_file: BinaryIO, cursor: LogCursor, out: BinaryIO,
            renderer: StreamRenderer | None = None) -> None:
    """Copy what is appended to the log until its run has ended and nothing more comes. Output
    the shim cut before it was printed (a chatty agent) is said, in a line, not printed."""
    while True:
        ended = store.get_run(run_id).ended_at is not None
        # Read after the check: whatever the agent wrote before its run ended is printed.
        while (chunk := cursor.read(log_file, CHUNK)).data or chunk.skipped:
            _write(out, chunk, renderer)
            out.flush()
        if ended:
            if renderer:
                out.write(renderer.finish().encode())
                out.flush()
            return
        time.sleep(FOLLOW_POLL)


def _write(out: BinaryIO, chunk: Chunk, renderer: StreamRenderer | None) -> None:
    if chunk.skipped:
        if renderer:
            renderer.finish()  # the event it held was cut: not shown
        out.write(_cut_note(chunk.skipped))
    out.write(renderer.feed(chunk.data).encode() if renderer else chunk.data)


def _cut_note(count: int) -> bytes:
    return f"\n# taskherd cut {count} bytes of output here, before they were read\n".encode()
