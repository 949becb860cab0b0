"""Kafka's wire protocol at the listener, request by request, written with kio as a client
writes it: what is served, and bad input answered with Kafka's error code or the connection
closed where Kafka closes it, nothing written, never a hang (every read has a timeout)."""

from __future__ import annotations

import dataclasses
import datetime
import struct
import time
import uuid
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from kio.schema.errors import ErrorCode

from app.kafka.api_keys import SERVED
from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask, closed, frame, join_group_v8, listener_with, read_frame, response
from tests.kafka_batches import UNDECOMPRESSABLE, compressed, undecompressable, with_log_append_time

NO_WAIT = datetime.timedelta(0)


def _records(values: list[bytes | None], *, key: bytes | None = None, headers: list[Any] | None = None,
             producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
             transactional: bool = False) -> bytes:
    """A record batch as a producer builds it (aiokafka's builder)."""
    b = DefaultRecordBatchBuilder(2, 0, int(transactional), producer_id, producer_epoch, base_sequence, 1 << 20)
    for i, v in enumerate(values):
        b.append(i, 1_700_000_000_000 + i, key, v, headers or [])
    return bytes(b.build())


def _produce(topic: str, partition: int, records: bytes, acks: int = -1, version: int = 9) -> Any:
    m = request_class(0, version)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    return m(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5), topic_data=(
        mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=partition, records=records),)),))


def _produce_partitions(topic: str, partitions: list[tuple[int, bytes]]) -> Any:
    """One Produce of `topic`'s partitions, each with its records, in that order: as a client
    batching several partitions together sends them."""
    return _produce_topics([(topic, partitions)])


def _produce_topics(topics: list[tuple[str, list[tuple[int, bytes]]]], *, version: int = 9,
                    transactional_id: str | None = None) -> Any:
    m = request_class(0, version)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    return m(transactional_id=transactional_id, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=tuple(
        mod.TopicProduceData(name=topic, partition_data=tuple(
            mod.PartitionProduceData(index=p, records=records) for p, records in partitions))
        for topic, partitions in topics))


def _answered(answer: Any) -> list[tuple[str, int, ErrorCode, int]]:
    return [(t.name, p.index, p.error_code, p.base_offset) for t in answer.responses for p in t.partition_responses]


def _partition_answer(answer: Any) -> Any:
    (t,) = answer.responses
    (p,) = t.partition_responses
    return p


def _stored(kafka: Listener, topic: str = "orders", partition: int = 0) -> list[tuple[int, str | None, str | None]]:
    r = kafka.client.get(f"/v1/topics/{topic}/partitions/{partition}/records",
                         params={"isolation": "read_uncommitted"})
    assert r.status_code == 200, r.text
    return [(x["offset"], x["key"], x["value"]) for x in r.json()["records"]]


def test_api_versions_advertises_exactly_what_is_served(kafka: Listener) -> None:
    m = request_class(18, 3)
    with kafka.connect() as s:
        answer = ask(s, 18, 3, m(client_software_name="test", client_software_version="1"))
    assert answer.error_code == ErrorCode.none
    assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == SERVED


def test_api_versions_of_a_version_too_new_is_answered_with_version_0_and_the_list(kafka: Listener) -> None:
    with kafka.connect() as s:
        # A client's ApiVersions v9: the header's first fields, then bytes the listener does not read.
        body = struct.pack(">hhi", 18, 9, 41) + struct.pack(">h", 4) + b"test" + b"\x00\x00\x00"
        s.sendall(struct.pack(">i", len(body)) + body)
        data = read_frame(s)
    assert data is not None
    correlation_id, answer = response(18, 0, data)
    assert correlation_id == 41
    assert answer.error_code == ErrorCode.unsupported_version
    assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == SERVED


def test_a_version_not_served_closes_the_connection_unanswered_as_kafka_does(kafka: Listener) -> None:
    # JoinGroup 8 (a version past the served ones: SERVED has 0 to 7). Answered UNSUPPORTED_VERSION
    # before, while a version whose answer has no error field of its own was answered empty.
    assert SERVED[11][1] < 8
    with kafka.connect() as s:
        s.sendall(frame(11, 8, join_group_v8()))
        assert closed(s)
    with kafka.connect() as s:  # the listener serves the next connection
        again = ask(s, 18, 3, request_class(18, 3)(client_software_name="t", client_software_version="1"), 8)
        assert again.error_code == ErrorCode.none


def test_a_produce_of_a_version_not_served_closes_the_connection_and_writes_nothing(kafka: Listener) -> None:
    # Produce 13 names its topics by id: not served. Its empty answer, with no error field at
    # the top and no partitions, was read by a client as a success.
    create_topic(kafka.client, "orders")
    assert SERVED[0][1] < 13
    m = request_class(0, 13)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    body = m(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
        mod.TopicProduceData(topic_id=uuid.uuid4(), partition_data=(
            mod.PartitionProduceData(index=0, records=_records([b'"a"'])),)),))
    with kafka.connect() as s:
        s.sendall(frame(0, 13, body))
        assert read_frame(s) is None
    assert _stored(kafka) == []


def test_metadata_and_fetch_of_versions_kio_does_not_know_close_the_connection(kafka: Listener) -> None:
    for api_key in (1, 3):  # Fetch, Metadata
        with kafka.connect() as s:
            head = struct.pack(">hhi", api_key, 99, 5) + struct.pack(">h", 4) + b"test" + b"\x00"
            s.sendall(struct.pack(">i", len(head)) + head)
            assert closed(s)


def test_an_unknown_api_key_closes_the_connection(kafka: Listener) -> None:
    with kafka.connect() as s:
        body = struct.pack(">hhi", 9999, 0, 1) + struct.pack(">h", -1)
        s.sendall(struct.pack(">i", len(body)) + body)
        assert closed(s)


def test_a_frame_over_the_limit_closes_the_connection_before_it_is_read(kafka: Listener) -> None:
    limit = kafka.services.settings.kafka_socket_request_max_bytes
    with kafka.connect() as s:
        s.sendall(struct.pack(">i", limit + 1))
        assert closed(s)


