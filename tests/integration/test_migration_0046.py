"""Upgrading to 0046 (producer tombstones) and back, on SQLite and PostgreSQL, with producers
stored: the upgrade makes the empty table and changes no producer; an expiry at 0046 leaves
the tombstone of a forgotten producer that had a holder, and a take-back by another principal
is refused by it; the downgrade drops the table, and with it the holders of forgotten ids,
every producer left as it was."""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from sqlalchemy import inspect, text

from app.domain.errors import UnknownProducerId
from app.storage import producers
from tests.migration_helpers import at_revision, connected

# Producer 1 held by alice (made at 1), 2 made by the service itself (no holder), 3 held by bob
# and used recently; the counter has handed out 3.
_PRODUCERS = ("INSERT INTO producers (producer_id, producer_epoch, transactional_id, created_ms, principal, taken_back_ms) "
              "VALUES (1, 0, NULL, 1, 'User:alice', NULL), (2, 0, NULL, 1, NULL, NULL), (3, 0, NULL, 500, 'User:bob', NULL)")
_COUNTER = "UPDATE counters SET value = 3 WHERE name = 'producer_id'"
_ROWS = "SELECT producer_id, producer_epoch, transactional_id, created_ms, principal, taken_back_ms FROM producers ORDER BY producer_id"


def _producers(url: str) -> list[tuple[Any, ...]]:
    with connected(url) as conn:
        return [tuple(r) for r in conn.execute(text(_ROWS))]


def _tombstones(url: str) -> list[tuple[Any, ...]] | None:
    with connected(url) as conn:
        if "producer_tombstones" not in inspect(conn).get_table_names():
            return None
        return [tuple(r) for r in conn.execute(text(
            "SELECT producer_id, principal, forgotten_ms FROM producer_tombstones ORDER BY producer_id"))]


def test_0046_keeps_the_holders_of_producers_forgotten_after_it_and_the_downgrade_drops_them(empty_url: str) -> None:
    config = at_revision(empty_url, "0044", _PRODUCERS, _COUNTER)
    stored = _producers(empty_url)

    command.upgrade(config, "0046")
    assert (_producers(empty_url), _tombstones(empty_url)) == (stored, [])

    with connected(empty_url) as conn, conn.begin():
        assert producers.delete_idle_producers(conn, [1, 2, 3], 100, 1_000) == [1, 2]
    assert _tombstones(empty_url) == [(1, "User:alice", 1_000)]
    # Refused, and its transaction rolled back with the row it made.
    with pytest.raises(UnknownProducerId), connected(empty_url) as conn, conn.begin():
        producers.take_back_producer(conn, 1, 0, 2_000, "User:mallory")
    with connected(empty_url) as conn, conn.begin():
        # The producer without a holder goes to whoever sends first, as before 0046.
        assert producers.take_back_producer(conn, 2, 0, 2_000, "User:mallory")
    after = [(2, 0, None, 2_000, "User:mallory", 2_000), stored[2]]
    assert _producers(empty_url) == after

    command.downgrade(config, "0044")
    assert (_producers(empty_url), _tombstones(empty_url)) == (after, None)

    command.upgrade(config, "0046")
    assert (_producers(empty_url), _tombstones(empty_url)) == (after, [])
