"""The Kafka door's records (app.domain.kafka_records): what a JSON topic and a bytes topic
take from a Kafka record and a whole produced batch, what they refuse, and what the Kafka door
reads back."""

from __future__ import annotations

import pytest

from app.domain.errors import InvalidRecord, InvalidTimestamp
from app.domain.log_cleaning import record_size
from app.domain.kafka_records import from_kafka, kafka_batch, to_kafka
from app.domain.record_formats import for_topic, sized_batch
from app.domain.records import RecordToAppend
from app.domain.types import ValueFormat

JSON, BYTES = ValueFormat.JSON, ValueFormat.BYTES


def test_a_kafka_record_on_a_bytes_topic_is_kept_exactly_and_read_back_exactly() -> None:
    headers = [("h", b"\x00"), ("h", None), ("g", b"")]

    stored = from_kafka(b"\xff\x00", b"\x00\xfe", headers, 9, BYTES)

    assert to_kafka(stored.key, stored.value, stored.headers) == (b"\xff\x00", b"\x00\xfe", headers)
    assert stored.timestamp_ms == 9


def test_a_kafka_record_without_headers_stores_none() -> None:
    assert from_kafka(None, None, [], 1, BYTES) == RecordToAppend(None, None, None, 1)
    assert to_kafka(None, None, None) == (None, None, [])


def test_a_kafka_record_on_a_json_topic_is_stored_as_text_and_read_back_as_its_bytes() -> None:
    stored = from_kafka(b"k\xc3\xa9", b'{"a": [1]}', [("h", b"v"), ("i", "é".encode())], 1, JSON)

    assert stored == RecordToAppend("ké", '{"a": [1]}', '{"h":"v","i":"é"}', 1)
    assert to_kafka(stored.key, stored.value, stored.headers) == (
        "ké".encode(), b'{"a": [1]}', [("h", b"v"), ("i", "é".encode())])


@pytest.mark.parametrize("as_sent", [bytes, memoryview], ids=["bytes", "a view into the request"])
def test_a_json_topic_stores_a_kafka_value_without_the_white_space_around_it_as_a_send_does(as_sent: type) -> None:
    value = as_sent(b' \t\n{"a": [1, 2]}\r\n ')

    assert from_kafka(None, value, [], 1, JSON).value == '{"a": [1, 2]}'
    batch = kafka_batch("t", 0, [None], [value], [[]], [1], JSON)
    assert list(batch.records) == [RecordToAppend(None, '{"a": [1, 2]}', None, 1)]
    assert batch.size_bytes == len(b'{"a": [1, 2]}')


def test_a_json_topics_null_value_reads_back_through_kafka_as_the_text_null() -> None:
    stored = from_kafka(b"k", None, [], 1, JSON)

    assert stored.value == "null"
    assert to_kafka(stored.key, stored.value, stored.headers) == (b"k", b"null", [])


@pytest.mark.parametrize(("key", "value", "headers"), [
    (None, b"not json", []),
    (None, b"\xff", []),
    (None, b"1e400", []),
    (None, b"[" * 255 + b"]" * 255, []),
    (b"\xff", b"1", []),
    (b"a\x00", b"1", []),
    (None, b"1", [("h", b"1"), ("h", b"2")]),
    (None, b"1", [("h", None)]),
    (None, b"1", [("h", b"\xff")]),
])
def test_a_json_topic_refuses_from_kafka_what_it_cannot_hold(key: bytes | None, value: bytes, headers: list) -> None:
    with pytest.raises(InvalidRecord):
        from_kafka(key, value, headers, 1, JSON)


def _kafka_batch(records: list[tuple], value_format: ValueFormat, **kw: object) -> object:
    """kafka_batch of records given as (key, value, headers, timestamp_ms) rows."""
    keys, values, headers, timestamps = (list(c) for c in zip(*records, strict=True)) if records else ([],) * 4
    return kafka_batch("t", 0, keys, values, headers, timestamps, value_format, **kw)


