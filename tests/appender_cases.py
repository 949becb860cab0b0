"""One table of cases for every appender: what a record or a batch of records is answered, and
exactly what is stored. tests/integration/test_appenders.py runs each case against each
appender (the HTTP Send, the in-database Python API, PostgreSQL's outbox.append, the Kafka
door's Produce), which must all give the case's verdict.

Each case appends to topic `t` (two partitions), whose partition 0 already holds one record
(offset 0, key "seed"), so the records a case appends there take offsets from 1. The topic is
a json topic unless the case's config says otherwise.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from app.domain.records import MAX_MESSAGE_ID_LENGTH, MAX_TIMESTAMP_MS

# The appenders, by name (tests/integration/test_appenders.py builds each).
SEND = "send"  # POST /v1/records
PYTHON = "python"  # app.in_database.append
SQL = "sql"  # SELECT outbox.append(...) on PostgreSQL
KAFKA = "kafka"  # a Produce request to the Kafka door
APPENDERS = (SEND, PYTHON, SQL, KAFKA)

MAX_MESSAGE_BYTES = 20  # the topic's max_message_bytes in the size cases
CLOCK_START_MS = 1_700_000_000_000  # the service's clock in the tests (tests/conftest.py, FakeClock)


@dataclass(frozen=True)
class Record:
    """A record as an application gives it. `value` and `headers` are Python values: the Python
    API is given them, the Send and outbox.append their JSON text (dumps). A Kafka producer
    sends bytes (kafka_bytes): the value's JSON text (None: a null value), the key's and each
    header value's UTF-8, and timestamp_ms None as Kafka's NO_TIMESTAMP (-1)."""

    value: Any = 1
    key: str | None = None
    headers: dict[str, Any] | None = None
    message_id: str | None = None
    timestamp_ms: int | None = 5

    def value_json(self) -> str:
        return dumps(self.value)

    def headers_json(self) -> str | None:
        return None if self.headers is None else dumps(self.headers)

    def kafka_headers(self) -> list[tuple[str, bytes]]:
        return [(name, kafka_bytes(text)) for name, text in (self.headers or {}).items()]


def kafka_bytes(text: str) -> bytes:
    """A text as a Kafka producer's bytes: its UTF-8, and a lone surrogate as the three bytes a
    surrogate would take, which are not UTF-8 (the bytes a careless encoder writes for it)."""
    return text.encode("utf-8", "surrogatepass")


class JsonText(str):
    """A value given as its JSON text exactly (dumps passes it through): a text no Python value
    dumps to, such as a number whose exponent the Python API would never write. Only the Send
    and outbox.append, which are given text, can express it."""


def dumps(value: Any) -> str:
    """JSON text as the Python API writes a value (app.in_database), but with a lone surrogate
    as its escape: the text a Send or outbox.append can be given (it is not UTF-8 otherwise)."""
    if isinstance(value, JsonText):
        return str(value)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False, allow_nan=False))


_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Stored:
    """A row of `records` as stored: every byte a reader gets back."""

    offset: int
    value: str | None  # a JSON topic's value; a bytes topic's is value_bytes
    key: str | None = None
    headers: str | None = None
    message_id: str | None = None
    partition: int = 0
    timestamp_ms: int = 5
    key_bytes: bytes | None = None
    value_bytes: bytes | None = None
    # Every appender here appends in no transaction: each record it writes, and its batch row
    # (tests/batch_rows.py holds the two together), is self-committed (docs/DESIGN-batches.md,
    # "Self-committed records").
    self_committed: bool = True
    # records.producer_id is the id of the case's idempotent producer (Case.idempotent), which
    # the view reads for a self-committed record; without one it is NULL.
    idempotent: bool = False


@dataclass(frozen=True)
class Case:
    name: str
    records: tuple[Record, ...]
    # The refusal's error code; None: accepted, with `appended` (per record) and `stored`.
    error: str | None = None
    stored: tuple[Stored, ...] = ()
    appended: tuple[bool, ...] | None = None  # None: every record
    partition: int = 0
    topic: str = "t"
    config: dict[str, Any] = field(default_factory=dict)  # the topic's config
    # Records the same appender appended and committed before the case's own.
    before: tuple[Record, ...] = ()
    # Who can express the case: a Send has no message ids nor Python values; outbox.append
    # takes one record per call and cannot be passed a text holding NUL or a lone surrogate,
    # nor a message id that is not text; a Kafka Produce has no message ids, and its headers
    # are a list of names with bytes.
    appenders: tuple[str, ...] = APPENDERS
    # The Kafka door's code where Kafka's broker answers the case's fault with another than
    # the one tests/integration/test_appenders.py maps `error` to (KAFKA_CODES).
    kafka_error: str | None = None
    # The records are an idempotent producer's first batch (sequence 0, in no transaction), its
    # id given it by the service: a Send and a Kafka Produce can express it.
    idempotent: bool = False
    # Appenders known to give another verdict: appender -> why (the case runs as xfail(strict)).
    known_wrong: dict[str, str] = field(default_factory=dict)

    def runs_on(self, appender: str) -> bool:
        if appender not in self.appenders:
            return False
        if appender in (SEND, KAFKA) and any(r.message_id is not None for r in self.records + self.before):
            return False
        if self.idempotent and appender not in (SEND, KAFKA):
            return False
        return True


BYTES_TOPIC = {"value_format": "bytes"}


def _long(n: int) -> str:
    """A JSON string value of n bytes in all (its quotes included)."""
    return "x" * (n - 2)


def _nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


CASES = [
    # Accepted: the bytes stored, the offsets taken.
    Case("a value is stored as its JSON text", (Record({"b": 1, "a": [1, 2.5]}),),
         stored=(Stored(1, '{"b": 1, "a": [1, 2.5]}'),)),
    Case("records take the next offsets in order", (Record("a"), Record("b", key="k"), Record("c")),
         stored=(Stored(1, '"a"'), Stored(2, '"b"', key="k"), Stored(3, '"c"'))),
    Case("each partition has its own offsets", (Record("p1"),), partition=1,
         stored=(Stored(0, '"p1"', partition=1),)),
    # An idempotent batch in no transaction is committed by its append, as a plain one is: its
    # records are self-committed, each carrying its producer's id (migration 0044).
    Case("an idempotent producer's records are self-committed with its id",
         (Record("a"), Record("b", key="k")), idempotent=True, appenders=(SEND, KAFKA),
         stored=(Stored(1, '"a"', idempotent=True), Stored(2, '"b"', key="k", idempotent=True))),
    Case("an idempotent producer's records in a bytes topic are self-committed with its id",
         (Record("v", key="k"),), idempotent=True, config={"value_format": "bytes"}, appenders=(KAFKA,),
         stored=(Stored(1, None, key_bytes=b"k", value_bytes=b'"v"', idempotent=True),)),
    Case("a null value is stored as null: a tombstone", (Record(None, key="k"),),
         stored=(Stored(1, "null", key="k"),)),
    Case("the record's timestamp is stored as given", (Record(1, timestamp_ms=1_700_000_000_123),),
         stored=(Stored(1, "1", timestamp_ms=1_700_000_000_123),)),
    Case("headers are stored as compact JSON in the order given", (Record(1, headers={"b": "1", "a": "é"}),),
         stored=(Stored(1, "1", headers='{"b":"1","a":"é"}'),)),
    Case("header texts keep their escapes", (Record(1, headers={"h": 'q"\\\n\x01\x7f/'}),),
         stored=(Stored(1, "1", headers='{"h":"q\\"\\\\\\n\\u0001\x7f/"}'),)),
    # Headers given as JSON null are no headers, as a value given as JSON null is a Send's null:
    # stored NULL (a Send's {"headers": null}, outbox.append's 'null'::json). The Python API's
    # None and a Kafka record's empty list are no headers already.
    Case("headers given as JSON null are no headers", (Record(1, headers=JsonText("null")),),  # type: ignore[arg-type]
         stored=(Stored(1, "1"),), appenders=(SEND, SQL)),
    # A Kafka record's headers are a list, which has no null: no headers and none are one.
    Case("empty headers are stored as {}", (Record(1, headers={}),), stored=(Stored(1, "1", headers="{}"),),
         appenders=(SEND, PYTHON, SQL)),
    # JSON's white space around a value is no part of it: a Send's body holds it between tokens.
    Case("a value is stored without the white space around it", (Record(JsonText(" \t\n1\r\n ")),),
         stored=(Stored(1, "1"),), appenders=(SEND, SQL, KAFKA)),
    Case("a NUL escaped in a value is stored", (Record("\x00"),), stored=(Stored(1, '"\\u0000"'),)),
    Case("the largest finite float is stored", (Record(1.7976931348623157e308),),
         stored=(Stored(1, "1.7976931348623157e+308"),)),
    Case("a value nesting 254 levels is stored", (Record(_nested(254)),),
         stored=(Stored(1, "[" * 254 + "]" * 254),)),
    Case("a compacted topic takes a record with a key", (Record(1, key="k"),), config={"cleanup_policy": "compact"},
         stored=(Stored(1, "1", key="k"),)),
    # Sizes: key, value and headers as stored, against max_message_bytes.
    Case("a record of exactly max_message_bytes is stored", (Record(_long(MAX_MESSAGE_BYTES)),),
         config={"max_message_bytes": MAX_MESSAGE_BYTES}, stored=(Stored(1, f'"{_long(MAX_MESSAGE_BYTES)}"'),)),
    Case("a record one byte over max_message_bytes is refused", (Record(_long(MAX_MESSAGE_BYTES + 1)),),
         config={"max_message_bytes": MAX_MESSAGE_BYTES}, error="MESSAGE_TOO_LARGE"),
    Case("white space around a value does not count against max_message_bytes",
         (Record(JsonText(f" \n{dumps(_long(MAX_MESSAGE_BYTES))}\n ")),), config={"max_message_bytes": MAX_MESSAGE_BYTES},
         stored=(Stored(1, f'"{_long(MAX_MESSAGE_BYTES)}"'),), appenders=(SEND, SQL, KAFKA)),
    Case("key bytes count against max_message_bytes", (Record(_long(MAX_MESSAGE_BYTES - 1), key="é"),),
         config={"max_message_bytes": MAX_MESSAGE_BYTES}, error="MESSAGE_TOO_LARGE"),
    Case("headers count as stored, compact, at the limit", (Record(1, headers={"h": "v" * 11}),),
         config={"max_message_bytes": MAX_MESSAGE_BYTES},
         stored=(Stored(1, "1", headers='{"h":"' + "v" * 11 + '"}'),)),
    Case("headers count as stored, compact, a byte over", (Record(1, headers={"h": "v" * 12}),),
         config={"max_message_bytes": MAX_MESSAGE_BYTES}, error="MESSAGE_TOO_LARGE"),
    # Message ids: an application's retry publishes nothing twice.
    Case("records with message ids are stored with them", (Record("a", message_id="m1"), Record("b", message_id="m2")),
         stored=(Stored(1, '"a"', message_id="m1"), Stored(2, '"b"', message_id="m2"))),
    Case("a message id twice in one append is stored once", (Record("a", message_id="m"), Record("b", message_id="m")),
         appended=(True, False), stored=(Stored(1, '"a"', message_id="m"),)),
    Case("a message id published before is not stored again", (Record("again", message_id="m"), Record("new")),
         before=(Record("first", message_id="m"),), appended=(False, True),
         stored=(Stored(1, '"first"', message_id="m"), Stored(2, '"new"'))),
    # A message id is 1 to MAX_MESSAGE_ID_LENGTH characters (app.domain.records.check_message_id).
    Case("a message id of the maximum length is stored", (Record("a", message_id="m" * MAX_MESSAGE_ID_LENGTH),),
         stored=(Stored(1, '"a"', message_id="m" * MAX_MESSAGE_ID_LENGTH),)),
    Case("a message id's length counts characters, not bytes",
         (Record("a", message_id="\U0001f600" * MAX_MESSAGE_ID_LENGTH),),
         stored=(Stored(1, '"a"', message_id="\U0001f600" * MAX_MESSAGE_ID_LENGTH),)),
    Case("a message id one character over the maximum", (Record("a", message_id="m" * (MAX_MESSAGE_ID_LENGTH + 1)),),
         error="INVALID_REQUEST"),
    Case("a message id of 100,000 characters", (Record("a", message_id="m" * 100_000),), error="INVALID_REQUEST"),
    Case("an empty message id", (Record("a", message_id=""),), error="INVALID_REQUEST"),
    Case("a refused message id refuses the append's earlier records too",
         (Record("ok", message_id="m1"), Record("a", message_id="")), error="INVALID_REQUEST"),
    Case("a NUL in a message id", (Record("a", message_id="a\x00b"),), error="INVALID_REQUEST", appenders=(PYTHON,)),
    Case("a lone surrogate in a message id", (Record("a", message_id="\ud800"),), error="INVALID_REQUEST",
         appenders=(PYTHON,)),
    Case("a message id that is not a string", (Record("a", message_id=42),), error="INVALID_REQUEST",  # type: ignore[arg-type]
         appenders=(PYTHON,)),
    # Refused: nothing is stored.
    Case("an unknown topic", (Record(),), topic="nope", error="UNKNOWN_TOPIC_OR_PARTITION"),
    Case("a partition the topic does not have", (Record(),), partition=2, error="UNKNOWN_TOPIC_OR_PARTITION"),
    # A name no topic may have (app.domain.records.check_address) is the caller's
    # mistake, not a topic that does not exist. Kafka's broker answers a Produce for any
    # partition it does not have, whatever its name or number, UNKNOWN_TOPIC_OR_PARTITION.
    Case("a negative partition", (Record(),), partition=-1, error="INVALID_REQUEST",
         kafka_error="UNKNOWN_TOPIC_OR_PARTITION"),
    Case("a topic name no topic may have", (Record(),), topic="a/b", error="INVALID_REQUEST",
         kafka_error="UNKNOWN_TOPIC_OR_PARTITION"),
    Case("an empty topic name", (Record(),), topic="", error="INVALID_REQUEST", kafka_error="UNKNOWN_TOPIC_OR_PARTITION"),
    Case("a topic name of 250 characters", (Record(),), topic="x" * 250, error="INVALID_REQUEST",
         kafka_error="UNKNOWN_TOPIC_OR_PARTITION"),
    Case("a topic name holding a control character", (Record(),), topic="a\tb", error="INVALID_REQUEST",
         kafka_error="UNKNOWN_TOPIC_OR_PARTITION"),
    Case("a compacted topic refuses a record without a key", (Record("k", key="k"), Record(1)),
         config={"cleanup_policy": "compact"}, error="INVALID_RECORD"),
    # A Produce cannot carry an expected offset: the request, not a record, is what is refused.
    Case("a topic checking expected offsets refuses an append without one", (Record(),),
         config={"check_expected_offsets": True}, error="INVALID_REQUEST", kafka_error="INVALID_REQUEST"),
    Case("a number beyond a 64-bit float", (Record(10 ** 400),), error="INVALID_REQUEST"),
    # Finite as a 64-bit float (it reads as 0.0, as orjson and every parser read
    # it); PostgreSQL's numeric, which outbox.append parses a value with, holds no exponent below
    # -16383 and refused it: the one rule of a finite number, checked two ways that disagree.
    Case("a number too small for PostgreSQL's numeric is a float's 0 and is stored as sent",
         (Record(JsonText("1e-16384")),), stored=(Stored(1, "1e-16384"),), appenders=(SEND, SQL, KAFKA)),
    # The other numbers numeric cannot hold: a zero with such an exponent, more fraction digits
    # than its 16383 (a float's 1.0), one too large for it (never finite), each among others,
    # and a text that looks like one, which is no number.
    Case("numbers PostgreSQL's numeric cannot hold that a float holds are stored as sent",
         (Record(JsonText('{"z": -0e-99999, "one": 1.' + "0" * 16384 + '1, "s": "1e999999", '
                          '"n": [-12.5e-20000, 1e-1]}')),),
         stored=(Stored(1, '{"z": -0e-99999, "one": 1.' + "0" * 16384 + '1, "s": "1e999999", '
                           '"n": [-12.5e-20000, 1e-1]}'),), appenders=(SEND, SQL, KAFKA)),
    Case("a number too large for PostgreSQL's numeric, beside a tiny one",
         (Record(JsonText("[1e-16384, -1e131072]")),), error="INVALID_REQUEST", appenders=(SEND, SQL, KAFKA)),
    Case("a number too large for a float written with an exponent numeric cannot hold",
         (Record(JsonText("[0.0000000000000000000000000000000001e-16000, 1" + "0" * 20000 + "e-19690]")),),
         error="INVALID_REQUEST", appenders=(SEND, SQL, KAFKA)),
    Case("a number beyond a 64-bit float deep in the value", (Record([1, {"a": -(10 ** 309)}]),), error="INVALID_REQUEST"),
    Case("a value nesting 255 levels", (Record(_nested(255)),), error="INVALID_REQUEST"),
    Case("a lone surrogate escape in a value", (Record("\ud800"),), error="INVALID_REQUEST",
         appenders=(SEND, SQL, KAFKA)),
    Case("a lone surrogate escape in a header", (Record(1, headers={"h": "\ud800"}),), error="INVALID_REQUEST",
         appenders=(SEND, SQL, KAFKA)),
    # outbox.append looked closely only at a text holding a high surrogate's escape;
    # PostgreSQL's json type takes a lone low one (\\udc00..\\udfff) unparsed (migration 0038).
    Case("a lone low surrogate escape in a value", (Record("\udc00"),), error="INVALID_REQUEST",
         appenders=(SEND, SQL, KAFKA)),
    Case("a lone low surrogate escape in a header", (Record(1, headers={"h": "\udfff"}),), error="INVALID_REQUEST",
         appenders=(SEND, SQL, KAFKA)),
    # A Kafka header's value is bytes, and its headers a list: a Produce can send neither.
    Case("a header value that is not a string", (Record(1, headers={"h": 1}),), error="INVALID_REQUEST",
         appenders=(SEND, PYTHON, SQL)),
    Case("headers that are not an object", (Record(1, headers=["h"]),), error="INVALID_REQUEST",  # type: ignore[arg-type]
         appenders=(SEND, PYTHON, SQL)),
    Case("a NUL in a header value", (Record(1, headers={"h": "a\x00"}),), error="INVALID_REQUEST"),
    Case("a NUL in a header name", (Record(1, headers={"\x00": "a"}),), error="INVALID_REQUEST"),
    Case("a NUL in a key", (Record(1, key="a\x00"),), error="INVALID_REQUEST", appenders=(SEND, PYTHON, KAFKA)),
    Case("a lone surrogate in a key", (Record(1, key="k\ud800"),), error="INVALID_REQUEST", appenders=(SEND, PYTHON, KAFKA)),
    # A timestamp is 0 to MAX_TIMESTAMP_MS, 9999-12-31T23:59:59.999Z, the last instant every
    # reader represents (app.domain.records.check_timestamp): one past it made every Spark read
    # of its partition fail. Kafka's broker answers one it will not take INVALID_TIMESTAMP; -1 is
    # its NO_TIMESTAMP, a record without one, which takes the append time as a Send's record
    # without one does.
    Case("a timestamp of 0 is stored", (Record(1, timestamp_ms=0),), stored=(Stored(1, "1", timestamp_ms=0),)),
    Case("a timestamp of 9999-12-31T23:59:59.999Z is stored", (Record(1, timestamp_ms=MAX_TIMESTAMP_MS),),
         stored=(Stored(1, "1", timestamp_ms=253_402_300_799_999),)),
    Case("a timestamp past 9999-12-31T23:59:59.999Z", (Record(1, timestamp_ms=MAX_TIMESTAMP_MS + 1),),
         error="INVALID_REQUEST", kafka_error="INVALID_TIMESTAMP"),
    Case("a timestamp of 2**63 - 1", (Record(1, timestamp_ms=2**63 - 1),), error="INVALID_REQUEST",
         kafka_error="INVALID_TIMESTAMP"),
    Case("a refused timestamp refuses the append's earlier records too",
         (Record("ok"), Record(1, timestamp_ms=MAX_TIMESTAMP_MS + 1)), error="INVALID_REQUEST",
         kafka_error="INVALID_TIMESTAMP"),
    Case("a negative timestamp", (Record(1, timestamp_ms=-2),), error="INVALID_REQUEST",
         kafka_error="INVALID_TIMESTAMP"),
    Case("a timestamp of -1", (Record(1, timestamp_ms=-1),), error="INVALID_REQUEST", appenders=(SEND, PYTHON, SQL)),
    # The Python API and outbox.append take clocks of their own (the process's, the database's),
    # not the service's, which the tests set.
    Case("a record without a timestamp takes the service's clock", (Record(1, timestamp_ms=None),),
         stored=(Stored(1, "1", timestamp_ms=CLOCK_START_MS),), appenders=(SEND, KAFKA)),
    Case("a refusal of a later record refuses the earlier ones too", (Record("ok"), Record(10 ** 400)),
         error="INVALID_REQUEST"),
    # The Python API's own: values that are not JSON.
    Case("a float that is not finite is not JSON", (Record(float("inf")),), error="INVALID_RECORD", appenders=(PYTHON,)),
    Case("a set is not JSON", (Record({1, 2}),), error="INVALID_RECORD", appenders=(PYTHON,)),
    Case("a text with a lone surrogate is not JSON", (Record("\ud800"),), error="INVALID_RECORD", appenders=(PYTHON,)),
    Case("an append of no records", (), error="INVALID_REQUEST", appenders=(SEND, PYTHON, KAFKA)),
    # A bytes topic (docs/ARCHITECTURE.md#record-formats): a Send takes its typed values; the
    # in-database appenders take JSON values only, and refuse its records; a Kafka record is
    # bytes, which it stores as they are (so a plain JSON value is no fault through Kafka).
    Case("a bytes topic stores a typed value's bytes", (Record({"type": "BINARY", "data": "AP8="}, key="k"),),
         config=BYTES_TOPIC, appenders=(SEND,), stored=(Stored(1, None, key_bytes=b"k", value_bytes=b"\x00\xff"),)),
    Case("a bytes topic refuses a plain JSON value", (Record(1),), config=BYTES_TOPIC, error="INVALID_RECORD",
         appenders=(SEND, PYTHON, SQL)),
    Case("a bytes topic stores a Kafka record's bytes as they are", (Record("v", key="k", headers={"h": "é"}),),
         config=BYTES_TOPIC, appenders=(KAFKA,),
         stored=(Stored(1, None, key_bytes=b"k", value_bytes=b'"v"', headers='[{"name":"h","value":"w6k="}]'),)),
    Case("a bytes topic's records are not the in-database appenders'", (Record({"type": "BINARY", "data": "AP8="}),),
         config=BYTES_TOPIC, error="INVALID_RECORD", appenders=(PYTHON, SQL)),
]

