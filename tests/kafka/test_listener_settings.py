"""The Kafka listener's own settings act: OUTBOX_KAFKA_BROKER_ID is the node id clients are
told of, OUTBOX_KAFKA_ADVERTISED_LISTENER the address, OUTBOX_KAFKA_MAX_CONNECTIONS the
connections it keeps open at once. (The request size
and idle limits are tested with the frames they act on, tests/kafka/test_wire.py.)"""

from __future__ import annotations

import datetime
import logging
import socket
import time

import pytest
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import IO_TIMEOUT_S, Listener, ask, closed, listener_with

pytestmark = pytest.mark.kafka


def test_the_broker_id_is_the_node_clients_are_told_to_find(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=1)
    metadata, coordinator = request_class(3, 12), request_class(10, 4)
    with listener_with(kafka, kafka_broker_id=7) as seven, seven.connect() as s:
        answer = ask(s, 3, 12, metadata(topics=None, allow_auto_topic_creation=False,
                                        include_topic_authorized_operations=False))
        found = ask(s, 10, 4, coordinator(key_type=1, coordinator_keys=("pay-1",)))
    (broker,) = answer.brokers
    assert (broker.node_id, answer.controller_id) == (7, 7)
    (topic,) = answer.topics
    assert [(p.leader_id, p.replica_nodes, p.isr_nodes) for p in topic.partitions] == [(7, (7,), (7,))]
    assert [(c.key, c.node_id) for c in found.coordinators] == [("pay-1", 7)]


def test_clients_are_told_the_advertised_listener_rather_than_the_listener_s_own_address(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=1)
    metadata, coordinator = request_class(3, 12), request_class(10, 4)
    with listener_with(kafka, kafka_advertised_listener="kafka.example.com:19092") as told, told.connect() as s:
        answer = ask(s, 3, 12, metadata(topics=None, allow_auto_topic_creation=False,
                                        include_topic_authorized_operations=False))
        found = ask(s, 10, 4, coordinator(key_type=1, coordinator_keys=("pay-1",)))
    assert [(b.host, b.port) for b in answer.brokers] == [("kafka.example.com", 19092)]
    assert [(c.host, c.port) for c in found.coordinators] == [("kafka.example.com", 19092)]


def test_connections_past_the_limit_are_closed_as_they_are_accepted(kafka: Listener) -> None:
    versions = request_class(18, 3)
    request = versions(client_software_name="test", client_software_version="1")
    with listener_with(kafka, kafka_max_connections=2) as small:
        first, second = small.connect(), small.connect()
        try:
            # Both served: a request on each is answered (and so both are accepted by now).
            for s in (first, second):
                assert ask(s, 18, 3, request).error_code == ErrorCode.none
            with small.connect() as third:
                assert closed(third)
            first.close()
            # A place freed: the next connection is served.
            _connected_and_answered(small, request).close()
        finally:
            first.close()
            second.close()


