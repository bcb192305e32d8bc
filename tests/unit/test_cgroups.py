"""Where a run's caps go and what is written there, on a cgroup tree laid out in a folder as
v1 and v2 hosts lay theirs (the real cgroups are exercised in tests/acceptance/test_caps.py)."""

from __future__ import annotations

import errno
import os

import pytest

from taskherd.host import cgroups
from taskherd.host.cgroups import Caps, CgroupUnavailable

CAPS = Caps(memory=64 << 20, pids=32, cpu=1.5)


def v2_host(tmp_path, own="/system.slice/taskherd.service", delegated=True):
    root = tmp_path / "cgroup"
    (root / own.lstrip("/")).mkdir(parents=True)
    if delegated:  # as systemd marks a Delegate=yes unit's cgroup
        os.setxattr(root / own.lstrip("/"), "user.delegate", b"1")
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    self_cgroup = tmp_path / "self"
    self_cgroup.write_text(f"0::{own}\n")
    return root, cgroups.host(root, self_cgroup)


def v1_host(tmp_path, controllers=("memory", "pids", "cpu")):
    root = tmp_path / "cgroup"
    for name in controllers:
        (root / name).mkdir(parents=True)
        (root / name / "cgroup.procs").write_text("")
    self_cgroup = tmp_path / "self"
    self_cgroup.write_text("".join(f"{i}:{name}:/\n" for i, name in enumerate(controllers)))
    return root, cgroups.host(root, self_cgroup)


