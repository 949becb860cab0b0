"""Request bodies: one decoder for every JSON body, and one answer for each kind of bad body.

Every operation that takes a body declares it as a dependency,
`body: Annotated[TopicCreate, json_body(TopicCreate)]`, where the type is a msgspec Struct
(app/api/schemas). That Struct is the one definition of a valid body: msgspec checks it while
it parses (no Python objects built twice), and the OpenAPI document's request bodies are
generated from it (app.api.app._openapi), so what Swagger UI shows is what is checked.

What a caller gets for each kind of bad body, on every endpoint alike:

| kind | status | error_code |
| --- | --- | --- |
| no body | 400 | INVALID_REQUEST |
| content-type other than JSON (missing, form data, text/plain, a charset other than UTF-8) | 415 | UNSUPPORTED_MEDIA_TYPE |
| not UTF-8, not JSON, a lone surrogate escape | 400 | INVALID_REQUEST, saying where (line, column) |
| nested too deep | 400 | INVALID_REQUEST |
| JSON, but not the operation's shape (type, range, unknown or missing field) | 422 | INVALID_REQUEST, `details.errors` naming the field |

A key that appears twice in one object is not refused: the last one wins, as in JavaScript,
Python and every decoder this service uses (a record's value is stored as sent, duplicates
and all).
"""

from __future__ import annotations

import codecs
import re
from typing import Any, Generic, TypeVar

import msgspec
import orjson
from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError

from app.domain.errors import InvalidRequest, UnsupportedMediaType
# Values are kept as raw JSON and checked to nest at most this deep (app.domain.records);
# msgspec refuses a body whose nesting reaches Python's recursion limit (about 1,000) first.
from app.domain.records import MAX_DEPTH

T = TypeVar("T")

# application/json, or a structured-syntax type such as application/vnd.api+json; with no
# parameters, or charset=utf-8 (JSON is UTF-8: RFC 8259 §8.1).
_JSON_MEDIA_TYPE = re.compile(r"application/(?:json|[^;/\s]+\+json)", re.IGNORECASE)
_UTF8 = re.compile(r"charset\s*=\s*\"?utf-8\"?", re.IGNORECASE)
# msgspec's error path: $.batches[0].records[2].key, with [...] for a key of a mapping.
_PATH_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")


def is_json_content_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    media_type, _, params = content_type.partition(";")
    if not _JSON_MEDIA_TYPE.fullmatch(media_type.strip()):
        return False
    params = params.strip()
    return not params or _UTF8.fullmatch(params) is not None


# A body this large is decoded in a worker thread, not on the event loop, where it would hold
# up every other request of the process (a 20,000-record Send takes some 20 ms to decode).
OFFLOAD_BYTES = 1 << 20

_ANY_JSON = msgspec.json.Decoder()  # no schema: the syntax alone


class JsonBody(Generic[T]):
    """A dependency that decodes the request body into `type_` (a msgspec Struct)."""

    def __init__(self, type_: type[T]) -> None:
        self.type = type_
        self._decoder = msgspec.json.Decoder(type_)

    async def __call__(self, request: Request) -> T:
        content_type = request.headers.get("content-type")
        body = await request.body()
        if not body.strip():
            raise InvalidRequest(
                "the request body is empty: this operation takes a JSON object "
                "(content-type: application/json)"
            )
        if not is_json_content_type(content_type):
            raise UnsupportedMediaType(_not_json(content_type))
        if len(body) > OFFLOAD_BYTES:
            return await run_in_threadpool(self.decode_body, request, body)
        return self.decode_body(request, body)

    def decode_body(self, request: Request, body: bytes) -> T:
        return decode(self._decoder, body)


def _not_json(content_type: str | None) -> str:
    """The 415's message. curl's `-d` without `-H` sends the form type: the likeliest way to get
    here from the README's commands, so that one is told the flag too."""
    said = "the body must be JSON, sent with content-type: application/json"
    if not content_type:
        return f"{said} (the request has no content-type; with curl add -H 'content-type: application/json')"
    if content_type.split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
        return (f"{said} (got {content_type!r}, curl's default for -d; with curl add "
                f"-H 'content-type: application/json')")
    return f"{said} (got {content_type!r})"


