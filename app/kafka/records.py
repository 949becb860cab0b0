"""Kafka record batches in and out of the service's record model.

What a produced record may be is the domain's one definition (app.domain.kafka_records: `from_kafka`,
applied to a whole batch at once by `kafka_batch`, for the topic's value format): on a bytes topic any key, value and
headers, stored byte for byte; on a JSON topic a UTF-8 key without NUL, a value of JSON text
(null: JSON null) stored as a Send stores it, without the white space around it, headers of
distinct names with UTF-8 values. Anything else is INVALID_RECORD,
nothing of its batch written. A fetched record is `to_kafka`'s: a bytes topic's bytes as
stored; a JSON topic's key and JSON value as their UTF-8 bytes (JSON null: the 4 bytes
`null`), its headers in the object's order.

The batches a Produce carries are read with aiokafka's record module (magic v2, its CRC-32C,
the four compressions through cramjam); the batches a Fetch answers are the stored ones (one
per append, with its producer, epoch and base sequence), written uncompressed: data batches by
aiokafka's builder, control batches (the COMMIT and ABORT markers, which aiokafka only reads)
by kio's writer.
"""

from __future__ import annotations

import datetime
import io
import struct
import zlib
from typing import Any

import cramjam
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from aiokafka.errors import CorruptRecordException, UnsupportedCodecError
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch

from app.domain.errors import InvalidRecord, InvalidTimestamp
from app.domain.read import LogBatch
from app.domain.kafka_records import kafka_batch, to_kafka
from app.domain.records import SendBatch
from app.domain.types import NO_PRODUCER_ID, ControlType, ValueFormat

NO_SEQUENCE = -1
NO_TIMESTAMP = -1  # a record's timestamp when its producer gave it none
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_BASE_OFFSET = struct.Struct(">q")
# A control record: key (version 0, type: 0 ABORT, 1 COMMIT), value (version 0, coordinator epoch).
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_CONTROL_TYPES = {ControlType.ABORT: 0, ControlType.COMMIT: 1}
_LOG_APPEND_TIME = 1  # a batch's timestamp type: the broker's clock, not the records'
_RECORD_COUNT = struct.Struct(">i")  # at byte 57 of a v2 batch, after its base sequence
# A v2 batch's CRC (of everything from the attributes on) at byte 17, its last offset delta at 23.
_CRC, _CRC_AT = struct.Struct(">I"), 17
_LAST_OFFSET_DELTA, _LAST_OFFSET_DELTA_AT = struct.Struct(">i"), 23
_BATCH_BYTES = 2**31 - 1  # the builder's own limit: a Fetch's bytes are bounded by its reader


def send_batch(topic: str, partition: int, batch: DefaultRecordBatch, now_ms: int,
               value_format: ValueFormat) -> SendBatch:
    """The produced batch (its CRC checked by the caller) as the service's SendBatch for a topic
    of `value_format`, with its base sequence if it has a producer; InvalidRecord if a record
    does not fit that format, InvalidTimestamp if its timestamp is none a record may have or
    the batch's timestamp type is the log append time."""
    # Each column in a pass of its own: no tuple a record to zip apart again (about an eighth
    # of the reading's cost in one process, docs/benchmarks.md, 2026-12-01).
    try:
        read = list(batch)
        keys = [r.key for r in read]
        values = [r.value for r in read]
        headers = [r.headers for r in read]
        timestamps = [r.timestamp for r in read]
    except (UnicodeDecodeError, ValueError, CorruptRecordException, UnsupportedCodecError, OSError, EOFError,
            zlib.error, struct.error, cramjam.DecompressionError) as e:
        # A header name that is not UTF-8, a bad varint, a record the header's count names and
        # the bytes do not hold, compressed records that do not decompress: gzip's reader raises
        # OSError for a bad header, zlib.error for a bad deflate body, EOFError for a member cut
        # short; aiokafka's xerial snappy reader struct.error for a block length cut short;
        # cramjam's codecs their own; aiokafka's reader UnsupportedCodecError for a codec id that
        # names none (which app.kafka.produce refuses before). The request's fault, answered for
        # this partition, never the service's traceback (which closed the connection without an
        # answer, the earlier partitions of the Produce written: a producer without idempotence
        # wrote them twice).
        raise InvalidRecord(f"a record of {topic}/{partition} cannot be read: {e}") from None
    if batch.timestamp_type == _LOG_APPEND_TIME:
        # The log append time is the broker's to set, never the producer's: Kafka's broker
        # refuses such a batch, every record named. Taken, it would have given every record the
        # service's clock in place of the timestamps the batch carries.
        raise InvalidTimestamp(f"{topic}/{partition}: a producer may not set a batch's timestamp type to "
                               "LogAppendTime", record_indexes=tuple(range(len(read))))
    if NO_TIMESTAMP in timestamps:
        # Kafka's record without a timestamp takes the append time, as a Send's record without
        # one does (batch_of). Any other below 0 is the domain's to refuse (from_kafka,
        # INVALID_TIMESTAMP), as a Send's is: not the clock's, which would store another record.
        timestamps = [now_ms if t == NO_TIMESTAMP else t for t in timestamps]
    return kafka_batch(topic, partition, keys, values, headers, timestamps, value_format,
                       base_sequence=None if batch.producer_id == NO_PRODUCER_ID else batch.base_sequence)


