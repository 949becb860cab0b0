"""The decompressed bound of one Produce (app.kafka.decompressed): how many bytes a batch's
records take decompressed, found out without decompressing more than what is left, and in
bounded time whatever the bytes."""

from __future__ import annotations

import gzip
import threading

import pytest
from aiokafka.codec import gzip_decode, lz4_decode, snappy_decode, zstd_decode

from app.domain.errors import InvalidRecord, RecordListTooLarge
from app.kafka.decompressed import BudgetSpent, DecompressedBudget
from tests.kafka_batches import (GZIP, LZ4, RECORDS_AT, SNAPPY, UNDECOMPRESSABLE, ZSTD, compressed, undecompressable,
                                 with_records)

_MEASURED_WITHIN_S = 5  # a bound on a wait for a measure of microseconds, never a timed assertion


@pytest.mark.parametrize("shape", sorted(UNDECOMPRESSABLE))
def test_records_that_do_not_decompress_are_measured_in_bounded_time(shape: str) -> None:
    # A xerial block of length -4 sent the measuring's cursor back to the same length: a
    # 40-byte Produce held a thread at full CPU for ever.
    batch, budget = undecompressable(shape), DecompressedBudget(1 << 20)
    done = threading.Event()

    def measure() -> None:
        try:
            budget.take(batch, UNDECOMPRESSABLE[shape][0])
        except Exception:  # noqa: BLE001 - what it answers is another test's: here, that it answers
            pass
        done.set()

    threading.Thread(target=measure, daemon=True).start()  # daemon: a loop that never ends cannot hold pytest
    assert done.wait(_MEASURED_WITHIN_S), "the measuring did not end"


_LIMIT = 1 << 20
_AIOKAFKA_DECODERS = {GZIP: gzip_decode, SNAPPY: snappy_decode, LZ4: lz4_decode, ZSTD: zstd_decode}


def _zstd(value_bytes: int) -> bytes:
    return compressed(ZSTD, b"a" * value_bytes)


def test_a_batch_alone_past_the_whole_bound_is_record_list_too_large_and_every_batch_after_it_not_written() -> None:
    budget = DecompressedBudget(_LIMIT)
    with pytest.raises(RecordListTooLarge):
        budget.take(_zstd(_LIMIT + 1), ZSTD)
    with pytest.raises(BudgetSpent):  # the bound's decompressing was spent finding that out
        budget.take(_zstd(10), ZSTD)


def test_a_batch_past_what_the_batches_before_it_left_is_budget_spent_and_so_is_every_batch_after_it() -> None:
    # A client batching several partitions into one Produce is not at fault: the batch is
    # retriable (NOT_ENOUGH_REPLICAS at the door), not RECORD_LIST_TOO_LARGE, which lost its records.
    budget = DecompressedBudget(_LIMIT)
    budget.take(_zstd(600_000), ZSTD)
    with pytest.raises(BudgetSpent):
        budget.take(_zstd(600_000), ZSTD)
    with pytest.raises(BudgetSpent):
        budget.take(_zstd(10), ZSTD)


# Raw snappy states its length first: measuring takes it at its word, and aiokafka's reader,
# decompressing, finds it false (an invalid record of send_batch's, tests/unit/test_kafka_produced_batches.py).
@pytest.mark.parametrize("shape", sorted(set(UNDECOMPRESSABLE) - {"snappy-garbage"}))
def test_records_that_do_not_decompress_are_an_invalid_record_and_take_a_try_s_room_not_the_bound(
        shape: str) -> None:
    budget = DecompressedBudget(8 * _LIMIT)
    with pytest.raises(InvalidRecord):
        budget.take(undecompressable(shape), UNDECOMPRESSABLE[shape][0])
    assert budget.left >= 8 * _LIMIT - (64 << 10)
    budget.take(_zstd(_LIMIT), ZSTD)  # the batches after it are taken


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_a_batch_takes_its_records_bytes_decompressed_as_aiokafka_s_reader_decompresses_them(codec: int) -> None:
    batch = compressed(codec, b"a" * 300_000)
    budget = DecompressedBudget(_LIMIT)
    budget.take(batch, codec)
    assert _LIMIT - budget.left == len(_AIOKAFKA_DECODERS[codec](batch[RECORDS_AT:]))


def test_gzip_members_after_one_another_and_zero_bytes_after_them_are_read_as_python_s_gzip_reads_them() -> None:
    batch = with_records(compressed(GZIP, b"a"), gzip.compress(b"x" * 1_000) + gzip.compress(b"y" * 500) + b"\0" * 3)
    budget = DecompressedBudget(_LIMIT)
    budget.take(batch, GZIP)
    assert _LIMIT - budget.left == len(gzip_decode(batch[RECORDS_AT:])) == 1_500
