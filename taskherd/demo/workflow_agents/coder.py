"""The coder: writes its module and says the tests passed. Once, for the task marked
"[gate fails once]", it writes code that does not compile: the compile gate catches it and
the retry is told what the gate said."""

import os
import sys
import time

prompt = sys.stdin.read()
task = os.environ["TASKHERD_TASK_ID"]
broken = "[gate fails once]" in prompt and "## Quality gate failed" not in prompt
if "## Reviewer's reason" in prompt:
    print("the reviewer sent it back; addressing the reason first", flush=True)
if "## Quality gate failed" in prompt:
    print("the compile gate failed last time; fixing the syntax", flush=True)
time.sleep(0.5)
with open(f"feature_{task}.py", "w") as module:
    module.write("def feature(:\n" if broken else "def feature():\n    return True\n")
print("TASK_COMPLETE: implemented it; tests: passed")
