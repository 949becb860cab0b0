"""examples/kafka_transactions.py's transform (the loop itself runs against a live Kafka listener
in tests/kafka/test_confluent_kafka_exactly_once.py)."""

from __future__ import annotations

import pytest

from examples.kafka_transactions import NotANumber, dead_letter_headers, transform


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
