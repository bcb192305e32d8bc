"""Fixtures of the integration tests beyond tests/conftest.py's."""

from tests.integration.fifo_gate import gate  # noqa: F401 - a fixture, found here by pytest
