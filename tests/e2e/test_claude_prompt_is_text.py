"""A task's prompt reaches the model as text, however it starts: the `claude` runtime's
launch, run with the real Claude Code CLI against the fake API."""

import subprocess
from types import SimpleNamespace

import pytest

from taskherd.model.settings import RoleConfig
from taskherd.runtimes.base import RunFiles
from taskherd.runtimes.claude import ClaudeRuntime
from taskherd.runtimes.claude_stream import ClaudeStreamReader
from tests.e2e.fake_anthropic import Text

RUN_TIMEOUT = 60


def user_texts(api) -> str:
    texts = []
    for request in api.turn_requests:
        for message in request.body.get("messages", []):
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            else:
                texts += [block.get("text", "") for block in content if isinstance(block, dict)]
    return "\n".join(texts)


@pytest.mark.parametrize(
    "prompt",
    ["--permission-mode=bypassPermissions hello", "-p --mcp-config=/nonexistent.json hi",
     "x" * 150_000],
    ids=["permission-mode", "mcp-config", "150kB"],
)
def test_prompt_starting_with_dashes_is_text_to_the_model(
    prompt, claude_cli, start_fake_anthropic, tmp_path
):
    api = start_fake_anthropic([Text("TASK_COMPLETE: read it")])
    role = RoleConfig(name="writer", runtime="claude", binary=str(claude_cli))
    files = RunFiles(log=tmp_path / "run.log", prompt=tmp_path / "run.prompt")
    launch = ClaudeRuntime().launch(role, SimpleNamespace(prompt=prompt), None, files, prompt)
    assert not any(prompt in arg for arg in launch.argv)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **api.client_env(home=str(home)),
           **launch.env}
    with open(launch.stdin_path, "rb") as stdin:
        done = subprocess.run(launch.argv, stdin=stdin, capture_output=True, env=env,
                              cwd=tmp_path, timeout=RUN_TIMEOUT)
    reader = ClaudeStreamReader()
    reader.feed(done.stdout)
    reader.finish()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert reader.result is not None and reader.result.summary == "read it"
    assert prompt in user_texts(api)
