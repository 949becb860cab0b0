"""What a statement run on the driver's cursor, outside SQLAlchemy, may be, and how its errors
are refused (app.storage.dialect.first_row_on_driver, app.storage.errors)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, Table, bindparam, create_engine, insert, literal, select, update

from app.domain.errors import InvalidRequest, StorageUnavailable
from app.storage import dialect
from app.storage.errors import translate_driver_errors


def test_a_sqlite_driver_error_is_retriable_storage_unavailable() -> None:
    with pytest.raises(StorageUnavailable, match="database unavailable: disk I/O error"):
        with translate_driver_errors():
            raise sqlite3.OperationalError("disk I/O error")


def test_a_value_sqlite_refuses_on_the_driver_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="value refused by the database: string or blob too big"):
        with translate_driver_errors():
            raise sqlite3.DataError("string or blob too big")


def test_a_statement_with_a_bind_value_sqlalchemy_converts_is_refused_before_it_runs() -> None:
    sqlite_dialect = create_engine("sqlite://").dialect  # nothing is connected
    with pytest.raises(TypeError, match=r"converts, expands or fills: \['at'\]"):
        dialect._on_driver(sqlite_dialect, select(bindparam("at", type_=DateTime)))


def test_a_statement_with_a_bind_parameter_whose_value_sqlalchemy_computes_is_refused_before_it_runs() -> None:
    sqlite_dialect = create_engine("sqlite://").dialect
    with pytest.raises(TypeError, match=r"converts, expands or fills: \['n'\]"):
        dialect._on_driver(sqlite_dialect, select(bindparam("a"), bindparam("n", callable_=lambda: 7)))


def test_a_statement_s_placeholders_take_its_bind_values_by_name_in_order() -> None:
    sqlite_dialect = create_engine("sqlite://").dialect
    stmt = select(bindparam("b"), bindparam("a"), bindparam("b"))

    sql, names, fixed, _ = dialect._on_driver(sqlite_dialect, stmt)

    assert (sql.count("?"), names, fixed) == (3, ("b", "a", "b"), {})


def test_a_bind_parameter_holding_its_own_value_takes_it_unless_the_caller_gives_one() -> None:
    engine = create_engine("sqlite://")
    stmt = select(bindparam("a"), bindparam("n", value=7))
    with engine.connect() as conn, conn.begin():
        own = dialect.first_row_on_driver(conn, stmt, {"a": 1})
        given = dialect.first_row_on_driver(conn, stmt, {"a": 1, "n": 8})

    assert (tuple(own), tuple(given)) == ((1, 7), (1, 8))  # type: ignore[arg-type]


def test_a_bind_parameter_whose_name_postgresql_s_driver_would_not_read_as_written_is_refused() -> None:
    postgresql_dialect = create_engine("postgresql+psycopg://").dialect  # nothing is connected
    with pytest.raises(TypeError, match=r"rewritten for it: \['a.b'\]"):
        dialect._on_driver(postgresql_dialect, select(bindparam("a.b")))


def test_a_postgresql_dialect_set_to_a_positional_paramstyle_is_refused() -> None:
    postgresql_dialect = create_engine("postgresql+psycopg://", paramstyle="format").dialect
    with pytest.raises(TypeError, match="this dialect's paramstyle is format"):
        dialect._on_driver(postgresql_dialect, select(bindparam("a")))


def test_a_statement_run_outside_a_transaction_is_refused_before_it_runs() -> None:
    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        with pytest.raises(RuntimeError, match="inside the caller's transaction"):
            dialect.first_row_on_driver(conn, select(bindparam("a")), {"a": 1})


def _one_row_table() -> tuple[Any, Table]:
    engine = create_engine("sqlite://")
    t = Table("t", MetaData(), Column("a", Integer), Column("b", Integer))
    t.create(engine)
    with engine.begin() as conn:
        conn.execute(insert(t), {"a": 0, "b": 0})
    return engine, t


def test_a_value_for_a_column_an_update_does_not_set_is_refused_before_it_runs() -> None:
    # SQLAlchemy would set b as well: an UPDATE compiled for the keys it is given.
    engine, t = _one_row_table()
    stmt = update(t).values(a=bindparam("x")).returning(t.c.a, t.c.b)
    with engine.connect() as conn, conn.begin():
        with pytest.raises(TypeError, match=r"columns the statement does not set: \['b'\]"):
            dialect.first_row_on_driver(conn, stmt, {"x": 5, "b": 9})


def test_a_value_that_names_neither_a_bind_parameter_nor_a_column_is_passed_over() -> None:
    engine, t = _one_row_table()
    stmt = update(t).values(a=bindparam("x")).returning(t.c.a, t.c.b)
    with engine.connect() as conn, conn.begin():
        row = dialect.first_row_on_driver(conn, stmt, {"x": 5, "y": 9})

    assert tuple(row) == (5, 0)  # type: ignore[arg-type]


def test_a_statement_compiled_for_one_paramstyle_is_compiled_afresh_for_another() -> None:
    stmt = select(bindparam("a"))
    dialect._on_driver(create_engine("postgresql+psycopg://").dialect, stmt)
    with pytest.raises(TypeError, match="this dialect's paramstyle is format"):
        dialect._on_driver(create_engine("postgresql+psycopg://", paramstyle="format").dialect, stmt)


def test_a_literal_s_value_is_kept_under_the_name_the_sql_gives_it_only() -> None:
    postgresql_dialect = create_engine("postgresql+psycopg://").dialect
    sql, _, fixed, _ = dialect._on_driver(postgresql_dialect, select(bindparam("a"), literal(3)))

    assert (fixed, "%(param_1)s" in sql) == ({"param_1": 3}, True)