def test_a_truncated_request_closes_the_connection_and_writes_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    whole = frame(0, 9, _produce("orders", 0, _records([b'"a"'])))
    with kafka.connect() as s:
        # The frame says it is 10 bytes shorter than the request it carries.
        s.sendall(struct.pack(">i", len(whole) - 14) + whole[4:-10])
        assert closed(s)
    assert _stored(kafka) == []


def test_a_request_that_ends_early_inside_its_frame_closes_the_connection(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    whole = frame(0, 9, _produce("orders", 0, _records([b'"a"'])))
    with kafka.connect() as s:
        s.sendall(struct.pack(">i", 12) + whole[4:16])  # the header and two bytes of the body
        assert closed(s)
    assert _stored(kafka) == []


def test_metadata_names_this_broker_the_leader_of_every_partition(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    m = request_class(3, 12)
    assert m is not None
    with kafka.connect() as s:
        answer = ask(s, 3, 12, m(topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    (broker,) = answer.brokers
    assert (broker.node_id, broker.host, broker.port) == (0, "127.0.0.1", kafka.port)
    (topic,) = answer.topics
    assert (topic.name, topic.error_code) == ("orders", ErrorCode.none)
    assert [(p.partition_index, p.leader_id, p.replica_nodes) for p in topic.partitions] == [(0, 0, (0,)), (1, 0, (0,))]


def test_metadata_of_an_unknown_topic_is_unknown_and_creates_nothing(kafka: Listener) -> None:
    m = request_class(3, 12)
    mod = __import__(m.__module__, fromlist=["x"])
    with kafka.connect() as s:
        answer = ask(s, 3, 12, m(topics=(mod.MetadataRequestTopic(topic_id=None, name="nope"),),
                                 allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    (topic,) = answer.topics
    assert (topic.name, topic.error_code, topic.partitions) == ("nope", ErrorCode.unknown_topic_or_partition, ())
    assert kafka.client.get("/v1/topics/nope").status_code == 404


def test_metadata_naming_topics_twice_answers_each_once_in_the_order_first_named(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    m = request_class(3, 12)
    mod = __import__(m.__module__, fromlist=["x"])
    named = ("orders", "nope", "orders", "nope", "orders")
    with kafka.connect() as s:
        answer = ask(s, 3, 12, m(topics=tuple(mod.MetadataRequestTopic(topic_id=None, name=n) for n in named),
                                 allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("orders", ErrorCode.none), ("nope", ErrorCode.unknown_topic_or_partition)]


def test_find_coordinator_names_this_broker(kafka: Listener) -> None:
    m = request_class(10, 4)
    with kafka.connect() as s:
        answer = ask(s, 10, 4, m(key_type=0, coordinator_keys=("group-a", "group-b")))
    assert [(c.key, c.node_id, c.port, c.error_code) for c in answer.coordinators] == [
        ("group-a", 0, kafka.port, ErrorCode.none), ("group-b", 0, kafka.port, ErrorCode.none)]


def test_produce_appends_json_values_at_their_offsets(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 0, _records([b'{"a": 1}', b'"two"'], key=b"k")))
    p = _partition_answer(answer)
    assert (p.error_code, p.base_offset) == (ErrorCode.none, 0)
    assert _stored(kafka) == [(0, "k", {"a": 1}), (1, "k", "two")]


def test_a_value_that_is_not_json_is_an_invalid_record_and_nothing_of_its_batch_is_written(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 0, _records([b'"fine"', b"not json"])))
    assert _partition_answer(answer).error_code == ErrorCode.invalid_record
    assert _stored(kafka) == []


def test_a_number_beyond_a_64_bit_float_among_json_values_is_an_invalid_record_and_nothing_is_written(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 0, _records([b'{"a": 1}', b'{"b": [1e400]}', b'"c"'])))
    assert _partition_answer(answer).error_code == ErrorCode.invalid_record
    assert _stored(kafka) == []


def test_a_record_larger_than_max_message_bytes_is_message_too_large_and_nothing_is_written(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", max_message_bytes=1000)
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 0, _records([b'"small"', b'"' + b"x" * 1000 + b'"'])))
    assert _partition_answer(answer).error_code == ErrorCode.message_too_large
    assert _stored(kafka) == []


def test_a_batch_claiming_the_log_append_time_is_an_invalid_timestamp_and_nothing_is_written(kafka: Listener) -> None:
    """Only a broker sets a batch's timestamps to the log append time; Kafka's refuses a
    producer's batch that claims it (the service had overwritten the records' timestamps)."""
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 0, with_log_append_time(_records([b"1", b"2"]))))
        kept = ask(s, 0, 9, _produce("orders", 0, _records([b"3"])))
    p = _partition_answer(answer)
    assert p.error_code == ErrorCode.invalid_timestamp
    assert [e.batch_index for e in p.record_errors] == [0, 1]
    assert _partition_answer(kept).error_code == ErrorCode.none
    assert _stored(kafka) == [(0, None, 3)]


@pytest.mark.parametrize("timestamp_ms", [253_402_300_800_000, 2**63 - 1])
def test_a_record_timestamped_past_9999_12_31_is_an_invalid_timestamp_named_and_nothing_is_written(
        kafka: Listener, timestamp_ms: int) -> None:
    """A record may be timestamped 9999-12-31T23:59:59.999Z at the latest (253402300799999,
    app.domain.records.MAX_TIMESTAMP_MS): the partition is answered INVALID_TIMESTAMP with the
    record named, as Kafka's broker answers a timestamp it refuses, and the batch is not written."""
    create_topic(kafka.client, "orders")
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, ts in enumerate((253_402_300_799_999, timestamp_ms, 5)):
        b.append(i, ts, None, b"1", [])
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 0, bytes(b.build())))
    p = _partition_answer(answer)
    assert (p.error_code, [e.batch_index for e in p.record_errors]) == (ErrorCode.invalid_timestamp, [1])
    assert p.error_message == ("record 1 of orders/0: timestamp_ms must be an integer from 0 to 253402300799999 "
                               f"(9999-12-31T23:59:59.999Z), not {timestamp_ms}")
    assert _stored(kafka) == []


