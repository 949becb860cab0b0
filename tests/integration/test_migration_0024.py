"""Upgrading to 0024 (API keys' SCRAM credentials) and back, on SQLite and PostgreSQL: a key
stored before has none, a key stored after keeps its own, and the downgrade keeps every key."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from tests.migration_helpers import at_revision, connected

_KEY = ("INSERT INTO api_keys (key_id, principal, secret_hash, created_ms{columns}) "
        "VALUES ('{key_id}', 'User:alice', 'scrypt$hash', 1{values})")
_SCRAM = ("scram_salt", "scram_iterations", "scram_sha_256_stored_key", "scram_sha_256_server_key",
          "scram_sha_512_stored_key", "scram_sha_512_server_key")


def _keys(url: str) -> list[tuple[object, ...]]:
    """Each key, with its iteration count and the lengths of its salt and of two of its keys."""
    with connected(url) as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("api_keys")}
        scram = ("scram_iterations, length(scram_salt), length(scram_sha_256_stored_key), "
                 "length(scram_sha_512_server_key)" if "scram_salt" in columns else "'gone', 0, 0, 0")
        return [tuple(r) for r in conn.execute(text(
            f"SELECT key_id, principal, secret_hash, {scram} FROM api_keys ORDER BY key_id"))]


def test_0024_adds_scram_credentials_that_older_keys_lack_and_its_downgrade_keeps_the_keys(empty_url: str) -> None:
    config = at_revision(empty_url, "0023", _KEY.format(columns="", key_id="old", values=""))

    command.upgrade(config, "0024")
    assert _keys(empty_url) == [("old", "User:alice", "scrypt$hash", None, None, None, None)]
    with connected(empty_url) as conn, conn.begin():
        conn.execute(text(_KEY.format(columns="".join(f", {c}" for c in _SCRAM), key_id="new",
                                      values=", :salt, 4096, :k32, :k32, :k64, :k64")),
                     {"salt": b"s" * 16, "k32": b"a" * 32, "k64": b"b" * 64})
    assert _keys(empty_url) == [("new", "User:alice", "scrypt$hash", 4096, 16, 32, 64),
                                ("old", "User:alice", "scrypt$hash", None, None, None, None)]

    command.downgrade(config, "0023")
    assert _keys(empty_url) == [("new", "User:alice", "scrypt$hash", "gone", 0, 0, 0),
                                ("old", "User:alice", "scrypt$hash", "gone", 0, 0, 0)]
