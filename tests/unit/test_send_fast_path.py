"""The Send fast path (msgspec, values kept as sent) takes a body only where the full path
(strict JSON parse, pydantic's SendRequest, values re-serialised by orjson) takes it too, and
then builds the same batches: same fields, and each value the same JSON value.

Where the fast path gives way (None), the full path decides, refusals included, so these
properties are what keeps the two from ever disagreeing about what is a valid Send.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from app.api.routers.records import _to_append
from app.api.schemas.records import SendRequest
from app.api.send_fast_path import DecodedSend, decode_send
from app.api.strict_json import loads
from app.domain.errors import InvalidRequest
from app.services.log_service import SendBatch

NOW = 1_700_000_000_000
_send_request = TypeAdapter(SendRequest)


def full_path(body: bytes) -> DecodedSend | None:
    """What the route does without the fast path; None when it refuses the body."""
    try:
        request = _send_request.validate_python(loads(body))
        batches = [
            (b.topic, b.partition, b.base_sequence, b.expected_offset,
             _to_append(b.topic, b.partition, b.records, NOW))
            for b in request.batches
        ]
    except (ValueError, ValidationError, InvalidRequest):  # json's JSONDecodeError is a ValueError
        return None
    return DecodedSend(
        [SendBatch(topic=t, partition=p, base_sequence=s, expected_offset=e, records=r)
         for t, p, s, e, r in batches],
        request.producer_id, request.producer_epoch, request.transactional_id,
    )


def comparable(send: DecodedSend) -> tuple:
    """The batches with each value parsed: the fast path stores a value's text as sent, the
    full path as orjson writes it, and both must mean the same JSON value."""
    return (
        send.producer_id, send.producer_epoch, send.transactional_id,
        [
            (b.topic, b.partition, b.base_sequence, b.expected_offset,
             [(r.key, _json(r.value), r.headers, r.timestamp_ms) for r in b.records])
            for b in send.batches
        ],
    )


def _json(text: str | None) -> Any:
    # Tag numbers by type so that 1 and 1.0 (and True) differ, as they do for a reader.
    if text is None:
        return None
    return json.loads(text, parse_float=lambda s: ("float", float(s)), parse_int=lambda s: ("int", int(s)))


def assert_both_paths_take_it_alike(body: bytes) -> None:
    fast, full = decode_send(body, NOW), full_path(body)
    assert fast is not None and full is not None
    assert comparable(fast) == comparable(full)


def body_with_value(value: bytes) -> bytes:
    """A Send of one record whose value is `value`, as sent."""
    return b'{"batches":[{"topic":"t","partition":0,"records":[{"value":' + value + b"}]}]}"


# --- generated bodies: near the schema, with values of every kind and fields out of bounds --

EDGE_INTS = st.sampled_from([0, -1, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, 32767, 32768])
INTS = st.integers(min_value=-5, max_value=2**31 + 5) | EDGE_INTS
TEXT = st.text(max_size=12) | st.sampled_from(["t", "a/b", "x\x00y", "\x1f", "e123", "1e+400", "-", "ü", "😀", ""])
WRONG = st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | TEXT | st.just([]) | st.just({})
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | EDGE_INTS | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


def maybe(key: str, strategy: st.SearchStrategy, p_wrong: bool = True) -> st.SearchStrategy:
    """A field: absent, as the strategy gives it, or (sometimes) of a wrong type."""
    valid = strategy.map(lambda v: {key: v})
    options = [st.just({}), *[valid] * 6]
    if p_wrong:
        options.append(WRONG.map(lambda v: {key: v}))
    return st.one_of(*options)


def merged(*parts: st.SearchStrategy) -> st.SearchStrategy:
    return st.tuples(*parts).map(lambda ds: {k: v for d in ds for k, v in d.items()})


RECORDS = merged(
    maybe("key", st.none() | TEXT),
    maybe("value", VALUES, p_wrong=False),
    maybe("headers", st.none() | st.dictionaries(TEXT, TEXT, max_size=3) | st.dictionaries(TEXT, INTS, max_size=2)),
    maybe("timestamp_ms", INTS),
    st.sampled_from([{}, {}, {}, {"extra": 1}]),
)
BATCHES = merged(
    maybe("topic", st.sampled_from(["t", "orders", "x" * 249, "x" * 250]) | TEXT),
    maybe("partition", INTS),
    maybe("base_sequence", st.none() | INTS),
    maybe("expected_offset", st.none() | INTS),
    maybe("records", st.lists(RECORDS, max_size=3)),
)
BODIES = merged(
    maybe("batches", st.lists(BATCHES, max_size=3)),
    maybe("transactional_id", st.none() | TEXT | st.just("x" * 256)),
    maybe("producer_id", st.none() | INTS),
    maybe("producer_epoch", st.none() | INTS),
)


def encode(document: Any, ascii_only: bool, spaced: bool) -> bytes:
    return json.dumps(document, ensure_ascii=ascii_only, separators=(", ", ": ") if spaced else (",", ":")).encode()


def valid_body(n: int = 3) -> dict:
    return {"producer_id": 7, "producer_epoch": 0, "batches": [
        {"topic": "orders", "partition": 1, "base_sequence": 0,
         "records": [{"key": f"k{i}", "value": {"id": i, "price": 12.5, "tags": ["a", None]},
                      "headers": {"h": "v"}} for i in range(n)]}]}


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BODIES, st.booleans(), st.booleans())
@example(valid_body(), False, True)
def test_fast_path_takes_only_what_the_full_path_takes_and_builds_the_same_batches(
    document: dict, ascii_only: bool, spaced: bool
) -> None:
    body = encode(document, ascii_only, spaced)
    fast = decode_send(body, NOW)
    event("fast path" if fast is not None else "full path")
    if fast is not None:
        full = full_path(body)
        assert full is not None, f"fast path took a body the full path refuses: {body!r}"
        assert comparable(fast) == comparable(full)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fast_path_agrees_on_byte_level_mutations_of_a_valid_body(data: st.DataObject) -> None:
    body = bytearray(encode(valid_body(2), False, False))
    if data.draw(st.booleans()):
        # A repeated key: the copy of a field comes first and the original overrides it.
        field = data.draw(st.sampled_from([b'"value":', b'"key":', b'"records":', b'"batches":', b'"partition":']))
        at = body.index(field)
        body[at:at] = field + data.draw(st.sampled_from([b'"\xff"', b'"\xc0\x80"', b"1", b"[]", b"null", b'"x"'])) + b","
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at:at + 1] = data.draw(st.sampled_from(
            [b"", b"\\", b'"', b"0", b"9" * 20, b"e400", b"\\u0000", b"\\ud800", b"\xff", b"\xed\xa0\x80",
             b"[", b"]", b"{", b"}", b",", b"NaN", b"-", b".", b" "]))
    fast = decode_send(bytes(body), NOW)
    event("fast path" if fast is not None else "full path")
    if fast is not None:
        full = full_path(bytes(body))
        assert full is not None, f"fast path took a body the full path refuses: {bytes(body)!r}"
        assert comparable(fast) == comparable(full)


def test_an_ordinary_send_takes_the_fast_path() -> None:
    fast = decode_send(encode(valid_body(), False, False), NOW)
    assert fast is not None
    assert [r.key for r in fast.batches[0].records] == ["k0", "k1", "k2"]


def test_a_value_is_stored_as_the_client_sent_it() -> None:
    body = b'{"batches":[{"topic":"t","partition":0,"records":[{"value": { "a" : [1, 2.50, "\\u00e9"] } }]}]}'
    fast = decode_send(body, NOW)
    assert fast is not None
    assert fast.batches[0].records[0].value == '{ "a" : [1, 2.50, "\\u00e9"] }'
    assert fast.batches[0].records[0].timestamp_ms == NOW


@pytest.mark.parametrize(
    "value",
    [
        b"98765432109876543210",  # beyond 64 bits: the full path decides
        b"1e400",  # overflows a float
        b"1E+308",
        b"1e-400",  # a 3-digit exponent either way
        b"-9223372036854775809",  # below -2**63
        b"18446744073709551616",  # above 2**64-1
        b"[1, 123456789012345678901]",
        b"1234567890123456789.5",  # 19 digits before a float's point
        b"1234567890123456789e5",
        b'"\xed\xa0\x80"',  # a surrogate encoded in UTF-8 is not UTF-8
        b"[" * 300 + b"]" * 300,  # deeper than orjson writes
        b"[" * 1000 + b"]" * 1000,  # past msgspec's own recursion limit
        b"[" * 2000 + b"]" * 2000,
    ],
)
def test_values_the_full_path_must_judge_leave_the_fast_path(value: bytes) -> None:
    assert decode_send(body_with_value(value), NOW) is None


def test_a_send_keyed_by_uuids_takes_the_fast_path() -> None:
    # Nearly every UUID holds an 'e' and three digits or dashes, which read like a 3-digit
    # exponent: in a key, that is text, and must not send the body down the full path.
    keys = [str(uuid.UUID(int=i * 0x9E3779B97F4A7C15_F39CC0605CEDC835 % 2**128)) for i in range(1000)]
    body = orjson.dumps({"batches": [{"topic": "t", "partition": 0,
                                      "records": [{"key": k, "value": {"n": 1}} for k in keys]}]})
    fast = decode_send(body, NOW)
    assert fast is not None
    assert [r.key for r in fast.batches[0].records] == keys


@pytest.mark.parametrize(
    "body",
    [
        b'{"batches":[{"topic":"invoice-2024","partition":0,"records":[{}]}],"transactional_id":"stage-1000"}',
        b'{"batches":[{"topic":"t","partition":0,"records":[{"key":"12345678901234567890123"}]}]}',
        b'{"batches":[{"topic":"t","partition":0,"records":[{"headers":{"e100":"1e999"}}]}]}',
        b'{"batches":[{"topic":"t","partition":0,"records":[{"value":["1e400","12345678901234567890"]}]}]}',
        # Escaped quotes and backslashes inside strings do not end them early.
        b'{"batches":[{"topic":"t","partition":0,"records":[{"value":"\\\\"},{"value":"\\\\\\"e123"}]}]}',
        b'{"batches":[{"topic":"t","partition":0,"records":[{"value":"\\"1e400\\""},{"key":"\\\\\\\\e100"}]}]}',
    ],
)
def test_text_that_looks_like_a_long_number_stays_on_the_fast_path(body: bytes) -> None:
    assert_both_paths_take_it_alike(body)


@pytest.mark.parametrize(
    "value",
    [
        # A sign is not a digit: "e-05" is a 2-digit exponent, which cannot overflow. As
        # Python's json writes 0.00001, it is the usual spelling of small floats.
        b"1e-05", b"2.5E-10", b"-1.5e+99", b"[1e-7, -0.5e+12, 6.02E23]", b"-922337203685477580",
        # 19 and 20 digits that the full path takes: a timestamp in nanoseconds, the bounds.
        b"1732450000123456789", b'{"ts": 1732450000123456789, "n": -1732450000123456789}',
        b'{"a": [{"b": [[{"ts": 1732450000123456789}]]}]}',  # nested, well within 64 levels
        b"9223372036854775807", b"-9223372036854775808", b"12345678901234567890", b"18446744073709551615",
        # A long fraction cannot overflow: orjson writes 3.0000000000000004e-05 so.
        b"0.000030000000000000004", b"[-1.1234567890123456789, 0.5]",
    ],
)
def test_numbers_the_full_path_takes_stay_on_the_fast_path(value: bytes) -> None:
    assert_both_paths_take_it_alike(body_with_value(value))


@pytest.mark.parametrize(
    "body",
    [
        b'{"batches":[{"topic":"t","partition":0,"records":[{"value":1e400,"value":1}]}]}',
        b'{"batches":[{"topic":"t","partition":0,"records":[{"value":123456789012345678901,"value":1}]}]}',
        # A number after a string that ends in an escaped backslash is outside it.
        b'{"batches":[{"topic":"t","partition":0,"records":[{"key":"e\\\\","value":1e999}]}]}',
        b'{"batches":[{"topic":"t","partition":0,"records":[{"value":["\\"", 1E+400]}]}]}',
    ],
)
def test_a_long_number_outside_strings_leaves_the_fast_path(body: bytes) -> None:
    assert decode_send(body, NOW) is None


@pytest.mark.parametrize("depth", [100, 900, 990])
def test_a_deep_value_under_a_repeated_key_leaves_the_fast_path_where_the_json_module_parses(
    depth: int,
) -> None:
    # A 19-digit run anywhere makes the full path parse with the json module, whose nesting
    # limit depends on the stack in use; msgspec skipped the replaced value (found in review).
    body = (b'{"batches":[{"topic":"t","partition":0,"records":[{"key":"1234567890123456789","value":'
            + b"[" * depth + b"]" * depth + b',"value":1}]}]}')
    assert decode_send(body, NOW) is None


@pytest.mark.parametrize(
    "fields",
    [
        {"batches": [{"topic": "a/b", "partition": 0, "records": [{}]}]},
        {"batches": [{"topic": "t", "partition": 0, "records": [{"key": "k\x00"}]}]},
        {"batches": [{"topic": "t", "partition": 0, "records": [{"headers": {"h": "\x00"}}]}]},
        {"batches": [{"topic": "t", "partition": 0, "records": [{"headers": {"h\x00": "v"}}]}]},
        {"batches": [{"topic": "t", "partition": True, "records": [{}]}]},
        {"batches": [{"topic": "t", "partition": 0, "records": []}]},
        {"batches": [{"topic": "t", "partition": 0, "records": [{}]}], "transactional_id": "a/b"},
        {"batches": [{"topic": "t", "partition": 0, "records": [{}]}], "transactional_id": "a\x7f"},
        {"batches": [{"topic": "t", "partition": 0, "records": [{}]}], "producer_epoch": 32768},
    ],
)
def test_fields_the_schema_refuses_leave_the_fast_path(fields: dict) -> None:
    body = orjson.dumps(fields)
    assert full_path(body) is None
    assert decode_send(body, NOW) is None


@pytest.mark.parametrize(
    "body",
    [
        # Not UTF-8 where a repeated key hides it from the per-value check (found in review).
        b'{"batches":[{"topic":"t","partition":0,"records":[{"value":"\xff","value":1}]}]}',
        b'{"batches":[{"topic":"t","partition":0,"records":[{"value":"\xc0\x80","value":1}]}]}',
        (b'{"batches":[{"topic":"t","partition":0,"records":[{"value":"\xff"}]}],'
        b'"batches":[{"topic":"t","partition":0,"records":[{"value":2}]}]}'),
    ],
)
def test_a_body_that_is_not_utf8_leaves_the_fast_path(body: bytes) -> None:
    assert full_path(body) is None
    assert decode_send(body, NOW) is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"batches":[{"topic":"t","partition":0,"records":[{"value":1,"value":[2]}]}]}',
        (b'{"batches":[{"topic":"t","partition":0,"records":[{"key":"a","key":null}]}],'
        b'"batches":[{"topic":"u","partition":1,"records":[{}]}]}'),
    ],
)
def test_a_repeated_field_counts_by_its_last_occurrence_on_both_paths(body: bytes) -> None:
    assert_both_paths_take_it_alike(body)
