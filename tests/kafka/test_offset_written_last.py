"""Of a group's offsets for a partition, the one written last stays, as in Kafka: a transaction's
staged offset (TxnOffsetCommit, AddOffsets) becomes the committed one when the transaction
commits only if no plain commit of it (OffsetCommit, an HTTP commit) came after the staging.
On SQLite and PostgreSQL; the group billing, the partition orders/0."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from tests.helpers import begin, create_topic, ident, init_producer
from tests.kafka.conftest import Listener
from tests.kafka.test_offset_leader_epoch import _commit, _fetched, _over_http, _stage
from tests.kafka.test_transactions import _end, _init

pytestmark = pytest.mark.kafka


def test_a_plain_commit_after_the_staging_stays_when_the_transaction_commits(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        _stage(s, "t", pid, epoch, 20, 4)
        assert _commit(s, 8, 30, committed_leader_epoch=6) == ErrorCode.none
        assert _fetched(s) == (-1, -1, ErrorCode.unstable_offset_commit)  # still pending until it ends
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
        assert _fetched(s) == (30, 6, ErrorCode.none)
    assert _over_http(kafka) == [(30, 6)]


def test_an_offset_staged_again_after_a_plain_commit_is_the_one_written_last(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        _stage(s, "t", pid, epoch, 20, 4)
        assert _commit(s, 8, 30, committed_leader_epoch=6) == ErrorCode.none
        _stage(s, "t", pid, epoch, 25, 5)
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
        assert _fetched(s) == (25, 5, ErrorCode.none)


def test_a_plain_commit_before_the_staging_is_replaced_when_the_transaction_commits(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        assert _commit(s, 8, 30, committed_leader_epoch=6) == ErrorCode.none
        pid, epoch = _init(s, "t")
        _stage(s, "t", pid, epoch, 20, 4)
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
        assert _fetched(s) == (20, 4, ErrorCode.none)


def test_a_plain_commit_of_another_partition_leaves_the_staged_offset_to_commit(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        _stage(s, "t", pid, epoch, 20, 4)
    r = kafka.client.post("/v1/groups/billing/offsets", json={"offsets": [{"topic": "orders", "partition": 1, "offset": 3}]})
    assert r.status_code == 200, r.text
    with kafka.connect() as s:
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
        assert _fetched(s) == (20, 4, ErrorCode.none)


def test_an_http_commit_after_an_http_transactions_add_offsets_stays_when_it_commits(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    producer = init_producer(kafka.client, "h")
    begin(kafka.client, "h", producer)
    r = kafka.client.post("/v1/transactions/h/offsets", json={**ident(producer), "group_id": "billing", "offsets": [
        {"topic": "orders", "partition": 0, "offset": 20}]})
    assert r.status_code == 200, r.text
    r = kafka.client.post("/v1/groups/billing/offsets", json={"offsets": [{"topic": "orders", "partition": 0, "offset": 30}]})
    assert r.status_code == 200, r.text
    r = kafka.client.post("/v1/transactions/h/commit", json=ident(producer))
    assert r.status_code == 200, r.text
    assert _over_http(kafka) == [(30, -1)]


def test_of_two_transactions_staging_one_partition_the_one_staged_last_stays_whichever_commits_last(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as a, kafka.connect() as b:
        pid_b, epoch_b = _init(b, "b")
        _stage(b, "b", pid_b, epoch_b, 5)
        pid_a, epoch_a = _init(a, "a")
        _stage(a, "a", pid_a, epoch_a, 10)  # staged after b's
        assert _end(a, "a", pid_a, epoch_a, commit=True).error_code == ErrorCode.none
        assert _end(b, "b", pid_b, epoch_b, commit=True).error_code == ErrorCode.none
        assert _fetched(a) == (10, -1, ErrorCode.none)


def test_a_staged_offset_commits_where_the_offset_committed_after_its_staging_was_deleted(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        _stage(s, "t", pid, epoch, 20, 4)
        assert _commit(s, 8, 30) == ErrorCode.none
    services = kafka.client.app.state.services
    assert services.group_offsets.delete_offsets("billing", [("orders", 0)]) == {}
    with kafka.connect() as s:
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
        assert _fetched(s) == (20, 4, ErrorCode.none)

