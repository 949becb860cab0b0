"""Self-committed records (docs/DESIGN-batches.md, migrations 0041 and 0044): a data batch in
no transaction, with no producer or an idempotent producer's, is flagged self_committed, on its
row and on each of its records (an idempotent one's records carrying its producer id), by the
Send's writer whatever the topic's format (tests/integration/test_appenders.py holds every
other appender to it), and no other batch is; the view committed_records reads a flagged
record without its batch row and every other through it, and the two give the same rows."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, text

from spark_jobs.reader import statement
from tests.helpers import batch, begin, create_topic, ident, init_producer, send


def _flags(db_url: str) -> tuple[list[tuple[int, bool]], list[tuple[int, bool]]]:
    """(base offset, self_committed) of each batch row of t/0, and (offset, self_committed) of
    each of its records, in offset order."""
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return tuple(  # type: ignore[return-value]
                [(o, bool(f)) for o, f in conn.execute(text(query))] for query in (
                    "SELECT b.base_offset, b.self_committed FROM record_batches b JOIN topics t USING (topic_id) "
                    "WHERE t.name = 't' ORDER BY b.base_offset",
                    'SELECT r."offset", r.self_committed FROM records r JOIN topics t USING (topic_id) '
                    "WHERE t.name = 't' ORDER BY r.\"offset\""))
    finally:
        engine.dispose()


def _view(db_url: str) -> list[tuple[Any, ...]]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(
                'SELECT "offset", commit_position, value, producer_id, transactional, batch_position '
                "FROM committed_records WHERE topic = 't' AND \"partition\" = 0 ORDER BY commit_position, \"offset\""))]
    finally:
        engine.dispose()


def test_a_plain_sends_batch_and_records_are_self_committed(client: Any, db_url: str) -> None:
    create_topic(client, "t")
    assert send(client, [batch("t", 0, [1, 2])]).status_code == 200
    assert send(client, [batch("t", 0, [3])]).status_code == 200

    assert _flags(db_url) == ([(0, True), (2, True)], [(0, True), (1, True), (2, True)])


def test_a_plain_sends_batch_of_a_bytes_topic_is_self_committed(client: Any, db_url: str) -> None:
    create_topic(client, "t", value_format="bytes")
    assert client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [
        {"value": {"type": "STRING", "data": "a"}}, {"value": {"type": "STRING", "data": "b"}}]}]}).status_code == 200

    assert _flags(db_url) == ([(0, True)], [(0, True), (1, True)])


def _producer_ids(db_url: str) -> list[tuple[int, int | None]]:
    """(offset, producer_id) of each record of t/0, in offset order."""
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return [(o, pid) for o, pid in conn.execute(text(
                'SELECT r."offset", r.producer_id FROM records r JOIN topics t USING (topic_id) '
                "WHERE t.name = 't' ORDER BY r.\"offset\""))]
    finally:
        engine.dispose()


def test_an_idempotent_producers_batch_is_self_committed_with_its_producer_id(client: Any, db_url: str) -> None:
    create_topic(client, "t")
    p = init_producer(client)
    assert send(client, [batch("t", 0, [1, 2], 0)], p).status_code == 200
    assert send(client, [batch("t", 0, [3], 2)], p).status_code == 200  # the producer's next batch
    assert send(client, [batch("t", 0, [3], 2)], p).status_code == 200  # its retry: a duplicate, not written
    assert send(client, [batch("t", 0, [4])]).status_code == 200

    assert _flags(db_url) == ([(0, True), (2, True), (3, True)], [(0, True), (1, True), (2, True), (3, True)])
    pid = p["producer_id"]
    assert _producer_ids(db_url) == [(0, pid), (1, pid), (2, pid), (3, None)]
    assert _view(db_url) == [(0, 0, "1", pid, False, 0), (1, 1, "2", pid, False, 1), (2, 2, "3", pid, False, 2),
                             (3, 3, "4", None, False, 3)]


def test_a_transactions_idempotent_producers_batches_are_not_self_committed(client: Any, db_url: str) -> None:
    create_topic(client, "t")
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    assert send(client, [batch("t", 0, [1, 2], 0)], p, "tx").status_code == 200
    assert client.post("/v1/transactions/tx/abort", json=ident(p)).status_code == 200

    assert _flags(db_url) == ([(0, False), (2, False)], [(0, False), (1, False), (2, False)])
    assert _producer_ids(db_url) == [(0, None), (1, None), (2, None)]
    assert _view(db_url) == []


def test_a_transactions_batches_and_marker_are_not_self_committed(client: Any, db_url: str) -> None:
    create_topic(client, "t")
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    assert send(client, [batch("t", 0, [1, 2], 0)], p, "tx").status_code == 200
    assert client.post("/v1/transactions/tx/commit", json=ident(p)).status_code == 200

    assert _flags(db_url) == ([(0, False), (2, False)], [(0, False), (1, False), (2, False)])


@pytest.mark.unflagged_records
def test_the_view_reads_flagged_and_unflagged_plain_batches_and_a_transactions_alike(client: Any, db_url: str) -> None:
    create_topic(client, "t")
    assert send(client, [batch("t", 0, [0, 1])]).status_code == 200  # 0-1, to be unflagged below
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    assert send(client, [batch("t", 0, [2, 3], 0)], p, "tx").status_code == 200  # 2-3
    assert send(client, [batch("t", 0, [5])]).status_code == 200  # 4, below the COMMIT marker at 5
    assert client.post("/v1/transactions/tx/commit", json=ident(p)).status_code == 200
    assert send(client, [batch("t", 0, [6, 7])]).status_code == 200  # 6-7
    q = init_producer(client)
    assert send(client, [batch("t", 0, [8], 0)], q).status_code == 200  # 8
    # The first plain batch as a writer before 0041 left it: read through its batch row.
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text('UPDATE records SET self_committed = FALSE WHERE "offset" < 2'))
            conn.execute(text("UPDATE record_batches SET self_committed = FALSE WHERE base_offset = 0"))
    finally:
        engine.dispose()
    assert _flags(db_url)[0] == [(0, False), (2, False), (4, True), (5, False), (6, True), (8, True)]

    pid = q["producer_id"]
    assert _view(db_url) == [
        (0, 0, "0", None, False, 1), (1, 1, "1", None, False, 1),
        (4, 4, "5", None, False, 4),
        (2, 5, "2", p["producer_id"], True, 5), (3, 5, "3", p["producer_id"], True, 5),
        (6, 6, "6", None, False, 6), (7, 7, "7", None, False, 7),
        (8, 8, "8", pid, False, 8),
    ]


@pytest.mark.unflagged_records
def test_a_ranges_end_inside_a_batch_read_through_its_row_past_the_probes_window_reads_the_batch(
        client: Any, db_url: str, monkeypatch: Any) -> None:
    """A range of positions that ends inside a plain batch written before 0041 (read through its
    row, positioned at its last offset) further past the end than NEXT_BATCH_WINDOW: the first
    probe for the next batch finds nothing, the second finds that batch, and the range's
    records in it are read. Bounded at end - 1 instead, they would be left out."""
    monkeypatch.setattr(statement, "NEXT_BATCH_WINDOW", 3)
    create_topic(client, "t")
    assert send(client, [batch("t", 0, list(range(10)))]).status_code == 200
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE records SET self_committed = FALSE"))
            conn.execute(text("UPDATE record_batches SET self_committed = FALSE"))
        with engine.connect() as conn:
            read = conn.execute(text('SELECT "offset" FROM committed_records WHERE ' + " AND ".join(
                statement.positions_predicate("t", 0, 2, 5, conn.dialect.name)) + ' ORDER BY "offset"')).scalars().all()
    finally:
        engine.dispose()
    assert read == [2, 3, 4]
