"""Requests the door reads as Kafka does, at the listener: one with a list null where its
version allows none closes the connection as unreadable before any of it is done (logged at
INFO, no traceback); one with a tagged field the door does not know is answered without it.
How the frames are read: tests/unit/test_kafka_request_reading.py."""

from __future__ import annotations

import logging
import struct
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v4 import request as create_topics_v4
from kio.schema.describe_producers.v0 import request as describe_producers_v0
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask, closed, frame, read_frame, response
from tests.kafka.test_door_metrics import _added

pytestmark = pytest.mark.kafka


def _closed_as_unreadable(kafka: Listener, caplog: pytest.LogCaptureFixture, data: bytes) -> None:
    unreadable = _added("outbox_kafka_connections_closed_total", reason="unreadable")
    caplog.set_level(logging.INFO, logger="app.kafka")
    with kafka.connect() as s:
        s.sendall(data)
        assert closed(s)
    assert [r.levelname for r in caplog.records if "UnexpectedNull" in r.getMessage()] == ["INFO"]
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert unreadable() == 1


def _topic(name: str, configs: tuple[create_topics_v4.CreatableTopicConfig, ...] | None) -> Any:
    return create_topics_v4.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=(),
                                           configs=configs)  # type: ignore[arg-type]


def test_a_create_topics_whose_second_topic_s_configs_are_null_creates_no_topic_and_closes_as_unreadable(
        kafka: Listener, caplog: pytest.LogCaptureFixture) -> None:
    body = create_topics_v4.CreateTopicsRequest(topics=(_topic("orders", ()), _topic("clicks", None)))
    _closed_as_unreadable(kafka, caplog, frame(19, 4, body))
    assert kafka.client.get("/v1/topics/orders").status_code == 404


def test_a_describe_producers_whose_partitions_are_null_closes_as_unreadable(
        kafka: Listener, caplog: pytest.LogCaptureFixture) -> None:
    create_topic(kafka.client, "orders")
    body = describe_producers_v0.DescribeProducersRequest(topics=(
        describe_producers_v0.TopicRequest(name="orders", partition_indexes=None),))  # type: ignore[arg-type]
    _closed_as_unreadable(kafka, caplog, frame(61, 0, body))


UNKNOWN_TAG = 99


def test_an_api_versions_v3_with_an_unknown_tagged_field_is_answered(kafka: Listener) -> None:
    plain = frame(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert plain.endswith(b"\0")  # the body's tagged fields: none; now one, of 2 bytes
    request = plain[4:-1] + bytes([1, UNKNOWN_TAG, 2]) + b"\1\2"
    with kafka.connect() as s:
        s.sendall(struct.pack(">i", len(request)) + request)
        data = read_frame(s)
    assert data is not None
    correlation_id, answer = response(18, 3, data)
    assert correlation_id == 7 and answer.error_code == ErrorCode.none


def test_a_metadata_v12_with_an_unknown_tagged_field_in_a_topic_is_answered(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    m = request_class(3, 12)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["MetadataRequestTopic"])
    body = m(topics=(mod.MetadataRequestTopic(topic_id=None, name="orders"),), allow_auto_topic_creation=False,
             include_topic_authorized_operations=False)
    plain = frame(3, 12, body)
    end = plain.index(b"orders") + len(b"orders")
    assert plain[end] == 0  # the topic's tagged fields: none; now one, of 2 bytes
    request = plain[4:end] + bytes([1, UNKNOWN_TAG, 2]) + b"\1\2" + plain[end + 1:]
    with kafka.connect() as s:
        s.sendall(struct.pack(">i", len(request)) + request)
        data = read_frame(s)
        assert data is not None
        _, answer = response(3, 12, data)
        assert [(t.name, len(t.partitions)) for t in answer.topics] == [("orders", 2)]
        # and the connection is still served
        assert ask(s, 3, 12, body).topics[0].error_code == ErrorCode.none
