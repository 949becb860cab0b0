"""The SCRAM credentials stored with every new API key (app.storage.security.add_api_key), on
SQLite and PostgreSQL: derived from the whole key, one salt for all of a principal's live keys
(a SCRAM server states the salt before it knows which key the client holds), and nothing from
which the key could be read back."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.scram import HASHES, ITERATIONS, credential


@pytest.fixture(autouse=True)
def cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.services.security._SCRYPT_N", 2)


def test_a_new_key_stores_rfc_5802s_credentials_of_the_key_for_both_mechanisms(services: Any) -> None:
    issued = services.security.create_api_key("alice", by="test")
    (row,) = services.security.list_api_keys("alice")
    assert sorted(row.scram) == sorted(HASHES) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    for mechanism, stored in row.scram.items():
        assert (len(stored.salt), stored.iterations) == (16, ITERATIONS)
        assert stored == credential(mechanism, issued.api_key, stored.salt, ITERATIONS)
    assert row.scram["SCRAM-SHA-256"].salt == row.scram["SCRAM-SHA-512"].salt


def test_the_keys_of_one_principal_share_a_salt_and_another_principals_do_not(services: Any) -> None:
    security = services.security
    first, second = (security.create_api_key("alice", by="test") for _ in range(2))
    security.create_api_key("bob", by="test")
    salts = {r.key_id: r.scram["SCRAM-SHA-256"].salt for r in security.list_api_keys()}
    assert salts[first.key_id] == salts[second.key_id]
    assert len(set(salts.values())) == 2
    # Each key its own StoredKey, under the shared salt.
    keys = {r.key_id: r.scram["SCRAM-SHA-256"].stored_key for r in security.list_api_keys("alice")}
    assert keys[first.key_id] != keys[second.key_id]


def test_a_principal_whose_keys_are_all_revoked_gets_a_new_salt_with_its_next_key(services: Any) -> None:
    security = services.security
    old = security.create_api_key("alice", by="test")
    old_salt = security.list_api_keys("alice")[0].scram["SCRAM-SHA-512"].salt
    assert security.revoke_api_keys(by="test", principal="alice") == [old.key_id]
    new = security.create_api_key("alice", by="test")
    (row,) = [r for r in security.list_api_keys("alice") if r.key_id == new.key_id]
    assert row.scram["SCRAM-SHA-512"].salt != old_salt
