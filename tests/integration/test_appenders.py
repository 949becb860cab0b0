"""Every appender gives every case of tests/appender_cases.py its verdict: the HTTP Send, the
in-database Python API (app.in_database) on SQLite and on PostgreSQL, PostgreSQL's
outbox.append called as any application would call it, and the Kafka door's Produce (its
request read and handled in the test's process, as the listener reads and hands it on). Same
refusals, same error codes (Kafka's for the same fault, KAFKA_CODES), the same bytes stored at
the same offsets."""

from __future__ import annotations

import datetime
import io
import sqlite3
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.domain.errors import OutboxError
from app.in_database import OutboxRecord, append
from app.kafka import auth, protocol
from app.kafka.api_keys import SERVED, ApiKey
from app.kafka.apis import Apis, Broker
from tests.appender_cases import APPENDERS, CASES, KAFKA, PYTHON, SEND, SQL, Case, Record, Stored, dumps, kafka_bytes
from tests.helpers import create_topic, init_producer

# Each case's own database, as new, and the app its HTTP Send and Kafka Produce go through
# built once: the app per case was a third of the module's time.
pytestmark = pytest.mark.shared_app


class Refused(Exception):
    def __init__(self, error_code: str) -> None:
        super().__init__(error_code)
        self.error_code = error_code


def _psycopg_url(db_url: str) -> str:
    return make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)


def by_send(client: Any, db_url: str, topic: str, partition: int, records: tuple[Record, ...],
            producer: dict | None = None) -> list[bool]:
    listed = ", ".join(
        '{"key": %s, "value": %s, "headers": %s, "timestamp_ms": %s}' % (
            "null" if r.key is None else _json_text(r.key), r.value_json(), r.headers_json() or "null",
            "null" if r.timestamp_ms is None else r.timestamp_ms)
        for r in records
    )
    body = '{"batches": [{"topic": %s, "partition": %d, "records": [%s]%s}]%s}' % (
        _json_text(topic), partition, listed, "" if producer is None else ', "base_sequence": 0',
        "" if producer is None else ', "producer_id": %d, "producer_epoch": %d' % (
            producer["producer_id"], producer["producer_epoch"]))
    r = client.post("/v1/records", content=body.encode(),
                    headers={"content-type": "application/json"})
    if r.status_code != 200:
        raise Refused(r.json()["error_code"])
    return [True] * len(records)


def _json_text(s: str) -> str:
    return dumps(s)


def by_python(client: Any, db_url: str, topic: str, partition: int, records: tuple[Record, ...],
              producer: dict | None = None) -> list[bool]:
    assert producer is None, "the Python API has no producer"
    outbox_records = [OutboxRecord(value=r.value, key=r.key, headers=r.headers, message_id=r.message_id,
                                   timestamp_ms=r.timestamp_ms) for r in records]
    if db_url.startswith("sqlite"):
        conn: Any = sqlite3.connect(make_url(db_url).database, timeout=30)
    else:
        conn = psycopg.connect(_psycopg_url(db_url))
    try:
        try:
            appended = append(conn, topic, partition, outbox_records)
        except OutboxError as e:
            raise Refused(e.error_code) from None
        conn.commit()
        return appended
    finally:
        conn.close()


def by_sql(client: Any, db_url: str, topic: str, partition: int, records: tuple[Record, ...],
           producer: dict | None = None) -> list[bool]:
    assert producer is None, "outbox.append has no producer"
    with psycopg.connect(_psycopg_url(db_url)) as conn:
        appended = []
        for r in records:
            try:
                (one,) = conn.execute(
                    "SELECT outbox.append(%s, %s, %s, %s::json, %s::json, %s, %s)",
                    (topic, partition, r.key, r.value_json(), r.headers_json(), r.message_id, r.timestamp_ms),
                ).fetchone()
            except psycopg.Error as e:
                code, _, _ = (e.diag.message_primary or "").partition(": ")
                raise Refused(code) from None
            appended.append(one)
        conn.commit()
    return appended


# A refusal's code as a Send, the Python API and outbox.append answer it, and the code of a
# Kafka Produce's partition for the same fault: Kafka's broker answers a record it cannot take
# INVALID_RECORD, whatever is wrong with it. A case's kafka_error says where Kafka's differs.
KAFKA_CODES = {
    "INVALID_REQUEST": "INVALID_RECORD",
    "INVALID_RECORD": "INVALID_RECORD",
    "MESSAGE_TOO_LARGE": "MESSAGE_TOO_LARGE",
    "UNKNOWN_TOPIC_OR_PARTITION": "UNKNOWN_TOPIC_OR_PARTITION",
}
PRODUCE_VERSION = SERVED[ApiKey.PRODUCE][1]
NO_TIMESTAMP = -1  # a Kafka record's timestamp when it has none


