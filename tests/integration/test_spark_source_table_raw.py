"""benchmarks/spark_source.py's table_raw reference (PostgreSQL only, benchmarks only: the leaves of
`records` are PostgreSQL's): its statement over a partition's leaf, bounded by the JVM read's
splits read as offset ranges, reads every row of the partition below the high watermark once,
committed, aborted and open records and markers alike, with the columns the JVM read fetches
(the topic's name written in, the offset in commit_position's place), where the partition's view
reads the committed records only."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from benchmarks.spark_source import JVM_STORED, table_raw_predicates, table_raw_statement
from spark_jobs.common.positions import TopicRange
from spark_jobs.reader.planning import Split

J = {"content-type": "application/json"}


def _ok(response):  # type: ignore[no-untyped-def]
    assert response.is_success, response.text
    return response.json()


def _transaction(client, transactional_id: str, key: str, end: str | None) -> None:  # type: ignore[no-untyped-def]
    """One record in a transaction of its own on partition 0, then committed, aborted or left open."""
    producer = _ok(client.post("/v1/producers", json={"transactional_id": transactional_id, "transaction_version": 2}))
    ids = {"producer_id": producer["producer_id"], "producer_epoch": producer["producer_epoch"]}
    _ok(client.post("/v1/records", json={"transactional_id": transactional_id, **ids, "batches": [
        {"topic": "t", "partition": 0, "base_sequence": 0, "records": [{"key": key, "value": 1}]}]}))
    if end is not None:
        _ok(client.post(f"/v1/transactions/{transactional_id}/{end}", json=ids))


def test_table_raw_reads_every_row_of_the_leaves_in_the_jvm_reads_columns(client, database) -> None:  # type: ignore[no-untyped-def]
    if database.engine.dialect.name != "postgresql":
        pytest.skip("the leaves of records are PostgreSQL's")
    _ok(client.post("/v1/topics", json={"name": "t", "partitions": 2}))
    _ok(client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [
        {"key": "plain-0", "value": 1, "headers": {"source": "till-1"}}, {"key": "plain-1", "value": 2}]}]}))
    _transaction(client, "committed", "txn-committed", "commit")
    _transaction(client, "aborted", "txn-aborted", "abort")
    _transaction(client, "open", "txn-open", None)
    _ok(client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 1, "records": [
        {"key": "other-0", "value": 3}]}]}))

    with database.engine.connect() as conn:
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 't'")).scalar_one()
        ends = dict(conn.execute(text('SELECT "partition", next_offset FROM partitions WHERE topic_id = :t'),
                                 {"t": topic_id}).all())
        # Partition 0's positions cut as a plan cuts them, in two splits; partition 1's in one.
        splits = [Split(TopicRange("t", 0, 0, 3)), Split(TopicRange("t", 0, 3, ends[0])),
                  Split(TopicRange("t", 1, 0, ends[1]))]
        by_partition = table_raw_predicates(splits)
        rows = {p: [conn.execute(text(f"SELECT * FROM ({table_raw_statement('t', topic_id, p)}) raw WHERE {pred} "
                                      'ORDER BY "offset"')).mappings().all() for pred in preds]
                for p, preds in by_partition.items()}
        committed = conn.execute(text(
            'SELECT "partition", "offset" FROM committed_records WHERE topic = \'t\' ORDER BY 1, 2')).all()

    assert ends == {0: 7, 1: 1}
    assert list(by_partition) == [0, 1] and [len(p) for p in rows.values()] == [2, 1]
    assert all(list(r) == JVM_STORED for leaf in rows.values() for split in leaf for r in split)
    # Every offset of the leaf once, in the split its offset falls in: the plain records, each
    # transaction's record and its marker (the open one has none yet), the offset as commit_position.
    assert [[(r["topic"], r["partition"], r["offset"], r["commit_position"], r["key"]) for r in split]
            for split in rows[0]] == [
        [("t", 0, 0, 0, "plain-0"), ("t", 0, 1, 1, "plain-1"), ("t", 0, 2, 2, "txn-committed")],
        [("t", 0, 3, 3, None), ("t", 0, 4, 4, "txn-aborted"), ("t", 0, 5, 5, None), ("t", 0, 6, 6, "txn-open")]]
    assert rows[0][0][0]["headers"] == '{"source":"till-1"}' and rows[0][0][1]["headers"] is None
    assert [[(r["partition"], r["offset"], r["key"]) for r in split] for split in rows[1]] == [[(1, 0, "other-0")]]
    # Against what the partition's view reads: the committed records only.
    assert committed == [(0, 0), (0, 1), (0, 2), (1, 0)]