def test_a_key_that_is_not_utf8_is_an_invalid_record(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 0, _records([b"1"], key=b"\xff\xfe")))
    assert _partition_answer(answer).error_code == ErrorCode.invalid_record
    assert _stored(kafka) == []


def test_a_header_name_that_is_not_utf8_is_an_invalid_record_and_the_connection_is_kept(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    records = bytearray(_records([b'"a"'], headers=[("h\u00e9", b"v")]))
    at = records.index("h\u00e9".encode())
    records[at + 1:at + 3] = b"\xff\xfe"  # the name's bytes, no longer UTF-8, under a CRC that matches
    struct.pack_into(">I", records, 17, calc_crc32c(bytes(records[21:])))
    _refused_then_a_good_batch_taken(kafka, bytes(records))


def _refused_then_a_good_batch_taken(kafka: Listener, records: bytes) -> None:
    """`records`, produced to orders/0, is an invalid record, written nowhere; a good batch sent
    next on the same connection is taken: the connection was kept."""
    with kafka.connect() as s:
        refused = _partition_answer(ask(s, 0, 9, _produce("orders", 0, records)))
        taken = _partition_answer(ask(s, 0, 9, _produce("orders", 0, _records([b'"b"']))))
    assert (refused.error_code, refused.base_offset) == (ErrorCode.invalid_record, -1)
    assert (taken.error_code, taken.base_offset) == (ErrorCode.none, 0)
    assert _stored(kafka) == [(0, None, "b")]


def test_headers_named_twice_are_an_invalid_record(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 0, _records([b"1"], headers=[("h", b"a"), ("h", b"b")])))
    assert _partition_answer(answer).error_code == ErrorCode.invalid_record
    assert _stored(kafka) == []


def test_a_corrupt_crc_is_a_corrupt_message_and_nothing_is_written(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    records = bytearray(_records([b'"a"']))
    records[-1] ^= 0xFF  # a byte of the record, under the CRC
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 0, bytes(records)))
    assert _partition_answer(answer).error_code == ErrorCode.corrupt_message
    assert _stored(kafka) == []


def test_a_produce_to_a_partition_that_does_not_exist_is_unknown(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 3, _records([b'"a"'])))
    assert _partition_answer(answer).error_code == ErrorCode.unknown_topic_or_partition
    assert _stored(kafka) == []


def test_acks_0_is_not_answered_and_the_next_request_is(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        s.sendall(frame(0, 9, _produce("orders", 0, _records([b'"a"']), acks=0), correlation_id=1))
        # The next answer read is the ApiVersions', correlation id 2: none came for the Produce.
        answer = ask(s, 18, 3, request_class(18, 3)(client_software_name="t", client_software_version="1"), 2)
    assert answer.error_code == ErrorCode.none
    assert _stored(kafka) == [(0, None, "a")]


@pytest.mark.parametrize("acks", [5, 2, -2])
def test_acks_other_than_0_1_and_minus_1_are_invalid_required_acks_and_nothing_is_written(
        kafka: Listener, acks: int) -> None:
    # As Kafka's replica manager: every partition refused, none read. Appended and answered
    # NONE before.
    create_topic(kafka.client, "orders", partitions=2)
    m = request_class(0, 9)
    mod = __import__(m.__module__, fromlist=["x"])
    body = m(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5), topic_data=(
        mod.TopicProduceData(name="orders", partition_data=tuple(
            mod.PartitionProduceData(index=p, records=_records([b'"a"'])) for p in (0, 1))),))
    with kafka.connect() as s:
        answer = ask(s, 0, 9, body)
        # The connection serves the next Produce.
        after = _partition_answer(ask(s, 0, 9, _produce("orders", 1, _records([b'"b"'])), correlation_id=8))
    assert _answered(answer) == [("orders", 0, ErrorCode.invalid_required_acks, -1),
                                 ("orders", 1, ErrorCode.invalid_required_acks, -1)]
    assert _stored(kafka, partition=0) == []
    assert (after.error_code, after.base_offset) == (ErrorCode.none, 0)
    assert _stored(kafka, partition=1) == [(0, None, "b")]