def json_body(type_: type) -> Any:
    """`body: Annotated[TopicCreate, json_body(TopicCreate)]`: the operation's body."""
    return Depends(JsonBody(type_))


class NoFields(msgspec.Struct, forbid_unknown_fields=True):
    """The body of an operation that takes none: nothing, or `{}`."""


_NO_FIELDS = JsonBody(NoFields)


async def refuse_fields(request: Request) -> None:
    """A dependency of an operation that takes no body (POST /v1/principals/{principal}/api-keys):
    a body that names a field is refused as every body's unknown field is (422), rather than
    answered 201 as though it were read. No body, or `{}`, is taken."""
    if (await request.body()).strip():
        await _NO_FIELDS(request)


def refuse_body(message: str) -> Any:
    """A dependency of an operation that reads its parameters from the query string only (DELETE
    /v1/acls): any body is refused (400 INVALID_REQUEST, `message` saying where they go), as a
    filter sent in it would be ignored and the answer blame the missing parameters."""
    async def no_body(request: Request) -> None:
        if (await request.body()).strip():
            raise InvalidRequest(message)

    return Depends(no_body)


def decode(decoder: msgspec.json.Decoder, body: bytes) -> Any:
    """`body` decoded by `decoder`, or the refusal the table above gives it."""
    try:
        if not body.isascii():
            # msgspec does not look inside the values it keeps as raw JSON text; those must be
            # Unicode too, or a reader of the log could not decode what it fetched.
            check_utf8(body)
        return decoder.decode(body)
    except msgspec.ValidationError as e:
        # msgspec stops at the first problem, which may come before a syntax error further
        # on: a body that is not JSON at all is that, whatever its first field holds.
        _refuse_unless_json(body)
        raise schema_mismatch(str(e), of=decoder.type) from None
    except msgspec.DecodeError as e:
        _refuse_unless_json(body)
        raise InvalidRequest(f"the body is not valid JSON: {e}") from None  # not met: both parsers refuse
    except RecursionError:
        raise too_deep() from None


# The UTF-8 check decodes this much of the body at a time: a whole body decoded at once is a
# string as large as the body, four times larger with one character outside the Basic
# Multilingual Plane (some 128 MB for a 32 MB body), only to be thrown away.
UTF8_CHUNK_BYTES = 1 << 16


def check_utf8(body: bytes) -> None:
    """Refuse a body that is not UTF-8, saying where, as decoding it whole would (the same byte
    and reason), but a chunk at a time. A lone surrogate's encoding (ED A0 80) is not UTF-8
    either: Python's codec refuses it, as RFC 3629 does."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(body)
    for start in range(0, len(body), UTF8_CHUNK_BYTES):
        # The bytes of a character cut at the previous chunk's end, held by the decoder.
        held = len(decoder.getstate()[0])
        try:
            decoder.decode(view[start:start + UTF8_CHUNK_BYTES], final=start + UTF8_CHUNK_BYTES >= len(body))
        except UnicodeDecodeError as e:
            at = start - held + e.start
            raise InvalidRequest(f"the body is not UTF-8: {where(body, at)} ({e.reason})") from None


def _refuse_unless_json(body: bytes) -> None:
    """Refuse a body that is not JSON (syntax, depth), saying where; a body that is JSON
    returns."""
    try:
        _ANY_JSON.decode(body)
    except msgspec.ValidationError:
        return  # JSON, with a number no Python type holds (1e400): the schema says what is wrong
    except msgspec.DecodeError as e:
        raise InvalidRequest(f"the body is not valid JSON: {_where_not_json(body, e)}") from None
    except RecursionError:
        raise too_deep() from None


def too_deep() -> InvalidRequest:
    return InvalidRequest(f"the body nests deeper than {MAX_DEPTH} levels of arrays and objects")


def _where_not_json(body: bytes, error: msgspec.DecodeError) -> str:
    """What is wrong with a body that is not JSON, and where. orjson says it better than
    msgspec ("unexpected end of data: line 1 column 17" against "Input data was truncated")."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as e:
        return str(e)
    return str(error)


