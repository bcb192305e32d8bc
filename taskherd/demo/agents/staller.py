"""An agent that hangs at a prompt: no output, no heartbeat, no CPU, until idle_timeout kills it."""

import time

from _demo import prompt, say

prompt()
say("Do you want to continue? [y/N]")
time.sleep(3600)  # waits for an answer that never comes
