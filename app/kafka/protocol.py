"""Kafka's wire protocol through kio: a request frame's header and body parsed, a response
encoded with its header, and the answer Kafka gives to a version it does not serve (the
versions served are app.kafka.api_keys'). No message is hand-written: every type comes from
kio, generated from Kafka's own JSON message schemas. A request is read field by field with
kio's own readers, walking kio's schema of its type (parse), so that, as Kafka's reader, it
refuses a list null where its version allows none, skips a tagged field it does not know, and
stops at OUTBOX_KAFKA_MAX_REQUEST_ENTRIES before making the entries past it."""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import io
import itertools
import struct
import types
import typing
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from kio.index import UnknownAPIKey, UnknownEntity, load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveField, classify_field, get_field_tag
from kio.serial._parse import get_field_reader
from kio.serial.errors import BufferUnderflow, NegativeByteLength, UnexpectedNull
from kio.serial.readers import (Reader, read_compact_array_length, read_legacy_array_length,
                                read_unsigned_varint)
from kio.static.constants import EntityType

from app.domain.request_shape import duplicated
from app.domain.types import IsolationLevel
from app.kafka.api_keys import SERVED


# The features ApiVersions answers, as a Kafka 4 broker does: `transaction.version` supported
# from 0 to 2 and finalized at 2 (KIP-584's feature flags; a feature's finalized level is its
# min and max level alike). The features never change here, so their epoch is fixed; a client
# takes them only from an epoch of 0 or more.
TRANSACTION_VERSION_FEATURE = "transaction.version"
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {TRANSACTION_VERSION_FEATURE: (0, 2)}
FINALIZED_FEATURES: dict[str, int] = {TRANSACTION_VERSION_FEATURE: 2}
FINALIZED_FEATURES_EPOCH = 0
# ApiVersions before 4 cannot carry a supported feature whose minimum is 0 (some clients fail
# to read it, KAFKA-17011): Kafka leaves such features out of those answers, and so does this.
_ZERO_MIN_FEATURES_SINCE = 4

_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id: every header starts so

# Every answer's throttle_time: this listener never tells a client to hold back before its
# next request.
NO_WAIT = datetime.timedelta(0)
# A SASL session's lifetime, in every SaslAuthenticate answer: zero tells the client its
# session never expires, so it never authenticates again on the same connection (which this
# listener does not serve: Apis.sasl_again).
NO_REAUTHENTICATION = datetime.timedelta(0)


class Unparseable(Exception):
    """The frame is not a request kio can read: Kafka closes such a connection."""


class TooManyEntries(Exception):
    """The request's lists hold more entries than OUTBOX_KAFKA_MAX_REQUEST_ENTRIES: the
    connection is closed, as for a frame over OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES."""


class CloseConnection(Exception):
    """A request whose outcome Kafka tells by closing the connection: a Produce with acks=0
    that failed (no answer is sent, so a closed connection is how the client learns of it)."""


class ClientGone(Exception):
    """The client of a request that waits (a JoinGroup at the barrier) has gone: the wait
    ends, nothing is answered, and the connection is closed (`client_gone`)."""


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request entity; None when the version is not served


_CLIENT_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("kafka_client_id", default=None)


def client_id() -> str | None:
    """The client id in the header of the request being handled (set by the listener around
    its handler; asyncio.to_thread carries it into the handler's worker thread)."""
    return _CLIENT_ID.get()


def bind_client_id(value: str | None) -> contextvars.Token[str | None]:
    return _CLIENT_ID.set(value)


def unbind_client_id(token: contextvars.Token[str | None]) -> None:
    _CLIENT_ID.reset(token)


_CLIENT_HOST: contextvars.ContextVar[str | None] = contextvars.ContextVar("kafka_client_host", default=None)


def client_host() -> str | None:
    """The address of the client whose request is being handled, as the listener saw it (its
    IP address; None if not known), set by the listener around its handler as client_id is."""
    return _CLIENT_HOST.get()


