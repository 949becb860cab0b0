"""Upgrading to 0027 and back on PostgreSQL: outbox.append refuses a number past a 64-bit float
with fewer than 309 digits in a row and a 2-digit exponent, which 0026's function took, and takes
it again after the downgrade; a finite one of the same shape is taken throughout."""

from __future__ import annotations

import pytest
from alembic import command

from tests.migration_helpers import appender_takes, at_revision, topic_t

PAST_A_FLOAT = "1" + "0" * 300 + "e10"
FINITE = "1" + "0" * 210 + "e97"


def _appended(url: str, value: str) -> bool:
    return appender_takes(url, "SELECT outbox.append('t', 0, NULL, %s::json, NULL)", (value,))


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0027_refuses_a_number_past_a_float_that_0026_took_and_the_downgrade_takes_it_again(empty_url: str) -> None:
    config = at_revision(empty_url, "0026", topic_t(1))
    assert (_appended(empty_url, PAST_A_FLOAT), _appended(empty_url, FINITE)) == (True, True)

    command.upgrade(config, "0027")
    assert (_appended(empty_url, PAST_A_FLOAT), _appended(empty_url, FINITE)) == (False, True)

    command.downgrade(config, "0026")
    assert (_appended(empty_url, PAST_A_FLOAT), _appended(empty_url, FINITE)) == (True, True)
