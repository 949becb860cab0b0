"""Upgrading to 0025 (each transactional producer's durability) and back, on SQLite and
PostgreSQL: a producer stored before is "send", a value outside the enum is refused, and the
downgrade keeps every transactional id."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from tests.migration_helpers import at_revision, connected, write

_TXN = ("INSERT INTO transactions (transactional_id, producer_id, producer_epoch, state, transaction_timeout_ms, "
        "updated_ms, transaction_version{columns}) VALUES ('{tid}', {pid}, 0, 'Empty', 60000, 1, 2{values})")


def _transactions(url: str) -> list[tuple[object, ...]]:
    with connected(url) as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("transactions")}
        durability = "durability" if "durability" in columns else "'gone'"
        return [tuple(r) for r in conn.execute(text(
            f"SELECT transactional_id, producer_id, transaction_version, {durability} FROM transactions "
            "ORDER BY transactional_id"))]


def test_0025_makes_every_stored_producer_send_and_takes_commit_for_new_ones(empty_url: str) -> None:
    config = at_revision(empty_url, "0024", _TXN.format(columns="", tid="old", pid=1, values=""))

    command.upgrade(config, "0025")
    assert _transactions(empty_url) == [("old", 1, 2, "send")]
    write(empty_url, _TXN.format(columns=", durability", tid="new", pid=2, values=", 'commit'"))
    assert _transactions(empty_url) == [("new", 2, 2, "commit"), ("old", 1, 2, "send")]
    with pytest.raises(IntegrityError):
        write(empty_url, _TXN.format(columns=", durability", tid="bad", pid=3, values=", 'disk'"))

    command.downgrade(config, "0024")
    assert _transactions(empty_url) == [("new", 2, 2, "gone"), ("old", 1, 2, "gone")]