def batches_bytes(batches: list[LogBatch]) -> bytes:
    """The fetched batches as Kafka record batches, in offset order: one RecordBatch per stored
    batch (what one append wrote, app.storage.offset_order), a control batch per marker."""
    out = bytearray()
    for batch in batches:
        out += _data_batch(batch) if batch.control_type is None else _control_batch(batch)
    return bytes(out)


def first_record_bytes(batches: list[LogBatch]) -> int:
    """The size of a read's first record in its RecordBatch: what the first partition of a
    Fetch to answer records may hand out whatever the bytes left (KIP-74)."""
    first = batches[0]
    return len(batches_bytes([first._replace(records=first.records[:1])]))


def _data_batch(batch: LogBatch) -> bytearray:
    if not batch.records:
        return _empty_batch(batch)
    # The header is the stored batch's, whichever of its records the read returns: Kafka's own
    # batches keep their base offset and sequence when compaction empties part of them, and a
    # client skips the records below its fetch offset and drops an aborted transaction's by
    # the producer and the transactional attribute.
    producer = batch.producer_id is not None
    builder = DefaultRecordBatchBuilder(
        2, 0, int(batch.txn_id is not None), batch.producer_id if producer else NO_PRODUCER_ID,
        batch.producer_epoch if producer else -1,
        batch.base_sequence if producer and batch.base_sequence is not None else NO_SEQUENCE, _BATCH_BYTES)
    base = batch.base_offset
    for r in batch.records:
        key, value, headers = to_kafka(r.key, r.value, r.headers)
        builder.append(r.offset - base, r.timestamp_ms, key, value, headers)
    built = builder.build()
    # The base offset is the broker's to set, and outside the CRC (it covers the attributes on).
    _BASE_OFFSET.pack_into(built, 0, base)
    return built


def _empty_batch(batch: LogBatch) -> bytearray:
    """A batch of no record over [base_offset, next_offset) (LogBatch): a client's next offset
    is its last offset + 1, whatever records it holds. Its last offset delta is within the part
    the CRC covers (from the attributes on), so the CRC is computed again."""
    assert batch.next_offset is not None and batch.next_offset > batch.base_offset
    built = DefaultRecordBatchBuilder(2, 0, 0, NO_PRODUCER_ID, -1, NO_SEQUENCE, _BATCH_BYTES).build()
    _BASE_OFFSET.pack_into(built, 0, batch.base_offset)
    _LAST_OFFSET_DELTA.pack_into(built, _LAST_OFFSET_DELTA_AT, batch.next_offset - 1 - batch.base_offset)
    _CRC.pack_into(built, _CRC_AT, calc_crc32c(bytes(built[_CRC_AT + _CRC.size:])))
    return built


def _control_batch(marker: LogBatch) -> bytes:
    assert marker.control_type is not None and marker.producer_id is not None and marker.producer_epoch is not None
    (record,) = marker.records
    control = Record(
        attributes=0,  # type: ignore[arg-type]
        timestamp=datetime.datetime.fromtimestamp(record.timestamp_ms / 1000, tz=datetime.UTC),  # type: ignore[arg-type]
        offset=record.offset,  # type: ignore[arg-type]
        key=_CONTROL_KEY.pack(0, _CONTROL_TYPES[marker.control_type]),
        value=_CONTROL_VALUE.pack(0, 0),
        headers=(),
    )
    buffer = io.BytesIO()
    write_new_batch(buffer, NewRecordBatch(
        producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,  # type: ignore[arg-type]
        partition_leader_epoch=-1, base_sequence=NO_SEQUENCE, records=(control,),  # type: ignore[arg-type]
        attributes=_TRANSACTIONAL | _CONTROL))  # type: ignore[arg-type]
    return buffer.getvalue()


def record_count(data: bytes) -> int:
    """How many records the first v2 batch in `data` says it holds: its header's count, by which
    aiokafka's reader iterates it, whatever its last offset delta says."""
    return int(_RECORD_COUNT.unpack_from(data, 57)[0])


def read_batches(data: bytes) -> list[Any]:
    """The record batches of a Produce's partition (aiokafka's reader); ValueError-like errors
    from aiokafka are the caller's to answer CORRUPT_MESSAGE."""
    from aiokafka.record.memory_records import MemoryRecords

    records = MemoryRecords(data)
    out = []
    while (batch := records.next_batch()) is not None:
        out.append(batch)
    return out
