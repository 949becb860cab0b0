"""Upgrading to 0030 (offset metadata stored escaped, app.storage.tables.OffsetMetadataText) and
back, on SQLite and PostgreSQL: the committed and staged offsets stored before read back as they
were committed, in the form the service now writes; the downgrade gives back the old form, and
on PostgreSQL refuses while a metadata holds NUL, which 0029 cannot store there."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text

from app.storage import offsets, transactions
from migrations.refusal import MigrationRefused
from tests.migration_helpers import at_revision, connected, topic_t

# As 0029 stored them on either database: none, plain, a backslash, what the escaping writes
# for a NUL (given literally), and two backslashes.
_STORED = (None, "plain", "back\\slash", "\\0", "\\\\")
_ESCAPED = (None, "plain", "back\\\\slash", "\\\\0", "\\\\\\\\")


def _insert(url: str, metadatas: tuple[str | None, ...]) -> None:
    """A committed offset of group "billing" and an offset staged by transaction "t" in partition
    p of topic "t", with metadatas[p]."""
    with connected(url) as conn, conn.begin():
        for p, m in enumerate(metadatas):
            conn.execute(text("INSERT INTO group_offsets (group_id, topic_id, \"partition\", committed_offset, "
                              "metadata, committed_ms) VALUES ('billing', 1, :p, 10, :m, 1)"), {"p": p, "m": m})
            conn.execute(text("INSERT INTO transaction_offsets (transactional_id, group_id, topic_id, \"partition\", "
                              "txn_id, committed_offset, metadata) VALUES ('t', 'billing', 1, :p, 1, 20, :m)"),
                         {"p": p, "m": m})


def _raw(url: str) -> tuple[list[str | None], list[str | None]]:
    """The metadata column as SQL reads it: group_offsets', then transaction_offsets', by partition."""
    with connected(url) as conn:
        return tuple(conn.execute(text(f'SELECT metadata FROM {table} ORDER BY "partition"')).scalars().all()
                     for table in ("group_offsets", "transaction_offsets"))  # type: ignore[return-value]


def _read_by_the_service(url: str, config: Config) -> tuple[list[str | None], list[str | None]]:
    """The metadata as the service reads it, at the schema of its own revision (later ones add columns)."""
    command.upgrade(config, "head")
    with connected(url) as conn:
        return ([o.metadata for o in offsets.fetch(conn, "billing")],
                [o.metadata for o in transactions.pending_offsets_of(conn, "t")])


def _at_0029(url: str, metadatas: tuple[str | None, ...]) -> object:
    config = at_revision(url, "0029", topic_t(len(metadatas)))
    _insert(url, metadatas)
    return config


def test_0030_doubles_every_stored_backslash_and_the_service_reads_each_metadata_as_it_was(empty_url: str) -> None:
    config = _at_0029(empty_url, _STORED)

    command.upgrade(config, "0030")
    assert _raw(empty_url) == (list(_ESCAPED), list(_ESCAPED))
    assert _read_by_the_service(empty_url, config) == (list(_STORED), list(_STORED))


@pytest.mark.parametrize("empty_url", ["sqlite"], indirect=True)
def test_0030_on_sqlite_escapes_the_nul_the_kafka_door_stored(empty_url: str) -> None:
    config = _at_0029(empty_url, ("Hello world!\x00", "\x00\\0"))

    command.upgrade(config, "0030")
    assert _raw(empty_url) == (["Hello world!\\0", "\\0\\\\0"],) * 2
    assert _read_by_the_service(empty_url, config) == (["Hello world!\x00", "\x00\\0"],) * 2


def test_0030_downgrade_gives_each_metadata_its_old_form_again(empty_url: str) -> None:
    config = at_revision(empty_url, "0030", topic_t(len(_STORED)))
    _insert(empty_url, _ESCAPED)

    command.downgrade(config, "0029")
    assert _raw(empty_url) == (list(_STORED), list(_STORED))


@pytest.mark.parametrize("empty_url", ["sqlite"], indirect=True)
def test_0030_downgrade_on_sqlite_stores_nul_as_0029_did(empty_url: str) -> None:
    config = at_revision(empty_url, "0030", topic_t(1))
    _insert(empty_url, ("Hello world!\\0",))

    command.downgrade(config, "0029")
    assert _raw(empty_url) == (["Hello world!\x00"],) * 2


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0030_downgrade_on_postgresql_refuses_while_a_metadata_holds_nul_and_changes_nothing(empty_url: str) -> None:
    config = at_revision(empty_url, "0030", topic_t(2))
    _insert(empty_url, ("Hello world!\\0", "back\\\\slash"))

    with pytest.raises(MigrationRefused, match=r"^2 committed or staged offset\(s\) hold NUL in their metadata, which "
                                               r"revision 0029 cannot store on PostgreSQL"):
        command.downgrade(config, "0029")
    assert _raw(empty_url) == (["Hello world!\\0", "back\\\\slash"],) * 2
    with connected(empty_url) as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "0030"
