"""API tokens, on every store: kept by digest, found while live, refused once revoked or
expired, names never reused."""

from __future__ import annotations

import pytest

from taskherd.store.tokens import LastAdminToken, TokenNotFound, TokenRefused

NOW = 1_700_000_000.0


def test_a_token_is_found_by_its_digest_while_it_is_live(store):
    made = store.add_api_token("ci", "intake", "d1" * 32, NOW, expires_at=NOW + 60,
                               roles=["qa", "coder"], rate_per_minute=30)
    assert (made.name, made.scope, made.roles, made.rate_per_minute) == (
        "ci", "intake", ("coder", "qa"), 30)
    assert store.live_api_token("d1" * 32, NOW + 59).id == made.id
    assert store.live_api_token("d1" * 32, NOW + 60) is None  # expired
    assert store.live_api_token("d2" * 32, NOW) is None


def test_a_revoked_token_matches_nothing_and_its_name_is_not_reused(store):
    store.add_api_token("ops", "operator", "aa" * 32, NOW)
    revoked = store.revoke_api_token("ops", NOW + 1)
    assert revoked.revoked_at == NOW + 1 and revoked.status(NOW + 2) == "revoked"
    assert store.live_api_token("aa" * 32, NOW + 2) is None
    with pytest.raises(TokenRefused, match="already revoked"):
        store.revoke_api_token("ops", NOW + 3)
    with pytest.raises(TokenRefused, match="already exists"):
        store.add_api_token("ops", "read", "bb" * 32, NOW + 4)
    with pytest.raises(TokenNotFound):
        store.revoke_api_token("nobody", NOW)
    assert [token.name for token in store.list_api_tokens()] == ["ops"]


def test_the_last_live_admin_token_is_kept_unless_asked(store):
    store.add_api_token("root", "admin", "a1" * 32, NOW)
    store.add_api_token("gone", "admin", "a2" * 32, NOW, expires_at=NOW + 1)
    store.add_api_token("ops", "operator", "a3" * 32, NOW)
    with pytest.raises(LastAdminToken, match="last live admin token"):
        store.revoke_api_token("root", NOW + 10)  # the other admin token has expired
    assert store.live_api_token("a1" * 32, NOW + 10) is not None
    store.revoke_api_token("ops", NOW + 10)  # other scopes go as before
    store.add_api_token("spare", "admin", "a4" * 32, NOW + 11)
    store.revoke_api_token("root", NOW + 12)
    with pytest.raises(LastAdminToken):
        store.revoke_api_token("spare", NOW + 13)
    assert store.revoke_api_token("spare", NOW + 14, keep_an_admin=False).revoked_at == NOW + 14