def test_an_idempotent_retry_is_answered_with_the_first_offsets_and_written_once(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        init = ask(s, 22, 4, request_class(22, 4)(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                                  producer_id=-1, producer_epoch=-1))
        assert init.error_code == ErrorCode.none
        records = _records([b"1", b"2"], producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                           base_sequence=0)
        first = _partition_answer(ask(s, 0, 9, _produce("orders", 0, records)))
        retry = _partition_answer(ask(s, 0, 9, _produce("orders", 0, records), 8))
        gap = _partition_answer(ask(s, 0, 9, _produce("orders", 0, _records(
            [b"3"], producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=5)), 9))
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    assert _stored(kafka) == [(0, None, 1), (1, None, 2)]


def test_a_retry_of_any_of_the_last_five_batches_is_answered_with_its_first_base_offset(kafka: Listener) -> None:
    """A producer with up to five requests in flight retries any of them after a lost answer:
    as Kafka's brokers, the door answers each of the producer's last five batches in the
    partition again (NONE, the base offset first answered), writing nothing; the sixth back, or
    one of them with another record count, is DUPLICATE_SEQUENCE_NUMBER."""
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        init = ask(s, 22, 4, request_class(22, 4)(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                                  producer_id=-1, producer_epoch=-1))

        def produce(values: list[bytes], base_sequence: int) -> tuple[ErrorCode, int]:
            p = _partition_answer(ask(s, 0, 9, _produce("orders", 0, _records(
                values, producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                base_sequence=base_sequence))))
            return p.error_code, p.base_offset

        batches, sequence = [], 0
        for n, count in enumerate((2, 1, 3, 1, 2, 1)):
            values = [b'"b%d.%d"' % (n, i) for i in range(count)]
            batches.append((values, sequence, produce(values, sequence)))
            sequence += count
            # Another producer's record between each two of its batches.
            assert _partition_answer(ask(s, 0, 9, _produce("orders", 0, _records([b'"other"'])))).error_code \
                == ErrorCode.none
        stored = _stored(kafka)
        retries = [produce(values, base_sequence) for values, base_sequence, _ in batches]
        recounted = produce([b'"x"', b'"y"'], 3)  # the third batch's sequences (3..5), two records
    assert [first for _, _, first in batches] == [(ErrorCode.none, o) for o in (0, 3, 5, 9, 11, 14)]
    assert retries == [(ErrorCode.duplicate_sequence_number, -1)] + [first for _, _, first in batches[1:]]
    assert recounted == (ErrorCode.duplicate_sequence_number, -1)
    assert _stored(kafka) == stored and len(stored) == 16


def test_an_idempotent_batch_with_a_negative_base_sequence_is_refused_as_the_http_door_refuses_it(
        kafka: Listener) -> None:
    """A base sequence below 0 is no batch's (Kafka's are 0 to 2^31-1): the HTTP
    door's schema refuses it (422 INVALID_REQUEST), and the service both doors call must too. It
    was judged by check_sequence as overlapping what was written and answered
    DUPLICATE_SEQUENCE_NUMBER, which a Kafka producer takes as success: its records acknowledged,
    never written."""
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        init = ask(s, 22, 4, request_class(22, 4)(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                                  producer_id=-1, producer_epoch=-1))
        first = _partition_answer(ask(s, 0, 9, _produce("orders", 0, _records(
            [b"1", b"2"], producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=0))))
        negative = _partition_answer(ask(s, 0, 9, _produce("orders", 0, _records(
            [b"3"], producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=-1)), 8))
    assert first.error_code == ErrorCode.none
    assert negative.error_code not in (ErrorCode.none, ErrorCode.duplicate_sequence_number), negative
    r = kafka.client.post("/v1/records", json={
        "producer_id": init.producer_id, "producer_epoch": init.producer_epoch,
        "batches": [{"topic": "orders", "partition": 0, "base_sequence": -1, "records": [{"value": 3}]}]})
    assert r.status_code == 422 and r.json()["error_code"] == "INVALID_REQUEST", r.text
    assert negative.error_code == ErrorCode.invalid_request
    assert _stored(kafka) == [(0, None, 1), (1, None, 2)]


def test_produce_requests_sent_before_any_answer_is_read_are_answered_in_order_each_on_its_own(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        init = ask(s, 22, 4, request_class(22, 4)(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                                  producer_id=-1, producer_epoch=-1))

        def batch(values: list[bytes], base_sequence: int) -> Any:
            return _produce("orders", 0, _records(values, producer_id=init.producer_id,
                                                  producer_epoch=init.producer_epoch, base_sequence=base_sequence))

        # Four requests in one write, as a client with several requests out sends them; the
        # third skips sequences 3 to 8.
        s.sendall(frame(0, 9, batch([b"1", b"2"], 0), 10) + frame(0, 9, batch([b"3"], 2), 11)
                  + frame(0, 9, batch([b"99"], 9), 12) + frame(0, 9, batch([b"4", b"5"], 3), 13))
        answers = []
        for _ in range(4):
            data = read_frame(s)
            assert data is not None
            correlation_id, answer = response(0, 9, data)
            p = _partition_answer(answer)
            answers.append((correlation_id, p.error_code, p.base_offset))
    assert answers == [(10, ErrorCode.none, 0), (11, ErrorCode.none, 2),
                       (12, ErrorCode.out_of_order_sequence_number, -1), (13, ErrorCode.none, 3)]
    assert _stored(kafka) == [(0, None, 1), (1, None, 2), (2, None, 3), (3, None, 4), (4, None, 5)]


def test_a_frame_that_never_completes_closes_the_connection_once_idle(kafka: Listener) -> None:
    with listener_with(kafka, kafka_connections_max_idle_ms=300) as quick, quick.connect() as s:
        s.sendall(struct.pack(">i", 100) + b"\x00\x12")  # 2 of the 100 bytes announced
        assert closed(s)


def test_a_frame_that_trickles_in_a_byte_at_a_time_has_the_idle_time_to_arrive_whole(kafka: Listener) -> None:
    # Kafka would keep it while bytes come; here it holds its room in the frame budget no
    # longer than OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS however it trickles (README).
    with listener_with(kafka, kafka_connections_max_idle_ms=300) as quick, quick.connect() as s:
        s.sendall(struct.pack(">i", 100))
        sent = 0
        try:
            for _ in range(100):  # a byte every 50 ms: never 300 ms without one, 5 s in all
                s.sendall(b"\x00")
                sent += 1
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert closed(s)
    assert sent < 60


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_a_compressed_batch_is_appended_record_by_record(kafka: Listener, codec: int) -> None:
    create_topic(kafka.client, "orders")
    b = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for i in range(3):
        b.append(i, 1_700_000_000_000, None, b'{"n": %d}' % i, [])
    records = bytes(b.build())
    assert records[22] & 0x07 == codec  # the attributes say so: the batch is compressed
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 0, records))
    assert (_partition_answer(answer).error_code, _partition_answer(answer).base_offset) == (ErrorCode.none, 0)
    assert _stored(kafka) == [(0, None, {"n": 0}), (1, None, {"n": 1}), (2, None, {"n": 2})]


def _fetch(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 1,
           isolation: int = 1, max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20) -> Any:
    m = request_class(1, 12)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    return m(replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
             max_bytes=max_bytes, isolation_level=isolation, session_id=0, session_epoch=-1, topics=(
                 mod.FetchTopic(topic=topic, partitions=(mod.FetchPartition(
                     partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                     log_start_offset=-1, partition_max_bytes=partition_max_bytes),)),),
             forgotten_topics_data=(), rack_id="")


def _fetched_offsets(answer: Any) -> list[int]:
    from tests.kafka.conftest import batch_offsets

    ((p,),) = [t.partitions for t in answer.responses]
    assert p.error_code == ErrorCode.none
    return batch_offsets(p.records)


