"""Quality gates, as the config declares them and as their failures are worded.

A role's gates run after its agent reported success and before the task completes (the
seeds' fleet: a coder reported "tests: passed" while the code did not compile; a report is
not a check). Running them is the supervisor's (`services/gates.py`); this module is pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from taskherd.model.settings import DEFAULT_TIMEOUT, Gate
from taskherd.policy.durations import parse_duration

GATE_KEYS = {
    "name": "a short name shown in task show and in the failure (required)",
    "argv": "the command as an argv list, never a shell string (required)",
    "workdir": "the folder it runs in (default: the role's workdir)",
    "timeout": "how long it may run, e.g. '10m'",
    "idle_timeout": "how long it may go without output or CPU (default: the role's)",
}
FAILED_PREFIX = "quality gate "  # how every gate failure starts: the prompt builder looks for it


class GateError(ValueError):
    pass


def parse_gates(value: Any, where: str) -> tuple[Gate, ...]:
    if not isinstance(value, list):
        raise GateError(f"{where} = {value!r}: expected an array of tables ([[{where}]])")
    gates = tuple(_parse_gate(item, f"{where}[{index}]") for index, item in enumerate(value))
    names = [gate.name for gate in gates]
    for name in names:
        if names.count(name) > 1:
            raise GateError(f"{where}: two gates are named {name!r}; names must differ")
    return gates


def _parse_gate(data: Any, where: str) -> Gate:
    if not isinstance(data, Mapping):
        raise GateError(f"{where}: a gate is a table with keys {', '.join(GATE_KEYS)}")
    unknown = sorted(set(data) - set(GATE_KEYS))
    if unknown:
        raise GateError(f"{where}.{unknown[0]}: unknown key (accepted: {', '.join(GATE_KEYS)})")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or not name.replace("-", "").replace(
            "_", "").isalnum():
        raise GateError(f"{where}.name = {name!r}: expected {GATE_KEYS['name']}: letters, "
                        "digits, '-' and '_'")
    argv = data.get("argv")
    if (not isinstance(argv, list) or not argv
            or not all(isinstance(part, str) and part for part in argv)):
        raise GateError(f"{where}.argv = {argv!r}: expected {GATE_KEYS['argv']}, e.g. "
                        "[\"python\", \"-m\", \"pytest\", \"-q\"]")
    workdir = data.get("workdir")
    if workdir is not None and (not isinstance(workdir, str) or not workdir):
        raise GateError(f"{where}.workdir = {workdir!r}: expected {GATE_KEYS['workdir']}")
    timeout = _duration(data, "timeout", where)
    idle_timeout = _duration(data, "idle_timeout", where)
    return Gate(name, tuple(argv), workdir, DEFAULT_TIMEOUT if timeout is None else timeout,
                idle_timeout)


def _duration(data: Mapping[str, Any], key: str, where: str) -> float | None:
    if key not in data:
        return None
    try:
        seconds = parse_duration(data[key])
    except ValueError as error:
        raise GateError(f"{where}.{key} = {data[key]!r}: {error}") from None
    if seconds <= 0:
        raise GateError(f"{where}.{key} = {data[key]!r}: must be positive")
    return seconds


def failure_text(gate: Gate, exit_code: int | None, timed_out: bool,
                 stopped: str | None = None) -> str:
    """The run's error when `gate` fails; it starts with FAILED_PREFIX. `stopped`: why the
    supervisor ended it (stalled: no output and no CPU for its idle window)."""
    if stopped is not None:
        how = stopped
    elif timed_out:
        how = f"ran longer than its timeout ({gate.timeout:g}s)"
    elif exit_code is None:
        how = "could not run"
    else:
        how = f"exited with code {exit_code}"
    return f"{FAILED_PREFIX}{gate.name!r} failed: {how} (argv: {' '.join(gate.argv)})"


def is_gate_failure(error: str | None) -> bool:
    return error is not None and error.startswith(FAILED_PREFIX)
