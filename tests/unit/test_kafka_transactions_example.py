"""examples/kafka_transactions.py's transform, and what its commit sends or aborts, on fake clients (the
loop itself runs against a live Kafka listener in tests/kafka/test_confluent_kafka_exactly_once.py)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, TopicPartition

from examples.kafka_transactions import Loop, NotANumber, dead_letter_headers, transform


def test_an_integer_becomes_its_square_with_the_number() -> None:
    assert transform(b"7") == b'{"n":7,"square":49}'


@pytest.mark.parametrize("value, reason", [
    (b'"seven"', "value is not an integer: b'\"seven\"'"),
    (b"7.5", "value is not an integer: b'7.5'"),
    (b"", "value is not an integer: b''"),
    (None, "value is null"),
])
def test_a_value_that_is_not_an_integer_is_refused_with_the_reason(value: bytes | None, reason: str) -> None:
    with pytest.raises(NotANumber) as raised:
        transform(value)
    assert str(raised.value) == reason


def test_a_dead_letter_record_s_headers_name_its_input_and_why_it_was_skipped() -> None:
    assert dead_letter_headers("numbers", 2, 17, NotANumber("value is null")) == [
        ("source", b"numbers/2/17"), ("reason", b"value is null")]


class _Producer:
    """What the loop asks of its transactional producer, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def send_offsets_to_transaction(self, positions: list[TopicPartition], _metadata: object, _timeout: float) -> None:
        self.calls.append(("send_offsets", [(t.partition, t.offset) for t in positions]))

    def commit_transaction(self, _timeout: float) -> None:
        self.calls.append(("commit", None))

    def abort_transaction(self, _timeout: float) -> None:
        self.calls.append(("abort", None))


class _Consumer:
    """A consumer holding `positions` (partition → the offset after the last record polled, or
    OFFSET_INVALID for one assigned and not read since) of the input topic."""

    def __init__(self, positions: dict[int, int]) -> None:
        self.positions = positions

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("numbers", p) for p in sorted(self.positions)]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(t.topic, t.partition, self.positions[t.partition]) for t in partitions]

    def consumer_group_metadata(self) -> object:
        return object()


def _loop_that_consumed(consumed: dict[int, tuple[int, int]], positions: dict[int, int]) -> tuple[Loop, _Producer]:
    loop = Loop.__new__(Loop)  # its clients are fakes: no Kafka listener
    producer = _Producer()
    loop.producer, loop.consumer = producer, _Consumer(positions)  # type: ignore[assignment]
    loop.consumed, loop.in_transaction = consumed, sum(last - first + 1 for first, last in consumed.values())
    return loop, producer


def test_a_transaction_commits_with_the_positions_past_every_input_it_consumed() -> None:
    loop, producer = _loop_that_consumed({2: (6, 10), 3: (0, 4)}, {2: 11, 3: 5})

    assert loop._commit() is True
    assert producer.calls == [("send_offsets", [(2, 11), (3, 5)]), ("commit", None)]


@pytest.mark.parametrize("positions", [
    {3: 5},                   # partition 2 is no longer assigned
    {2: OFFSET_INVALID, 3: 5},  # assigned again, nothing polled from it since
    {2: 8, 3: 5},             # a position that does not pass the last record consumed (10)
])
def test_a_transaction_that_cannot_send_an_offset_past_an_input_it_consumed_aborts(positions: dict[int, int]) -> None:
    # Committed, its results from partition 2 would stand without their offsets, and whoever
    # reads partition 2 next would make them again from the offset committed before them.
    loop, producer = _loop_that_consumed({2: (6, 10), 3: (0, 4)}, positions)

    assert loop._commit() is False
    assert producer.calls == [("abort", None)]
    assert (loop.consumed, loop.in_transaction) == ({}, 0)


def test_a_bootstrap_where_no_listener_answers_is_one_line_and_exit_status_2(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import signal
    import socket
    import time

    from examples import kafka_transactions

    monkeypatch.setattr(kafka_transactions, "REACH_TIMEOUT_S", 1)  # a short wait: the line and the exit status are what is tested
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with socket.socket() as s:  # a port nothing listens on: bound, never listened
        s.bind(("127.0.0.1", 0))
        bootstrap = f"127.0.0.1:{s.getsockname()[1]}"
        started = time.monotonic()
        status = kafka_transactions.main(["--bootstrap", bootstrap, "--input", "numbers", "--output", "squares",
                                          "--group", "squarer", "--transactional-id", "squarer-1"])
        took = time.monotonic() - started
    for sig, handler in handlers.items():  # main() installs its own: give pytest's back
        signal.signal(sig, handler)

    err = capsys.readouterr().err
    assert status == 2
    assert err == (f"error: --bootstrap {bootstrap}: no Kafka listener answered within 1 s (Failed to get metadata: "
                   f"Local: Broker transport failure): is `outbox serve --kafka-listener {bootstrap}` running, "
                   f"without OUTBOX_AUTHENTICATION? This example does not authenticate (no SASL), and a listener "
                   f"with OUTBOX_AUTHENTICATION closes its unauthenticated connections, which looks the same\n")
    assert took < kafka_transactions.TIMEOUT_S