def test_a_waiting_fetch_is_answered_when_a_record_arrives_not_at_its_deadline(kafka: Listener) -> None:
    import threading
    import time

    create_topic(kafka.client, "orders")
    timer = threading.Timer(0.5, lambda: kafka.client.post("/v1/records", json={"batches": [
        {"topic": "orders", "partition": 0, "records": [{"value": "late"}]}]}))
    with kafka.connect() as s:
        started = time.monotonic()
        timer.start()
        answer = ask(s, 1, 12, _fetch("orders", 0, 0, max_wait_ms=8000))
        waited = time.monotonic() - started
    timer.join()
    assert _fetched_offsets(answer) == [0]
    assert 0.4 <= waited < 6


def test_a_fetch_with_nothing_to_read_waits_max_wait_ms_and_answers_no_records(kafka: Listener) -> None:
    import time

    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        started = time.monotonic()
        answer = ask(s, 1, 12, _fetch("orders", 0, 0, max_wait_ms=400))
        waited = time.monotonic() - started
    assert _fetched_offsets(answer) == []
    assert 0.35 <= waited < 5


def test_a_waiting_fetch_is_answered_when_a_topic_it_reads_is_deleted_not_at_its_deadline(kafka: Listener) -> None:
    import threading
    import time

    create_topic(kafka.client, "orders")
    create_topic(kafka.client, "refunds")
    m = request_class(1, 12)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    fetch = m(replica_id=-1, max_wait=datetime.timedelta(milliseconds=8000), min_bytes=1, max_bytes=1 << 20,
              isolation_level=1, session_id=0, session_epoch=-1, topics=tuple(
                  mod.FetchTopic(topic=name, partitions=(mod.FetchPartition(
                      partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                      log_start_offset=-1, partition_max_bytes=1 << 20),)) for name in ("orders", "refunds")),
              forgotten_topics_data=(), rack_id="")
    timer = threading.Timer(0.5, lambda: kafka.client.delete("/v1/topics/refunds"))
    with kafka.connect() as s:
        started = time.monotonic()
        timer.start()
        answer = ask(s, 1, 12, fetch)
        waited = time.monotonic() - started
    timer.join()
    assert [(t.topic, [(p.partition_index, p.error_code, p.high_watermark) for p in t.partitions])
            for t in answer.responses] == [
        ("orders", [(0, ErrorCode.none, 0)]),
        ("refunds", [(0, ErrorCode.unknown_topic_or_partition, -1)]),
    ]
    assert 0.4 <= waited < 6


def test_a_fetch_stops_at_partition_max_bytes_but_always_brings_the_first_record(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    r = kafka.client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [
        {"value": "x" * 100} for _ in range(3)]}]})
    assert r.status_code == 200, r.text
    with kafka.connect() as s:
        one = ask(s, 1, 12, _fetch("orders", 0, 0, partition_max_bytes=10))
        two = ask(s, 1, 12, _fetch("orders", 0, 0, partition_max_bytes=210), 8)
    assert _fetched_offsets(one) == [0]
    assert _fetched_offsets(two) == [0, 1]


def test_only_the_first_record_of_a_fetch_may_exceed_max_bytes_the_other_partitions_answer_none(
        kafka: Listener) -> None:
    from tests.kafka.conftest import batch_offsets

    create_topic(kafka.client, "orders", partitions=3)
    # Partition 0's record exceeds max_bytes and comes; partition 1's would fit on its own but
    # not in what is left, and does not; partition 2's is past the spent bytes.
    r = kafka.client.post("/v1/records", json={"batches": [
        {"topic": "orders", "partition": p, "records": [{"value": "x" * size}]}
        for p, size in ((0, 300), (1, 90), (2, 300))]})
    assert r.status_code == 200, r.text
    m = request_class(1, 12)
    mod = __import__(m.__module__, fromlist=["x"])
    fetch = m(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=500, isolation_level=1,
              session_id=0, session_epoch=-1, topics=(mod.FetchTopic(topic="orders", partitions=tuple(
                  mod.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                     log_start_offset=-1, partition_max_bytes=1 << 20) for p in range(3))),),
              forgotten_topics_data=(), rack_id="")
    with kafka.connect() as s:
        answer = ask(s, 1, 12, fetch)
    ((*partitions,),) = [t.partitions for t in answer.responses]
    assert [(p.partition_index, p.error_code, p.high_watermark, batch_offsets(p.records)) for p in partitions] == [
        (0, ErrorCode.none, 1, [0]), (1, ErrorCode.none, 1, []), (2, ErrorCode.none, 1, [])]


def _produce_bytes(kafka: Listener, topic: str, partition: int, values: list[bytes]) -> None:
    """Each value a batch of its own, produced to a bytes topic."""
    with kafka.connect() as s:
        for v in values:
            answer = ask(s, 0, 9, _produce(topic, partition, _records([v])))
            assert _partition_answer(answer).error_code == ErrorCode.none


def test_a_fetch_whose_limits_are_met_answers_at_once_not_after_max_wait_ms(kafka: Listener) -> None:
    import time

    create_topic(kafka.client, "blobs", value_format="bytes")
    _produce_bytes(kafka, "blobs", 0, [bytes([n]) * 100_000 for n in range(3)])
    with kafka.connect() as s:
        started = time.monotonic()
        # min_bytes met by the one record that fits partition_max_bytes
        one = ask(s, 1, 12, _fetch("blobs", 0, 0, max_wait_ms=5000, min_bytes=100_000,
                                   partition_max_bytes=150_000))
        two = ask(s, 1, 12, _fetch("blobs", 0, 1, max_wait_ms=5000, min_bytes=1, partition_max_bytes=250_000), 8)
        waited = time.monotonic() - started
    assert _fetched_offsets(one) == [0]
    assert _fetched_offsets(two) == [1, 2]
    assert waited < 2.5