def bind_client_host(value: str | None) -> contextvars.Token[str | None]:
    return _CLIENT_HOST.set(value)


def unbind_client_host(token: contextvars.Token[str | None]) -> None:
    _CLIENT_HOST.reset(token)


_UNSAID: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("kafka_unsaid", default=None)


def bind_unsaid() -> tuple[contextvars.Token[list[str] | None], list[str]]:
    """A list, bound for the request being handled, that build fills with the first error
    message its answer's version has no field for (a Produce before version 8: kcat's). The
    listener logs it as it logs a message the answer carries: Kafka's clients show the code
    only, and without it the reason for a refusal was nowhere."""
    unsaid: list[str] = []
    return _UNSAID.set(unsaid), unsaid


def unbind_unsaid(token: contextvars.Token[list[str] | None]) -> None:
    _UNSAID.reset(token)


def _never_gone() -> bool:
    return False


_CLIENT_GONE: contextvars.ContextVar[typing.Callable[[], bool]] = contextvars.ContextVar(
    "kafka_client_gone", default=_never_gone)


def client_gone() -> bool:
    """Whether the client of the request being handled has gone (the listener binds how its
    connection tells, for the connection's lifetime): a request that waits on other clients
    asks it before each ask of the service, so that a client that left stops costing them."""
    return _CLIENT_GONE.get()()


def bind_client_gone(check: typing.Callable[[], bool]) -> contextvars.Token[typing.Callable[[], bool]]:
    return _CLIENT_GONE.set(check)


def unbind_client_gone(token: contextvars.Token[typing.Callable[[], bool]]) -> None:
    _CLIENT_GONE.reset(token)