def where(body: bytes, index: int) -> str:
    line = body.count(b"\n", 0, index) + 1
    column = index - (body.rfind(b"\n", 0, index) + 1) + 1
    return f"line {line} column {column} (byte {index})"


def schema_mismatch(message: str, prefix: tuple[str | int, ...] = ("body",), *,
                    of: Any = None) -> RequestValidationError:
    """msgspec's "Expected `int`, got `str` - at `$.batches[0].partition`" as the 422 that the
    query and path checks answer too (app.api.errors), located at body.batches.0.partition.
    With the body's type (`of`), an unknown field is answered with the fields there are."""
    problem, _, path = message.partition(" - at `")
    loc: list[str | int] = list(prefix)
    for name, index in (m.groups() for m in _PATH_PART.finditer(path.rstrip("`").removeprefix("$"))):
        if name is not None:
            loc.append(name)
        elif index is not None:
            loc.append(int(index))
        else:
            loc.append("[key]")
    if of is not None:
        problem = with_known_fields(problem, of, loc[len(prefix):])
    return RequestValidationError([{"loc": tuple(loc), "msg": problem, "type": "body"}])


def with_known_fields(problem: str, type_: Any, path: list[str | int] | None = None) -> str:
    """msgspec's "Object contains unknown field `segment_ms`", with the fields the object at
    `path` in `type_` (a msgspec Struct) does take, so that the caller need not look them up;
    any other problem as it is."""
    if not problem.startswith("Object contains unknown field"):
        return problem
    info, path = msgspec.inspect.type_info(type_), path or []
    fields = _fields_at(info, path)
    if not fields:
        return problem
    problem = f"{problem}; known fields: {', '.join(fields)}"
    # A field one level down given here (a topic's "value_format" beside "name" where it goes
    # in "config"): say where it goes.
    unknown = problem.split("`")[1] if problem.count("`") >= 2 else None
    homes = [f for f in fields if unknown is not None and unknown in _fields_at(info, [*path, f])]
    return f"{problem}; `{unknown}` goes in `{homes[0]}`" if len(homes) == 1 else problem


def _fields_at(info: msgspec.inspect.Type, path: list[str | int]) -> list[str]:
    """The field names of the Struct at `path` (names, list indexes, "[key]" for a mapping's
    values), [] where the path leads to no single Struct."""
    while True:
        if isinstance(info, msgspec.inspect.Metadata):
            info = info.type
        elif isinstance(info, msgspec.inspect.UnionType):
            # `X | None`, `X | UnsetType`: the one Struct of the union, if it has one.
            structs = [t for t in info.types if isinstance(t, msgspec.inspect.StructType)]
            if len(structs) != 1:
                return []
            info = structs[0]
        elif not path:
            return [f.encode_name for f in info.fields] if isinstance(info, msgspec.inspect.StructType) else []
        elif isinstance(info, msgspec.inspect.StructType) and isinstance(path[0], str):
            info = next((f.type for f in info.fields if f.encode_name == path[0]), None)
            if info is None:
                return []
            path = path[1:]
        elif isinstance(info, (msgspec.inspect.ListType, msgspec.inspect.TupleType,
                               msgspec.inspect.VarTupleType, msgspec.inspect.SetType,
                               msgspec.inspect.FrozenSetType)) and isinstance(path[0], int):
            info = info.item_type if hasattr(info, "item_type") else info.item_types[path[0]]
            path = path[1:]
        elif isinstance(info, msgspec.inspect.DictType) and path[0] == "[key]":
            info = info.value_type
            path = path[1:]
        else:
            return []
