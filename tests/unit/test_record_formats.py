"""The one definition of a record per topic format (app.domain.record_formats): what a JSON
topic and a bytes topic take from a Send and what they refuse (from the Kafka door:
tests/unit/test_kafka_records.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.errors import InvalidConfig, InvalidRecord
from app.domain.log_cleaning import record_size, record_sizes
from app.domain.record_formats import for_topic
from app.domain.records import RecordToAppend, batch_of
from app.domain.topic_config import TopicConfig
from app.domain.types import ValueFormat

JSON, BYTES = ValueFormat.JSON, ValueFormat.BYTES


def _sent(value: bytes | None, key: object = None, headers: object = None) -> SimpleNamespace:
    """A record as the Send's decoder hands it to batch_of: the value's JSON text as bytes."""
    return SimpleNamespace(value=value, key=key, headers=headers, timestamp_ms=5)


def test_a_json_topics_batch_comes_back_as_it_is() -> None:
    batch = batch_of("t", 0, [_sent(b'{"a":1}', "k", {"h": "v"})], 1)

    assert for_topic(batch, JSON) is batch


def test_a_json_topic_refuses_a_typed_key() -> None:
    batch = batch_of("t", 0, [_sent(b"1", SimpleNamespace(type="BINARY", data="AA=="))], 1)

    with pytest.raises(InvalidRecord, match="json topic"):
        for_topic(batch, JSON)


def test_a_bytes_topic_takes_typed_values_and_counts_their_bytes() -> None:
    batch = batch_of("t", 0, [_sent(b'{"type":"BINARY","data":"AP8A"}', SimpleNamespace(type="STRING", data="é"),
                                    [SimpleNamespace(name="h", value="AQ=="), SimpleNamespace(name="h", value=None)])],
                     1)

    out = for_topic(batch, BYTES)

    headers = '[{"name":"h","value":"AQ=="},{"name":"h","value":null}]'
    assert out.records == [RecordToAppend("é".encode(), b"\x00\xff\x00", headers, 5)]
    assert (out.value_format, out.size_bytes, out.largest_record) == (BYTES, 2 + 3 + len(headers), (0, 5 + len(headers)))


@pytest.mark.parametrize("value", [b'"text"', b"1", b'{"type":"BINARY"}', b'{"type":"BINARY","data":"A"}',
                                   b'{"type":"BINARY","data":"AA==","more":1}', b'{"type":"HEX","data":"00"}'])
def test_a_bytes_topic_refuses_a_value_that_is_not_typed(value: bytes) -> None:
    with pytest.raises(InvalidRecord):
        for_topic(batch_of("t", 0, [_sent(value)], 1), BYTES)


def test_a_null_value_on_a_bytes_topic_is_null() -> None:
    out = for_topic(batch_of("t", 0, [_sent(None, "k")], 1, no_value=None), BYTES)

    assert out.records == [RecordToAppend(b"k", None, None, 5)]


def test_record_size_counts_bytes_as_they_are_and_text_in_utf8() -> None:
    assert record_size(b"\xff", "é", '{"h":"v"}') == 1 + 2 + 9


def test_record_sizes_counts_each_record_of_the_columns_null_as_nothing_and_a_view_as_its_bytes() -> None:
    assert record_sizes([None, b"ab", "\u00e9"], ["null", memoryview(b"xyz"), None], [None, '{"h":"\u20ac"}', None]) \
        == [4, 2 + 3 + 11, 2]


def test_record_sizes_counts_a_column_of_texts_in_utf8_when_one_is_beyond_ascii() -> None:
    assert record_sizes(["a", "bb", "\u00e9"], [None, None, None], [None, None, None]) == [1, 2, 2]


def test_record_sizes_counts_a_text_among_bytes_in_utf8() -> None:
    assert record_sizes([None, None], [b"ab", "\u00e9"], [None, None]) == [2, 2]


def test_record_sizes_refuses_columns_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="^a batch's key, value and header columns must be of one length$"):
        record_sizes(["a"], ["1", "2"], [None, None])


_field = st.none() | st.binary(max_size=4) | st.text(st.characters(blacklist_categories=("Cs",)), max_size=4)


@given(st.lists(st.tuples(_field, _field, _field), max_size=6))
def test_record_sizes_are_each_records_fields_bytes_in_utf8(rows: list[tuple[object, object, object]]) -> None:
    def field_bytes(f: object) -> int:
        return 0 if f is None else len(f.encode()) if isinstance(f, str) else len(f)  # type: ignore[arg-type]

    columns = [[row[i] for row in rows] for i in range(3)]
    assert record_sizes(*columns) == [sum(map(field_bytes, row)) for row in rows]  # type: ignore[arg-type]


def test_a_topics_format_cannot_be_altered() -> None:
    config = TopicConfig(value_format=BYTES)

    assert config.altered({"value_format": "bytes"}) == config
    with pytest.raises(InvalidConfig, match="value_format"):
        config.altered({"value_format": JSON})


def test_a_bytes_topic_refuses_a_batch_read_as_json_that_is_not_a_sends() -> None:
    batch = batch_of("t", 0, [_sent(b'{"type":"BINARY","data":"AA=="}')], 1)
    batch.http_shapes = False  # as the Kafka door builds its batches today

    with pytest.raises(InvalidRecord, match="bytes topic"):
        for_topic(batch, BYTES)
    assert for_topic(batch, JSON) is batch
