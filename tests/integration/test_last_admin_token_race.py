"""Two revokes of the last two admin tokens at once, on PostgreSQL (SQLite's one writer
orders them already): the second waits for the first's locks, counts again, and is
refused, so one admin token stays live."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from taskherd.store import open_store
from taskherd.store.tokens import LastAdminToken
from tests.interleave import pause_before, wait_for_lock_wait_or

NOW = 1_700_000_000.0


def test_two_revokes_at_once_leave_one_admin_token(pg_url):
    first, second = open_store(pg_url), open_store(pg_url)
    try:
        first.add_api_token("alice", "admin", "a1" * 32, NOW)
        first.add_api_token("bob", "admin", "b2" * 32, NOW)
        # The first has counted two live admin tokens and holds them: it pauses before its
        # UPDATE while the second revokes the other one.
        counted, go_on = pause_before(first, "revoke_api_token")
        with ThreadPoolExecutor(2) as threads:
            try:
                revoking_alice = threads.submit(first.revoke_api_token, "alice", NOW + 1)
                assert counted.wait(10)
                revoking_bob = threads.submit(second.revoke_api_token, "bob", NOW + 1)
                wait_for_lock_wait_or(revoking_bob.done, pg_url)
            finally:
                go_on.set()
            assert revoking_alice.result(10).revoked_at == NOW + 1
            with pytest.raises(LastAdminToken):
                revoking_bob.result(10)
        assert second.live_api_token("b2" * 32, NOW + 2).name == "bob"
    finally:
        first.close()
        second.close()