def test_a_kafka_batch_is_sized_as_stored() -> None:
    batch = _kafka_batch([(b"ab", b"\x00", [], 1), (None, b"xyz", [], 2)], BYTES, base_sequence=4)

    assert (batch.size_bytes, batch.largest_record, batch.base_sequence) == (6, (0, 3), 4)
    assert for_topic(batch, BYTES) is batch


def test_a_json_topics_kafka_batch_is_sized_as_stored() -> None:
    batch = _kafka_batch([("ké".encode(), b"[1]", [("h", b"v")], 1), (None, None, [], 2)], JSON)

    assert (batch.size_bytes, batch.largest_record) == (3 + 3 + 9 + 4, (0, 15))
    assert for_topic(batch, JSON) is batch


# Records a topic of each format takes, as a whole batch: what from_kafka makes of each.
_TAKEN = [
    (b"k\xc3\xa9", b' {"a": [1]} ', [("h", b"v"), ("i", "\u00e9".encode())], 1),
    (None, None, [], 0),
    (b"", b'""', [], 2),
    (None, b"[" * 254 + b"]" * 254, [], 3),
    (b"\xe2\x82\xac", b'"\xe2\x82\xac \\u0000"', [], 253_402_300_799_999),  # 9999-12-31T23:59:59.999Z
    (b"k", b"null", [("a", b"")], 4),
]


@pytest.mark.parametrize("value_format", [JSON, BYTES])
def test_a_kafka_batch_holds_what_from_kafka_makes_of_each_record(value_format: ValueFormat) -> None:
    batch = _kafka_batch(_TAKEN, value_format)

    assert batch.records == [from_kafka(k, v, h, ts, value_format) for k, v, h, ts in _TAKEN]
    sizes = [record_size(r.key, r.value, r.headers) for r in batch.records]
    assert (batch.size_bytes, batch.largest_record) == (sum(sizes), (sizes.index(max(sizes)), max(sizes)))


def test_the_largest_record_of_a_kafka_batch_is_the_first_of_the_largest() -> None:
    batch = _kafka_batch([(b"a", b"xy", [], 1), (None, b"z", [], 2), (b"ab", b"y", [], 3)], BYTES)
    assert (batch.size_bytes, batch.largest_record) == (3 + 1 + 3, (0, 3))


@pytest.mark.parametrize(("key", "value", "headers", "timestamp"), [
    (None, b"not json", [], 1),
    (None, b"\xff", [], 1),
    (None, b"1e400", [], 1),
    (None, b"[" * 255 + b"]" * 255, [], 1),
    (b"\xff", b"1", [], 1),
    (b"\xe2\x82", b"1", [], 1),  # the first bytes of a character, whose end would be the next key's
    (b"a\x00", b"1", [], 1),
    (None, b"1", [("h", b"1"), ("h", b"2")], 1),
    (None, b"1", [("h", None)], 1),
    (None, b"1", [("h", b"\xff")], 1),
    (None, b"1", [], -1),
    (None, b"1", [], 2**63),
    (None, b"1", [], 2**63 - 1),
    (None, b"1", [], 253_402_300_800_000),  # a millisecond past 9999-12-31T23:59:59.999Z
])
def test_a_json_topic_refuses_a_kafka_batch_naming_the_record_from_kafka_refuses(
        key: bytes | None, value: bytes, headers: list, timestamp: int) -> None:
    records = [(b"k", b"1", [], 1), (key, value, headers, timestamp), (b"k", b"2", [], 1)]

    with pytest.raises(Exception) as one:
        from_kafka(key, value, headers, timestamp, JSON, index=1, where="t/0")
    with pytest.raises(type(one.value)) as batch:
        _kafka_batch(records, JSON)

    assert str(batch.value) == str(one.value)


@pytest.mark.parametrize("values", [
    [b"[1", b"2]", b"3,4"],  # no value JSON, though the three joined by commas are an array of three
    [b'"a', b'b"'],
    [b"1 2", b"3"],
    [b'"a', b'b",1'],  # joined: an array of two whose lengths add up to the values' lengths
    [b'"x', b'"],[1'],
])
def test_a_json_topic_refuses_a_kafka_batch_whose_values_are_json_only_together(values: list[bytes]) -> None:
    with pytest.raises(InvalidRecord, match="record 0 of t/0: a json topic's value must be JSON"):
        _kafka_batch([(None, v, [], 1) for v in values], JSON)


