"""The API's store thread: every call's own answer or error, whatever batch it rode in."""

import asyncio
import threading

import pytest

from taskherd.api.store_thread import BATCH, StoreThread


def test_each_caller_gets_its_own_result_and_the_calls_run_in_one_thread_in_order():
    worker = StoreThread()
    ran: list[tuple[int, str]] = []

    def call(number: int) -> int:
        ran.append((number, threading.current_thread().name))
        return number * 10

    async def main() -> list[int]:
        return await asyncio.gather(*(worker.run(call, n) for n in range(BATCH * 3 + 1)))

    assert asyncio.run(main()) == [n * 10 for n in range(BATCH * 3 + 1)]
    assert [number for number, _ in ran] == list(range(BATCH * 3 + 1))
    assert {name for _, name in ran} == {"taskherd-api-store"}


def test_an_error_reaches_only_its_caller():
    worker = StoreThread()

    def call(number: int) -> int:
        if number == 3:
            raise LookupError("no task 3")
        return number

    async def main() -> list[object]:
        return await asyncio.gather(*(worker.run(call, n) for n in range(6)),
                                    return_exceptions=True)

    answers = asyncio.run(main())
    assert [a for n, a in enumerate(answers) if n != 3] == [0, 1, 2, 4, 5]
    assert isinstance(answers[3], LookupError) and str(answers[3]) == "no task 3"


def test_a_cancelled_caller_does_not_stop_the_thread_serving_the_next():
    worker = StoreThread()
    release = threading.Event()

    async def main() -> str:
        slow = asyncio.ensure_future(worker.run(release.wait, 5))
        await asyncio.sleep(0)  # queued
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        release.set()
        return await worker.run(str.upper, "served")

    assert asyncio.run(main()) == "SERVED"


def test_calls_from_two_event_loops_each_answered_on_their_own():
    worker = StoreThread()
    results: dict[str, int] = {}

    def on_its_own_loop(name: str, value: int) -> None:
        results[name] = asyncio.run(worker.run(lambda: value))

    threads = [threading.Thread(target=on_its_own_loop, args=(name, value))
               for name, value in (("a", 1), ("b", 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == {"a": 1, "b": 2}


def test_a_batch_runs_inside_the_hold_it_is_given_even_when_a_call_fails():
    """The API holds the store's events around a batch: entered before its first call,
    left after its last, once a batch, in the store thread."""
    import contextlib

    seen: list[str] = []

    @contextlib.contextmanager
    def hold():
        seen.append(f"hold {threading.current_thread().name}")
        try:
            yield
        finally:
            seen.append("told")

    worker = StoreThread(hold=hold)

    def call(number: int) -> int:
        seen.append(f"call {number}")
        if number == 1:
            raise LookupError("no task 1")
        return number

    async def main() -> list[object]:
        return await asyncio.gather(*(worker.run(call, n) for n in range(3)),
                                    return_exceptions=True)

    answers = asyncio.run(main())
    assert answers[0] == 0 and isinstance(answers[1], LookupError) and answers[2] == 2
    holds = [n for n, step in enumerate(seen) if step.startswith("hold")]
    assert seen[holds[0]] == "hold taskherd-api-store"
    # Every call between a hold and its telling; as many holds as tellings.
    assert seen.count("told") == len(holds) and seen[-1] == "told"
    assert [s for s in seen if s.startswith("call")] == ["call 0", "call 1", "call 2"]
    depth = 0
    for step in seen:
        depth += step.startswith("hold") - (step == "told")
        assert depth in (0, 1) and (depth == 1 or not step.startswith("call"))
