"""An agent that fails its first two attempts, then succeeds: retries with backoff at work."""

import sys

from _demo import attempt, prompt, say, work

prompt()
number = attempt()
say(f"attempt {number}: calling a flaky upstream")
work(2, "fetching")
if number < 3:
    print(f"error: upstream answered 503 on attempt {number}", file=sys.stderr, flush=True)
    sys.exit(1)
say(f"TASK_COMPLETE: upstream answered on attempt {number}")
