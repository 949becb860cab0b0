"""Transactional ids and group ids over the Kafka door are held to the same rule as over HTTP
(app.domain.ids: 1 to 255 characters, no '/', no control character), checked by the services:
an id outside it is refused with the code Kafka answers an id it refuses (INVALID_REQUEST for
a transactional id, as its InitProducerId answers an empty one; INVALID_GROUP_ID for a group
id, as its group coordinator does), on the same connection, and nothing is written. Before,
SQLite stored such ids and PostgreSQL refused an over-long one: the verdict was the database's.
On both databases."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.domain.ids import ID_MAX_LENGTH
from app.kafka.protocol import request_class
from tests.fuzz.stored import StoredTables, diff
from tests.helpers import begin, create_topic, init_producer
from tests.kafka.conftest import Listener, ask
from tests.kafka.test_groups import _nested, commit, join

OVER_LONG = "x" * (ID_MAX_LENGTH + 1)
WITH_A_SLASH = "orders/eu"


def _init_producer_id(s: Any, transactional_id: str) -> Any:
    return ask(s, 22, 4, request_class(22, 4)(  # type: ignore[misc]
        transactional_id=transactional_id, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
        producer_epoch=-1))


def _refused_writing_nothing(kafka: Listener, db_url: str, refuse: Callable[[Any], Any]) -> Any:
    """What `refuse` answers on a connection; the stored state is the same after it, and the
    connection still answers (InitProducerId of a valid id) after the refusal."""
    stored = StoredTables(db_url)
    try:
        before = stored.snapshot()
        with kafka.connect() as s:
            answered = refuse(s)
            assert diff(before, stored.snapshot()) == []
            assert _init_producer_id(s, "valid").error_code == ErrorCode.none
        return answered
    finally:
        stored.dispose()


@pytest.mark.parametrize("transactional_id", [OVER_LONG, WITH_A_SLASH], ids=["over-long", "with-a-slash"])
def test_init_producer_id_of_a_transactional_id_outside_the_rule_is_invalid_request_and_writes_nothing(
        kafka: Listener, db_url: str, transactional_id: str) -> None:
    answer = _refused_writing_nothing(kafka, db_url, lambda s: _init_producer_id(s, transactional_id))

    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (ErrorCode.invalid_request, -1, -1)


@pytest.mark.parametrize("group_id", [OVER_LONG, WITH_A_SLASH], ids=["over-long", "with-a-slash"])
def test_join_group_of_a_group_id_outside_the_rule_is_invalid_group_id_and_writes_nothing(
        kafka: Listener, db_url: str, group_id: str) -> None:
    create_topic(kafka.client, "orders")

    answer = _refused_writing_nothing(kafka, db_url, lambda s: join(s, group_id, ask_member_id=False))

    assert (answer.error_code, answer.member_id) == (ErrorCode.invalid_group_id, "")


@pytest.mark.parametrize("group_id", [OVER_LONG, WITH_A_SLASH], ids=["over-long", "with-a-slash"])
def test_offset_commit_of_a_group_id_outside_the_rule_is_invalid_group_id_and_writes_nothing(
        kafka: Listener, db_url: str, group_id: str) -> None:
    create_topic(kafka.client, "orders")

    # A simple consumer's commit (generation -1, no member): the one that creates a group.
    answer = _refused_writing_nothing(kafka, db_url, lambda s: commit(s, group_id, -1, "", {("orders", 0): 3}))

    assert answer == [ErrorCode.invalid_group_id]


def test_txn_offset_commit_of_a_group_id_with_a_slash_is_invalid_group_id_and_stages_nothing(
        kafka: Listener, db_url: str) -> None:
    create_topic(kafka.client, "orders")
    producer = init_producer(kafka.client, "tx")
    begin(kafka.client, "tx", producer)
    topic, partition = _nested(28, 3, "TxnOffsetCommitRequestTopic"), _nested(28, 3, "TxnOffsetCommitRequestPartition")
    body = request_class(28, 3)(  # type: ignore[misc]
        transactional_id="tx", group_id=WITH_A_SLASH, producer_id=producer["producer_id"],
        producer_epoch=producer["producer_epoch"], generation_id=-1, member_id="", group_instance_id=None,
        topics=(topic(name="orders", partitions=(partition(partition_index=0, committed_offset=3,
                                                           committed_metadata=None),)),))

    answer = _refused_writing_nothing(kafka, db_url, lambda s: ask(s, 28, 3, body))

    assert [p.error_code for t in answer.topics for p in t.partitions] == [ErrorCode.invalid_group_id]


def _offset_fetch(s: Any, version: int, group_id: str) -> Any:
    """OffsetFetch of `version` naming orders/0 for `group_id`."""
    topic = _nested(9, version, "OffsetFetchRequestTopic")
    fields = {"require_stable": False} if version >= 7 else {}
    return ask(s, 9, version, request_class(9, version)(  # type: ignore[misc]
        group_id=group_id, topics=(topic(name="orders", partition_indexes=(0,)),), **fields))


@pytest.mark.parametrize("group_id", ["", OVER_LONG, "../t1", "t\x00"],
                         ids=["empty", "over-long", "with-a-slash", "with-a-nul"])
@pytest.mark.parametrize("version", [2, 7])
def test_offset_fetch_of_a_group_id_outside_the_rule_is_invalid_group_id(
        kafka: Listener, db_url: str, group_id: str, version: int) -> None:
    # The topics named went unchecked once the group was refused: the connection closed unanswered.
    create_topic(kafka.client, "orders")
    answer = _refused_writing_nothing(kafka, db_url, lambda s: _offset_fetch(s, version, group_id))
    assert (answer.error_code, answer.topics) == (ErrorCode.invalid_group_id, ())


def test_offset_fetch_version_1_answers_a_group_id_outside_the_rule_in_every_partition(
        kafka: Listener, db_url: str) -> None:
    # Version 1 has no field for the group's error: Kafka answers it in each partition asked for.
    create_topic(kafka.client, "orders")
    answer = _refused_writing_nothing(kafka, db_url, lambda s: _offset_fetch(s, 1, WITH_A_SLASH))
    assert [(t.name, p.partition_index, p.committed_offset, p.error_code) for t in answer.topics
            for p in t.partitions] == [("orders", 0, -1, ErrorCode.invalid_group_id)]