def by_kafka(client: Any, db_url: str, topic: str, partition: int, records: tuple[Record, ...],
             producer: dict | None = None) -> list[bool]:
    """A Produce of one record batch, as a producer without idempotence writes it (aiokafka's
    builder), or as `producer`, idempotent, writes its first (sequence 0), read from its bytes
    and handled by the door's Produce, as the listener does for an anonymous client."""
    batch = (DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30) if producer is None else
             DefaultRecordBatchBuilder(2, 0, 0, producer["producer_id"], producer["producer_epoch"], 0, 1 << 30))
    for i, r in enumerate(records):
        batch.append(i, NO_TIMESTAMP if r.timestamp_ms is None else r.timestamp_ms,
                     None if r.key is None else kafka_bytes(r.key),
                     None if r.value is None else r.value_json().encode(), r.kafka_headers())
    services = client.app.state.services
    request = protocol.parse(_produce_frame(topic, partition, bytes(batch.build())),
                             services.settings.kafka_max_request_entries)
    apis = Apis(services, Broker(services.settings.kafka_broker_id, "127.0.0.1", 9092))
    access = auth.Access(auth.NOBODY, None)
    token = auth.bind(access)
    try:
        answer = apis.handlers[ApiKey.PRODUCE](request.body, request.api_version)
    finally:
        auth.unbind(token)
    access.hold_to_rules(ApiKey.PRODUCE, request.body)
    ((answered,),) = [t.partition_responses for t in answer.responses]
    if answered.error_code != ErrorCode.none:
        raise Refused(answered.error_code.name.upper())
    return [True] * len(records)


def _produce_frame(topic: str, partition: int, records: bytes) -> bytes:
    cls = protocol.request_class(ApiKey.PRODUCE, PRODUCE_VERSION)
    assert cls is not None
    m = __import__(cls.__module__, fromlist=["x"])
    body = cls(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=partition, records=records),)),))
    buffer = io.BytesIO()
    header = cls.__header_schema__  # type: ignore[attr-defined]
    entity_writer(header)(buffer, header(request_api_key=ApiKey.PRODUCE, request_api_version=PRODUCE_VERSION,
                                         correlation_id=1, client_id="appender"))
    entity_writer(cls)(buffer, body)
    return buffer.getvalue()  # a frame as the listener hands it on, after its size


Appender = Callable[[Any, str, str, int, tuple[Record, ...], dict | None], list[bool]]
RUNS: dict[str, tuple[Appender, list[str]]] = {
    SEND: (by_send, ["sqlite", "postgresql"]),
    PYTHON: (by_python, ["sqlite", "postgresql"]),
    SQL: (by_sql, ["postgresql"]),
    KAFKA: (by_kafka, ["sqlite", "postgresql"]),
}
assert set(RUNS) == set(APPENDERS)


def stored(db_url: str, producer: dict | None = None) -> tuple[Stored, ...]:
    """The records stored, but the seed; a record's producer_id must be `producer`'s id or NULL."""
    engine = create_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(text(
            'SELECT r."partition", r."offset", r.key, r.value, r.headers, m.message_id, r.timestamp_ms, '
            "r.key_bytes, r.value_bytes, r.self_committed, r.producer_id "
            "FROM records r JOIN topics t ON t.topic_id = r.topic_id "
            "LEFT JOIN record_message_ids m "
            'ON m.topic_id = r.topic_id AND m."partition" = r."partition" AND m."offset" = r."offset" '
            """WHERE t.name = 't' AND NOT (r."partition" = 0 AND r."offset" = 0) """  # not the seed
            'ORDER BY r."partition", r."offset"'
        )).all()
    engine.dispose()
    assert {pid for *_, pid in rows} <= {None, None if producer is None else producer["producer_id"]}, rows
    return tuple(Stored(partition=p, offset=o, key=k, value=v, headers=h, message_id=m, timestamp_ms=ts,
                        key_bytes=None if kb is None else bytes(kb), value_bytes=None if vb is None else bytes(vb),
                        self_committed=bool(sc), idempotent=pid is not None)
                 for p, o, k, v, h, m, ts, kb, vb, sc, pid in rows)


@pytest.mark.parametrize(("appender", "db_url", "case"), [
    pytest.param(appender, db, case, id=f"{appender}-{db}-{case.name}",
                 marks=[pytest.mark.xfail(strict=True, reason=case.known_wrong[appender])]
                 if appender in case.known_wrong else [])
    for case in CASES for appender, (_, dbs) in RUNS.items() for db in dbs if case.runs_on(appender)
], indirect=["db_url"])
def test_every_appender_gives_each_case_its_verdict(client: Any, db_url: str, appender: str, case: Case) -> None:
    create_topic(client, "t", partitions=2, **case.config)
    seed_value: Any = {"type": "STRING", "data": "seed"} if case.config.get("value_format") == "bytes" else "seed"
    seed = client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "expected_offset": 0,
                                                         "records": [{"key": "seed", "value": seed_value}]}]})
    assert seed.status_code == 200, seed.text
    run = RUNS[appender][0]
    if case.before:
        run(client, db_url, case.topic, case.partition, case.before, None)
    producer = init_producer(client) if case.idempotent else None

    try:
        appended = run(client, db_url, case.topic, case.partition, case.records, producer)
    except Refused as e:
        verdict: Any = e.error_code
    else:
        verdict = appended

    if case.error is not None:
        assert verdict == (case.error if appender != KAFKA else case.kafka_error or KAFKA_CODES[case.error])
        assert stored(db_url) == ()
    else:
        assert verdict == list(case.appended or [True] * len(case.records))
        assert stored(db_url, producer) == case.stored
