"""Upgrading to 0046 (producer_tombstones, renamed forgotten_producers by 0047) and back, on
SQLite and PostgreSQL, with producers stored: the upgrade makes the empty table and changes no
producer; the row an expiry at 0046 wrote of a forgotten producer that had a holder is kept
there; the downgrade drops the table, and with it the holders of forgotten ids, every producer
left as it was. The rows are written as SQL: this version's code names the table as 0047 does
(what it does with them: tests/integration/test_migration_0047.py)."""

from __future__ import annotations

from typing import Any

from alembic import command
from sqlalchemy import inspect, text

from tests.migration_helpers import at_revision, connected, write

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

    # An expiry at 0046 forgets producers 1 and 2, and keeps the holder of 1 (2 had none).
    write(empty_url, "DELETE FROM producers WHERE producer_id IN (1, 2)",
          "INSERT INTO producer_tombstones (producer_id, principal, forgotten_ms) VALUES (1, 'User:alice', 1000)")
    assert (_producers(empty_url), _tombstones(empty_url)) == (stored[2:], [(1, "User:alice", 1_000)])

    command.downgrade(config, "0044")
    assert (_producers(empty_url), _tombstones(empty_url)) == (stored[2:], None)

    command.upgrade(config, "0046")
    assert (_producers(empty_url), _tombstones(empty_url)) == (stored[2:], [])
