"""Rendering Claude Code's stream-json as readable lines, one event at a time."""

from __future__ import annotations

import json

from taskherd.runtimes.claude_render import (
    StreamRenderer,
    looks_like_stream_json,
    render_line,
)


def event(**fields):
    return json.dumps(fields)


def assistant(*content):
    return event(type="assistant", message={"role": "assistant", "content": list(content)})


def test_tool_calls_show_their_subject_on_one_line():
    bash = {"type": "tool_use", "name": "Bash", "input": {"command": "pytest -q\n  -x"}}
    edit = {"type": "tool_use", "name": "Edit", "input": {"file_path": "/src/app.py"}}
    other = {"type": "tool_use", "name": "mcp__db__query", "input": {"sql": "select 1"}}
    assert render_line(assistant(bash, edit, other)) == [
        "→ Bash: pytest -q -x", "→ Edit: /src/app.py", '→ mcp__db__query: {"sql": "select 1"}']


def test_tool_results_are_one_clipped_line_and_errors_say_so():
    long = "x" * 1000
    line = event(type="user", message={"content": [
        {"type": "tool_result", "content": long},
        {"type": "tool_result", "content": [{"type": "text", "text": "no such file"}],
         "is_error": True}]})
    shown = render_line(line)
    assert shown[0].startswith("← xxx") and shown[0].endswith("…") and len(shown[0]) < 200
    assert shown[1] == "← error: no such file"


def test_text_keeps_its_lines_and_noise_is_dropped():
    assert render_line(assistant({"type": "text", "text": "one\ntwo"})) == ["one", "two"]
    assert render_line(event(type="stream_event", event={"delta": "x"})) == []
    assert render_line("plain stderr line") == ["plain stderr line"]
    assert render_line("{not json") == ["{not json"]


def test_a_cut_line_waits_for_its_end():
    renderer = StreamRenderer()
    whole = (assistant({"type": "text", "text": "hello"}) + "\n").encode()
    assert renderer.feed(whole[:10]) == ""
    assert renderer.feed(whole[10:]) == "hello\n"
    assert renderer.feed(b"tail without newline") == ""
    assert renderer.finish() == "tail without newline\n"


def test_a_stream_json_log_is_recognised_by_its_first_event():
    header = '# taskherd {"run": 1}'
    init = event(type="system", subtype="init", session_id="s1")
    assert looks_like_stream_json([header, init])
    assert not looks_like_stream_json([header, "working on it"])
    assert not looks_like_stream_json([header, event(type="system", subtype="other")])
