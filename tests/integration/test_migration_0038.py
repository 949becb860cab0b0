"""Upgrading to 0038 and back on PostgreSQL: outbox.append refuses a lone low surrogate's escape
in a value, which 0037's function (0034's text) stored, and takes it again after the downgrade;
a surrogate pair is taken throughout. An impossible topic name is the caller's mistake
(INVALID_REQUEST) from 0038 on, an unknown topic before."""

from __future__ import annotations

import psycopg
import pytest
from alembic import command

from tests.migration_helpers import appender_takes, at_revision, topic_t

LOW, PAIR = '"\\udc00"', '"\\ud83d\\ude00"'


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
    assert [_appended(empty_url, v) for v in (LOW, PAIR)] == [True, True]
    assert _refusal(empty_url, "a/b") == "UNKNOWN_TOPIC_OR_PARTITION"

    command.upgrade(config, "0038")
    assert [_appended(empty_url, v) for v in (LOW, PAIR)] == [False, True]
    assert _refusal(empty_url, "a/b") == "INVALID_REQUEST"

    command.downgrade(config, "0037")
    assert [_appended(empty_url, v) for v in (LOW, PAIR)] == [True, True]
    assert _refusal(empty_url, "a/b") == "UNKNOWN_TOPIC_OR_PARTITION"
