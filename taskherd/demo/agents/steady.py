"""A well-behaved agent: reports progress, sends heartbeats, finishes with TASK_COMPLETE."""

from _demo import prompt, say, steps_in, work

text = prompt()
steps = steps_in(text)
say(f"read the prompt ({len(text)} characters), planning {steps} steps")
work(steps, "working")
say(f"TASK_COMPLETE: did all {steps} steps")
