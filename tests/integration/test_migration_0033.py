"""Upgrading to 0033 and back on PostgreSQL: outbox.append refuses an empty message id and one
over 255 characters, which 0032's function took, and takes them again after the downgrade; an
id of 255 characters is taken throughout."""

from __future__ import annotations

import pytest
from alembic import command

from tests.migration_helpers import appender_takes, at_revision, topic_t

EMPTY, TOO_LONG, LONGEST = "", "m" * 256, "m" * 255


def _appended(url: str, message_id: str) -> bool:
    return appender_takes(url, "SELECT outbox.append('t', 0, NULL, '1'::json, NULL, %s)", (message_id,))


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0033_refuses_an_empty_or_too_long_message_id_that_0032_took_and_the_downgrade_takes_them_again(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0032", topic_t(1))
    ids = (EMPTY, TOO_LONG, LONGEST)
    assert [_appended(empty_url, m) for m in ids] == [True, True, True]

    command.upgrade(config, "0033")
    assert [_appended(empty_url, m) for m in ids] == [False, False, True]

    command.downgrade(config, "0032")
    assert [_appended(empty_url, m) for m in ids] == [True, True, True]
