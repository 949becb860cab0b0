"""The fast JSON parse (orjson) answers exactly as the strict json-module parse would.

strict_json.loads takes orjson's fast path only where the two agree; these properties check
that claim on generated documents and on byte-level mutations of them.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.api.strict_json import _strict_loads, loads

# Integers at and beyond the 64-bit limits, where orjson alone would turn them into floats.
EDGE_INTS = st.sampled_from(
    [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, -(10**30), 0]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | EDGE_INTS
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.characters())
)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


def outcome(parse: Any, body: bytes) -> tuple:
    """What a parse gives, comparable across parsers: the value with every number tagged by
    its type (1 and 1.0 compare equal in Python), or the fact that it refused."""
    try:
        return ("ok", tagged(parse(body)))
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return ("refused",)


def tagged(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value.hex() if math.isfinite(value) else repr(value))
    if isinstance(value, list):
        return [tagged(v) for v in value]
    return {k: tagged(v) for k, v in value.items()}


@settings(max_examples=400, deadline=None)
@given(doc=DOCUMENTS, ensure_ascii=st.booleans())
@example(doc=-(2**63) - 1, ensure_ascii=True)
@example(doc=2**64, ensure_ascii=True)
@example(doc="\ud800", ensure_ascii=True)
def test_fast_parse_equals_strict_parse_on_generated_documents(doc: Any, ensure_ascii: bool) -> None:
    try:
        body = json.dumps(doc, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")
    except UnicodeEncodeError:
        return
    assert outcome(loads, body) == outcome(_strict_loads, body)


@settings(max_examples=400, deadline=None)
@given(doc=DOCUMENTS, data=st.data())
def test_fast_parse_equals_strict_parse_on_mutated_bytes(doc: Any, data: st.DataObject) -> None:
    body = bytearray(json.dumps(doc).encode())
    for _ in range(data.draw(st.integers(1, 3))):
        if not body:
            break
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] = data.draw(st.sampled_from(b'0123456789-+.eE"\\[]{},: NaIfinity\x00\xff'))
    assert outcome(loads, bytes(body)) == outcome(_strict_loads, bytes(body))


@pytest.mark.parametrize(
    "body",
    [b"NaN", b"[Infinity]", b"[-Infinity]", b"[1e400]", b'{"a": 1,}', b"\"\xff\"", b'"\\ud800"'],
)
def test_what_the_strict_parse_refuses_or_keeps_is_unchanged(body: bytes) -> None:
    assert outcome(loads, body) == outcome(_strict_loads, body)


def test_a_long_run_of_digits_is_parsed_exactly() -> None:
    assert loads(b"[18446744073709551616, -9223372036854775809]") == [2**64, -(2**63) - 1]
