"""Compressed record batches as a producer builds them (aiokafka's builder), and compressed
records that do not decompress under a CRC that matches them: only decompressing finds them
out. For the Kafka door's tests (tests/kafka) and the unit tests of what it reads
(tests/unit)."""

from __future__ import annotations

import struct
from collections.abc import Callable

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
RECORDS_AT = 61  # a v2 batch's header: its records (compressed or not) follow
_LENGTH_AT, _CRC_AT, _CRC_FROM, _ATTRIBUTES_AT = 8, 17, 21, 21
_XERIAL = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)  # xerial's magic, its version and compatible version


def compressed(codec: int, value: bytes) -> bytes:
    """A batch of one record compressed with `codec` (1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
    b = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
    b.append(0, 1_700_000_000_000, None, value, [])
    return bytes(b.build())


def with_records(batch: bytes, payload: bytes) -> bytes:
    """`batch`'s header over `payload` as its compressed records, its length and CRC-32C made
    to match."""
    raw = bytearray(batch[:RECORDS_AT] + payload)
    struct.pack_into(">i", raw, _LENGTH_AT, len(raw) - 12)
    struct.pack_into(">I", raw, _CRC_AT, calc_crc32c(bytes(raw[_CRC_FROM:])))
    return bytes(raw)


def _gzip_records() -> bytes:
    return compressed(GZIP, b'"' + b"a" * 1_000 + b'"')[RECORDS_AT:]


# Each a way compressed records fail to decompress, as (codec, records): the reader of each
# raised something of its own (zlib.error, EOFError, struct.error), not just OSError.
UNDECOMPRESSABLE = {
    "gzip-garbage": (GZIP, b"Z" * 50),  # no gzip header
    "gzip-bad-deflate": (GZIP, _gzip_records()[:10] + b"\xff" * 40),  # a good header, then no deflate block
    "gzip-truncated": (GZIP, _gzip_records()[:len(_gzip_records()) // 2]),
    "snappy-garbage": (SNAPPY, b"Z" * 50),  # raw snappy claiming 90 bytes, not holding them
    "snappy-xerial-length-cut-short": (SNAPPY, _XERIAL + b"\x00\x01\x00"),  # 3 bytes of a block's 4-byte length
    "snappy-xerial-negative-length": (SNAPPY, _XERIAL + struct.pack(">i", -4) + b"\x00" * 4),
    "lz4-garbage": (LZ4, b"Z" * 50),
    "zstd-garbage": (ZSTD, b"Z" * 50),
}


def undecompressable(shape: str) -> bytes:
    """A batch of one record, its compressed records those of UNDECOMPRESSABLE[shape]."""
    codec, payload = UNDECOMPRESSABLE[shape]
    return with_records(compressed(codec, b'"a"'), payload)


def with_codec(batch: bytes, codec: int) -> bytes:
    """`batch` with its attributes' compression codec bits set to `codec` (5, 6 and 7 name
    none), its CRC-32C made to match."""
    return _with_attributes(batch, lambda attributes: (attributes & ~0x07) | codec)


def with_log_append_time(batch: bytes) -> bytes:
    """`batch` with its attributes' timestamp type bit set (the log append time, which only a
    broker sets), its CRC-32C made to match."""
    return _with_attributes(batch, lambda attributes: attributes | 0x08)


def _with_attributes(batch: bytes, change: Callable[[int], int]) -> bytes:
    raw = bytearray(batch)
    (attributes,) = struct.unpack_from(">h", raw, _ATTRIBUTES_AT)
    struct.pack_into(">h", raw, _ATTRIBUTES_AT, change(attributes))
    struct.pack_into(">I", raw, _CRC_AT, calc_crc32c(bytes(raw[_CRC_FROM:])))
    return bytes(raw)
