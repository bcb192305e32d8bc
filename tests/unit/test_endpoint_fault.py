"""Whose fault a chat call's failure is (faults.endpoint_fault), judged from what a real
loopback connection answered: a refused connection, a reply cut mid-answer and a gateway's
5xx are the endpoint's (no strike, the runtime pauses); a 4xx, a 500 and a silence are not.
The settle of such a run, and what the delivery targets read of an outage."""

from __future__ import annotations

import socket
import threading
from types import SimpleNamespace

import httpx
import pytest

from taskherd.host.senders import one_line
from taskherd.model import Fault, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.faults import endpoint_fault
from taskherd.policy.queue import Settlement, settle

NOW = 1_800_000_000.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_answer(raw: bytes) -> int:
    """A loopback server that reads one request, writes `raw` and closes: its port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(raw)

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def error_of(port: int, read_timeout: float = 5.0) -> tuple[int | None, httpx.HTTPError | None]:
    """What a streamed POST to the port met: its status, or the transport's error."""
    try:
        with httpx.Client(timeout=httpx.Timeout(5.0, read=read_timeout)) as client, \
                client.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions",
                              json={}) as response:
            status = response.status_code
            response.read()
            return status, None
    except httpx.HTTPError as error:
        return None, error


def test_a_refused_connection_is_the_endpoints_fault():
    status, error = error_of(free_port())  # nobody listens there: the gateway is away
    assert status is None and isinstance(error, httpx.ConnectError)
    assert endpoint_fault(status, error) is Fault.ENDPOINT


def test_a_reply_cut_mid_answer_is_the_endpoints_fault():
    port = one_answer(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                      b"content-length: 1000\r\n\r\ndata: {\"choices\": []}\n\n")
    status, error = error_of(port)
    assert status is None and error is not None
    assert endpoint_fault(status, error) is Fault.ENDPOINT, repr(error)


@pytest.mark.parametrize("status", [502, 503, 504, 520, 529])
def test_a_gateways_5xx_is_the_endpoints_fault(status):
    port = one_answer(f"HTTP/1.1 {status} Down\r\ncontent-length: 0\r\n\r\n".encode())
    assert error_of(port) == (status, None)
    assert endpoint_fault(status, None) is Fault.ENDPOINT


@pytest.mark.parametrize("status", [400, 401, 404, 429, 500, 501])
def test_the_calls_own_refusals_are_not(status):
    # 429 is a rate limit (its own pause, counted); 500 can be this prompt's doing.
    assert endpoint_fault(status, None) is None


def test_an_endpoint_that_took_the_request_and_went_silent_is_not():
    server = socket.create_server(("127.0.0.1", 0))  # accepts, never answers
    try:
        status, error = error_of(server.getsockname()[1], read_timeout=0.2)
    finally:
        server.close()
    assert isinstance(error, httpx.ReadTimeout)
    assert endpoint_fault(status, error) is None  # a stall, judged as before
    assert endpoint_fault(None, ValueError("no detail")) is None


def test_an_outage_puts_the_task_back_with_no_strike_and_no_rate_limit_counted():
    task = SimpleNamespace(attempts=2, max_attempts=3, review=False, rescues=10)
    down = RunResult(Outcome.LOST, error="endpoint down: ConnectError", fault=Fault.ENDPOINT)
    # At its last attempt, its rescues and its rate limits at their caps: nothing counted.
    assert settle(task, down, RetryPolicy(max_rate_limits=1), NOW, recent_rate_limits=4) == \
        Settlement(TaskState.READY, NOW)


def test_the_delivery_targets_read_the_outage_and_its_end():
    body = {"runtime": "chat", "down_since": NOW, "reason": "endpoint down: HTTP 502"}
    down = one_line({"event": "endpoint_down", "endpoint": body})
    assert down.startswith("taskherd: runtime chat's endpoint down since ")
    assert down.endswith(": endpoint down: HTTP 502")
    back = one_line({"event": "endpoint_up", "endpoint": body})
    assert back.startswith("taskherd: runtime chat's endpoint is back (down since ")