# A JSON topic's values at the edges of what it takes: whatever path kafka_batch takes through a
# batch, each is taken or refused exactly as from_kafka takes or refuses it alone.
_JSON_EDGES = [
    b"1", b" 1", b"1 ", b'"\\ud83d\\ude00"', b'"\\u0000"', b'{"a":1,"a":2}', b"-0", b"1e308", b"1E+308",
    b"-1e-400", b"9" * 308, b"0." + b"0" * 400 + b"1", b"123456789012345678901234567890",
    b"[" * 254 + b"]" * 254,
    b"1e400", b"1E+400", b"-1e309", b"1" + b"0" * 309, b"9" * 309, b"[1e400]", b'{"a":-1e999}',
    b'"\xff"', b'"\xed\xa0\x80"', b'"\\ud800"', b'"\\uDC00"', b'"a\x01b"', b"NaN", b"Infinity", b"01", b"1.",
    b"", b" ", b"[1,]", b'{"a":1,}', b"\xef\xbb\xbf1", b"[" * 255 + b"]" * 255, b"1 2", b"tru", b"[1", b"]",
]


@pytest.mark.parametrize("value", _JSON_EDGES)
def test_a_json_topics_kafka_batch_takes_and_refuses_each_value_as_from_kafka_does(value: bytes) -> None:
    records = [(b"k", b'{"a": 1}', [], 1), (b"k", value, [], 2), (b"k", b"[2]", [], 3)]
    try:
        expected = [from_kafka(k, v, h, ts, JSON, index=i, where="t/0") for i, (k, v, h, ts) in enumerate(records)]
    except InvalidRecord as one:
        with pytest.raises(InvalidRecord) as batch:
            _kafka_batch(records, JSON)
        assert str(batch.value) == str(one)
    else:
        assert _kafka_batch(records, JSON).records == expected


def test_a_bytes_topic_takes_any_kafka_batch_and_refuses_only_a_timestamp_out_of_range() -> None:
    batch = _kafka_batch([(b"\xff\x00", b"\x00\xfe", [("h", None), ("h", b"\xff")], 1)], BYTES)

    assert batch.records == [from_kafka(b"\xff\x00", b"\x00\xfe", [("h", None), ("h", b"\xff")], 1, BYTES)]
    with pytest.raises(InvalidTimestamp, match="record 1 of t/0"):
        _kafka_batch([(None, None, [], 1), (None, None, [], -1)], BYTES)
    with pytest.raises(InvalidTimestamp, match="record 1 of t/0: timestamp_ms must be an integer from 0 to "
                       r"253402300799999 \(9999-12-31T23:59:59.999Z\), not 253402300800000"):
        _kafka_batch([(None, None, [], 1), (None, None, [], 253_402_300_800_000)], BYTES)


@pytest.mark.parametrize("as_sent", [bytes, memoryview], ids=["bytes", "a view into the request"])
def test_a_kafka_batch_built_for_a_json_topic_is_refused_by_a_bytes_topic_never_read_as_https_typed_value(
        as_sent: type) -> None:
    # The door builds for the format it remembers; a topic deleted and created again as a bytes
    # topic since then must refuse the batch (the door then builds it again for bytes), not take
    # a Kafka value that looks like the HTTP API's {"type": "STRING", "data": ...} as that shape.
    sent = b'{"type": "STRING", "data": "x"}'
    batch = kafka_batch("t", 0, [None], [as_sent(sent)], [[]], [1], ValueFormat.JSON)
    with pytest.raises(InvalidRecord, match="bytes topic"):
        for_topic(batch, ValueFormat.BYTES)


def test_a_batch_sized_again_keeps_whether_it_may_be_read_as_https_typed_values() -> None:
    batch = kafka_batch("t", 0, [None], [b'"x"'], [[]], [1], ValueFormat.JSON)
    assert not sized_batch(batch, [RecordToAppend(None, '"x"', None, 1)], ValueFormat.JSON).http_shapes
