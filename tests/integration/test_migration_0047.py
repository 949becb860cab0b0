"""Upgrading to 0047 (producer_tombstones renamed forgotten_producers) and back, on SQLite and
PostgreSQL, with producers and a forgotten producer's holder stored: the upgrade keeps every row
under the new name, with its primary key and index named after it, and the old name is gone;
the service's code reads and writes the rows there (a take-back by another principal refused,
an expiry keeping its holder); the downgrade puts every row back under the old names."""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from sqlalchemy import inspect, text

from app.domain.errors import UnknownProducerId
from app.storage import producers
from tests.migration_helpers import at_revision, connected

# Producer 1, alice's, forgotten by an expiry at 1,000 (its holder kept); 2 made by the service
# itself (no holder) and 3 held by bob, both live; the counter has handed out 3.
_PRODUCERS = ("INSERT INTO producers (producer_id, producer_epoch, transactional_id, created_ms, principal, taken_back_ms) "
              "VALUES (2, 0, NULL, 1, NULL, NULL), (3, 0, NULL, 500, 'User:bob', NULL)")
_FORGOTTEN = "INSERT INTO producer_tombstones (producer_id, principal, forgotten_ms) VALUES (1, 'User:alice', 1000)"
_COUNTER = "UPDATE counters SET value = 3 WHERE name = 'producer_id'"
_ROWS = "SELECT producer_id, producer_epoch, transactional_id, created_ms, principal, taken_back_ms FROM producers ORDER BY producer_id"


def _producers(url: str) -> list[tuple[Any, ...]]:
    with connected(url) as conn:
        return [tuple(r) for r in conn.execute(text(_ROWS))]


def _holders(url: str) -> dict[str, Any]:
    """Each of the two names: its rows, its primary key's name and its indexes' names; None
    where no table has that name."""
    found: dict[str, Any] = {}
    with connected(url) as conn:
        insp = inspect(conn)
        tables = insp.get_table_names()
        for table in ("producer_tombstones", "forgotten_producers"):
            if table not in tables:
                found[table] = None
                continue
            rows = [tuple(r) for r in conn.execute(text(
                f"SELECT producer_id, principal, forgotten_ms FROM {table} ORDER BY producer_id"))]
            found[table] = (rows, insp.get_pk_constraint(table)["name"],
                            sorted(i["name"] for i in insp.get_indexes(table)))
    return found


def test_0047_renames_the_holders_of_forgotten_producers_with_their_rows_and_the_downgrade_renames_them_back(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0046", _PRODUCERS, _FORGOTTEN, _COUNTER)
    stored = _producers(empty_url)
    assert _holders(empty_url) == {
        "producer_tombstones": ([(1, "User:alice", 1_000)], "pk_producer_tombstones",
                                ["ix_producer_tombstones_forgotten_ms"]),
        "forgotten_producers": None,
    }

    command.upgrade(config, "0047")
    assert _producers(empty_url) == stored
    assert _holders(empty_url) == {
        "producer_tombstones": None,
        "forgotten_producers": ([(1, "User:alice", 1_000)], "pk_forgotten_producers",
                                ["ix_forgotten_producers_forgotten_ms"]),
    }

    # The service's code finds alice's row there: another principal's take-back is refused, its
    # transaction rolled back with the row it made.
    with pytest.raises(UnknownProducerId), connected(empty_url) as conn, conn.begin():
        producers.take_back_producer(conn, 1, 0, 2_000, "User:mallory")
    # An expiry forgets 2 and 3, and keeps bob's holder beside alice's.
    with connected(empty_url) as conn, conn.begin():
        assert producers.delete_idle_producers(conn, [2, 3], 600, 3_000) == [2, 3]
    assert _producers(empty_url) == []
    held = [(1, "User:alice", 1_000), (3, "User:bob", 3_000)]
    assert _holders(empty_url)["forgotten_producers"] == (held, "pk_forgotten_producers",
                                                          ["ix_forgotten_producers_forgotten_ms"])

    command.downgrade(config, "0046")
    assert _holders(empty_url) == {
        "producer_tombstones": (held, "pk_producer_tombstones", ["ix_producer_tombstones_forgotten_ms"]),
        "forgotten_producers": None,
    }

    command.upgrade(config, "0047")
    assert _holders(empty_url) == {
        "producer_tombstones": None,
        "forgotten_producers": (held, "pk_forgotten_producers", ["ix_forgotten_producers_forgotten_ms"]),
    }