def prefix(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id); Unparseable if the frame is shorter."""
    if len(frame) < _PREFIX.size:
        raise Unparseable(f"a frame of {len(frame)} bytes has no request header")
    return _PREFIX.unpack_from(frame)


@cache
def api_name(api_key: int) -> str:
    """Kafka's name of a served API (Produce, Fetch, ...): its request type's, from kio."""
    low = SERVED[api_key][0]
    cls = request_class(api_key, low)
    return cls.__name__.removesuffix("Request") if cls is not None else str(api_key)


def isolation_level(body: Any) -> IsolationLevel | None:
    """The isolation level a Fetch or ListOffsets asks for (read_uncommitted before the version
    that has the field); None for a level Kafka's protocol does not define. The caller refuses
    every partition of such a request with INVALID_REQUEST rather than read it as
    read_uncommitted (Kafka answers UNKNOWN_SERVER_ERROR there; the clearer code is chosen)."""
    return {0: IsolationLevel.READ_UNCOMMITTED, 1: IsolationLevel.READ_COMMITTED}.get(
        getattr(body, "isolation_level", 0))


def error_codes(response: Any) -> dict[ErrorCode, int]:
    """Every error code other than NONE in an answer entity, with how many times it is there
    (per partition, topic or group answered with it): what the door's metrics and access log
    say of an answer. Walks only the fields that are error codes or hold entities (_walked);
    record bytes are not entered."""
    found: dict[ErrorCode, int] = {}
    for entity in _entities(response):
        for name in _walked(type(entity))[0]:
            code = getattr(entity, name)
            if code is not ErrorCode.none:
                found[code] = found.get(code, 0) + 1
    return found


def first_error_message(response: Any) -> str | None:
    """An error message the answer entity carries (a field `error_message` set beside an error
    code other than NONE; the first that error_codes' walk finds), None if it has none."""
    for entity in _entities(response):
        said = getattr(entity, "error_message", None)
        if said and any(getattr(entity, name) is not ErrorCode.none for name in _walked(type(entity))[0]):
            return str(said)
    return None


_Entry = TypeVar("_Entry")


def partitions_once(named: Iterable[tuple[str, int, _Entry]], *,
                    each_topic_once: bool = False) -> list[tuple[str, list[_Entry]]]:
    """A request's (topic, partition, entry) triples as Kafka's broker takes them, into a map
    keyed by partition (a Fetch's fetchData, a Produce's and a DeleteRecords' partitions, the
    group coordinator's offsets): each partition once, where it was first named, with the entry
    it was last named with. Grouped as Kafka's answers group them: a Fetch's in runs of one
    topic (FetchResponse's, a topic named again after another answered again); with
    `each_topic_once`, a Produce's and a DeleteRecords' (ProduceResponse and
    handleDeleteRecordsRequest group their partitions by topic), each topic once, where it was
    first named, with all its partitions, and done in that order. Each partition is a database
    read or write here: named 2,000 times, it is still done once."""
    latest: dict[tuple[str, int], _Entry] = {}
    for topic, partition, entry in named:
        latest[(topic, partition)] = entry
    if each_topic_once:
        topics: dict[str, list[_Entry]] = {}
        for (topic, _), entry in latest.items():
            topics.setdefault(topic, []).append(entry)
        return list(topics.items())
    return [(topic, [e for _, e in run]) for topic, run in itertools.groupby(latest.items(), key=lambda kv: kv[0][0])]


def answered_once(entries: Iterable[_Entry], key: Callable[[_Entry], Hashable | None]) -> list[tuple[_Entry, bool]]:
    """A request's entries, each with whether its key (a topic's name or id) is named more than
    once (request_shape.duplicated): such a key's entries answered by one, where it was first
    named, as Kafka's controller answers each duplicated topic once (not once per copy); the
    other entries each on their own, in the request's order. A key of None is never a duplicate
    (Kafka answers each entry naming neither a name nor an id)."""
    keyed = [(entry, key(entry)) for entry in entries]
    twice = set(duplicated(k for _, k in keyed if k is not None))
    answered: set[Hashable] = set()
    out = []
    for entry, k in keyed:
        if k in twice:
            if k in answered:
                continue
            answered.add(k)
        out.append((entry, k in twice))
    return out


def _entities(root: Any) -> Iterator[Any]:
    """`root` and every entity within it, through its fields that hold entities (_walked)."""
    stack = [root]
    while stack:
        entity = stack.pop()
        if entity is None:
            continue
        yield entity
        _, entities, tuples = _walked(type(entity))
        for name in entities:
            stack.append(getattr(entity, name))
        for name in tuples:
            stack.extend(getattr(entity, name) or ())


@cache
def _walked(cls: type) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """An entity type's fields that error_codes reads: (error codes, entities, tuples of
    entities), from its type hints, once per type."""
    codes, entities, tuples = [], [], []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        # A nullable field (`X | None`, an OffsetFetch's `topics` up to version 7) is walked as
        # its X, or its entities would escape the walk.
        present = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) is not tuple and len(present) == 1:
            hint = present[0]
        args = typing.get_args(hint)
        if hint is ErrorCode:
            codes.append(f.name)
        elif typing.get_origin(hint) is tuple and args and dataclasses.is_dataclass(args[0]):
            tuples.append(f.name)
        elif dataclasses.is_dataclass(hint):
            entities.append(f.name)
    return tuple(codes), tuple(entities), tuple(tuples)


def supported_features(api_versions_version: int) -> dict[str, tuple[int, int]]:
    """The supported features an ApiVersions answer of that version carries."""
    return {name: (lo, hi) for name, (lo, hi) in SUPPORTED_FEATURES.items()
            if lo > 0 or api_versions_version >= _ZERO_MIN_FEATURES_SINCE}


@cache
def _module(api_key: int, api_version: int, entity_type: EntityType) -> types.ModuleType | None:
    try:
        return load_payload_module(api_key, api_version, entity_type)  # type: ignore[arg-type]
    except (UnknownAPIKey, UnknownEntity):
        return None


@cache
def request_class(api_key: int, api_version: int) -> type | None:
    """The request type of that API and version (None if kio has none): once per version, as
    every frame's parse asks for it and finding it scans its module's names."""
    module = _module(api_key, api_version, EntityType.request)
    return None if module is None else module.__dict__.get(_entity_name(module, EntityType.request))


