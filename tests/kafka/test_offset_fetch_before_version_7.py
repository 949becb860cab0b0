"""OffsetFetch before version 7 has no UNSTABLE_OFFSET_COMMIT: a client of such a version is
given the retriable COORDINATOR_LOAD_IN_PROGRESS where the offset waits on an open transaction
(an HTTP reader's commit position past its records: app.domain.offsets.offset_in_order), and
retries until the transaction ends. aiokafka 0.14 asks with version 1 and gave up on the code
it did not know. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask
from tests.kafka.test_offset_leader_epoch import _module
from tests.kafka.test_offsets_across_doors import _end, _http_commit, _open_transaction, _plain

pytestmark = pytest.mark.kafka

RETRYING_S = 1.5  # how long the consumer is left retrying before the transaction ends
TIMEOUT_S = 20


async def _committed_while_t1_ends(kafka: Listener, t1: dict, *, commit: bool) -> tuple[bool, object]:
    """aiokafka's committed offset of orders/0 for "billing", asked while T1 is open: whether
    it was still asking when T1 ended, and what it got (an offset, or the error it raised)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id="billing", enable_auto_commit=False,
                                isolation_level="read_committed", retry_backoff_ms=50)
    await consumer.start()
    try:
        asking = asyncio.ensure_future(consumer.committed(TopicPartition("orders", 0)))
        await asyncio.sleep(RETRYING_S)
        still_asking = not asking.done()
        await asyncio.to_thread(_end, kafka, "t1", t1, commit=commit)
        try:
            got: object = await asyncio.wait_for(asking, TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - what the client raised is the answer
            got = e
    finally:
        await consumer.stop()
    return still_asking, got


def _straddled(kafka: Listener) -> dict:
    """T1 open with its record at 0, a plain record at 1, the HTTP reader's position 2."""
    create_topic(kafka.client, "orders")
    t1 = _open_transaction(kafka, "t1", "T1")
    _plain(kafka, "P1")
    _http_commit(kafka, 2)
    return t1


def test_aiokafka_retries_an_offset_an_open_transaction_straddles_and_gets_it_once_the_transaction_aborts(
        kafka: Listener) -> None:
    t1 = _straddled(kafka)
    still_asking, got = asyncio.run(_committed_while_t1_ends(kafka, t1, commit=False))
    assert still_asking is True
    assert got == 2  # T1 aborted: 2 is past the plain record in both orders


def test_aiokafka_is_refused_once_the_straddling_transaction_commits(kafka: Listener) -> None:
    from aiokafka.errors import KafkaError

    t1 = _straddled(kafka)
    still_asking, got = asyncio.run(_committed_while_t1_ends(kafka, t1, commit=True))
    assert still_asking is True
    # T1 committed at 2: a Kafka consumer at 2 would never read it. Not retriable.
    assert isinstance(got, KafkaError) and "InconsistentGroupProtocol" in repr(got), got


def test_kafka_python_of_a_version_before_7_retries_an_offset_an_open_transaction_straddles(kafka: Listener) -> None:
    """kafka-python told the broker is 2.4 asks with OffsetFetch version 6 (its table of
    2.4's versions): it takes a partition's COORDINATOR_LOAD_IN_PROGRESS as retriable too, and
    gets the offset once the transaction aborts."""
    import threading

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    t1 = _straddled(kafka)
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id="billing", enable_auto_commit=False,
                             api_version=(2, 4), retry_backoff_ms=50)
    got: list[object] = []
    try:
        asking = threading.Thread(target=lambda: got.append(consumer.committed(KTopicPartition("orders", 0))))
        asking.start()
        asking.join(RETRYING_S)
        still_asking = asking.is_alive()
        _end(kafka, "t1", t1, commit=False)
        asking.join(TIMEOUT_S)
    finally:
        consumer.close()
    assert still_asking is True
    assert got == [2]


@pytest.mark.parametrize("version", [2, 6])
def test_from_version_2_the_answer_itself_says_the_coordinator_is_loading(kafka: Listener, version: int) -> None:
    """From version 2 the answer has an error of its own, and a client of those versions
    retries the coordinator's COORDINATOR_LOAD_IN_PROGRESS only there: a partition's it takes
    as an unexpected error and gives up. The partition keeps it too, for a client that reads
    only the partitions' (aiokafka, above)."""
    _straddled(kafka)
    with kafka.connect() as s:
        answer = ask(s, 9, version, request_class(9, version)(  # type: ignore[misc]
            group_id="billing",
            topics=(_module(9, version).OffsetFetchRequestTopic(name="orders", partition_indexes=(0,)),)))
    assert answer.error_code == ErrorCode.coordinator_load_in_progress
    assert [(t.name, p.partition_index, p.committed_offset, p.error_code)
            for t in answer.topics for p in t.partitions] == [
        ("orders", 0, -1, ErrorCode.coordinator_load_in_progress)]
