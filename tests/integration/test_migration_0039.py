"""Upgrading to 0039 and back on PostgreSQL: outbox.append and publish_pending check the topic's
config through one function, outbox.check_topic_config, and answer each refusal with the code
and message 0038's functions answered; under REPEATABLE READ a commit whose topic was altered
after the application's snapshot fails with a serialization failure from 0039 on, and published
its records under the config of the snapshot before (and after the downgrade)."""

from __future__ import annotations

import psycopg
import pytest
from alembic import command

from tests.migration_helpers import at_revision, topic_t

PARTITION = 'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 0, 0)'
# Each config a record below is refused under, and that record's arguments (key, value).
CONFIGS = [("check_expected_offsets = TRUE", ("k", "1")),
           ("cleanup_policy = 'compact'", (None, "1")),
           ("max_message_bytes = 2", ("k", '"long"'))]
DEFAULT = "cleanup_policy = 'delete', check_expected_offsets = FALSE, max_message_bytes = 1000"


def _psycopg(url: str) -> str:
    return url.replace("postgresql+psycopg", "postgresql")


def _refusals(url: str) -> list[tuple[str | None, str | None]]:
    """The SQLSTATE and message of each record of CONFIGS refused by outbox.append under its
    config, then by the commit of a transaction that staged it and set the config after."""
    answers: list[tuple[str | None, str | None]] = []
    with psycopg.connect(_psycopg(url)) as conn:
        for at_commit in (False, True):
            for config, (key, value) in CONFIGS:
                conn.execute(f"UPDATE topics SET {DEFAULT} WHERE topic_id = 1")
                conn.commit()
                if not at_commit:
                    conn.execute(f"UPDATE topics SET {config} WHERE topic_id = 1")
                try:
                    conn.execute("SELECT outbox.append('t', 0, %s, %s::json)", (key, value))
                    if at_commit:
                        conn.execute(f"UPDATE topics SET {config} WHERE topic_id = 1")
                    conn.commit()
                except psycopg.Error as e:
                    conn.rollback()
                    answers.append((e.sqlstate, e.diag.message_primary))
                else:
                    raise AssertionError(f"{config}: the record was taken")
    return answers


def _checked_in_one_place(url: str) -> bool:
    with psycopg.connect(_psycopg(url)) as conn:
        row = conn.execute("SELECT to_regprocedure('outbox.check_topic_config(text, integer, text, boolean, "
                           "integer, boolean, bigint, boolean)')").fetchone()
    return row is not None and row[0] is not None


def _published_though_altered_after_the_snapshot(url: str) -> bool:
    """A record without a key staged to t/0 under REPEATABLE READ, t made compacted by another
    transaction before the commit: whether the commit published the record."""
    with psycopg.connect(_psycopg(url)) as app, psycopg.connect(_psycopg(url), autocommit=True) as admin:
        admin.execute(f"UPDATE topics SET {DEFAULT} WHERE topic_id = 1")
        app.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        app.execute("SELECT outbox.append('t', 0, NULL, '1')")
        admin.execute("UPDATE topics SET cleanup_policy = 'compact' WHERE topic_id = 1")
        try:
            app.commit()
        except psycopg.errors.SerializationFailure:
            return False
    return True


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0039_checks_the_topic_s_config_in_one_function_with_0038_s_refusals_and_the_downgrade_keeps_them(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0038", topic_t(1), PARTITION)
    refusals = _refusals(empty_url)
    assert [message.partition(":")[0] for _, message in refusals] == ["INVALID_REQUEST", "INVALID_RECORD", "MESSAGE_TOO_LARGE"] * 2
    assert not _checked_in_one_place(empty_url)

    command.upgrade(config, "0039")
    assert _refusals(empty_url) == refusals
    assert _checked_in_one_place(empty_url)

    command.downgrade(config, "0038")
    assert _refusals(empty_url) == refusals
    assert not _checked_in_one_place(empty_url)


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0039_fails_a_commit_whose_topic_changed_after_its_snapshot_and_the_downgrade_publishes_it(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0038", topic_t(1), PARTITION)
    assert _published_though_altered_after_the_snapshot(empty_url)

    command.upgrade(config, "0039")
    assert not _published_though_altered_after_the_snapshot(empty_url)

    command.downgrade(config, "0038")
    assert _published_though_altered_after_the_snapshot(empty_url)