def response_module(api_key: int, api_version: int) -> types.ModuleType | None:
    return _module(api_key, api_version, EntityType.response)


def response_class(api_key: int, api_version: int) -> type | None:
    module = response_module(api_key, api_version)
    return None if module is None else module.__dict__.get(_entity_name(module, EntityType.response))


def _entity_name(module: types.ModuleType, entity_type: EntityType) -> str:
    for name, value in vars(module).items():
        if isinstance(value, type) and getattr(value, "__type__", None) is entity_type:
            return name
    return ""


def parse(frame: bytes, max_entries: int) -> Request:
    """The served request in `frame`; Unparseable if it cannot be read as its version's
    request (kio's schema: a list null where its version does not allow one is as unreadable as
    such a string); TooManyEntries as soon as its lists hold more than `max_entries` together
    (OUTBOX_KAFKA_MAX_REQUEST_ENTRIES), counted as each list's length is read, before any of
    that list is built."""
    api_key, api_version, correlation_id = prefix(frame)
    cls = request_class(api_key, api_version)
    if cls is None:
        raise Unparseable(f"no request type for API key {api_key} version {api_version}")
    view = memoryview(frame)
    budget = _Budget(api_key, max_entries)
    try:
        header, at = _read(cls.__header_schema__, view, 0, budget)  # type: ignore[attr-defined]
        body, _ = _read(cls, view, at, budget)
    except TooManyEntries:
        raise
    except Exception as e:  # noqa: BLE001 - kio raises several kinds for bytes it cannot read
        raise Unparseable(f"{type(e).__name__}: {e}") from None
    return Request(api_key, api_version, correlation_id, getattr(header, "client_id", None), body)


class _Budget:
    """What is left of a request's OUTBOX_KAFKA_MAX_REQUEST_ENTRIES while it is read."""

    __slots__ = ("api_key", "limit", "left")

    def __init__(self, api_key: int, limit: int) -> None:
        self.api_key, self.limit, self.left = api_key, limit, limit

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise TooManyEntries(f"API key {self.api_key} with more than {self.limit} entries in its lists "
                                 f"and tagged fields")


@dataclass(frozen=True, slots=True)
class _Field:
    """How one field of an entity is read. `read`: kio's reader of the whole field. `entity`:
    the type of the entity it is or whose list it is, read with _read unless `whole`. A list's
    length is read first (`length`), refused if null where `nullable` is False, and counted;
    then kio reads the list `whole`, or its entities are read one by one."""
    name: str
    read: Reader[Any]
    length: Reader[int | None] | None
    nullable: bool
    entity: type | None
    whole: bool


@dataclass(frozen=True, slots=True)
class _Plan:
    fields: tuple[_Field, ...]
    tagged: dict[int, _Field]
    flexible: bool


def _read(cls: type, view: memoryview, at: int, budget: _Budget) -> tuple[Any, int]:
    """The entity of `cls` at `at`, and the offset after it."""
    plan = _plan(cls)
    values: dict[str, Any] = {}
    for f in plan.fields:
        values[f.name], at = _read_field(cls, f, view, at, budget)
    if plan.flexible:
        # Kafka skips a tagged field it does not know (KIP-482: a newer client may send one):
        # only the known ones are read, each from where its size says it starts.
        count, used = read_unsigned_varint(view, at)
        at += used
        # Each takes two bytes at least (its tag and its size), and counts as an entry: a frame
        # of millions of empty tagged fields held a thread for seconds a megabyte, skipping them
        # one by one, before the entries' bound saw anything.
        if 2 * count > len(view) - at:
            raise BufferUnderflow(f"{cls.__name__}'s {count} tagged fields in {len(view) - at} bytes")
        budget.take(count)
        for _ in range(count):
            tag, used = read_unsigned_varint(view, at)
            at += used
            size, used = read_unsigned_varint(view, at)
            at += used
            if at + size > len(view):
                raise BufferUnderflow(f"{cls.__name__}'s tagged field {tag} of {size} bytes past the frame's end")
            known = plan.tagged.get(tag)
            if known is not None:
                values[known.name], _ = _read_field(cls, known, view, at, budget)
            at += size
    return cls(**values), at


