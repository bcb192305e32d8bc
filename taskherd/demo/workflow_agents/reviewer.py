"""The QA reviewer: reads the task under review and gives its verdict with `taskherd approve`
or `taskherd reject --reason`. It rejects the task marked "[rejected once]" the first time."""

import os
import re
import subprocess
import sys

prompt = sys.stdin.read()
asked = re.search(r"Review the work done for task (\d+)", prompt)
assert asked is not None, "the review prompt names the task it reviews"
reviewed = asked.group(1)
seen = f"reviewed-{reviewed}"
if "[rejected once]" in prompt and not os.path.exists(seen):
    open(seen, "w").close()
    subprocess.run(["taskherd", "reject", "--reason", "the cache never expires: add a TTL"],
                   check=True)
else:
    subprocess.run(["taskherd", "approve"], check=True)
