"""A produced batch read into the service's record model (app.kafka.records.send_batch):
records that cannot be read are the request's fault, an InvalidRecord of that partition,
whatever the reader of their compression raises; a record without a timestamp takes the
append time, and one with a timestamp no record may have is INVALID_TIMESTAMP."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from app.domain.errors import InvalidRecord, InvalidTimestamp
from app.domain.types import ValueFormat
from app.kafka.records import read_batches, send_batch
from tests.kafka_batches import UNDECOMPRESSABLE, compressed, undecompressable, with_codec, with_log_append_time


@pytest.mark.parametrize("shape", sorted(UNDECOMPRESSABLE))
def test_compressed_records_that_do_not_decompress_are_an_invalid_record(shape: str) -> None:
    (batch,) = read_batches(undecompressable(shape))
    assert batch.validate_crc()  # only decompressing finds them out
    with pytest.raises(InvalidRecord, match="cannot be read"):
        send_batch("blobs", 1, batch, 1_700_000_000_000, ValueFormat.BYTES)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_records_of_a_compression_codec_that_names_none_are_an_invalid_record(codec: int) -> None:
    (batch,) = read_batches(with_codec(compressed(0, b"a"), codec))
    assert batch.validate_crc()
    with pytest.raises(InvalidRecord, match="cannot be read"):
        send_batch("blobs", 1, batch, 1_700_000_000_000, ValueFormat.BYTES)


NOW_MS = 1_700_000_000_000


def _timestamped(*timestamps: int) -> object:
    """A batch of one record a timestamp, as a producer builds it."""
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, ts in enumerate(timestamps):
        b.append(i, ts, None, b"1", [])
    (batch,) = read_batches(bytes(b.build()))
    return batch


@pytest.mark.parametrize("value_format", [ValueFormat.JSON, ValueFormat.BYTES])
def test_a_record_without_a_timestamp_takes_the_append_time(value_format: ValueFormat) -> None:
    batch = send_batch("t", 0, _timestamped(5, -1, 0), NOW_MS, value_format)  # type: ignore[arg-type]

    assert [r.timestamp_ms for r in batch.records] == [5, NOW_MS, 0]


@pytest.mark.parametrize("value_format", [ValueFormat.JSON, ValueFormat.BYTES])
@pytest.mark.parametrize("timestamp", [-2, -(2**63)])
def test_a_timestamp_below_0_but_no_timestamp_is_an_invalid_timestamp_naming_the_record(
        value_format: ValueFormat, timestamp: int) -> None:
    with pytest.raises(InvalidTimestamp, match="record 1 of t/0: timestamp_ms must be an integer from 0") as refused:
        send_batch("t", 0, _timestamped(5, timestamp), NOW_MS, value_format)  # type: ignore[arg-type]

    assert refused.value.error_code == "INVALID_TIMESTAMP"
    assert refused.value.record_indexes == (1,)


@pytest.mark.parametrize("value_format", [ValueFormat.JSON, ValueFormat.BYTES])
def test_a_batch_whose_timestamp_type_is_the_log_append_time_is_an_invalid_timestamp_naming_every_record(
        value_format: ValueFormat) -> None:
    """The log append time is the broker's to set: Kafka's broker refuses a producer's batch that
    claims it, and so does the service, rather than overwrite the batch's timestamps."""
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(3):
        b.append(i, 5 + i, None, b"1", [])
    (batch,) = read_batches(with_log_append_time(bytes(b.build())))
    assert batch.validate_crc() and batch.timestamp_type == 1

    with pytest.raises(InvalidTimestamp, match="t/0: a producer may not set a batch's timestamp type to "
                                               "LogAppendTime") as refused:
        send_batch("t", 0, batch, NOW_MS, value_format)

    assert refused.value.error_code == "INVALID_TIMESTAMP"
    assert refused.value.record_indexes == (0, 1, 2)