def _read_field(cls: type, f: _Field, view: memoryview, at: int, budget: _Budget) -> tuple[Any, int]:
    if f.length is None:
        if f.entity is not None and not f.whole:
            return _read(f.entity, view, at, budget)
        value, used = f.read(view, at)
        return value, at + used
    n, used = f.length(view, at)
    if n is not None and n < -1:
        raise NegativeByteLength(f"{cls.__name__}.{f.name} of {n} entries")
    if n is None or n == -1:
        # kio reads a null list as None wherever it is, which a handler iterating it cannot take.
        if not f.nullable:
            raise UnexpectedNull(f"{cls.__name__}.{f.name} is null, which its version does not allow")
        return None, at + used
    at_least = len(view) - at - used
    if n > at_least:
        # Every entry takes a byte at least: as Kafka's reader, a length past the frame's end
        # is refused before anything is made of it.
        raise BufferUnderflow(f"{cls.__name__}.{f.name} of {n} entries in {at_least} bytes")
    budget.take(n)
    if f.whole:
        try:
            value, whole = f.read(view, at)
            return value, at + whole
        except KeyError:
            # kio's reader fails on a tagged field it does not know (a flexible version's
            # entity): such a list is read entity by entity, which skips it.
            if f.entity is None:
                raise
    at += used
    items = []
    for _ in range(n):
        item, at = _read(f.entity, view, at, budget)  # type: ignore[arg-type]
        items.append(item)
    return tuple(items), at


@cache
def _plan(cls: type) -> _Plan:
    """How `cls` is read, from kio's schema of it (its fields' types and metadata), once per
    type. kio reads a list whole, once its length is counted, where nothing within it is to be
    counted or refused: a list of primitives, or of entities of primitives only."""
    header = getattr(cls, "__type__", None) is EntityType.header
    fields, tagged = [], {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        tag = get_field_tag(f)
        # A nullable list is `tuple[X, ...] | None`; `tuple[X | None, ...]` is not one.
        nullable = typing.get_origin(f.type) in (types.UnionType, typing.Union)
        entity = kind.type_ if isinstance(kind, (EntityField, EntityTupleField)) else None
        if entity is None:
            whole = True
        elif kind.is_array:
            whole = all(isinstance(classify_field(g), PrimitiveField) for g in dataclasses.fields(entity))
        else:
            whole = nullable  # left to kio, the marker byte before it and all
        planned = _Field(name=f.name, read=get_field_reader(cls, f, header, tag is not None),
                         length=(read_compact_array_length if cls.__flexible__  # type: ignore[attr-defined]
                                 else read_legacy_array_length) if kind.is_array else None,
                         nullable=nullable, entity=entity, whole=whole)
        if tag is None:
            fields.append(planned)
        else:
            tagged[tag] = planned
    return _Plan(tuple(fields), tagged, bool(cls.__flexible__))  # type: ignore[attr-defined]


def encode(correlation_id: int, response: Any) -> bytes:
    """The response frame: its size, its header (the version its schema names), its body."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_class = type(response).__header_schema__
    entity_writer(header_class)(buffer, header_class(correlation_id=correlation_id))
    entity_writer(type(response))(buffer, response)
    data = bytearray(buffer.getbuffer())
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def build(cls: type, **values: Any) -> Any:
    """An entity of `cls` from the values its version has fields for: one handler builds the
    answer of every version, each taking the fields it knows."""
    names = {f.name for f in dataclasses.fields(cls)}
    message = values.get("error_message")
    if message is not None and "error_message" not in names:
        unsaid = _UNSAID.get()
        if unsaid is not None and not unsaid:
            unsaid.append(str(message))
    return cls(**{k: v for k, v in values.items() if k in names})
