from taskherd.model import Outcome, Run, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.queue import rescued_result


def test_backoff_doubles_from_the_base_and_stops_at_the_cap():
    policy = RetryPolicy(backoff_base=15, backoff_cap=900)
    assert [policy.backoff(n) for n in range(1, 9)] == [15, 30, 60, 120, 240, 480, 900, 900]


def test_backoff_of_huge_strike_counts_does_not_overflow():
    assert RetryPolicy().backoff(10_000) == RetryPolicy().backoff_cap


def _open_run(report: str | None, summary: str | None = None) -> Run:
    return Run(id=7, task_id=3, attempt=1, node="n1", role="deployer", runtime=None, pid=None,
               pid_started_at=None, log_path=None, claimed_at=1.0, spawned_at=None,
               heartbeat_at=None, progress=None, ended_at=None, exit_code=None, outcome=None,
               summary=None, error=None, cost_usd=None, input_tokens=None, output_tokens=None,
               turns=None, session_id=None, report=report, report_summary=summary)


LOST = RunResult(Outcome.LOST, error="node n1 went silent: declared down by n2")


def test_a_rescue_settles_a_run_by_its_agents_report_and_loses_only_a_silent_one():
    done = rescued_result(_open_run("done", "deployed"), LOST, RetryPolicy())
    assert (done.outcome, done.summary) == (Outcome.SUCCEEDED, "deployed")
    assert "node n1 went silent" in done.error  # the record still says what happened
    blocked = rescued_result(_open_run("block", "which region?"), LOST, RetryPolicy())
    assert (blocked.outcome, blocked.summary) == (Outcome.BLOCKED, "which region?")
    failed = rescued_result(_open_run("fail", "tests red"), LOST, RetryPolicy())
    assert (failed.outcome, failed.error) == (Outcome.FAILED, "tests red")
    assert rescued_result(_open_run(None), LOST, RetryPolicy()) is LOST


def test_a_rescue_does_not_take_done_on_the_word_of_an_agent_whose_role_has_gates():
    gated = RetryPolicy(rescue_trusts_done=False)
    assert rescued_result(_open_run("done", "deployed"), LOST, gated) is LOST
