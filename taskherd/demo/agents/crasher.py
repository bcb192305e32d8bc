"""An agent that dies mid-work (SIGKILL, as an out-of-memory kill would): outcome `crashed`."""

import os
import signal

from _demo import prompt, say, work

prompt()
work(2, "loading a huge file")
say("allocating 64 GiB …")
os.kill(os.getpid(), signal.SIGKILL)
