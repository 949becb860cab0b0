"""Upgrading to 0038 and back on PostgreSQL: outbox.append refuses a lone low surrogate's escape
in a value, which 0037's function (0034's text) stored, and takes it again after the downgrade;
a surrogate pair is taken throughout."""

from __future__ import annotations

import pytest
from alembic import command

from tests.migration_helpers import appender_takes, at_revision, topic_t

LOW, PAIR = '"\\udc00"', '"\\ud83d\\ude00"'


def _appended(url: str, value: str) -> bool:
    return appender_takes(url, "SELECT outbox.append('t', 0, NULL, %s::json)", (value,))


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0038_refuses_a_lone_low_surrogate_escape_that_0037_took_and_the_downgrade_takes_it_again(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0037", topic_t(1))
    assert [_appended(empty_url, v) for v in (LOW, PAIR)] == [True, True]

    command.upgrade(config, "0038")
    assert [_appended(empty_url, v) for v in (LOW, PAIR)] == [False, True]

    command.downgrade(config, "0037")
    assert [_appended(empty_url, v) for v in (LOW, PAIR)] == [True, True]
