"""An agent that finds it needs a human and says so with `taskherd block`."""

from _demo import prompt, say, taskherd, work

prompt()
work(2, "reading the deploy checklist")
say("the production deploy needs a person to approve the database migration")
taskherd("block", "--summary", "needs a human to approve the migration")
