"""A FIFO agents block on until the test opens it: a release with no sleep. The fixture
`gate` (offered to every integration test by conftest.py) and `release`, shared by the
process tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def gate(tmp_path):
    """A FIFO an agent blocks on until the test opens it: a release with no sleep."""
    path = tmp_path / "gate"
    os.mkfifo(path)
    return path


def release(gate_path):
    with open(gate_path, "w") as gate:
        gate.write("go\n")