def test_a_fetch_of_one_large_record_reads_that_record_not_the_records_after_it(kafka: Listener) -> None:
    import tracemalloc

    create_topic(kafka.client, "blobs", value_format="bytes")
    _produce_bytes(kafka, "blobs", 0, [bytes([n]) * 256_000 for n in range(40)])
    # What the process holds while it answers: the one record (with its copies in the answer,
    # and this client's), not the 10 MB of the 40 records up to the record limit.
    tracemalloc.start()
    try:
        with kafka.connect() as s:
            tracemalloc.reset_peak()
            answer = ask(s, 1, 12, _fetch("blobs", 0, 0, partition_max_bytes=1000))
            peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert _fetched_offsets(answer) == [0]
    assert peak < 3_000_000, peak


def test_a_later_partition_whose_first_record_does_not_fit_is_not_read(kafka: Listener) -> None:
    import tracemalloc

    from tests.kafka.conftest import batch_offsets

    create_topic(kafka.client, "blobs", partitions=3, value_format="bytes")
    for p in range(3):
        _produce_bytes(kafka, "blobs", p, [bytes([p]) * 900_000] * 8)
    m = request_class(1, 12)
    mod = __import__(m.__module__, fromlist=["x"])
    fetch = m(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1_000_000, isolation_level=1,
              session_id=0, session_epoch=-1, topics=(mod.FetchTopic(topic="blobs", partitions=tuple(
                  mod.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                     log_start_offset=-1, partition_max_bytes=20_000_000) for p in range(3))),),
              forgotten_topics_data=(), rack_id="")
    tracemalloc.start()
    try:
        with kafka.connect() as s:
            tracemalloc.reset_peak()
            answer = ask(s, 1, 12, fetch)
            peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    ((*partitions,),) = [t.partitions for t in answer.responses]
    assert [(p.partition_index, p.high_watermark, batch_offsets(p.records)) for p in partitions] == [
        (0, 8, [0]), (1, 8, []), (2, 8, [])]
    # Partition 0's first record and its copies; none of the other 23 (20.7 MB) is handed over.
    assert peak < 6_000_000, peak


def test_a_fetch_answers_each_stored_send_as_its_own_record_batch_and_names_the_aborted_one(
        kafka: Listener) -> None:
    from aiokafka.record.memory_records import MemoryRecords

    from tests.helpers import batch, begin, ident, init_producer, send

    client = kafka.client
    create_topic(client, "orders")
    p, a = init_producer(client), init_producer(client, "a")
    assert send(client, [batch("orders", 0, ["p0", "p1"], 0)], p).status_code == 200  # 0, 1
    begin(client, "a", a)
    assert send(client, [batch("orders", 0, ["a0"], 0)], a, "a").status_code == 200  # 2
    assert client.post("/v1/transactions/a/abort", json=ident(a)).status_code == 200  # ABORT at 3
    assert send(client, [batch("orders", 0, ["p2"], 2)], p).status_code == 200  # 4
    with kafka.connect() as s:
        answer = ask(s, 1, 12, _fetch("orders", 0, 0))
    ((part,),) = [t.partitions for t in answer.responses]
    batches, read = [], MemoryRecords(bytes(part.records))
    while (b := read.next_batch()) is not None:
        batches.append((b.base_offset, b.producer_id, b.base_sequence, b.is_transactional, b.is_control_batch,
                        [r.offset for r in b]))
    pid, aid = p["producer_id"], a["producer_id"]
    assert batches == [(0, pid, 0, False, False, [0, 1]), (2, aid, 0, True, False, [2]),
                       (3, aid, -1, True, True, [3]), (4, pid, 2, False, False, [4])]
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(aid, 2)]


