"""How many bytes a produced batch's records take once decompressed, found without holding
more than a bound: aiokafka's reader decompresses a batch whole, so a small compressed batch
could otherwise make the process hold gigabytes (a "decompression bomb"). The bound is one
Produce's, across all its batches and partitions (DecompressedBudget): a 1 MB frame holds
hundreds of small compressed batches, each of which could otherwise take the whole bound. A
batch past what is left is refused before aiokafka reads it: RECORD_LIST_TOO_LARGE if it
alone is past the whole bound, else, the bound being spent by the batches before it,
NOT_ENOUGH_REPLICAS with every batch after it (BudgetSpent), which producers retry.

Each codec as aiokafka's codec module reads it (gzip, xerial-framed or raw snappy, lz4 frames,
zstd), through cramjam and zlib with an output bound: never a hand-written decompressor.
Records that do not decompress are INVALID_RECORD here, before aiokafka's reader meets them,
and take what finding that out decompressed (at most the output room of the try that failed;
for gzip, a 64 KiB step past what it counted), not the whole bound."""

from __future__ import annotations

import struct
import zlib

import cramjam

from app.domain.errors import InvalidRecord, RecordListTooLarge

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
# The codec ids Kafka defines: a batch's attributes have room for 5, 6 and 7 too, which name no
# codec (aiokafka's reader raises UnsupportedCodecError for them once it reads the records).
CODECS = frozenset({NONE, GZIP, SNAPPY, LZ4, ZSTD})
_BATCH_LENGTH = struct.Struct(">i")  # at byte 8 of a v2 batch: its length after this field
_RECORDS_AT = 61  # a v2 batch's header: its records (compressed or not) follow
_XERIAL = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)  # magic, version, compatible version
_FIRST_TRY_RATIO = 64  # most batches fit a buffer this many times their compressed size
_STEP_BYTES = 64 << 10  # gzip's output at a time, and the least output room of a first try


class BudgetSpent(Exception):
    """The batch does not fit in what the batches before it in its Produce left of the bound:
    not written, nothing wrong with it, answered NOT_ENOUGH_REPLICAS, which producers retry
    (librdkafka: retry, message not persisted), the batch then in a Produce of its own or
    with others."""


class DecompressedBudget:
    """What is left of OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES for one Produce's records, taken
    batch by batch in the order they are read: a batch takes its records' bytes decompressed
    (an uncompressed one, its bytes as they are), whether or not it is then written (refused
    for an unknown topic, say), since they were decompressed. Without it a request's
    decompressing, in CPU, was its batches times the bound (docs/benchmarks.md)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def take(self, batch: bytes, codec: int) -> None:
        """Takes the batch's records' decompressed bytes from what is left, found out
        decompressing at most that much. Past what is left: RecordListTooLarge if nothing was
        taken before (the batch alone is past the bound: it would be in any Produce), else
        BudgetSpent; nothing is then left, and every batch after it is BudgetSpent. Records
        that do not decompress: InvalidRecord, having taken what finding that out decompressed
        (at most a try's output room), not the whole bound."""
        if self.left <= 0:
            raise self._spent()
        alone = self.left == self.limit
        size, decompressed = _decompressed_size(batch, codec, self.left)
        if not decompressed:
            self.left = max(0, self.left - size)
            raise InvalidRecord("the record batch's compressed records do not decompress")
        if size > self.left:
            self.left = 0
            if alone:
                raise RecordListTooLarge(f"the record batch's records take more than {self.limit} bytes decompressed "
                                         "(OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES, which bounds a whole Produce)")
            raise self._spent()
        self.left -= size

    def _spent(self) -> BudgetSpent:
        return BudgetSpent(f"not written: the record batches before it in this Produce took the {self.limit} bytes "
                           "their records may take decompressed (OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES); sent again "
                           "apart from them, it is taken")


def _decompressed_size(batch: bytes, codec: int, limit: int) -> tuple[int, bool]:
    """(the bytes the batch's records take decompressed, more than `limit` if they take more;
    True), or (what finding out that they do not decompress decompressed, at most; False)."""
    end = 12 + _BATCH_LENGTH.unpack_from(batch, 8)[0]
    payload = memoryview(batch)[_RECORDS_AT:end]
    if codec == GZIP:
        return _gzip_size(bytes(payload), limit)
    if codec == SNAPPY:
        size = _snappy_size(payload)
        return (len(payload), False) if size is None else (size, True)
    if codec in (LZ4, ZSTD):
        return _bounded_size(cramjam.lz4 if codec == LZ4 else cramjam.zstd, payload, limit)
    assert codec == NONE, f"codec {codec} is not one of CODECS: its batch is refused before it is read"
    return len(payload), True


def _rooms(payload: memoryview, limit: int) -> list[int]:
    """The output rooms to try: a small one first, which most batches fit, then `limit` + 1
    (past the limit). A try that fails has decompressed at most its room."""
    first = max(_STEP_BYTES, _FIRST_TRY_RATIO * len(payload))
    return [first, limit + 1] if first <= limit else [limit + 1]


def _gzip_size(data: bytes, limit: int) -> tuple[int, bool]:
    """Every gzip member, as Python's gzip module reads them all (zero bytes after a member
    skipped), decompressed _STEP_BYTES at a time: never more held, and a member cut short or
    a bad deflate body or trailer found out having decompressed at most a step past what
    was counted."""
    size = 0
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while not d.eof:
            step = min(_STEP_BYTES, limit + 1 - size)
            try:
                out = d.decompress(data, step)
            except zlib.error:
                return size + step, False
            size += len(out)
            if size > limit:
                return size, True
            if not out and not d.eof:
                return size, False  # zlib stops short of `step` only at the end of its input: cut short
            data = d.unconsumed_tail
        data = d.unused_data.lstrip(b"\0")
    return size, True


def _snappy_size(payload: memoryview) -> int | None:
    """A snappy block states its decompressed length in its first bytes. A xerial stream's
    blocks each follow their length, as aiokafka's reader reads them: a length that is not
    positive or runs past the bytes is not snappy (a negative one sent the cursor back: the
    loop never ended, a 40-byte Produce held a thread at full CPU for ever)."""
    try:
        if not _is_xerial(payload):
            return int(cramjam.snappy.decompress_raw_len(bytes(payload)))
        size, cursor, data = 0, 16, bytes(payload)
        while cursor < len(data):
            (block,) = struct.unpack_from(">i", data, cursor)
            cursor += 4
            if block <= 0 or cursor + block > len(data):
                return None
            size += int(cramjam.snappy.decompress_raw_len(data[cursor:cursor + block]))
            cursor += block
        return size
    except (cramjam.DecompressionError, ValueError, struct.error):
        return None


def _is_xerial(payload: memoryview) -> bool:
    """As aiokafka's reader tells a xerial stream from raw snappy: more than its 16-byte header,
    which is the magic, version 1 and compatible version 1."""
    return len(payload) > 16 and bytes(payload[:16]) == _XERIAL


def _bounded_size(codec: object, payload: memoryview, limit: int) -> tuple[int, bool]:
    """Decompressed into a buffer that cannot grow past `limit` + 1: a small one first."""
    for room in _rooms(payload, limit):
        try:
            return int(codec.decompress_into(bytes(payload), bytearray(room))), True  # type: ignore[attr-defined]
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e):
                return room, False  # not this codec's bytes, having decompressed at most `room`
    return limit + 1, True
