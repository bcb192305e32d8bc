"""What an agent's processes are doing: the CPU time of each process tree (one /proc walk for
every agent the supervisor samples) and, for tests and tools, a whole sample of one agent
(its log's size, its tree's CPU time, how many of its processes live).

Read-only: nothing here starts or stops a process (`taskherd.host.procs` does).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from taskherd.host.procs import START_TIME_TOLERANCE, ProcessHandle

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Activity:
    """One sample for stall detection; growth between samples means alive."""

    log_size: int  # bytes in the run's log
    cpu_seconds: float  # user+system CPU of the process tree, reaped children included
    process_count: int  # live processes found in the tree (0: all gone)


def activity(handle: ProcessHandle) -> Activity:
    """Log size and CPU time of the shim's process tree, for stall detection."""
    try:
        log_size = handle.log_path.stat().st_size
    except FileNotFoundError:
        log_size = 0
    processes = _process_tree(handle)
    cpu_seconds = 0.0
    counted = 0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:  # vanished mid-walk, or a zombie
            continue
        cpu_seconds += times.user + times.system + times.children_user + times.children_system
        counted += 1
    return Activity(log_size, cpu_seconds, counted)


def tree_cpu_seconds(roots: set[int]) -> dict[int, float]:
    """CPU seconds (reaped children included) of each root's process tree, in one /proc walk.

    One walk for all agents, not one per agent: with a hundred idle agents a per-agent
    `children(recursive=True)` scans /proc a hundred times a second. Read straight from
    /proc/PID/stat rather than through psutil's Process objects: at a thousand agents (two
    thousand processes) that is the difference between a few and a few dozen milliseconds.
    """
    if not roots:
        return {}
    parent_of: dict[int, int] = {}
    cpu_of: dict[int, float] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:  # not Linux: psutil knows how to ask this system
        return _tree_cpu_seconds_psutil(roots)
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat_file:
                text = stat_file.read()
        except OSError:  # ended mid-walk
            continue
        # "pid (comm) state ppid … utime stime cutime cstime …": comm may hold spaces and
        # parentheses, so the fields are counted from the last ')'.
        fields = text[text.rindex(b")") + 2:].split()
        pid = int(name)
        parent_of[pid] = int(fields[1])
        cpu_of[pid] = (int(fields[11]) + int(fields[12]) + int(fields[13])
                       + int(fields[14])) / _CLOCK_TICKS
    return _sum_per_root(roots, parent_of, cpu_of)


def _tree_cpu_seconds_psutil(roots: set[int]) -> dict[int, float]:
    parent_of: dict[int, int] = {}
    cpu_of: dict[int, float] = {}
    for process in psutil.process_iter(["ppid", "cpu_times"]):
        info = process.info
        times = info.get("cpu_times")
        if times is None:
            continue
        parent_of[process.pid] = info["ppid"]
        cpu_of[process.pid] = (times.user + times.system
                               + times.children_user + times.children_system)
    return _sum_per_root(roots, parent_of, cpu_of)


def _sum_per_root(roots: set[int], parent_of: dict[int, int],
                  cpu_of: dict[int, float]) -> dict[int, float]:
    totals: dict[int, float] = {}
    for pid, seconds in cpu_of.items():
        root, hops = pid, 0
        while root not in roots and root in parent_of and hops < 64:
            root, hops = parent_of[root], hops + 1
        if root in roots:
            totals[root] = totals.get(root, 0.0) + seconds
    return totals


def _process_tree(handle: ProcessHandle) -> list[psutil.Process]:
    if handle.poll() is not None:
        return []  # orphans left in the group are outside the tree anyway
    try:
        root = psutil.Process(handle.pid)
        if abs(root.create_time() - handle.started_at) > START_TIME_TOLERANCE:
            return []  # the pid now belongs to someone else
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
