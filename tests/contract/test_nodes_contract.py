"""Nodes say they are alive: a daemon that stops says goodbye, one that dies goes silent and
is judged down after three of its lease periods."""

from __future__ import annotations

LEASE = 60.0


def up(store, name="n1", now=1000.0, pid=4242):
    return store.node_up(name, host="box", pid=pid, version="1.2", lease=LEASE,
                         roles=["qa", "coder"], now=now)


def test_a_node_that_keeps_reporting_is_up_with_its_running_count(store):
    node = up(store)
    assert node.status(1000.0) == "up" and node.running == 0 and node.started_at == 1000.0
    assert node.roles == ("coder", "qa")
    store.node_seen("n1", 1100.0, running=3, roles=["coder"])
    [node] = store.list_nodes()
    assert (node.last_seen, node.running, node.pid, node.host) == (1100.0, 3, 4242, "box")
    assert node.status(1100.0 + 3 * LEASE) == "up"
    assert node.roles == ("coder",) and node.runs("coder") and node.runs("any")
    assert not node.runs("qa")


def test_a_silent_node_is_down_and_a_clean_stop_is_stopped(store):
    up(store, "dies")
    up(store, "leaves")
    store.node_stopped("leaves", 1010.0)
    nodes = {node.name: node for node in store.list_nodes()}
    later = 1000.0 + 3 * LEASE + 1
    assert nodes["dies"].status(later) == "down"
    assert nodes["leaves"].status(later) == "stopped"
    assert nodes["leaves"].stopped_at == 1010.0 and nodes["leaves"].running == 0


def test_a_restart_is_a_new_life(store):
    up(store, now=1000.0, pid=1)
    store.node_seen("n1", 1050.0, running=2, roles=[])
    store.node_stopped("n1", 1060.0)
    node = up(store, now=2000.0, pid=2)
    assert (node.started_at, node.pid, node.stopped_at, node.running) == (2000.0, 2, None, 0)
    assert [n.name for n in store.list_nodes()] == ["n1"]


def test_a_nodes_pause_is_begun_and_ended_once_and_kept_across_a_restart(store, reopen):
    up(store)
    store.add_alias("ops", "file", "/dev/null", 1000.0)
    assert store.pause_node("n1", "0 B free at /data", ["ops"], 1001.0)
    assert not store.pause_node("n1", "/data is full", ["ops"], 1002.0)  # already paused
    other = reopen()  # what `taskherd status` in another process reads
    try:
        [node] = other.list_nodes()
        assert (node.paused_at, node.paused_reason) == (1001.0, "/data is full")
        up(store, now=1003.0, pid=2)  # a restart does not forget it: the disk is still full
        assert other.list_nodes()[0].paused_at == 1001.0
    finally:
        other.close()
    assert store.resume_node("n1", ["ops"], 1004.0)
    assert not store.resume_node("n1", ["ops"], 1005.0)
    [node] = store.list_nodes()
    assert (node.paused_at, node.paused_reason) == (None, None)
    told = [(d.event, d.task_id) for d in store.list_deliveries(alias="ops")]
    assert sorted(told) == [("node_paused", None), ("node_resumed", None)]
