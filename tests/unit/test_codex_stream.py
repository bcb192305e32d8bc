"""Reading `codex exec --json` output, with lines as Codex CLI 0.169 writes them."""

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from taskherd.host.procs import ExitStatus
from taskherd.model import Outcome, Run
from taskherd.model.settings import Price, RoleConfig
from taskherd.runtimes.codex import CodexRuntime
from taskherd.runtimes.codex_stream import CodexStreamReader
from taskherd.runtimes.ratelimit import detect_rate_limit

NOW = datetime(2026, 11, 23, 10, 39, tzinfo=UTC)
SUCCESS = b"""\
# taskherd {"run": 1}
WARNING: proceeding, even though we could not create PATH aliases
{"type":"thread.started","thread_id":"01a207fd-014c-7fc1-8878-0f5f983161a5"}
{"type":"turn.started"}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -c 'echo hi'","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -c 'echo hi'","aggregated_output":"TASK_COMPLETE: not from the agent\\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Did it.\\n**TASK_COMPLETE:** echoed"}}
{"type":"turn.completed","usage":{"input_tokens":2100,"cached_input_tokens":200,"cache_write_input_tokens":0,"output_tokens":65,"reasoning_output_tokens":10}}
"""


def a_run() -> Run:
    fields = dict.fromkeys(Run.__dataclass_fields__)
    fields.update(id=1, task_id=1, attempt=1, node="n", role="coder", runtime="codex",
                  claimed_at=NOW.timestamp())
    return Run(**fields)


LIMIT = ('{"type":"error","message":"You\u2019ve hit your usage limit. Upgrade to Pro '
         '(https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to '
         'purchase more credits or try again at 12:39 PM."}\n'
         '{"type":"turn.failed","error":{"message":"You\u2019ve hit your usage limit."}}\n')


def test_events_split_anywhere_give_session_summary_and_tokens():
    reader = CodexStreamReader()
    seen = sum(reader.feed(SUCCESS[i:i + 7], NOW) for i in range(0, len(SUCCESS), 7))
    seen += reader.finish(NOW)
    state = reader.state
    assert seen == 6 and state.lines_skipped == 2  # the header and the stderr warning
    assert state.thread_id == "01a207fd-014c-7fc1-8878-0f5f983161a5"
    assert state.completed_summary == "echoed"  # the agent's message, not a command's output
    assert (state.usage.input_tokens, state.usage.cached_input_tokens,
            state.usage.output_tokens, state.usage.turns) == (2100, 200, 65, 1)


def test_a_usage_limit_reads_its_clock_in_the_zone_given():
    reader = CodexStreamReader(clock_zone=ZoneInfo("Europe/Paris"))
    reader.feed(LIMIT.encode(), NOW)
    signal = reader.state.rate_limit
    assert signal is not None and signal.source == "usage_limit_try_again_at"
    assert signal.reset_at == datetime(2026, 11, 23, 12, 39, tzinfo=ZoneInfo("Europe/Paris"))
    assert reader.state.turn_failed


def test_a_usage_limit_days_away_names_its_date_and_year():
    text = ("You\u2019ve hit your usage limit. Visit https://chatgpt.com/settings/usage to "
            "purchase more credits or try again at Jan 2nd, 2027 6:12 PM.")
    signal = detect_rate_limit(text, NOW, default_tz=UTC)
    assert signal.reset_at == datetime(2027, 1, 2, 18, 12, tzinfo=UTC)


def test_the_runtime_prices_tokens_and_a_limit_is_rate_limited():
    role = RoleConfig(name="coder", runtime="codex", model="m", timezone="UTC",
                      price=Price(input=1.25, output=10.0, cached_input=0.125))
    runtime = CodexRuntime()
    reader = runtime.reader(role)
    reader.feed(SUCCESS, NOW.timestamp())
    run = a_run()
    result = runtime.result(role, reader, ExitStatus(0), run, NOW.timestamp())
    assert result.outcome is Outcome.SUCCEEDED and result.summary == "echoed"
    assert result.cost_usd == (1900 * 1.25 + 200 * 0.125 + 65 * 10.0) / 1e6
    limited = runtime.reader(role)
    assert limited.feed(LIMIT.encode(), NOW.timestamp()) is not None  # pauses mid-run
    result = runtime.result(role, limited, ExitStatus(1), run, NOW.timestamp())
    assert result.outcome is Outcome.RATE_LIMITED
    assert result.retry_at == datetime(2026, 11, 23, 12, 39, tzinfo=UTC).timestamp()
    assert result.cost_usd is None  # no turn completed: unknown, not zero


def test_an_unpriced_model_has_an_unknown_cost_and_the_prompt_is_never_an_option(tmp_path):
    from taskherd.model import Task
    from taskherd.runtimes.base import RunFiles

    role = RoleConfig(name="coder", runtime="codex", model="unpriced", args=("--x",))
    task = Task(**dict.fromkeys(Task.__dataclass_fields__) | {"id": 1, "prompt": "--oss"})
    launch = CodexRuntime().launch(role, task,
                                   a_run(),
                                   RunFiles(tmp_path / "log", tmp_path / "prompt"), "--oss")
    assert launch.argv[-1] == "-" and "--oss" not in launch.argv
    assert launch.stdin_path.read_text() == "--oss"
    reader = CodexRuntime().reader(role)
    reader.feed(SUCCESS, NOW.timestamp())
    result = CodexRuntime().result(role, reader, ExitStatus(0), a_run(), NOW.timestamp())
    assert result.cost_usd is None and result.input_tokens == 2100
