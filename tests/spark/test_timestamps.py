"""A record's timestamp through both Spark readers (the Python data source and the JVM read), on
SQLite and PostgreSQL: a record may be timestamped up to 9999-12-31T23:59:59.999Z
(app.domain.records.MAX_TIMESTAMP_MS), which both read as that instant; every door refuses a
later one. A record stored past it before migration 0049 (every door took up to 2**63 - 1, and
one such record made every Spark read of its partition fail with an overflow naming nothing)
stops the read with one line naming its partition and offset, the same from both readers."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from spark_jobs.datasource import read_outbox
from tests.e2e.api import ok

LAST_TIMESTAMP_MS = 253_402_300_799_999


def _millis(df) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    # unix_millis: the instant itself, not a datetime of the session's time zone.
    return sorted(tuple(r) for r in df.selectExpr("offset", "unix_millis(timestamp)").collect())


def _stored_before_0049(database_url: str, offset: int, timestamp_ms: int) -> None:
    """What a door took before 0049, written as SQL: the doors refuse it now."""
    engine = create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(text('UPDATE records SET timestamp_ms = :ts WHERE "partition" = 0 AND "offset" = :offset'),
                     {"ts": timestamp_ms, "offset": offset})
    engine.dispose()


@pytest.mark.parametrize("reader", ["python", "jvm"])
def test_the_last_instant_a_record_may_have_is_read_and_one_stored_past_it_stops_the_read_naming_it(
        spark, backend, url, client, reader) -> None:  # type: ignore[no-untyped-def]
    # No retention: the service's cleaner would delete the records of 1970 while the test reads.
    ok(client.post("/v1/topics", json={"name": "t", "partitions": 1, "config": {"retention_ms": -1}}), 201)
    ok(client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [
        {"value": 1, "timestamp_ms": 5}, {"value": 2, "timestamp_ms": LAST_TIMESTAMP_MS}, {"value": 3, "timestamp_ms": 6}]}]}))
    refused = client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [
        {"value": 4, "timestamp_ms": LAST_TIMESTAMP_MS + 1}]}]})
    assert (refused.status_code, refused.json()["error_code"]) == (422, "INVALID_REQUEST")

    read = read_outbox(spark, reader=reader, url=url, databaseUrl=backend.url, topics="t")
    assert _millis(read) == [(0, 5), (1, LAST_TIMESTAMP_MS), (2, 6)]

    _stored_before_0049(backend.url, 2, 2**63 - 1)
    with pytest.raises(Exception) as caught:  # noqa: B017 - Spark's own exception class of a task's failure
        read_outbox(spark, reader=reader, url=url, databaseUrl=backend.url, topics="t").collect()
    assert ("record 2 of t/0: timestamp_ms 9223372036854775807 is past 253402300799999 (9999-12-31T23:59:59.999Z), "
            "the last instant Spark's and Python's timestamps hold; it was stored before migration 0049, which "
            "refuses it") in str(caught.value)
