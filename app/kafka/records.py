"""How a Kafka record maps onto the service's record model, both ways: the one place that says
it, until records are bytes (a per-topic value format) and this mapping is replaced.

The model today (app.domain.records): a key is text, a value JSON text, headers a JSON object
of text values. So a produced Kafka record is taken when

- its value is UTF-8 JSON text (kept as sent: the same text an HTTP Send of it stores), and
  passes the checks every appender makes (finite numbers, nesting depth); a null value is
  stored as JSON null, and reads back as the 4 bytes `null`;
- its key is null or UTF-8 text without NUL;
- its headers have distinct names and UTF-8 values without NUL (a null header value has no
  place in an object of strings);

and anything else is refused with INVALID_RECORD, nothing of its batch written. A fetched
record carries its key and its JSON value as their UTF-8 bytes, its headers in the object's
order, each value's UTF-8 bytes.

The batches a Produce carries are read with aiokafka's record module (magic v2, its CRC-32C,
the four compressions through cramjam); the batches a Fetch answers are written uncompressed:
data batches by aiokafka's builder, control batches (the COMMIT and ABORT markers, which
aiokafka only reads) by kio's writer.
"""

from __future__ import annotations

import datetime
import io
import struct
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch

from app.domain.errors import InvalidRecord, InvalidRequest
from app.domain.read import LogEntry
from app.domain.records import SendBatch, batch_of, check_finite_numbers, check_headers, check_text, to_kafka
from app.domain.types import ControlType

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_BASE_OFFSET = struct.Struct(">q")
# A control record: key (version 0, type: 0 ABORT, 1 COMMIT), value (version 0, coordinator epoch).
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_CONTROL_TYPES = {ControlType.ABORT: 0, ControlType.COMMIT: 1}
_LOG_APPEND_TIME = 1  # a batch's timestamp type: the broker's clock, not the records'
_BATCH_BYTES = 2**31 - 1  # the builder's own limit: a Fetch's bytes are bounded by its reader


class _Record:
    """A produced record as app.domain.records.batch_of takes it."""

    __slots__ = ("headers", "key", "timestamp_ms", "value")

    def __init__(self, key: str | None, value: bytes | None, headers: dict[str, str] | None,
                 timestamp_ms: int | None) -> None:
        self.key, self.value, self.headers, self.timestamp_ms = key, value, headers, timestamp_ms


def send_batch(topic: str, partition: int, batch: DefaultRecordBatch, now_ms: int) -> SendBatch:
    """The produced batch (its CRC checked by the caller) as the service's SendBatch, with its
    base sequence if it has a producer; InvalidRecord if a record does not fit the model."""
    records = []
    log_append_time = batch.timestamp_type == _LOG_APPEND_TIME
    try:
        for i, r in enumerate(batch):
            where = f"record {i} of {topic}/{partition}"
            records.append(_Record(_key(r.key, where), _value(r.value, where), _headers(r.headers, where),
                                   None if log_append_time or r.timestamp < 0 else r.timestamp))
    except (UnicodeDecodeError, ValueError) as e:  # a header name that is not UTF-8, a bad varint
        raise InvalidRecord(f"a record of {topic}/{partition} cannot be read: {e}") from None
    try:
        send = batch_of(topic, partition, records, now_ms, no_value=None,
                        base_sequence=None if batch.producer_id == NO_PRODUCER_ID else batch.base_sequence)
        # JSON values, not the HTTP API's typed ones: a bytes topic refuses them (INVALID_RECORD).
        send.http_shapes = False
        return send
    except InvalidRequest as e:  # the depth check: a record the model cannot take
        raise InvalidRecord(e.message) from None


def _key(key: bytes | None, where: str) -> str | None:
    if key is None:
        return None
    try:
        text = bytes(key).decode("utf-8")
        check_text(text, f"{where}: the key")
    except (UnicodeDecodeError, InvalidRequest):
        raise InvalidRecord(f"{where}: the key must be UTF-8 text without NUL") from None
    return text


