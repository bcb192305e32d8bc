"""The planner: the queue ran low, so it adds the next coder tasks with `taskherd task add`."""

import subprocess
import sys

sys.stdin.read()
FEATURES = [
    ("Add a logout button", "Add a logout button to the header."),
    ("Validate the signup form", "Reject empty e-mail addresses. [gate fails once]"),
    ("Cache the product list", "Cache it for a minute. [rejected once]"),
]
for title, prompt in FEATURES:
    subprocess.run(["taskherd", "task", "add", title, "--role", "coder", "--prompt", prompt],
                   check=True, stdout=subprocess.DEVNULL)
    print(f"planned: {title}", flush=True)
print(f"TASK_COMPLETE: planned {len(FEATURES)} features")