def test_a_fetch_below_the_log_start_is_offset_out_of_range(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        answer = ask(s, 1, 12, _fetch("orders", 0, 5))
    ((p,),) = [t.partitions for t in answer.responses]
    assert p.error_code == ErrorCode.offset_out_of_range


def test_a_partition_s_fetch_error_comes_with_empty_records_not_null(kafka: Listener) -> None:
    # Kafka answers an erring partition with an empty record set; librdkafka 2.0 takes a null
    # one (size -1, before Fetch's flexible versions) for a corrupt answer and fetches again
    # for ever (its own test 0034-offset_reset).
    create_topic(kafka.client, "orders")
    m = request_class(1, 11)
    mod = __import__(m.__module__, fromlist=["x"])
    fetch = m(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
              session_id=0, session_epoch=-1, topics=tuple(mod.FetchTopic(topic=name, partitions=(mod.FetchPartition(
                  partition=0, current_leader_epoch=-1, fetch_offset=5, log_start_offset=-1,
                  partition_max_bytes=1 << 20),)) for name in ("orders", "missing")),
              forgotten_topics_data=(), rack_id="")
    with kafka.connect() as s:
        answer = ask(s, 1, 11, fetch)
    assert [(t.topic, p.error_code, p.records) for t in answer.responses for p in t.partitions] == [
        ("orders", ErrorCode.offset_out_of_range, b""), ("missing", ErrorCode.unknown_topic_or_partition, b"")]


def test_a_failed_produce_with_acks_0_closes_the_connection_as_kafka_does(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        s.sendall(frame(0, 9, _produce("orders", 0, _records([b"not json"]), acks=0)))
        assert closed(s)
    assert _stored(kafka) == []


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_a_batch_that_decompresses_past_the_request_limit_is_refused_and_not_written(
        kafka: Listener, codec: int) -> None:
    create_topic(kafka.client, "orders")
    records = compressed(codec, b'"' + b"0" * 3_000_000 + b'"')
    with listener_with(kafka, kafka_socket_request_max_bytes=1 << 20) as small, small.connect() as s:
        assert len(records) < 1 << 20  # the frame itself is under the limit
        answer = ask(s, 0, 9, _produce("orders", 0, records))
    assert _partition_answer(answer).error_code == ErrorCode.record_list_too_large
    assert _stored(kafka) == []


def test_init_producer_id_with_the_current_id_and_epoch_bumps_the_epoch(kafka: Listener) -> None:
    m = request_class(22, 4)
    assert m is not None
    with kafka.connect() as s:
        first = ask(s, 22, 4, m(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                producer_id=-1, producer_epoch=-1))
        bumped = ask(s, 22, 4, m(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                 producer_id=first.producer_id, producer_epoch=first.producer_epoch), 8)
    assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.none, first.producer_id, 1)


def test_compressed_batches_past_the_request_limit_together_are_not_written_and_retriable_from_the_one_past_it(
        kafka: Listener) -> None:
    # Each batch alone is within the limit: the request's records, together, are not. The
    # batches from the one past it are not at fault: NOT_ENOUGH_REPLICAS, which producers
    # retry as not written (RECORD_LIST_TOO_LARGE, not retriable, lost their records).
    create_topic(kafka.client, "blobs", partitions=4, value_format="bytes")
    large, small = compressed(4, b"a" * 400_000), _records([b"b"])
    body = _produce_partitions("blobs", [(0, large), (1, large), (2, large), (3, small)])
    with listener_with(kafka, kafka_socket_request_max_bytes=1 << 20) as small_limit, small_limit.connect() as s:
        answer = ask(s, 0, 9, body)
        again = ask(s, 0, 9, _produce_partitions("blobs", [(2, large), (3, small)]))  # the next request has its own
    assert _answered(answer) == [("blobs", 0, ErrorCode.none, 0), ("blobs", 1, ErrorCode.none, 0),
                                 ("blobs", 2, ErrorCode.not_enough_replicas, -1),
                                 ("blobs", 3, ErrorCode.not_enough_replicas, -1)]
    assert _answered(again) == [("blobs", 2, ErrorCode.none, 0), ("blobs", 3, ErrorCode.none, 0)]
    assert [len(_stored_values(kafka, p)) for p in range(4)] == [1, 1, 1, 1]


def test_a_batch_refused_for_an_unknown_topic_still_takes_the_request_s_decompressed_bytes(kafka: Listener) -> None:
    # Its records were decompressed to measure them before the topic was looked up.
    create_topic(kafka.client, "blobs", value_format="bytes")
    large = compressed(4, b"a" * 600_000)
    with listener_with(kafka, kafka_socket_request_max_bytes=1 << 20) as small_limit, small_limit.connect() as s:
        answer = ask(s, 0, 9, _produce_topics([("nowhere", [(0, large)]), ("blobs", [(0, large)])]))
    assert _answered(answer) == [("nowhere", 0, ErrorCode.unknown_topic_or_partition, -1),
                                 ("blobs", 0, ErrorCode.not_enough_replicas, -1)]
    assert _stored_values(kafka, 0) == []


def test_records_that_do_not_decompress_take_what_finding_that_out_decompressed_not_the_request_s_bound(
        kafka: Listener) -> None:
    create_topic(kafka.client, "blobs", partitions=3, value_format="bytes")
    large = compressed(4, b"a" * 400_000)
    body = _produce_partitions("blobs", [(0, undecompressable("zstd-garbage")), (1, large), (2, large)])
    with listener_with(kafka, kafka_socket_request_max_bytes=1 << 20) as small_limit, small_limit.connect() as s:
        answer = ask(s, 0, 9, body)
    assert _answered(answer) == [("blobs", 0, ErrorCode.invalid_record, -1), ("blobs", 1, ErrorCode.none, 0),
                                 ("blobs", 2, ErrorCode.none, 0)]


def _stored_values(kafka: Listener, partition: int) -> list[Any]:
    r = kafka.client.get(f"/v1/topics/blobs/partitions/{partition}/records", params={"isolation": "read_uncommitted"})
    assert r.status_code == 200, r.text
    return [x["value"] for x in r.json()["records"]]


@pytest.mark.parametrize("shape", sorted(UNDECOMPRESSABLE))
def test_a_compressed_batch_whose_records_do_not_decompress_is_an_invalid_record_and_the_connection_kept(
        kafka: Listener, shape: str) -> None:
    # Its CRC matches its bytes: only decompressing them finds them out. A bad deflate body
    # (zlib.error), a gzip member cut short (EOFError), a xerial block length cut short
    # (struct.error) were a traceback in the service's log and the connection closed without
    # an answer, the partition before it written: a producer without idempotence, retrying,
    # wrote it twice.
    create_topic(kafka.client, "blobs", partitions=2, value_format="bytes")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce_partitions("blobs", [(0, _records([b"good"])), (1, undecompressable(shape))]))
        again = _partition_answer(ask(s, 0, 9, _produce("blobs", 1, _records([b"next"]))))
    assert _answered(answer) == [("blobs", 0, ErrorCode.none, 0), ("blobs", 1, ErrorCode.invalid_record, -1)]
    assert (again.error_code, again.base_offset) == (ErrorCode.none, 0)  # on the same connection
    assert [len(_stored_values(kafka, p)) for p in range(2)] == [1, 1]


def test_a_produce_naming_a_topic_with_no_partitions_writes_the_others_once_and_answers_them_alone(
        kafka: Listener) -> None:
    # As Kafka's answer, which is its partitions': the topic named with none is not in it.
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce_topics([("orders", [(0, _records([b'"a"']))]), ("anything", [])]))
        again = _partition_answer(ask(s, 0, 9, _produce("orders", 0, _records([b'"b"'])), correlation_id=8))
    assert _answered(answer) == [("orders", 0, ErrorCode.none, 0)]
    assert (again.error_code, again.base_offset) == (ErrorCode.none, 1)  # on the same connection
    assert [value for _, _, value in _stored(kafka)] == ["a", "b"]


