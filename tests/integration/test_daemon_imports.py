"""What the daemon loads to run: every module it holds is memory for its whole life, and at a
hundred agents the daemon's own memory is a third of each agent's cost (bench/sandbox.py)."""

import json
import subprocess
import sys

HEAVY = ("httpx", "rich", "pygments", "click")


def test_the_daemon_loads_no_http_client_until_a_chat_role_calls() -> None:
    # httpx brings, with its command line, rich, pygments and click: ~11 MB of the daemon's
    # memory (ssl comes with asyncio anyway). The chat runtime and the senders import it
    # when they send.
    code = ("import json, sys; import taskherd.daemon; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60)
    assert json.loads(loaded.stdout) == []
