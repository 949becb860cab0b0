"""Upgrading to 0038 and back on PostgreSQL: outbox.append refuses a lone low surrogate's escape
in a value, which 0037's function (0034's text) stored, and takes it again after the downgrade;
a surrogate pair is taken throughout. An impossible topic name is the caller's mistake
(INVALID_REQUEST) from 0038 on, an unknown topic before; a number too small for PostgreSQL's
numeric (a float's 0) is taken from 0038 on, refused before."""

from __future__ import annotations

import psycopg
import pytest
from alembic import command

from tests.migration_helpers import appender_takes, at_revision, topic_t

LOW, PAIR = '"\\udc00"', '"\\ud83d\\ude00"'
# A float's 0 that PostgreSQL's numeric cannot hold: refused before 0038, taken from it.
TINY = "1e-16384"


def _appended(url: str, value: str) -> bool:
    return appender_takes(url, "SELECT outbox.append('t', 0, NULL, %s::json)", (value,))


def _refusal(url: str, topic: str) -> str:
    """The error code outbox.append answers a record of `topic`."""
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
        try:
            conn.execute("SELECT outbox.append(%s, 0, NULL, '1')", (topic,))
        except psycopg.Error as e:
            return (e.diag.message_primary or "").partition(":")[0]
    raise AssertionError(f"outbox.append took topic {topic!r}")


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0038_refuses_a_lone_low_surrogate_escape_that_0037_took_and_the_downgrade_takes_it_again(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0037", topic_t(1))
    assert [_appended(empty_url, v) for v in (LOW, PAIR, TINY)] == [True, True, False]
    assert _refusal(empty_url, "a/b") == "UNKNOWN_TOPIC_OR_PARTITION"

    command.upgrade(config, "0038")
    assert [_appended(empty_url, v) for v in (LOW, PAIR, TINY)] == [False, True, True]
    assert _refusal(empty_url, "a/b") == "INVALID_REQUEST"

    command.downgrade(config, "0037")
    assert [_appended(empty_url, v) for v in (LOW, PAIR, TINY)] == [True, True, False]
    assert _refusal(empty_url, "a/b") == "UNKNOWN_TOPIC_OR_PARTITION"


def _published_though_compacted(url: str) -> bool:
    """A record without a key staged to t/0, t made compacted in the same transaction before
    its commit: whether the commit published the record (or refused it, INVALID_RECORD)."""
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
        conn.execute("UPDATE topics SET cleanup_policy = 'delete' WHERE topic_id = 1")
        conn.commit()
        conn.execute("SELECT outbox.append('t', 0, NULL, '1')")
        conn.execute("UPDATE topics SET cleanup_policy = 'compact' WHERE topic_id = 1")
        try:
            conn.commit()
        except psycopg.errors.InvalidParameterValue as e:
            assert (e.diag.message_primary or "").startswith("INVALID_RECORD: ")
            return False
    return True


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0038_holds_staged_records_to_the_topic_s_config_at_the_commit_and_the_downgrade_does_not(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0037", topic_t(1),
                         'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 0, 0)')
    assert _published_though_compacted(empty_url)

    command.upgrade(config, "0038")
    assert not _published_though_compacted(empty_url)

    command.downgrade(config, "0037")
    assert _published_though_compacted(empty_url)
