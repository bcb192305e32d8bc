"""The rules, pure: what a task, a chain, a job, a limit or a run's liveness means, decided
from records and settings, with no store, process or network of their own."""
