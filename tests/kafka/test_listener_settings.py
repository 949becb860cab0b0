"""The Kafka listener's own settings act: OUTBOX_KAFKA_BROKER_ID is the node id clients are
told of, OUTBOX_KAFKA_MAX_CONNECTIONS the connections it keeps open at once. (The request size
and idle limits are tested with the frames they act on, tests/kafka/test_wire.py.)"""

from __future__ import annotations

import socket
import time

import pytest
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask, closed, listener_with

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


def test_a_fetch_past_the_waiting_requests_bound_is_answered_at_once(kafka: Listener) -> None:
    """OUTBOX_MAX_WAITING_REQUESTS counts the Kafka door's waiting Fetches as it counts HTTP's:
    with one place, a second Fetch that would wait is answered with what is there (nothing)
    while the first still waits."""
    import dataclasses
    import select

    from app.kafka.server import KafkaListener
    from app.services.waiting import WaitingRequests
    from tests.kafka.conftest import frame, read_frame, response
    from tests.kafka.test_wire import _fetch, _fetched_offsets

    create_topic(kafka.client, "orders")
    services = dataclasses.replace(kafka.services, waiting=WaitingRequests(1, 1))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    listener = KafkaListener(services, sock)
    kafka.client.portal.call(listener.start)
    try:
        bounded = Listener("127.0.0.1", listener.port, kafka.client)
        with bounded.connect() as first, bounded.connect() as second:
            first.sendall(frame(1, 12, _fetch("orders", 0, 0, max_wait_ms=4000), correlation_id=1))
            deadline = time.monotonic() + 5
            while services.waiting.total == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert services.waiting.total == 1  # the first one waits, in the only place
            second.sendall(frame(1, 12, _fetch("orders", 0, 0, max_wait_ms=4000), correlation_id=2))
            data = read_frame(second)
            assert data is not None
            assert _fetched_offsets(response(1, 12, data)[1]) == []
            assert select.select([first], [], [], 0)[0] == []  # still waiting when the second was answered
            assert _fetched_offsets(response(1, 12, read_frame(first))[1]) == []
        assert services.waiting.total == 0  # its place given back
    finally:
        kafka.client.portal.call(listener.stop)