def test_a_flood_of_connections_past_the_limit_is_one_warning(kafka: Listener,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    # A line a refused connection would let a client flood the log as fast as it connects.
    versions = request_class(18, 3)
    request = versions(client_software_name="test", client_software_version="1")
    with caplog.at_level(logging.WARNING, "app.kafka"), listener_with(kafka, kafka_max_connections=1) as small, \
            small.connect() as first:
        assert ask(first, 18, 3, request).error_code == ErrorCode.none  # accepted by now
        for _ in range(5):
            with small.connect() as refused:
                assert closed(refused)
    lines = [r.getMessage() for r in caplog.records if "OUTBOX_KAFKA_MAX_CONNECTIONS" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("Kafka listener: 1 connections already"), lines


def _connected_and_answered(listener: Listener, request: object) -> socket.socket:
    """A connection the listener serves, once the closed one's place is given back (its task
    ends a moment after the client closes): tried a few times."""
    for _ in range(50):
        s = listener.connect()
        try:
            ask(s, 18, 3, request)
            return s
        except (AssertionError, ConnectionError, OSError):
            s.close()
            time.sleep(0.1)
    raise AssertionError("no connection was served after one closed")


def test_a_fetch_waits_whatever_the_waiting_requests_bound(kafka: Listener) -> None:
    """OUTBOX_MAX_WAITING_REQUESTS keeps HTTP connections for requests that do not wait; the
    Kafka door's waits are one a connection, bounded by OUTBOX_KAFKA_MAX_CONNECTIONS. A Fetch
    refused a place would be answered at once with nothing, and Kafka's clients fetch again at
    once after an empty answer: it waits, every place taken, and takes none."""
    import dataclasses

    from app.kafka.server import KafkaListener
    from app.services.waiting import WaitingRequests
    from tests.kafka.conftest import frame, read_frame, response
    from tests.kafka.test_wire import _fetch, _fetched_offsets

    create_topic(kafka.client, "orders")
    services = dataclasses.replace(kafka.services, waiting=WaitingRequests(1, 1))
    taken = services.waiting.enter("User:alice", "fetch")  # every place taken (an HTTP long poll)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    listener = KafkaListener(services, sock)
    kafka.client.portal.call(listener.start)
    try:
        bounded = Listener("127.0.0.1", listener.port, kafka.client)
        with bounded.connect() as s:
            started = time.monotonic()
            s.sendall(frame(1, 12, _fetch("orders", 0, 0, max_wait_ms=1500), correlation_id=1))
            data = read_frame(s)
            waited = time.monotonic() - started
        assert data is not None and _fetched_offsets(response(1, 12, data)[1]) == []
        assert waited >= 1.4, waited  # its whole max_wait_ms: not answered at once
        assert services.waiting.total == 1  # the HTTP place alone
    finally:
        taken.release()
        kafka.client.portal.call(listener.stop)


def _metadata_of(listener: Listener, name: str, *, allow_auto_topic_creation: bool) -> tuple[str, int, int]:
    """(topic, error code, partition count) of a Metadata version 12 naming `name`."""
    m = request_class(3, 12)
    mod = __import__(m.__module__, fromlist=["x"])
    with listener.connect() as s:
        answer = ask(s, 3, 12, m(topics=(mod.MetadataRequestTopic(topic_id=None, name=name),),
                                 allow_auto_topic_creation=allow_auto_topic_creation,
                                 include_topic_authorized_operations=False))
    (topic,) = answer.topics
    return topic.name, topic.error_code, len(topic.partitions)


def test_auto_create_topics_makes_a_named_topic_with_num_partitions_as_a_bytes_topic(kafka: Listener) -> None:
    with listener_with(kafka, kafka_auto_create_topics=True, kafka_num_partitions=3) as auto:
        assert _metadata_of(auto, "fresh", allow_auto_topic_creation=True) == ("fresh", ErrorCode.none, 3)
    r = kafka.client.get("/v1/topics/fresh")
    assert (r.json()["partition_count"], r.json()["config"]["value_format"]) == (3, "bytes")


def test_auto_create_topics_creates_nothing_when_the_request_does_not_allow_it(kafka: Listener) -> None:
    with listener_with(kafka, kafka_auto_create_topics=True) as auto:
        assert _metadata_of(auto, "fresh", allow_auto_topic_creation=False) == (
            "fresh", ErrorCode.unknown_topic_or_partition, 0)
    assert kafka.client.get("/v1/topics/fresh").status_code == 404


def test_auto_create_topics_refuses_an_illegal_name_with_kafka_s_code(kafka: Listener) -> None:
    with listener_with(kafka, kafka_auto_create_topics=True) as auto:
        assert _metadata_of(auto, "bad/name", allow_auto_topic_creation=True) == (
            "bad/name", ErrorCode.invalid_topic_exception, 0)


def test_a_producer_to_a_missing_topic_has_it_auto_created_and_its_record_written(kafka: Listener) -> None:
    from confluent_kafka import Producer

    with listener_with(kafka, kafka_auto_create_topics=True) as auto:
        p = Producer({"bootstrap.servers": auto.bootstrap, "linger.ms": 0, "message.timeout.ms": 10_000})
        reports: list[object] = []
        p.produce("fresh", value=b"\x00raw", partition=0,
                  on_delivery=lambda err, msg: reports.append((err, msg.offset())))
        assert p.flush(20) == 0
    assert reports == [(None, 0)]
    records = kafka.client.get("/v1/topics/fresh/partitions/0/records").json()["records"]
    assert [r["value"] for r in records] == [{"type": "BINARY", "data": "AHJhdw=="}]


def test_num_partitions_is_the_count_of_a_create_topics_that_leaves_it_to_the_broker(kafka: Listener) -> None:
    m = request_class(19, 7)
    mod = __import__(m.__module__, fromlist=["x"])
    topic = mod.CreatableTopic(name="orders", num_partitions=-1, replication_factor=-1, assignments=(), configs=())
    with listener_with(kafka, kafka_num_partitions=5) as five, five.connect() as s:
        answer = ask(s, 19, 7, m(topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False))
    assert [(t.name, t.error_code, t.num_partitions) for t in answer.topics] == [("orders", ErrorCode.none, 5)]
    assert kafka.client.get("/v1/topics/orders").json()["partition_count"] == 5


def test_connections_past_the_per_address_limit_are_closed_and_another_address_is_served(kafka: Listener) -> None:
    versions = request_class(18, 3)
    request = versions(client_software_name="test", client_software_version="1")
    with listener_with(kafka, kafka_max_connections_per_ip=1) as small, small.connect() as first:
        assert ask(first, 18, 3, request).error_code == ErrorCode.none  # accepted by now
        with small.connect() as second:
            assert closed(second)
        with socket.create_connection((small.host, small.port), timeout=IO_TIMEOUT_S,
                                      source_address=("127.0.0.2", 0)) as elsewhere:
            elsewhere.settimeout(IO_TIMEOUT_S)
            assert ask(elsewhere, 18, 3, request).error_code == ErrorCode.none
