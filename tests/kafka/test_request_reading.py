"""Requests the door reads as Kafka does, at the listener: one with a list null where its
version allows none closes the connection as unreadable before any of it is done (logged at
INFO, no traceback).
How the frames are read: tests/unit/test_kafka_request_reading.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kio.schema.create_topics.v4 import request as create_topics_v4
from kio.schema.describe_producers.v0 import request as describe_producers_v0

from tests.helpers import create_topic
from tests.kafka.conftest import Listener, closed, frame
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
