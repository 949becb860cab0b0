"""CreateTopics, DeleteTopics and CreatePartitions naming one topic (or topic id) more than
once, in raw frames (librdkafka's AdminClient refuses such a request before sending it): as
Kafka's controller answers them, the duplicated topic once, INVALID_REQUEST, and nothing done to
it; the request's other topics each done and answered on their own. On SQLite and PostgreSQL."""

from __future__ import annotations

import datetime
import types
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask

pytestmark = pytest.mark.kafka

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37


def _schema(api_key: int, version: int) -> tuple[type, types.ModuleType]:
    cls = request_class(api_key, version)
    assert cls is not None
    return cls, __import__(cls.__module__, fromlist=["x"])


def _create_topics(kafka: Listener, topics: list[tuple[str, int]]) -> list[tuple[str, ErrorCode, str | None, int]]:
    cls, mod = _schema(CREATE_TOPICS, 7)
    body = cls(timeout=datetime.timedelta(0), validate_only=False, topics=tuple(
        mod.CreatableTopic(name=name, num_partitions=count, replication_factor=1, assignments=(), configs=())
        for name, count in topics))
    with kafka.connect() as s:
        answer = ask(s, CREATE_TOPICS, 7, body)
    return [(t.name, t.error_code, t.error_message, t.num_partitions) for t in answer.topics]


def _create_partitions(kafka: Listener, topics: list[tuple[str, int]]) -> list[tuple[str, ErrorCode, str | None]]:
    cls, mod = _schema(CREATE_PARTITIONS, 3)
    body = cls(timeout=datetime.timedelta(0), validate_only=False, topics=tuple(
        mod.CreatePartitionsTopic(name=name, count=count, assignments=None) for name, count in topics))
    with kafka.connect() as s:
        answer = ask(s, CREATE_PARTITIONS, 3, body)
    return [(r.name, r.error_code, r.error_message) for r in answer.results]


def _delete_topics(kafka: Listener, version: int, named: list[Any]) -> list[tuple[Any, ...]]:
    """DeleteTopics of `named`: names (v5), or (name, topic id) pairs (v6); answered as (name,
    topic id, error code, message), the id None where v5 has none and where it is all zeros (as
    the wire reads it)."""
    cls, mod = _schema(DELETE_TOPICS, version)
    if version < 6:
        body = cls(timeout=datetime.timedelta(0), topic_names=tuple(named))
    else:
        body = cls(timeout=datetime.timedelta(0), topics=tuple(
            mod.DeleteTopicState(name=name, topic_id=topic_id) for name, topic_id in named))
    with kafka.connect() as s:
        answer = ask(s, DELETE_TOPICS, version, body)
    return [(r.name, getattr(r, "topic_id", None), r.error_code, r.error_message) for r in answer.responses]


def _partition_counts(kafka: Listener) -> dict[str, int]:
    return {t["name"]: t["partition_count"] for t in kafka.client.get("/v1/topics").json()["topics"]}


def test_create_topics_naming_a_topic_twice_answers_it_once_invalid_request_and_creates_the_others(
        kafka: Listener) -> None:
    got = _create_topics(kafka, [("orders", 2), ("fresh", 3), ("orders", 4)])
    assert got == [("orders", ErrorCode.invalid_request, "Duplicate topic name.", -1), ("fresh", ErrorCode.none, None, 3)]
    assert _partition_counts(kafka) == {"fresh": 3}


def test_create_topics_naming_an_existing_topic_twice_is_invalid_request_not_already_exists(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    got = _create_topics(kafka, [("orders", 5), ("orders", 5)])
    assert got == [("orders", ErrorCode.invalid_request, "Duplicate topic name.", -1)]
    assert _partition_counts(kafka) == {"orders": 1}


def test_delete_topics_naming_a_topic_twice_answers_it_once_invalid_request_and_deletes_the_others(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    create_topic(kafka.client, "old", 1)
    got = _delete_topics(kafka, 5, ["orders", "old", "orders"])
    assert got == [("orders", None, ErrorCode.invalid_request, "Duplicate topic name."),
                   ("old", None, ErrorCode.none, None)]
    assert _partition_counts(kafka) == {"orders": 1}


def test_delete_topics_by_name_in_v6_naming_a_topic_twice_is_invalid_request(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    zero = uuid.UUID(int=0)
    got = _delete_topics(kafka, 6, [("orders", zero), ("orders", zero)])
    assert got == [("orders", None, ErrorCode.invalid_request, "Duplicate topic name.")]
    assert _partition_counts(kafka) == {"orders": 1}


def test_delete_topics_naming_a_topic_id_twice_answers_it_once_invalid_request(kafka: Listener) -> None:
    create_topic(kafka.client, "old", 1)
    twice, once, zero = uuid.UUID(int=7), uuid.UUID(int=8), uuid.UUID(int=0)
    got = _delete_topics(kafka, 6, [(None, twice), (None, once), ("old", zero), (None, twice)])
    assert got == [(None, twice, ErrorCode.invalid_request, "Duplicate topic id."),
                   (None, once, ErrorCode.unknown_topic_id, "topics are deleted by name: they have no ids here"),
                   ("old", None, ErrorCode.none, None)]
    assert _partition_counts(kafka) == {}


def test_create_partitions_naming_a_topic_twice_answers_it_once_invalid_request_and_grows_the_others(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    create_topic(kafka.client, "other", 1)
    got = _create_partitions(kafka, [("orders", 3), ("other", 2), ("orders", 4)])
    assert got == [("orders", ErrorCode.invalid_request, "Duplicate topic name."), ("other", ErrorCode.none, None)]
    assert _partition_counts(kafka) == {"orders": 1, "other": 2}
