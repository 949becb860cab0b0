"""One large Produce, as librdkafka's idempotent producer sends them (one request out, ~9,000
records): its records go to the database in several COPY pieces (app.storage.record_rows
COPY_PIECE_CHARS), and the request stays all or nothing whichever piece its bad record is in."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode
from sqlalchemy import func, select

from app.kafka.protocol import request_class
from app.storage import record_rows
from app.storage.tables import records
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask

RECORDS = 9_000
VALUE = b'{"order_id": 123456, "meal": "Pizza", "value": 12.5, "customer": "c-000042", "note": "extra cheese"}'


def _idempotent_producer(s: Any) -> Any:
    init = ask(s, 22, 4, request_class(22, 4)(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                              producer_id=-1, producer_epoch=-1))
    assert init.error_code == ErrorCode.none
    return init


def _batch(values: list[bytes], producer: Any, base_sequence: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 0, producer.producer_id, producer.producer_epoch, base_sequence, 1 << 30)
    for i, v in enumerate(values):
        b.append(i, 1_700_000_000_000 + i, f"k{i}".encode(), v, [])
    return bytes(b.build())


def _produce(s: Any, batch: bytes) -> Any:
    m = request_class(0, 9)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    answer = ask(s, 0, 9, m(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30), topic_data=(
        mod.TopicProduceData(name="orders", partition_data=(mod.PartitionProduceData(index=0, records=batch),)),)))
    (t,) = answer.responses
    (p,) = t.partition_responses
    return p


def _stored(kafka: Listener) -> list[tuple[int, int, str | None, str | None]]:
    with kafka.services.db.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(  # type: ignore[misc]
            select(records.c.offset, records.c.timestamp_ms, records.c.key, records.c.value)
            .where(records.c.control_type.is_(None)).order_by(records.c.offset))]


def test_a_large_idempotent_produce_is_stored_at_its_offsets_record_for_record(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    values = [VALUE.replace(b"123456", str(i).encode()) for i in range(RECORDS)]
    # The batch is larger than a COPY piece: it is written in several.
    assert RECORDS * len(VALUE) > 3 * record_rows.COPY_PIECE_CHARS
    with kafka.connect() as s:
        producer = _idempotent_producer(s)
        first = _produce(s, _batch(values, producer, 0))
        second = _produce(s, _batch(values[:10], producer, RECORDS))
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    assert (second.error_code, second.base_offset) == (ErrorCode.none, RECORDS)
    expected = [(i, 1_700_000_000_000 + i, f"k{i}", v.decode()) for i, v in enumerate(values)]
    expected += [(RECORDS + i, 1_700_000_000_000 + i, f"k{i}", v.decode()) for i, v in enumerate(values[:10])]
    assert _stored(kafka) == expected


def test_a_bad_record_in_a_large_produce_s_last_piece_refuses_the_request_and_writes_nothing(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    values = [VALUE] * RECORDS
    values[RECORDS - 3] = b"not json"
    with kafka.connect() as s:
        producer = _idempotent_producer(s)
        refused = _produce(s, _batch(values, producer, 0))
        # Nothing of the refused request moved the producer's sequence: the same sequence again, good, is taken.
        taken = _produce(s, _batch([VALUE], producer, 0))
    assert refused.error_code == ErrorCode.invalid_record
    assert refused.error_message is not None and f"record {RECORDS - 3}" in refused.error_message
    assert (taken.error_code, taken.base_offset) == (ErrorCode.none, 0)
    with kafka.services.db.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(records)).scalar_one() == 1
    assert _stored(kafka) == [(0, 1_700_000_000_000, "k0", VALUE.decode())]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # SQLite has no COPY
def test_the_database_refusing_a_large_produce_s_last_piece_writes_nothing(
        kafka: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every record is valid; the last COPY piece reaches PostgreSQL with a line it refuses, after
    # the pieces before it were sent: the COPY, and so the whole request, fails in the database.
    lines_of = record_rows._copy_lines

    def last_piece_broken(b: Any, base_offset: int, c: Any, start: int, stop: int, more: str = "") -> str | None:
        lines = lines_of(b, base_offset, c, start, stop, more)
        return lines + "not a row\n" if lines is not None and stop == RECORDS else lines

    monkeypatch.setattr(record_rows, "_copy_lines", last_piece_broken)
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        producer = _idempotent_producer(s)
        refused = _produce(s, _batch([VALUE] * RECORDS, producer, 0))
        monkeypatch.setattr(record_rows, "_copy_lines", lines_of)
        taken = _produce(s, _batch([VALUE], producer, 0))
    assert refused.error_code == ErrorCode.invalid_request
    assert refused.error_message is not None and refused.error_message.startswith("value refused by the database")
    assert (taken.error_code, taken.base_offset) == (ErrorCode.none, 0)
    assert _stored(kafka) == [(0, 1_700_000_000_000, "k0", VALUE.decode())]
