"""The fake OpenAI-compatible server speaks the protocol the `chat` runtime
will be tested against (streaming, errors, stalls), checked with a plain
stdlib client until the runtime exists."""

import json
import socket
import urllib.error
import urllib.request

import pytest

from tests.e2e.fake_openai import ApiError, RateLimited, StopMidStream, Text

KEY = "sk-test-key"


def post(api, body, key=KEY, headers=None, timeout=10):
    request = urllib.request.Request(
        f"{api.base_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "content-type": "application/json",
            "authorization": f"Bearer {key}",
            **(headers or {}),
        },
    )
    return urllib.request.urlopen(request, timeout=timeout)


def sse_data(response) -> list[str]:
    return [
        line[len(b"data: ") :].decode().strip() for line in response if line.startswith(b"data: ")
    ]


def chat(stream=False, **extra):
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
        **extra,
    }


def test_streaming_reply_and_recorded_headers(start_fake_openai):
    api = start_fake_openai([Text("TASK_COMPLETE: done", chunks=4)], api_key=KEY)
    with post(
        api,
        chat(stream=True, stream_options={"include_usage": True}),
        headers={"x-session-key": "run-42"},
    ) as response:
        assert response.headers["content-type"] == "text/event-stream"
        data = sse_data(response)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "TASK_COMPLETE: done"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"] == {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
    [request] = api.completion_requests
    assert request.header("x-session-key") == "run-42"
    assert request.header("authorization") == f"Bearer {KEY}"
    assert request.body["messages"][0]["content"] == "hi"


def test_non_streaming_reply(start_fake_openai):
    api = start_fake_openai([Text("hello", prompt_tokens=7, completion_tokens=2)])
    with post(api, chat()) as response:
        body = json.load(response)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hello"}
    assert body["usage"]["total_tokens"] == 9


def test_wrong_key_is_401_and_takes_no_step(start_fake_openai):
    api = start_fake_openai([Text("hello")], api_key=KEY)
    with pytest.raises(urllib.error.HTTPError) as raised:
        post(api, chat(), key="wrong")
    assert raised.value.code == 401
    assert api.completion_requests == []


@pytest.mark.parametrize(
    "step, status, retry_after",
    [
        (RateLimited("17"), 429, "17"),
        (RateLimited("Wed, 21 Oct 2026 07:28:00 GMT"), 429, "Wed, 21 Oct 2026 07:28:00 GMT"),
        (ApiError(500), 500, None),
    ],
)
def test_http_errors(start_fake_openai, step, status, retry_after):
    api = start_fake_openai([step])
    with pytest.raises(urllib.error.HTTPError) as raised:
        post(api, chat(stream=True))
    assert raised.value.code == status
    assert raised.value.headers.get("retry-after") == retry_after
    assert "error" in json.load(raised.value)


def test_dropped_stream_ends_without_done(start_fake_openai):
    api = start_fake_openai([StopMidStream(after_chunks=2, drop_connection=True)])
    with post(api, chat(stream=True)) as response:
        data = sse_data(response)
    assert len(data) == 2 and "[DONE]" not in data


def test_hanging_stream_times_out_the_client(start_fake_openai):
    api = start_fake_openai([StopMidStream(after_chunks=2)])
    with post(api, chat(stream=True), timeout=0.5) as response:
        first = [response.readline() for _ in range(2)]
        assert first[0].startswith(b"data: ")
        with pytest.raises((socket.timeout, TimeoutError)):
            while True:
                if not response.readline():
                    pytest.fail("the stream ended instead of hanging")


def test_after_script_answers_when_script_runs_out(start_fake_openai):
    api = start_fake_openai([Text("one")], after_script=RateLimited(None))
    post(api, chat()).close()
    with pytest.raises(urllib.error.HTTPError) as raised:
        post(api, chat())
    assert raised.value.code == 429 and raised.value.headers.get("retry-after") is None
    assert [r.step for r in api.completion_requests] == [0, 1]
