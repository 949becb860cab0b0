"""Durability "commit" at the Kafka door (docs/GUARANTEES.md#durability-commit).

Its readers while such a transaction is open: its Sends are not durable until its Prepare,
Commit or Abort, so a read_uncommitted Fetch and ListOffsets latest stop at its first offset in
the partition (the high watermark, Kafka's: the end of what is durable), durable records after
it included; PostgreSQL only, as SQLite's Sends all wait for the disk. And its EndTxn: Kafka's
carries no count of acknowledged records, so a Commit of such a producer over the wire is
refused (both databases)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import batch, create_topic, ident, init_producer, send
from tests.kafka.conftest import Listener, ask, batch_offsets

TID = "durable"
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
LATEST = -1


@pytest.fixture
def open_between_plain_records(kafka: Listener, database) -> dict:  # type: ignore[no-untyped-def]
    """x (offset 0, plain), the open transaction's a, b, c (1-3), y (4, plain)."""
    if database.dialect != "postgresql":
        pytest.skip("synchronous_commit is PostgreSQL's; SQLite's Sends stay durable")
    client = kafka.client
    create_topic(client, "out", 1)
    assert send(client, [batch("out", 0, ["x"])]).status_code == 200
    p = init_producer(client, TID, transaction_version=2, durability="commit")
    assert send(client, [batch("out", 0, ["a", "b", "c"], 0)], p, TID).status_code == 200
    assert send(client, [batch("out", 0, ["y"])]).status_code == 200
    return p


def _fetch(kafka: Listener, isolation: int) -> tuple[list[int], int, int]:
    """(the offsets of the batches answered, high_watermark, last_stable_offset) from offset 0."""
    m = request_class(1, 12)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    body = m(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
             isolation_level=isolation, session_id=0, session_epoch=-1, topics=(
                 mod.FetchTopic(topic="out", partitions=(mod.FetchPartition(
                     partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                     log_start_offset=-1, partition_max_bytes=1 << 20),)),),
             forgotten_topics_data=(), rack_id="")
    with kafka.connect() as s:
        answer = ask(s, 1, 12, body)
    ((p,),) = [t.partitions for t in answer.responses]
    assert p.error_code == ErrorCode.none
    return batch_offsets(p.records), p.high_watermark, p.last_stable_offset


def _latest(kafka: Listener, isolation: int) -> int:
    m = request_class(2, 7)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    body = m(replica_id=-1, isolation_level=isolation, topics=(mod.ListOffsetsTopic(name="out", partitions=(
        mod.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=LATEST),)),))
    with kafka.connect() as s:
        answer = ask(s, 2, 7, body)
    ((p,),) = [t.partitions for t in answer.topics]
    assert p.error_code == ErrorCode.none
    return p.offset


def test_a_read_uncommitted_fetch_stops_at_the_open_transactions_first_offset(  # type: ignore[no-untyped-def]
        kafka: Listener, open_between_plain_records) -> None:
    assert _fetch(kafka, READ_UNCOMMITTED) == ([0], 1, 1)


def test_list_offsets_latest_under_read_uncommitted_is_that_offset(  # type: ignore[no-untyped-def]
        kafka: Listener, open_between_plain_records) -> None:
    assert _latest(kafka, READ_UNCOMMITTED) == 1


def test_read_committed_is_bounded_by_the_last_stable_offset_as_before(  # type: ignore[no-untyped-def]
        kafka: Listener, open_between_plain_records) -> None:
    assert _fetch(kafka, READ_COMMITTED) == ([0], 1, 1)
    assert _latest(kafka, READ_COMMITTED) == 1


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_once_the_transaction_ends_read_uncommitted_reads_to_the_log_end(  # type: ignore[no-untyped-def]
        kafka: Listener, open_between_plain_records, end: str) -> None:
    extra: dict[str, Any] = {"acknowledged_records": 3} if end == "commit" else {}
    r = kafka.client.post(f"/v1/transactions/{TID}/{end}", json={**ident(open_between_plain_records), **extra})
    assert r.status_code == 200, r.text

    # Every data record, an aborted one too (read_uncommitted), and the high watermark past the marker at 5.
    assert _fetch(kafka, READ_UNCOMMITTED) == ([0, 1, 2, 3, 4], 6, 6)
    assert _latest(kafka, READ_UNCOMMITTED) == 6


def test_an_end_txn_commit_of_a_durability_commit_producer_is_refused_and_changes_nothing(kafka: Listener) -> None:
    client = kafka.client
    create_topic(client, "out", 1)
    p = init_producer(client, TID, transaction_version=2, durability="commit")
    assert send(client, [batch("out", 0, ["a", "b"], 0)], p, TID).status_code == 200

    with kafka.connect() as s:
        answer = ask(s, 26, 5, request_class(26, 5)(transactional_id=TID, producer_id=p["producer_id"],
                                                    producer_epoch=p["producer_epoch"], committed=True))

    assert answer.error_code == ErrorCode.invalid_request
    assert client.get(f"/v1/transactions/{TID}").json()["state"] == "Ongoing"
    committed = kafka.client.post(f"/v1/transactions/{TID}/commit", json={**ident(p), "acknowledged_records": 2})
    assert committed.status_code == 200, committed.text
