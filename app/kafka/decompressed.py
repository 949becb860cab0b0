"""How many bytes a produced batch's records take once decompressed, found without holding
more than a bound: aiokafka's reader decompresses a batch whole, so a small compressed batch
could otherwise make the process hold gigabytes (a "decompression bomb"). A batch over the
bound is refused before aiokafka reads it.

Each codec as aiokafka's codec module reads it (gzip, xerial-framed or raw snappy, lz4 frames,
zstd), through cramjam and zlib with an output bound: never a hand-written decompressor."""

from __future__ import annotations

import struct
import zlib

import cramjam

from app.domain.errors import RecordListTooLarge

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
_BATCH_LENGTH = struct.Struct(">i")  # at byte 8 of a v2 batch: its length after this field
_RECORDS_AT = 61  # a v2 batch's header: its records (compressed or not) follow
_XERIAL = b"\x82SNAPPY\x00"
_FIRST_TRY_RATIO = 64  # most batches fit a buffer this many times their compressed size


def check_decompressed_size(batch: bytes, codec: int, limit: int) -> None:
    """RecordListTooLarge if the batch's records take more than `limit` bytes decompressed.
    Bytes that do not decompress are left to aiokafka's reader to refuse."""
    end = 12 + _BATCH_LENGTH.unpack_from(batch, 8)[0]
    payload = memoryview(batch)[_RECORDS_AT:end]
    if codec == GZIP:
        size = _gzip_size(payload, limit)
    elif codec == SNAPPY:
        size = _snappy_size(payload)
    elif codec in (LZ4, ZSTD):
        size = _bounded_size(cramjam.lz4 if codec == LZ4 else cramjam.zstd, payload, limit)
    else:
        return
    if size is not None and size > limit:
        raise RecordListTooLarge(f"the record batch takes more than {limit} bytes decompressed "
                                 "(OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES)")


def _gzip_size(payload: memoryview, limit: int) -> int | None:
    """Every gzip member, as Python's gzip module reads them all, each bounded."""
    size, data = 0, bytes(payload)
    try:
        while data:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            size += len(d.decompress(data, limit + 1 - size))
            if size > limit:
                return size
            if not d.eof:
                return size  # truncated: aiokafka's reader refuses it
            data = d.unused_data
    except zlib.error:
        return None
    return size


def _snappy_size(payload: memoryview) -> int | None:
    """A snappy block states its decompressed length in its first bytes."""
    try:
        if bytes(payload[:8]) != _XERIAL:
            return int(cramjam.snappy.decompress_raw_len(bytes(payload)))
        size, cursor, data = 0, 16, bytes(payload)
        while cursor + 4 <= len(data):
            (block,) = struct.unpack_from(">i", data, cursor)
            cursor += 4
            size += int(cramjam.snappy.decompress_raw_len(data[cursor:cursor + block]))
            cursor += block
        return size
    except (cramjam.DecompressionError, ValueError, struct.error):
        return None


def _bounded_size(codec: object, payload: memoryview, limit: int) -> int | None:
    """Decompressed into a buffer that cannot grow past `limit`: a small one first."""
    for room in sorted({min(limit, max(1 << 20, _FIRST_TRY_RATIO * len(payload))), limit}):
        try:
            return int(codec.decompress_into(bytes(payload), bytearray(room)))  # type: ignore[attr-defined]
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e):
                return None  # not this codec's bytes: aiokafka's reader refuses them
    return limit + 1
