"""Upgrading to 0040 (CHECKs of transactions.state and topics.cleanup_policy) and back, on SQLite
and PostgreSQL: every stored state and policy is kept, and every partition (SQLite edits the
definition of `topics`, which partitions reference ON DELETE CASCADE); a value outside them is
refused from 0040 on and taken again after the downgrade; an upgrade over a row holding one
refuses, naming it. PostgreSQL's CHECK of outbox.append_grants.pattern_type is named as
tables.one_of names a CHECK from 0040 on."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from app.domain.transaction import STORED_STATES
from app.domain.types import CleanupPolicy
from app.storage import migrate
from migrations import locks
from migrations.refusal import MigrationRefused
from tests.migration_helpers import at_revision, connected, write


def _topic(topic_id: int, policy: str) -> str:
    return ("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, check_expected_offsets, "
            f"created_ms) VALUES ({topic_id}, 't{topic_id}', 1, '{policy}', -1, FALSE, 1)")


def _partition(topic_id: int) -> str:
    return ('INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) '
            f"VALUES ({topic_id}, 0, 7, 2)")


def _transaction(transactional_id: str, state: str) -> str:
    return ("INSERT INTO transactions (transactional_id, producer_id, producer_epoch, state, transaction_timeout_ms, "
            f"updated_ms) VALUES ('{transactional_id}', 1, 0, '{state}', 60000, 1)")


# A topic of each policy with a partition, a transactional id in each stored state.
STORED = ([_topic(i, p.value) for i, p in enumerate(CleanupPolicy, start=1)]
          + [_partition(i) for i, _ in enumerate(CleanupPolicy, start=1)]
          + [_transaction(f"tx-{s.value}", s.value) for s in STORED_STATES])


def _rows(url: str) -> tuple[list[tuple[object, ...]], ...]:
    with connected(url) as conn:
        return tuple([tuple(r) for r in conn.execute(text(query))] for query in (
            "SELECT topic_id, name, cleanup_policy FROM topics ORDER BY topic_id",
            'SELECT topic_id, "partition", next_offset, log_start_offset FROM partitions ORDER BY topic_id',
            "SELECT transactional_id, state FROM transactions ORDER BY transactional_id"))


def _takes(url: str, statement: str) -> bool:
    """Whether `statement` is written (then rolled back) or refused by a constraint."""
    with connected(url) as conn:
        try:
            with conn.begin() as txn:
                conn.execute(text(statement))
                txn.rollback()
        except IntegrityError:
            return False
    return True


OUTSIDE = (_transaction("fenced", "PrepareEpochFence"), "UPDATE topics SET cleanup_policy = 'delete,compact'")


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        return migrate.current_revision(engine)
    finally:
        engine.dispose()


def test_0040_keeps_every_stored_row_and_refuses_a_state_or_policy_outside_the_enums_until_the_downgrade(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0039", *STORED)
    stored = _rows(empty_url)
    assert all(_takes(empty_url, s) for s in OUTSIDE)

    command.upgrade(config, "0040")
    assert _rows(empty_url) == stored
    assert not any(_takes(empty_url, s) for s in OUTSIDE)
    assert _takes(empty_url, _topic(9, "compact,delete"))

    command.downgrade(config, "0039")
    assert _rows(empty_url) == stored
    assert all(_takes(empty_url, s) for s in OUTSIDE)


def test_0040_refuses_to_upgrade_over_a_state_or_policy_outside_the_enums_naming_the_rows(empty_url: str) -> None:
    config = at_revision(empty_url, "0039", *STORED, _transaction("odd", "Closed"))

    with pytest.raises(MigrationRefused, match=r"^1 row\(s\) of transactions hold a state outside Empty, Ongoing, "
                                               r"Prepared, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, "
                                               r"Dead, which no revision writes \(an edit by hand\?\): 'odd' "
                                               r"\('Closed'\); set each to one of those states or delete it before "
                                               r"upgrading$"):
        command.upgrade(config, "0040")
    assert _revision(empty_url) == "0039"

    write(empty_url, "DELETE FROM transactions WHERE transactional_id = 'odd'", "UPDATE topics SET cleanup_policy = "
          "'Delete' WHERE topic_id = 1")
    with pytest.raises(MigrationRefused, match=r"^1 row\(s\) of topics hold a cleanup_policy outside delete, compact, "
                                               r"compact,delete, which no revision writes \(an edit by hand\?\): 't1' "
                                               r"\('Delete'\); set each to one of those policies before upgrading$"):
        command.upgrade(config, "0040")
    assert _revision(empty_url) == "0039"


def _pattern_type_checks(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        return sorted(c["name"] for c in inspect(engine).get_check_constraints("append_grants", schema="outbox")
                      if "pattern_type IN" in c["sqltext"] or "pattern_type = ANY" in c["sqltext"])
    finally:
        engine.dispose()


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0040_names_the_append_grants_pattern_type_check_as_one_of_does_and_the_downgrade_names_it_back(
        empty_url: str) -> None:
    grant = "INSERT INTO outbox.append_grants (role, topic, pattern_type) VALUES ('r', 't', '{}')"
    config = at_revision(empty_url, "0039", grant.format("prefixed"))
    assert _pattern_type_checks(empty_url) == ["append_grants_pattern_type_check"]

    command.upgrade(config, "0040")
    assert _pattern_type_checks(empty_url) == ["ck_append_grants_pattern_type"]
    assert not _takes(empty_url, grant.format("match"))

    command.downgrade(config, "0039")
    assert _pattern_type_checks(empty_url) == ["append_grants_pattern_type_check"]
    assert not _takes(empty_url, grant.format("match"))


def _psycopg_url(url: str) -> str:
    return url.replace("postgresql+psycopg", "postgresql")


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0040_waiting_for_a_long_reader_of_topics_does_not_stop_the_services_reads_behind_it(empty_url: str) -> None:
    """A reader holding `topics` (a long transaction) keeps the upgrade waiting for its lock;
    meanwhile the service's reads of `topics` and `transactions` go on, each held a moment at
    most, where behind an ALTER waiting for its lock each waited as long as the reader. The
    upgrade ends once the reader does."""
    config = at_revision(empty_url, "0039", *STORED)
    failed: list[BaseException] = []

    def upgrade() -> None:
        try:
            command.upgrade(config, "0040")
        except BaseException as e:  # noqa: BLE001 - said by the test's thread
            failed.append(e)

    with psycopg.connect(_psycopg_url(empty_url)) as reader, \
            psycopg.connect(_psycopg_url(empty_url), autocommit=True) as service:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM topics").fetchone() == (3,)
        upgrading = threading.Thread(target=upgrade)
        upgrading.start()
        try:
            # Well past a try's wait (migrations.locks.WAIT): a read that queued behind the
            # migration's wait is refused by this timeout rather than served.
            service.execute("SET lock_timeout = '2s'")
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                assert service.execute("SELECT count(*) FROM topics").fetchone() == (3,)
                assert service.execute("SELECT count(*) FROM transactions").fetchone() == (len(STORED_STATES),)
                time.sleep(0.05)
            assert upgrading.is_alive() and not failed, failed
        finally:
            reader.execute("COMMIT")
            upgrading.join(60)
    assert not upgrading.is_alive() and not failed, failed
    assert _revision(empty_url) == "0040"


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0040_gives_up_after_its_patience_naming_the_transaction_that_holds_the_table(
        empty_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locks, "PATIENCE_S", 1.0)
    config = at_revision(empty_url, "0039", *STORED)
    with psycopg.connect(_psycopg_url(empty_url)) as reader:
        reader.execute("SET application_name = 'long-reader'")
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM transactions")
        pid = reader.info.backend_pid
        with pytest.raises(RuntimeError, match=rf"^migration 0040 could not take topics, transactions and "
                                               rf"outbox.append_grants in ACCESS EXCLUSIVE mode within 1 s; held by: "
                                               rf"pid {pid} \(long-reader, since [0-9: -]+\); run the upgrade again "
                                               rf"once they are done$"):
            command.upgrade(config, "0040")
        reader.execute("COMMIT")
    assert _revision(empty_url) == "0039"
