"""Every appender gives every case of tests/appender_cases.py its verdict: the HTTP Send, the
in-database Python API (app.in_database) on SQLite and on PostgreSQL, and PostgreSQL's
outbox.append called as any application would call it. Same refusals, same error codes, the
same bytes stored at the same offsets."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.domain.errors import OutboxError
from app.in_database import OutboxRecord, append
from tests.appender_cases import APPENDERS, CASES, PYTHON, SEND, SQL, Case, Record, Stored, dumps
from tests.helpers import create_topic


class Refused(Exception):
    def __init__(self, error_code: str) -> None:
        super().__init__(error_code)
        self.error_code = error_code


def _psycopg_url(db_url: str) -> str:
    return make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)


def by_send(client: Any, db_url: str, topic: str, partition: int, records: tuple[Record, ...]) -> list[bool]:
    listed = ", ".join(
        '{"key": %s, "value": %s, "headers": %s, "timestamp_ms": %s}' % (
            "null" if r.key is None else _json_text(r.key), r.value_json(), r.headers_json() or "null",
            "null" if r.timestamp_ms is None else r.timestamp_ms)
        for r in records
    )
    body = '{"batches": [{"topic": %s, "partition": %d, "records": [%s]}]}' % (_json_text(topic), partition, listed)
    r = client.post("/v1/records", content=body.encode(),
                    headers={"content-type": "application/json"})
    if r.status_code != 200:
        raise Refused(r.json()["error_code"])
    return [True] * len(records)


def _json_text(s: str) -> str:
    return dumps(s)


def by_python(client: Any, db_url: str, topic: str, partition: int, records: tuple[Record, ...]) -> list[bool]:
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


def by_sql(client: Any, db_url: str, topic: str, partition: int, records: tuple[Record, ...]) -> list[bool]:
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


Appender = Callable[[Any, str, str, int, tuple[Record, ...]], list[bool]]
RUNS: dict[str, tuple[Appender, list[str]]] = {
    SEND: (by_send, ["sqlite", "postgresql"]),
    PYTHON: (by_python, ["sqlite", "postgresql"]),
    SQL: (by_sql, ["postgresql"]),
}
assert set(RUNS) == set(APPENDERS)


def stored(db_url: str) -> tuple[Stored, ...]:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(text(
            'SELECT r."partition", r."offset", r.key, r.value, r.headers, m.message_id, r.timestamp_ms, '
            "r.key_bytes, r.value_bytes "
            "FROM records r JOIN topics t ON t.topic_id = r.topic_id "
            "LEFT JOIN record_message_ids m "
            'ON m.topic_id = r.topic_id AND m."partition" = r."partition" AND m."offset" = r."offset" '
            """WHERE t.name = 't' AND NOT (r."partition" = 0 AND r."offset" = 0) """  # not the seed
            'ORDER BY r."partition", r."offset"'
        )).all()
    engine.dispose()
    return tuple(Stored(partition=p, offset=o, key=k, value=v, headers=h, message_id=m, timestamp_ms=ts,
                        key_bytes=None if kb is None else bytes(kb), value_bytes=None if vb is None else bytes(vb))
                 for p, o, k, v, h, m, ts, kb, vb in rows)


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
        run(client, db_url, case.topic, case.partition, case.before)

    try:
        appended = run(client, db_url, case.topic, case.partition, case.records)
    except Refused as e:
        verdict: Any = e.error_code
    else:
        verdict = appended

    if case.error is not None:
        assert verdict == case.error
        assert stored(db_url) == ()
    else:
        assert verdict == list(case.appended or [True] * len(case.records))
        assert stored(db_url) == case.stored
