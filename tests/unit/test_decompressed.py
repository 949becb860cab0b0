"""The decompressed bound of one Produce (app.kafka.decompressed): how many bytes a batch's
records take decompressed, found out without decompressing more than what is left, and in
bounded time whatever the bytes."""

from __future__ import annotations

import threading

import pytest

from app.kafka.decompressed import DecompressedBudget
from tests.kafka_batches import UNDECOMPRESSABLE, undecompressable

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