def test_a_delete_records_naming_a_topic_with_no_partitions_moves_the_others_and_answers_them_alone(
        kafka: Listener) -> None:
    from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic

    create_topic(kafka.client, "orders", value_format="bytes")
    _produce_bytes(kafka, "orders", 0, [b"a", b"b", b"c"])
    with kafka.connect() as s:
        answer = ask(s, 21, 2, DeleteRecordsRequest(timeout=datetime.timedelta(seconds=5), topics=(
            DeleteRecordsTopic(name="orders", partitions=(DeleteRecordsPartition(partition_index=0, offset=2),)),
            DeleteRecordsTopic(name="zz", partitions=()))))
        again = ask(s, 21, 2, DeleteRecordsRequest(timeout=datetime.timedelta(seconds=5), topics=(
            DeleteRecordsTopic(name="orders", partitions=(DeleteRecordsPartition(partition_index=0, offset=2),)),)),
            correlation_id=8)
    assert [(t.name, [(p.partition_index, p.error_code, p.low_watermark) for p in t.partitions])
            for t in answer.topics] == [("orders", [(0, ErrorCode.none, 2)])]
    assert [p.error_code for t in again.topics for p in t.partitions] == [ErrorCode.none]  # the same connection
    assert kafka.client.get("/v1/topics/orders/partitions/0/offsets").json()["log_start_offset"] == 2


def test_a_fetch_naming_a_topic_with_no_partitions_answers_the_others_alone(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        ask(s, 0, 9, _produce("orders", 0, _records([b'"a"'])))
        request = _fetch("orders", 0, 0)
        m = __import__(type(request).__module__, fromlist=["FetchTopic"])
        answer = ask(s, 1, 12, dataclasses.replace(request, topics=(
            *request.topics, m.FetchTopic(topic="zz", partitions=()))), correlation_id=8)
    assert [(t.topic, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.responses] == [
        ("orders", [(0, ErrorCode.none)])]
    assert _fetched_offsets(answer) == [0]


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_a_batch_whose_compression_codec_names_none_is_corrupt_message_and_the_connection_kept(
        kafka: Listener, codec: int) -> None:
    # Its CRC matches its bytes. aiokafka's reader raised UnsupportedCodecError: the connection
    # closed unanswered, the Produce's partition before it written.
    from tests.kafka_batches import with_codec

    create_topic(kafka.client, "blobs", partitions=2, value_format="bytes")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce_partitions("blobs", [
            (0, _records([b"good"])), (1, with_codec(_records([b"bad"]), codec))]))
        again = _partition_answer(ask(s, 0, 9, _produce("blobs", 1, _records([b"next"])), correlation_id=8))
    assert _answered(answer) == [("blobs", 0, ErrorCode.none, 0), ("blobs", 1, ErrorCode.corrupt_message, -1)]
    assert (again.error_code, again.base_offset) == (ErrorCode.none, 0)  # on the same connection
    assert [len(_stored_values(kafka, p)) for p in range(2)] == [1, 1]


@pytest.mark.parametrize("version", [1, 3, 4])
def test_find_coordinator_of_an_unknown_key_type_is_an_invalid_request_naming_no_broker(
        kafka: Listener, version: int) -> None:
    # As Kafka: answered NONE with this broker before, the client took it for a coordinator.
    m = request_class(10, version)
    with kafka.connect() as s:
        if version >= 4:
            answer = ask(s, 10, version, m(key_type=9, coordinator_keys=("group-a", "tx")))
            assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in answer.coordinators] == [
                ("group-a", ErrorCode.invalid_request, -1, "", -1), ("tx", ErrorCode.invalid_request, -1, "", -1)]
            assert answer.coordinators[0].error_message == "key_type 9 is none of 0 (group), 1 (transaction)"
        else:
            answer = ask(s, 10, version, m(key="group-a", key_type=9))
            assert (answer.error_code, answer.node_id, answer.host, answer.port) == (
                ErrorCode.invalid_request, -1, "", -1)
        # The connection serves the next request: a key_type served.
        good = ask(s, 10, 4, request_class(10, 4)(key_type=1, coordinator_keys=("tx",)), correlation_id=8)
    assert [(c.error_code, c.node_id, c.port) for c in good.coordinators] == [(ErrorCode.none, 0, kafka.port)]


def test_find_coordinator_version_0_without_a_key_type_finds_a_group_s(kafka: Listener) -> None:
    m = request_class(10, 0)
    with kafka.connect() as s:
        answer = ask(s, 10, 0, m(key="group-a"))
    assert (answer.error_code, answer.node_id, answer.port) == (ErrorCode.none, 0, kafka.port)


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_of_a_version_without_topic_ids_naming_a_topic_by_no_name_answers_every_topic_invalid_request(
        kafka: Listener, version: int) -> None:
    # As Kafka: a null name (the request's topic ids not served before version 12) makes the
    # request invalid. Its answer, whose names are not nullable, failed to encode: closed.
    create_topic(kafka.client, "orders")
    m = request_class(3, version)
    mod = __import__(m.__module__, fromlist=["x"])
    cluster = {"include_cluster_authorized_operations": False} if version == 10 else {}
    with kafka.connect() as s:
        answer = ask(s, 3, version, m(topics=(mod.MetadataRequestTopic(topic_id=None, name="orders"),
                                              mod.MetadataRequestTopic(topic_id=None, name=None)),
                                      allow_auto_topic_creation=False, include_topic_authorized_operations=False,
                                      **cluster))
    assert [(t.name, t.error_code, t.partitions) for t in answer.topics] == [
        ("orders", ErrorCode.invalid_request, ()), ("", ErrorCode.invalid_request, ())]


def test_metadata_version_12_naming_a_topic_by_an_id_alone_answers_it_unknown_topic_id(kafka: Listener) -> None:
    import uuid

    create_topic(kafka.client, "orders")
    m = request_class(3, 12)
    mod = __import__(m.__module__, fromlist=["x"])
    some_id = uuid.UUID(int=7)
    with kafka.connect() as s:
        answer = ask(s, 3, 12, m(topics=(mod.MetadataRequestTopic(topic_id=None, name="orders"),
                                         mod.MetadataRequestTopic(topic_id=some_id, name=None)),
                                 allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert [(t.name, t.topic_id, t.error_code) for t in answer.topics] == [
        (None, some_id, ErrorCode.unknown_topic_id), ("orders", None, ErrorCode.none)]  # kio reads a zero id as None