def _value(value: bytes | None, where: str) -> bytes | None:
    if value is None:
        return None
    value = bytes(value)
    try:
        orjson.loads(value)
        check_finite_numbers(value)
    except (orjson.JSONDecodeError, InvalidRequest):
        raise InvalidRecord(f"{where}: the value must be UTF-8 JSON text with finite numbers") from None
    return value


def _headers(headers: Iterable[tuple[str, bytes | None]], where: str) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for name, value in headers:
        if name in out:
            raise InvalidRecord(f"{where}: the header {name!r} is named twice; headers are an object")
        if value is None:
            raise InvalidRecord(f"{where}: the header {name!r} has a null value; header values are text")
        try:
            out[name] = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecord(f"{where}: the header {name!r} is not UTF-8 text") from None
    if not out:
        return None
    try:
        check_headers(out, where)
    except InvalidRequest as e:
        raise InvalidRecord(e.message) from None
    return out


def batches_bytes(entries: list[LogEntry]) -> bytes:
    """The fetched rows as Kafka record batches, in offset order: a run of data records of one
    producer (and epoch, and transaction or not) with consecutive sequences is one batch; each
    marker a control batch of its own."""
    out = bytearray()
    for run in _runs(entries):
        first = run[0]
        if first.control_type is not None:
            out += _control_batch(first)
        else:
            out += _data_batch(run)
    return bytes(out)


def _runs(entries: list[LogEntry]) -> Iterator[list[LogEntry]]:
    run: list[LogEntry] = []
    for e in entries:
        if run and (e.control_type is not None or run[-1].control_type is not None or not _follows(run[-1], e)):
            yield run
            run = []
        run.append(e)
    if run:
        yield run


def _follows(last: LogEntry, e: LogEntry) -> bool:
    if (last.producer_id, last.producer_epoch, last.txn_id is None) != (e.producer_id, e.producer_epoch, e.txn_id is None):
        return False
    if e.producer_id is None:
        return True
    return last.sequence is not None and e.sequence == last.sequence + 1


def _data_batch(run: list[LogEntry]) -> bytearray:
    first = run[0]
    producer = first.producer_id is not None
    builder = DefaultRecordBatchBuilder(
        2, 0, int(first.txn_id is not None), first.producer_id if producer else NO_PRODUCER_ID,
        first.producer_epoch if producer else -1, first.sequence if producer and first.sequence is not None
        else NO_SEQUENCE, _BATCH_BYTES)
    base = first.offset
    for e in run:
        key, value, headers = to_kafka(e.key, e.value, e.headers)
        builder.append(e.offset - base, e.timestamp_ms, key, value, headers)
    built = builder.build()
    # The base offset is the broker's to set, and outside the CRC (it covers the attributes on).
    _BASE_OFFSET.pack_into(built, 0, base)
    return built


def _control_batch(marker: LogEntry) -> bytes:
    assert marker.control_type is not None and marker.producer_id is not None and marker.producer_epoch is not None
    record = Record(
        attributes=0,  # type: ignore[arg-type]
        timestamp=datetime.datetime.fromtimestamp(marker.timestamp_ms / 1000, tz=datetime.UTC),  # type: ignore[arg-type]
        offset=marker.offset,  # type: ignore[arg-type]
        key=_CONTROL_KEY.pack(0, _CONTROL_TYPES[marker.control_type]),
        value=_CONTROL_VALUE.pack(0, 0),
        headers=(),
    )
    buffer = io.BytesIO()
    write_new_batch(buffer, NewRecordBatch(
        producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,  # type: ignore[arg-type]
        partition_leader_epoch=-1, base_sequence=NO_SEQUENCE, records=(record,),  # type: ignore[arg-type]
        attributes=_TRANSACTIONAL | _CONTROL))  # type: ignore[arg-type]
    return buffer.getvalue()


def read_batches(data: bytes) -> list[Any]:
    """The record batches of a Produce's partition (aiokafka's reader); ValueError-like errors
    from aiokafka are the caller's to answer CORRUPT_MESSAGE."""
    from aiokafka.record.memory_records import MemoryRecords

    records = MemoryRecords(data)
    out = []
    while (batch := records.next_batch()) is not None:
        out.append(batch)
    return out
