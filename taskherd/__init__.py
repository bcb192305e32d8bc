"""taskherd: a durable queue, scheduler and process supervisor for fleets of AI agents.

The Python API, for a program that enqueues or acts on work without the CLI::

    import time
    from taskherd import open_queue, add_task

    with open_queue() as queue:            # or open_queue("path/to/taskherd.toml")
        added = add_task(queue, {"role": "coder", "title": "Fix the flaky test"}, time.time())
        print(added.task.id, added.task.max_attempts)

Every function is the one the CLI calls, so a task added here gets the role's policy exactly
as `taskherd task add` gives it. Names are imported on first use (PEP 562), which keeps
`import taskherd` (and `taskherd --version`) from loading the store and its drivers.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# public name → the module that defines it
_API = {
    "open_queue": "taskherd.ops",
    "Queue": "taskherd.ops",
    "BadInput": "taskherd.ops",
    "add_task": "taskherd.ops.tasks",
    "import_tasks": "taskherd.ops.tasks",
    "get_task": "taskherd.ops.tasks",
    "list_tasks": "taskherd.ops.tasks",
    "runs_of_task": "taskherd.ops.tasks",
    "cancel": "taskherd.ops.tasks",
    "approve": "taskherd.ops.tasks",
    "reject": "taskherd.ops.tasks",
    "block": "taskherd.ops.tasks",
    "unblock": "taskherd.ops.tasks",
    "requeue": "taskherd.ops.tasks",
    "Task": "taskherd.model",
    "Run": "taskherd.model",
    "TaskState": "taskherd.model",
    "Priority": "taskherd.model",
    "StoreError": "taskherd.store",
    "TransitionRefused": "taskherd.store",
    "TaskNotFound": "taskherd.store",
}

__all__ = ["__version__", *_API.keys()]  # noqa: PLE0604


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'taskherd' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once found, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
