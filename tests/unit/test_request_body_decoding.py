"""The body decoder's pieces without HTTP: content types, locations, nesting depth."""

from __future__ import annotations

import msgspec
import pytest
from fastapi.exceptions import RequestValidationError

from app.api.json_body import MAX_DEPTH, decode, is_json_content_type, schema_mismatch, where
from app.api.schemas.records import SendRequest
from app.api.send_body import to_domain
from app.domain.errors import InvalidRequest

SEND = msgspec.json.Decoder(SendRequest)


@pytest.mark.parametrize("content_type", [
    "application/json", "APPLICATION/JSON", "application/json; charset=utf-8",
    "application/json;charset=UTF-8", 'application/json; charset="utf-8"', "application/vnd.api+json",
    "application/problem+json; charset=utf-8",
])
def test_json_media_types_with_no_charset_or_utf8_are_json(content_type: str) -> None:
    assert is_json_content_type(content_type)


@pytest.mark.parametrize("content_type", [
    None, "", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/json; charset=latin-1", "application/json; charset=utf-16", "application/jsonx",
    "text/json", "application/json; version=2",
])
def test_other_content_types_are_not_json(content_type: str | None) -> None:
    assert not is_json_content_type(content_type)


def test_where_counts_lines_and_columns_from_one() -> None:
    body = b'{\n  "a": 1,\n  "b" 2\n}'
    assert where(body, 0) == "line 1 column 1 (byte 0)"
    assert where(body, body.index(b"2")) == "line 3 column 7 (byte 18)"


def test_a_schema_mismatch_is_located_in_the_body_by_field_and_index() -> None:
    error = schema_mismatch("Expected `int`, got `str` - at `$.batches[3].records[12].partition`")
    assert isinstance(error, RequestValidationError)
    assert error.errors() == [{"loc": ("body", "batches", 3, "records", 12, "partition"),
                               "msg": "Expected `int`, got `str`", "type": "body"}]


def test_a_mismatch_in_a_mapping_key_is_located_at_the_mapping() -> None:
    error = schema_mismatch("Expected `str`, got `int` - at `$.batches[0].records[0].headers[...]`")
    assert error.errors()[0]["loc"] == ("body", "batches", 0, "records", 0, "headers", "[key]")


def test_a_mismatch_of_the_whole_body_is_located_at_the_body() -> None:
    assert schema_mismatch("Expected `object`, got `array`").errors()[0]["loc"] == ("body",)


def test_an_unknown_field_is_answered_with_the_fields_of_the_object_it_is_in() -> None:
    body = b'{"batches":[{"topic":"t","partition":0,"records":[{"value":1,"partition":0}]}]}'
    with pytest.raises(RequestValidationError) as refused:
        decode(SEND, body)
    assert refused.value.errors() == [{
        "loc": ("body", "batches", 0, "records", 0),
        "msg": "Object contains unknown field `partition`; known fields: key, value, headers, timestamp_ms",
        "type": "body"}]


def _send(value: bytes) -> bytes:
    return b'{"batches":[{"topic":"t","partition":0,"records":[{"value":' + value + b"}]}]}"


def _decoded_value(value: bytes) -> str:
    body = _send(value)
    return to_domain(decode(SEND, body), body, 0).batches[0].records[0].value  # type: ignore[return-value]


def _nested(depth: int, pattern: bytes = b"[{") -> bytes:
    """A value `depth` levels deep, alternating the opening brackets of `pattern`."""
    opens = [pattern[i % len(pattern):i % len(pattern) + 1] for i in range(depth)]
    text = b"1"
    for o in reversed(opens):
        text = b"[" + text + b"]" if o == b"[" else b'{"k":' + text + b"}"
    return text


@pytest.mark.parametrize("pattern", [b"[", b"{", b"[{", b"{["])
def test_a_value_exactly_max_depth_deep_is_taken(pattern: bytes) -> None:
    value = _nested(MAX_DEPTH, pattern)
    assert _decoded_value(value) == value.decode()


@pytest.mark.parametrize("pattern", [b"[", b"{", b"[{", b"{["])
def test_a_value_one_level_deeper_is_refused(pattern: bytes) -> None:
    with pytest.raises(InvalidRequest, match=f"nests deeper than {MAX_DEPTH} levels"):
        _decoded_value(_nested(MAX_DEPTH + 1, pattern))


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    inside = b'"' + b"[{" * 300 + b'\\"\\\\' + b"}" * 10 + b'"'
    value = b"[" + inside + b"," + _nested(MAX_DEPTH - 1) + b"]"
    assert _decoded_value(value) == value.decode()


def test_many_shallow_siblings_are_not_deep() -> None:
    value = b"[" + b",".join([b'{"a":[1]}'] * 1000) + b"]"
    assert _decoded_value(value) == value.decode()


@pytest.mark.parametrize("record", [
    b'{"value": 1}', b'{}', b'{"key": "k\\u00e9", "value": "caf\\u00e9"}', b'{"key": "\xc3\xa9t\xc3\xa9"}',
    b'{"headers": {"h": "\xe2\x82\xac", "\xf0\x9f\x98\x80": ""}, "value": [1, 2.5, {"a" : null}]}',
    b'{"key": "", "headers": {}, "value": "\xf0\x9f\x98\x80"}',
])
def test_a_batch_counts_the_bytes_that_record_size_gives_its_records(record: bytes) -> None:
    from app.domain.log_cleaning import record_size

    body = b'{"batches":[{"topic":"t","partition":0,"records":[' + record + b"," + record + b"]}]}"
    [batch] = to_domain(decode(SEND, body), body, 0).batches
    assert batch.size_bytes == sum(record_size(r.key, r.value, r.headers) for r in batch.records)
    assert batch.size_bytes > 0
