"""Runtimes: how a role's agent is started and how its output is read."""
