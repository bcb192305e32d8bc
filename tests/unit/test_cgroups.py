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


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_a_run_takes_the_cgroups_made_ahead_for_its_caps_by_a_rename(tmp_path, layout):
    root, host = v1_host(tmp_path) if layout == "v1" else v2_host(tmp_path)
    data = tmp_path / "data"
    ready = cgroups.prepare(data, CAPS, host)
    assert ready.startswith(cgroups.READY_PREFIX)
    made = sorted(path for path in root.rglob(ready) if path.is_dir())
    assert made  # one in each hierarchy (v1), one under the delegated cgroup (v2)
    limits = {path: sorted(child.name for child in path.iterdir()) for path in made}

    group = cgroups.create(data, 4, CAPS, host, ready)
    assert not any(path.exists() for path in made)  # renamed, not copied
    assert sorted(group.folders) == [path.with_name("run-4") for path in made]
    for path in made:  # the limits written ahead are the run's
        assert sorted(child.name for child in path.with_name("run-4").iterdir()) == limits[path]
    assert all("/run-4/" in path for path in group.join_files)


def test_a_set_made_ahead_that_cannot_be_the_runs_is_removed_and_the_runs_made(tmp_path):
    root, host = v1_host(tmp_path, controllers=("pids",))
    data = tmp_path / "data"
    cgroups.create(data, 5, Caps(pids=5), host)  # a leftover of the run's own name
    ready = cgroups.prepare(data, Caps(pids=5), host)
    folder = root / "pids" / cgroups.group_name(data) / ready
    (folder / "pids.max").unlink()  # a fake tree's folder holds files, which rmdir refuses
    group = cgroups.create(data, 5, Caps(pids=9), host, ready)
    assert not folder.exists()
    assert (group.folders[0] / "pids.max").read_text() == "9"  # the run's caps, written


def test_sets_made_ahead_by_an_earlier_daemon_are_removed_at_start(tmp_path):
    root, host = v1_host(tmp_path, controllers=("pids",))
    ready = cgroups.prepare(tmp_path / "data", Caps(pids=5), host)
    folder = root / "pids" / cgroups.group_name(tmp_path / "data") / ready
    (folder / "pids.max").unlink()
    cgroups.release_stale(tmp_path / "data", keep=set(), where=host)
    assert not folder.exists()


def test_the_shim_copies_a_capped_agents_output_under_its_cpu_cap_alone(tmp_path):
    root, host = v1_host(tmp_path)
    group = cgroups.create(tmp_path / "data", 4, CAPS, host)
    name = cgroups.group_name(tmp_path / "data")
    # v1: the cpu cgroup only, never the memory one (a cap that kills must spare the shim)
    assert group.copier_files == [str(root / "cpu" / name / "run-4" / "tasks")]
    assert cgroups.create(tmp_path / "data", 5, Caps(memory=64 << 20), host).copier_files == []
    _, v2 = v2_host(tmp_path / "v2")
    assert cgroups.create(tmp_path / "data", 6, CAPS, v2).copier_files == []  # one cgroup
