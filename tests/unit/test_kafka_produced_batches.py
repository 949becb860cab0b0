"""A produced batch read into the service's record model (app.kafka.records.send_batch):
records that cannot be read are the request's fault, an InvalidRecord of that partition,
whatever the reader of their compression raises."""

from __future__ import annotations

import pytest

from app.domain.errors import InvalidRecord
from app.domain.types import ValueFormat
from app.kafka.records import read_batches, send_batch
from tests.kafka_batches import UNDECOMPRESSABLE, compressed, undecompressable, with_codec


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
