"""Fixtures every test folder may use: a throwaway PostgreSQL server (tests/pg.py)."""

pytest_plugins = ["tests.pg"]
