"""dialect.bulk_insert's constant columns on SQLite: written into the INSERT as literals, bound
once instead of once a row, and only integers (a bool as 1 or 0) are ever written into it."""

from __future__ import annotations

import pytest
from sqlalchemy import BigInteger, Boolean, Column, Integer, MetaData, Table, create_engine, select

from app.storage import dialect

_T = Table("t", MetaData(), Column("a", Integer), Column("flag", Boolean), Column("producer_id", BigInteger))


def test_constant_columns_take_their_value_in_every_row() -> None:
    engine = create_engine("sqlite://")
    with engine.begin() as conn:
        _T.create(conn)
        dialect.bulk_insert(conn, _T, ("a",), [(1,), (2,)], {"flag": True, "producer_id": 12})
        dialect.bulk_insert(conn, _T, ("a",), [(3,)])
        assert conn.execute(select(_T).order_by(_T.c.a)).all() == [(1, True, 12), (2, True, 12), (3, None, None)]


@pytest.mark.parametrize("value", ["1; DROP TABLE t", 1.5, None])
def test_a_constant_that_is_not_an_integer_is_refused(value: object) -> None:
    engine = create_engine("sqlite://")
    with engine.begin() as conn:
        _T.create(conn)
        with pytest.raises(TypeError):
            dialect.bulk_insert(conn, _T, ("a",), [(1,)], {"producer_id": value})  # type: ignore[dict-item]
