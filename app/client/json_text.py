"""A record's value given as its JSON text (JsonText), and the request bodies that carry such a
text as it is.

A value given as a Python object is encoded by the client (json.dumps, as httpx encodes a JSON
body), and the service stores the text it receives. A value that is JSON text already (read
from the service, from a file, from a Spark column) would change if it were parsed and encoded
again: a 30-digit integer becomes a float, "1.10" becomes 1.1, an escape its character, an
object's repeated key disappears. Given as JsonText it is spliced into the request body as it
is, and stored as a Send of the same text stores it.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import msgspec

# JSON's white space: what may stand around a value's text and is no part of it.
_JSON_WHITESPACE = " \t\n\r"

# A JSON body as httpx encodes one (httpx >= 0.28): compact, UTF-8, no NaN or Infinity.
_dumps = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class JsonText:
    """A record's value as its JSON text, which Producer.send sends as it is: the service
    stores that text without the white space around it, as it stores a Send's value.

    Checked here to be exactly one JSON value, by msgspec, the parser the service reads a
    Send's body with: spliced into the body, it can then neither end the value early nor add
    anything to the request (`1},{"value":2` is refused, as plain text is). The text itself is
    never changed. What else makes a valid record (finite numbers, a bounded depth) is the
    service's to check, as for any Send. ValueError for text that is not one JSON value."""

    __slots__ = ("text",)

    def __init__(self, text: str | bytes) -> None:
        try:
            msgspec.json.decode(text, type=msgspec.Raw)
            if isinstance(text, bytes):
                text = text.decode()
        except (msgspec.DecodeError, UnicodeError) as e:
            raise ValueError(f"not one JSON value: {e}") from None
        self.text: str = text.strip(_JSON_WHITESPACE)

    def __eq__(self, other: object) -> bool:
        return self.text == other.text if isinstance(other, JsonText) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"JsonText({self.text!r})"


def json_content(body: Any) -> bytes:
    """A request's JSON body as bytes: as httpx encodes it, with each JsonText in it spliced in
    as its text. A body without JsonText (every request but a Send of JsonText values) is one
    json.dumps; one with JsonText, which json.dumps refuses, is encoded container by container
    down to the values, each of which json.dumps encodes as it would inside the whole."""
    try:
        return _dumps(body).encode()
    except TypeError:  # a JsonText (or a value json.dumps refuses, which _spliced raises for again)
        return _spliced(body).encode()


def _spliced(value: Any) -> str:
    kind = type(value)
    if kind is JsonText:
        return value.text  # type: ignore[no-any-return]
    if kind is dict and all(type(k) is str for k in value):
        return "{" + ",".join(f"{_dumps(k)}:{_spliced(v)}" for k, v in value.items()) + "}"
    if kind is list or kind is tuple:
        return "[" + ",".join(map(_spliced, value)) + "]"
    return _dumps(value)
