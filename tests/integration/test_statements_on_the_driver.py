"""A statement run on the driver's cursor (app.storage.dialect.rows_on_driver: a Send's offsets
through sole_row_on_driver, a batch's sequence state on SQLite through first_row_on_driver): the
row it answers and what it writes are the statement's, a second row where one was meant is
refused, and SQLAlchemy's cursor events see it, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import Integer, bindparam, event, literal, select
from sqlalchemy.exc import MultipleResultsFound

from app.storage import dialect
from app.storage.log_end import _TAKE_OFFSETS, take_offsets_with
from app.storage.tables import partitions

# Every partition of a topic one step on, answering each partition: two rows for a topic of two.
_STEP_EVERY_PARTITION = (
    partitions.update().where(partitions.c.topic_id == bindparam("p_topic_id", type_=Integer))
    .values(next_offset=partitions.c.next_offset + 1).returning(partitions.c.partition))


def _take(database, topic_id: int, count: int):  # type: ignore[no-untyped-def]
    with database.write() as conn:
        return dialect.first_row_on_driver(conn, _TAKE_OFFSETS, {
            "p_topic_id": topic_id, "p_partition": 1, "p_count": count, "p_records": count, "p_size_bytes": 10})


@pytest.mark.raw_records  # takes offsets and counts records it never writes
def test_a_write_with_returning_answers_its_row_and_writes_once(services, database) -> None:  # type: ignore[no-untyped-def]
    topic_id = services.topics.create("t", 2).topic_id

    first, second = _take(database, topic_id, 3), _take(database, topic_id, 2)

    assert (tuple(first), tuple(second)) == ((3,), (5,))
    with database.read() as conn:
        stored = conn.execute(select(partitions.c.partition, partitions.c.next_offset, partitions.c.record_count)
                              .where(partitions.c.topic_id == topic_id).order_by(partitions.c.partition)).all()
    assert [tuple(r) for r in stored] == [(0, 0, 0), (1, 5, 5)]


def test_a_write_without_returning_answers_no_rows_and_writes(services, database) -> None:  # type: ignore[no-untyped-def]
    topic_id = services.topics.create("t", 1).topic_id
    step = partitions.update().where(partitions.c.topic_id == bindparam("p_topic_id", type_=Integer)).values(
        next_offset=partitions.c.next_offset + 1)

    with database.write() as conn:
        assert dialect.rows_on_driver(conn, step, {"p_topic_id": topic_id}) == []
    with database.read() as conn:
        assert conn.execute(select(partitions.c.next_offset)).scalars().all() == [1]


def test_a_statement_that_matches_no_row_answers_none_and_writes_nothing(services, database) -> None:  # type: ignore[no-untyped-def]
    topic_id = services.topics.create("t", 1).topic_id

    assert _take(database, topic_id + 1, 3) is None
    with database.read() as conn:
        assert conn.execute(select(partitions.c.next_offset)).scalars().all() == [0]


def test_a_row_answers_its_columns_by_position_and_on_postgresql_by_name_with_literals_bound(  # type: ignore[no-untyped-def]
        services, database) -> None:
    stmt = select(bindparam("a", type_=Integer).label("given"), literal("committed").label("own"))

    with database.write() as conn:
        row = dialect.first_row_on_driver(conn, stmt, {"a": 4})

    assert tuple(row) == (4, "committed")  # type: ignore[arg-type]
    if database.dialect == "postgresql":
        assert (row.given, row.own) == (4, "committed")  # type: ignore[union-attr]


@pytest.mark.raw_records  # takes offsets and counts records it never writes
@pytest.mark.parametrize("listened_on", ["engine", "connection"])
def test_sqlalchemy_s_cursor_events_see_the_statement_before_and_after_it_runs(  # type: ignore[no-untyped-def]
        services, database, listened_on: str) -> None:
    # On the engine and on one connection: _fetch_all reads SQLAlchemy's flag of each
    # (Engine._has_events, Connection._has_events), and a listener on either must be seen.
    # SQLite's engine always has listeners (app.storage.engine's BEGIN), so it is on
    # PostgreSQL that a listener on the connection alone shows its flag is read.
    topic_id = services.topics.create("t", 2).topic_id
    seen: list[str] = []

    def before(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        seen.append("before " + statement.split()[0])

    def after(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        seen.append("after " + statement.split()[0])

    with database.write() as conn:
        target = database.engine if listened_on == "engine" else conn
        event.listen(target, "before_cursor_execute", before)
        event.listen(target, "after_cursor_execute", after)
        try:
            dialect.first_row_on_driver(conn, _TAKE_OFFSETS, {
                "p_topic_id": topic_id, "p_partition": 1, "p_count": 3, "p_records": 3, "p_size_bytes": 10})
        finally:
            event.remove(target, "before_cursor_execute", before)
            event.remove(target, "after_cursor_execute", after)

    assert [s for s in seen if s.endswith("UPDATE")] == ["before UPDATE", "after UPDATE"]


def test_a_statement_for_one_row_that_answers_two_raises_and_writes_nothing(services, database) -> None:  # type: ignore[no-untyped-def]
    topic_id = services.topics.create("t", 2).topic_id

    with pytest.raises(MultipleResultsFound, match="^Multiple rows were found when one or none was required$"):
        with database.write() as conn:
            dialect.sole_row_on_driver(conn, _STEP_EVERY_PARTITION, {"p_topic_id": topic_id})

    with database.read() as conn:
        assert conn.execute(select(partitions.c.next_offset).order_by(partitions.c.partition)).scalars().all() == [0, 0]


def test_a_statement_for_one_row_that_answers_one_answers_it(services, database) -> None:  # type: ignore[no-untyped-def]
    topic_id = services.topics.create("t", 1).topic_id

    with database.write() as conn:
        row = dialect.sole_row_on_driver(conn, _STEP_EVERY_PARTITION, {"p_topic_id": topic_id})

    assert tuple(row) == (0,)  # type: ignore[arg-type]


def test_take_offsets_with_a_statement_that_answers_two_rows_raises_and_writes_nothing(  # type: ignore[no-untyped-def]
        services, database) -> None:
    # Its statement is meant to take one partition's offsets: one that took two has written
    # both, and the Send's transaction must roll back rather than commit the first row's offsets.
    topic_id = services.topics.create("t", 2).topic_id

    with pytest.raises(MultipleResultsFound):
        with database.write() as conn:
            take_offsets_with(conn, _STEP_EVERY_PARTITION, {}, topic_id, 0, 1, 0, records=1)

    with database.read() as conn:
        assert conn.execute(select(partitions.c.next_offset).order_by(partitions.c.partition)).scalars().all() == [0, 0]
