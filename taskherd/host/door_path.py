"""Where a node's agent door lives on disk: the socket's name and its own folder.

Apart from the settings so that an agent's commands (`taskherd heartbeat`, many times a run)
find their socket without importing the records and settings they never use."""

from __future__ import annotations

from pathlib import Path

SOCKET_NAME = "agent.sock"
DOOR_DIR = "door"  # the socket's own folder: a sandbox mounts the folder, not the file


def door_dir(data_dir: Path) -> Path:
    """The folder of the door's socket. A sandboxed agent is given this folder, never the
    socket file alone: a restarted daemon binds a new socket (a new file), which a mount of
    the old file would never show, and the agent's reports would wait for nothing."""
    return data_dir / DOOR_DIR
