"""An agent that hangs: no output, no heartbeat, no CPU, until idle_timeout kills it as stalled.

It asks nothing: an agent whose last output is a question would be blocked as needs_input
instead (no strike), not stalled.
"""

import time

from _demo import prompt, say

prompt()
say("Waiting for the license server...")
time.sleep(3600)  # a reply that never comes
