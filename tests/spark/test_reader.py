"""The old JDBC reader (benchmarks/jdbc_reader.py, the benchmarks' baseline) returns exactly
what read_committed returns, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import httpx

from benchmarks.jdbc_reader import JdbcSource, read_committed
from spark_jobs.common.positions import PositionRange, batch_ranges
from tests.e2e.api import ok
from tests.spark.logbuilder import LogBuilder, read_committed_api

TOPIC = "mix"
PARTITIONS = 3


def _mixed_log(log: LogBuilder) -> None:
    """Per partition: plain and idempotent records; X2 committed before X1 although appended
    after it (commit order); an aborted transaction; one transaction left open, and one
    ("late") still open when the test takes its snapshot. Each transaction spans all
    partitions, so every partition gets its COMMIT and ABORT markers."""
    log.create(PARTITIONS)
    for p in range(PARTITIONS):
        log.plain(p, 3)
    log.begin("x1")
    for p in range(PARTITIONS):
        log.send("x1", p, 2)
        log.idempotent("idem", p, 2)
    log.begin("x2")
    for p in range(PARTITIONS):
        log.send("x2", p, 3)
        log.send("x1", p, 1)
    log.commit("x2")
    for p in range(PARTITIONS):
        log.plain(p, 1)
    log.commit("x1")
    log.begin("aborted")
    for p in range(PARTITIONS):
        log.send("aborted", p, 2)
        log.plain(p, 2)
    log.abort("aborted")
    log.begin("open")
    log.begin("late")
    for p in range(PARTITIONS):
        log.send("open", p, 2)
        log.send("late", p, 3)
        log.plain(p, 1)


def _key(r: dict) -> tuple:
    """A record as comparable data: the API's JSON and the DataFrame's row alike."""
    return (r["partition"], r["offset"], r["commit_position"], r["timestamp_ms"], r["key"],
            json.dumps(r["value"], sort_keys=True), tuple(sorted((r["headers"] or {}).items())), r["producer_id"],
            r["transactional"])


def _api_records(client: httpx.Client, ranges: list[PositionRange]) -> list[tuple]:
    out = []
    for r in ranges:
        for rec in read_committed_api(client, TOPIC, r.partition, r.start, r.end):
            out.append(_key({**rec, "partition": r.partition}))
    return out


def _spark_records(df) -> list[tuple]:  # type: ignore[no-untyped-def]
    rows = df.orderBy("partition", "commit_position", "offset").collect()
    return [_key({**row.asDict(), "value": json.loads(row["value"])}) for row in rows]


def test_reader_returns_exactly_the_read_committed_records(spark, backend, url) -> None:  # type: ignore[no-untyped-def]
    client = httpx.Client(base_url=url, timeout=30)
    log = LogBuilder(client, TOPIC)
    _mixed_log(log)

    # The snapshot, and start positions of three kinds: the log start, a commit-point boundary
    # (where a read_committed consumer that fetched 4 records stands), and an offset in the
    # middle of transactions (any offset is a position).
    ends = log.log_ends()
    first = ok(client.get(f"/v1/topics/{TOPIC}/partitions/1/records",
                          params={"offset": 0, "max_records": 4}))
    starts = {0: 0, 1: first["next_offset"], 2: 5}
    ranges = batch_ranges(starts, ends)
    expected = _api_records(client, ranges)

    # After the snapshot: the late transaction commits (its marker lands past the snapshotted
    # end while its records sit below it), and more records come in.
    log.commit("late")
    for p in range(PARTITIONS):
        log.plain(p, 2, tag="after-snapshot")
    after = _api_records(client, batch_ranges(starts, log.log_ends()))
    late = [k for k in after if '"tag": "late"' in k[5]]
    assert late and all(k[1] < ends[k[0]] <= k[2] for k in late), "late records below the end, marker past it"

    source = JdbcSource.from_url(backend.url)
    for splits in (1, 3):
        df = read_committed(spark, source, TOPIC, ranges, splits=splits)
        assert df.rdd.getNumPartitions() == PARTITIONS * splits
        got = _spark_records(df)
        assert got == expected, f"splits={splits}"

    tags = {json.loads(k[5])["tag"] for k in expected}
    assert tags == {"plain", "x1", "x2", "idempotent"}, "no aborted, open, late or later records"
    assert len(expected) == len(set(expected))


def test_reader_splits_positions_evenly_with_bounded_predicates(spark, backend, url) -> None:  # type: ignore[no-untyped-def]
    client = httpx.Client(base_url=url, timeout=30)
    log = LogBuilder(client, TOPIC)
    log.create(2)
    for _ in range(5):
        log.plain(0, 4)
        log.begin("t")
        log.send("t", 0, 3)
        log.send("t", 1, 2)
        log.plain(1, 1)
        log.commit("t")
    ranges = batch_ranges({}, log.log_ends())
    source = JdbcSource.from_url(backend.url)

    whole = _spark_records(read_committed(spark, source, TOPIC, ranges, splits=1))
    df = read_committed(spark, source, TOPIC, ranges, splits=4)
    per_split = df.rdd.glom().map(len).collect()
    assert len(per_split) == 8 and sum(per_split) == len(whole)
    assert _spark_records(df) == whole
    # Empty ranges read nothing and make no query.
    empty = [PositionRange(0, 7, 7), PositionRange(1, 3, 3)]
    df = read_committed(spark, source, TOPIC, empty)
    assert df.rdd.getNumPartitions() == 1 and df.count() == 0


def test_value_schema_decodes_values_and_headers_into_columns(spark, backend, url) -> None:  # type: ignore[no-untyped-def]
    client = httpx.Client(base_url=url, timeout=30)
    ok(client.post("/v1/topics", json={"name": "orders", "partitions": 1}), 201)
    ok(client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [
        {"key": "o-1", "value": {"order_id": 1, "meal": "Pizza", "value": 9.5}, "headers": {"src": "till-1"}},
        {"key": "o-2", "value": {"order_id": 2, "meal": "Salad", "value": 7}},
        {"key": "o-3", "value": "not an object"},
    ]}]}))
    ranges = batch_ranges({}, {0: 3})
    source = JdbcSource.from_url(backend.url)
    schema = "order_id BIGINT, meal STRING, value DOUBLE"

    nested = read_committed(spark, source, "orders", ranges, value_schema=schema).orderBy("offset").collect()
    assert [r["value"] and r["value"].asDict() for r in nested] == [
        {"order_id": 1, "meal": "Pizza", "value": 9.5}, {"order_id": 2, "meal": "Salad", "value": 7.0},
        {"order_id": None, "meal": None, "value": None}]  # not an object: every field null
    assert [r["headers"] for r in nested] == [{"src": "till-1"}, None, None]
    assert nested[0]["timestamp"] is not None

    flat = read_committed(spark, source, "orders", ranges, value_schema=schema, flatten=True)
    assert flat.columns[-3:] == ["order_id", "meal", "value"]
    assert [(r["key"], r["order_id"], r["value"]) for r in flat.orderBy("offset").collect()] == [
        ("o-1", 1, 9.5), ("o-2", 2, 7.0), ("o-3", None, None)]


def test_reader_reads_records_appended_in_application_transactions(spark, backend, url) -> None:  # type: ignore[no-untyped-def]
    """Records an application appended in its own database transaction (app.in_database) are
    plain records to Spark too, in commit order with Sends and transactions; a rolled-back
    application transaction leaves nothing."""
    import sqlite3

    import psycopg
    from sqlalchemy.engine import make_url

    from app.in_database import OutboxRecord, append

    client = httpx.Client(base_url=url, timeout=30)
    log = LogBuilder(client, TOPIC)
    log.create(PARTITIONS)

    def application(p: int, n: int, *, commit: bool = True) -> None:
        u = make_url(backend.url)
        conn = (sqlite3.connect(u.database, timeout=30) if backend.name == "sqlite"
                else psycopg.connect(u.set(drivername="postgresql").render_as_string(hide_password=False)))
        try:
            append(conn, TOPIC, p, [OutboxRecord(value={"tag": "in-database" if commit else "rolled-back", "n": i})
                                    for i in range(n)])
            conn.commit() if commit else conn.rollback()
        finally:
            conn.close()

    for p in range(PARTITIONS):
        log.plain(p, 2)
        application(p, 3)
    log.begin("x1")
    for p in range(PARTITIONS):
        log.send("x1", p, 2)
        application(p, 2)
        application(p, 2, commit=False)
    log.commit("x1")
    ranges = batch_ranges({p: 0 for p in range(PARTITIONS)}, log.log_ends())
    expected = _api_records(client, ranges)

    got = _spark_records(read_committed(spark, JdbcSource.from_url(backend.url), TOPIC, ranges))

    assert got == expected
    assert sum('"in-database"' in k[5] for k in got) == PARTITIONS * 5
    assert not any('"rolled-back"' in k[5] for k in got)