def test_v2_caps_go_under_the_daemons_delegated_cgroup(tmp_path):
    root, host = v2_host(tmp_path)
    base = root / "system.slice" / "taskherd.service"
    assert host.version == 2 and set(host.bases.values()) == {base}
    (tmp_path / "data").mkdir()
    group = cgroups.create(tmp_path / "data", 7, CAPS, host)
    run = base / cgroups.group_name(tmp_path / "data") / "run-7"
    assert group.join_files == [str(run / "cgroup.procs")]
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (run.parent / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (run / "memory.max").read_text() == str(64 << 20)
    assert (run / "pids.max").read_text() == "32"
    assert (run / "cpu.max").read_text() == "15000 10000"


def test_v2_daemon_in_its_delegated_cgroup_moves_into_a_leaf_of_its_own(tmp_path,
                                                                         monkeypatch):
    root, host = v2_host(tmp_path)
    base = root / "system.slice" / "taskherd.service"
    # Where a Delegate=yes unit starts the daemon, its fork server and shims: its own cgroup.
    (base / "cgroup.procs").write_text("100\n101\n")
    write = cgroups._write

    def kernel(path, value):
        """The two rules of v2 this needs: no domain controller given below a cgroup (but
        the root) that holds processes, and a process is in one cgroup at a time."""
        if path.name == "cgroup.subtree_control" and path.parent != root and "+memory" in \
                str(value) and procs(path.parent):
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
        if path.name == "cgroup.procs":
            for other in root.rglob("cgroup.procs"):
                other.write_text("".join(f"{p}\n" for p in procs(other.parent)
                                         if p != str(value)))
            path.write_text("".join(f"{p}\n" for p in [*procs(path.parent), str(value)]))
            return
        write(path, value)

    monkeypatch.setattr(cgroups, "_write", kernel)
    group = cgroups.create(tmp_path / "data", 7, CAPS, host)
    assert procs(base) == [] and procs(base / "taskherd-daemon") == ["100", "101"]
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    run = base / cgroups.group_name(tmp_path / "data") / "run-7"
    assert group.join_files == [str(run / "cgroup.procs")]
    assert (run / "memory.max").read_text() == str(64 << 20)


def procs(folder):
    path = folder / "cgroup.procs"
    return path.read_text().split() if path.exists() else []


def test_v2_root_daemon_in_a_cgroup_systemd_did_not_delegate_uses_the_root(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 0)
    # Started by root from a login session: its scope is systemd's, though root may write it.
    root, host = v2_host(tmp_path, own="/user.slice/user-0.slice/session-4.scope",
                         delegated=False)
    assert set(host.bases.values()) == {root}
    group = cgroups.create(tmp_path / "data", 2, CAPS, host)
    assert group.join_files == [str(root / cgroups.group_name(tmp_path / "data") / "run-2" /
                                    "cgroup.procs")]
    assert not (root / "user.slice" / "user-0.slice" / "session-4.scope" /
                "cgroup.subtree_control").exists()


def test_v1_caps_go_in_each_controllers_hierarchy(tmp_path):
    root, host = v1_host(tmp_path)
    group = cgroups.create(tmp_path / "data", 3, CAPS, host)
    name = cgroups.group_name(tmp_path / "data")
    # `tasks`: the starter moves itself as one thread, without the whole-group lock
    assert group.join_files == [str(root / c / name / "run-3" / "tasks")
                                for c in ("memory", "pids", "cpu")]
    assert (root / "memory" / name / "run-3" / "memory.limit_in_bytes").read_text() == str(
        64 << 20)
    assert (root / "pids" / name / "run-3" / "pids.max").read_text() == "32"
    # 1.5 cores over a 10 ms period (see CPU_PERIOD_US)
    assert (root / "cpu" / name / "run-3" / "cpu.cfs_quota_us").read_text() == "15000"
    assert (root / "cpu" / name / "run-3" / "cpu.cfs_period_us").read_text() == "10000"


def test_only_the_controllers_a_role_asks_for_are_used(tmp_path):
    root, host = v1_host(tmp_path)
    group = cgroups.create(tmp_path / "data", 1, Caps(pids=10), host)
    assert group.join_files == [str(root / "pids" / cgroups.group_name(tmp_path / "data") /
                                    "run-1" / "tasks")]


def test_a_cap_this_host_cannot_enforce_is_refused_naming_what_to_do(tmp_path):
    _, host = v1_host(tmp_path, controllers=("pids",))
    with pytest.raises(CgroupUnavailable, match="memory cap cannot be enforced here: the "
                                                "memory controller is not mounted"):
        cgroups.create(tmp_path / "data", 1, CAPS, host)
    cgroups.create(tmp_path / "data", 1, Caps(pids=5), host)  # what it has, it enforces


def test_a_v2_cgroup_not_delegated_to_the_daemon_is_refused(tmp_path, monkeypatch):
    v2_host(tmp_path)
    # A user's daemon whose cgroup systemd did not delegate: nothing there is its to write.
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(cgroups.os, "access", lambda path, mode: False)
    host = cgroups.host(tmp_path / "cgroup", tmp_path / "self")
    with pytest.raises(CgroupUnavailable, match="not delegated to it: run it as a systemd user "
                                                "service with Delegate=yes"):
        cgroups.create(tmp_path / "data", 1, CAPS, host)


def test_v2_a_controller_not_delegated_to_the_daemon_is_refused_saying_how(tmp_path):
    root, _ = v2_host(tmp_path)
    # An older systemd's user manager: the host has cpu, the daemon's cgroup was not given it.
    (root / "system.slice" / "taskherd.service" / "cgroup.controllers").write_text(
        "memory pids\n")
    host = cgroups.host(root, tmp_path / "self")
    assert set(host.bases) == {"memory", "pids"}
    with pytest.raises(CgroupUnavailable, match="its cpu cap cannot be enforced here: the cpu "
                                                "controller is not delegated to .*Delegate="):
        cgroups.create(tmp_path / "data", 1, CAPS, host)
    cgroups.create(tmp_path / "data", 1, Caps(memory=64 << 20, pids=32), host)


def test_two_data_dirs_never_share_a_cgroup(tmp_path):
    assert cgroups.group_name(tmp_path / "a") != cgroups.group_name(tmp_path / "b")
    assert cgroups.group_name(tmp_path / "a") == cgroups.group_name(tmp_path / "a" / ".")


def test_stale_run_cgroups_are_removed_and_open_ones_kept(tmp_path):
    root, host = v1_host(tmp_path, controllers=("pids",))
    for run_id in (1, 2):
        cgroups.create(tmp_path / "data", run_id, Caps(pids=5), host)
    # A fake tree's folders hold files, which rmdir refuses: empty the one to be removed.
    stale = root / "pids" / cgroups.group_name(tmp_path / "data") / "run-1"
    for child in stale.iterdir():
        child.unlink()
    assert cgroups.release_stale(tmp_path / "data", keep={2}, where=host) == 1
    assert not stale.exists()
    assert cgroups.run_folders(tmp_path / "data", 2, host)


def test_the_shim_copies_a_capped_agents_output_under_its_cpu_cap_alone(tmp_path):
    root, host = v1_host(tmp_path)
    group = cgroups.create(tmp_path / "data", 4, CAPS, host)
    name = cgroups.group_name(tmp_path / "data")
    # v1: the cpu cgroup only, never the memory one (a cap that kills must spare the shim)
    assert group.copier_files == [str(root / "cpu" / name / "run-4" / "tasks")]
    assert cgroups.create(tmp_path / "data", 5, Caps(memory=64 << 20), host).copier_files == []
    _, v2 = v2_host(tmp_path / "v2")
    assert cgroups.create(tmp_path / "data", 6, CAPS, v2).copier_files == []  # one cgroup
