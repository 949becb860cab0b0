"""CreateTopics, DeleteTopics and CreatePartitions naming one topic (or topic id) more than
once, in raw frames (librdkafka's AdminClient refuses such a request before sending it): as
Kafka's controller answers them, the duplicated topic once, INVALID_REQUEST, and nothing done to
it; the request's other topics each done and answered on their own. With authentication on, no
ACL is asked for a duplicated topic: a principal without rights on it is refused nothing for it
(no refusal counted or audited). A DeleteTopics v6 entry naming its topic both ways (a name
and a non-zero id) or neither way is answered INVALID_REQUEST on its own, as Kafka's controller
answers it, with nothing deleted and no ACL asked for it. On SQLite and PostgreSQL."""

from __future__ import annotations

import datetime
import logging
import socket
import types
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka import test_security
from tests.kafka.conftest import Listener, ask
from tests.kafka.secured import Secured

pytestmark = pytest.mark.kafka

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
DUPLICATE = (ErrorCode.invalid_request, "Duplicate topic name.")
# Kafka's controller's answers to a DeleteTopics v6 entry naming a topic both ways, or neither.
BOTH_WAYS = (ErrorCode.invalid_request, "You may not specify both topic name and topic id.")
NEITHER_WAY = (ErrorCode.invalid_request, "Neither topic name nor id were specified.")
ZERO = uuid.UUID(int=0)


def _schema(api_key: int, version: int) -> tuple[type, types.ModuleType]:
    cls = request_class(api_key, version)
    assert cls is not None
    return cls, __import__(cls.__module__, fromlist=["x"])


def _create_topics(s: socket.socket, version: int, topics: list[tuple[str, int]],
                   validate_only: bool = False) -> list[tuple[str, ErrorCode, str | None]]:
    cls, mod = _schema(CREATE_TOPICS, version)
    body = cls(timeout=datetime.timedelta(0), validate_only=validate_only, topics=tuple(
        mod.CreatableTopic(name=name, num_partitions=count, replication_factor=1, assignments=(), configs=())
        for name, count in topics))
    return [(t.name, t.error_code, t.error_message) for t in ask(s, CREATE_TOPICS, version, body).topics]


def _create_partitions(s: socket.socket, version: int, topics: list[tuple[str, int]],
                       validate_only: bool = False) -> list[tuple[str, ErrorCode, str | None]]:
    cls, mod = _schema(CREATE_PARTITIONS, version)
    body = cls(timeout=datetime.timedelta(0), validate_only=validate_only, topics=tuple(
        mod.CreatePartitionsTopic(name=name, count=count, assignments=None) for name, count in topics))
    return [(r.name, r.error_code, r.error_message) for r in ask(s, CREATE_PARTITIONS, version, body).results]


def _delete_topics(s: socket.socket, version: int, named: list[Any]) -> list[tuple[Any, ...]]:
    """DeleteTopics of `named`: names (before v6), or (name, topic id) pairs (v6); answered as
    (name, topic id, error code, message), the id None where the version has none and where it
    is all zeros (as the wire reads it), the message None before v5."""
    cls, mod = _schema(DELETE_TOPICS, version)
    if version < 6:
        body = cls(timeout=datetime.timedelta(0), topic_names=tuple(named))
    else:
        body = cls(timeout=datetime.timedelta(0), topics=tuple(
            mod.DeleteTopicState(name=name, topic_id=topic_id) for name, topic_id in named))
    return [(r.name, getattr(r, "topic_id", None), r.error_code, getattr(r, "error_message", None))
            for r in ask(s, DELETE_TOPICS, version, body).responses]


def _partition_counts(client: Any, headers: dict[str, str] | None = None) -> dict[str, int]:
    return {t["name"]: t["partition_count"] for t in client.get("/v1/topics", headers=headers).json()["topics"]}


# --- authentication off ------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 7])  # the oldest served (not flexible) and the newest
def test_create_topics_naming_a_topic_twice_answers_it_once_invalid_request_and_creates_the_others(
        kafka: Listener, version: int) -> None:
    with kafka.connect() as s:
        got = _create_topics(s, version, [("orders", 2), ("fresh", 3), ("orders", 4)])
    assert got == [("orders", *DUPLICATE), ("fresh", ErrorCode.none, None)]
    assert _partition_counts(kafka.client) == {"fresh": 3}


def test_create_topics_naming_an_existing_topic_twice_is_invalid_request_not_already_exists(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    with kafka.connect() as s:
        assert _create_topics(s, 7, [("orders", 5), ("orders", 5)]) == [("orders", *DUPLICATE)]
    assert _partition_counts(kafka.client) == {"orders": 1}


@pytest.mark.parametrize("version", [1, 5])  # the oldest served (not flexible) and the last by name only
def test_delete_topics_naming_a_topic_twice_answers_it_once_invalid_request_and_deletes_the_others(
        kafka: Listener, version: int) -> None:
    create_topic(kafka.client, "orders", 1)
    create_topic(kafka.client, "old", 1)
    with kafka.connect() as s:
        got = _delete_topics(s, version, ["orders", "old", "orders"])
    # Versions before 5 answer no message.
    message = DUPLICATE[1] if version >= 5 else None
    assert got == [("orders", None, ErrorCode.invalid_request, message), ("old", None, ErrorCode.none, None)]
    assert _partition_counts(kafka.client) == {"orders": 1}


def test_delete_topics_v6_entry_naming_a_topic_and_a_topic_id_is_invalid_request_and_deletes_nothing(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    create_topic(kafka.client, "old", 1)
    with kafka.connect() as s:
        got = _delete_topics(s, 6, [("orders", uuid.UUID(int=7)), ("old", ZERO)])
    assert got == [("orders", uuid.UUID(int=7), *BOTH_WAYS), ("old", None, ErrorCode.none, None)]
    assert _partition_counts(kafka.client) == {"orders": 1}


def test_delete_topics_v6_entry_naming_a_topic_and_a_topic_id_is_no_copy_of_an_entry_naming_it(
        kafka: Listener) -> None:
    # Kafka's controller counts a name as named again only by an entry with the all-zero id.
    create_topic(kafka.client, "orders", 1)
    with kafka.connect() as s:
        got = _delete_topics(s, 6, [("orders", uuid.UUID(int=7)), ("orders", ZERO)])
    assert got == [("orders", uuid.UUID(int=7), *BOTH_WAYS), ("orders", None, ErrorCode.none, None)]
    assert _partition_counts(kafka.client) == {}


def test_delete_topics_v6_entries_naming_neither_a_topic_nor_a_topic_id_are_each_invalid_request(
        kafka: Listener) -> None:
    create_topic(kafka.client, "old", 1)
    with kafka.connect() as s:
        got = _delete_topics(s, 6, [(None, ZERO), ("old", ZERO), (None, ZERO)])
    assert got == [(None, None, *NEITHER_WAY), ("old", None, ErrorCode.none, None), (None, None, *NEITHER_WAY)]
    assert _partition_counts(kafka.client) == {}


def test_delete_topics_v6_naming_a_topic_twice_answers_it_once_with_the_all_zero_topic_id(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    create_topic(kafka.client, "old", 1)
    with kafka.connect() as s:
        got = _delete_topics(s, 6, [("orders", ZERO), ("old", ZERO), ("orders", ZERO)])
    assert got == [("orders", None, *DUPLICATE), ("old", None, ErrorCode.none, None)]
    assert _partition_counts(kafka.client) == {"orders": 1}


def test_delete_topics_naming_a_topic_id_twice_answers_it_once_invalid_request(kafka: Listener) -> None:
    create_topic(kafka.client, "old", 1)
    twice, once = uuid.UUID(int=7), uuid.UUID(int=8)
    with kafka.connect() as s:
        got = _delete_topics(s, 6, [(None, twice), (None, once), ("old", ZERO), (None, twice)])
    assert got == [(None, twice, ErrorCode.invalid_request, "Duplicate topic id."),
                   (None, once, ErrorCode.unknown_topic_id, "topics are deleted by name: they have no ids here"),
                   ("old", None, ErrorCode.none, None)]
    assert _partition_counts(kafka.client) == {}


@pytest.mark.parametrize("version", [0, 3])  # the oldest served (not flexible) and the newest
def test_create_partitions_naming_a_topic_twice_answers_it_once_invalid_request_and_grows_the_others(
        kafka: Listener, version: int) -> None:
    create_topic(kafka.client, "orders", 1)
    create_topic(kafka.client, "other", 1)
    with kafka.connect() as s:
        got = _create_partitions(s, version, [("orders", 3), ("other", 2), ("orders", 4)])
    assert got == [("orders", *DUPLICATE), ("other", ErrorCode.none, None)]
    assert _partition_counts(kafka.client) == {"orders": 1, "other": 2}


# --- authentication on: `alice` has no ACL; `orders` and `audit` exist (tests/kafka/secured.py) ---


@contextmanager
def _as_alice(secured: Secured) -> Iterator[socket.socket]:
    with secured.connect() as s:
        assert test_security._sasl(s, "alice", secured.keys["alice"]).error_code == ErrorCode.none
        yield s


@pytest.fixture
def audit_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The audit log's lines while the test runs."""
    caplog.set_level(logging.INFO, logger="outbox.audit")
    return caplog


def _refused(audit_log: pytest.LogCaptureFixture) -> list[str]:
    """The resources the audit log says were refused (SecurityState.refused, which counts each
    in outbox_authorization_refusals too)."""
    return [r.resource for r in audit_log.records if r.name == "outbox.audit" and r.allowed is False]


@pytest.mark.usefixtures("cheap_scrypt")
@pytest.mark.parametrize("validate_only", [False, True])
def test_create_topics_naming_a_topic_twice_refuses_nothing_for_it_to_a_principal_without_rights(
        secured: Secured, audit_log: pytest.LogCaptureFixture, validate_only: bool) -> None:
    with _as_alice(secured) as s:
        got = _create_topics(s, 7, [("fresh", 1), ("fresh", 1), ("other", 1)], validate_only)
    assert got == [("fresh", *DUPLICATE), ("other", ErrorCode.topic_authorization_failed, None)]
    assert _refused(audit_log) == ["topic:other"]
    assert _partition_counts(secured.client, secured.headers()) == {"orders": 1, "audit": 1}


@pytest.mark.usefixtures("cheap_scrypt")
@pytest.mark.parametrize("validate_only", [False, True])
def test_create_partitions_naming_a_topic_twice_refuses_nothing_for_it_to_a_principal_without_rights(
        secured: Secured, audit_log: pytest.LogCaptureFixture, validate_only: bool) -> None:
    with _as_alice(secured) as s:
        got = _create_partitions(s, 3, [("orders", 4), ("orders", 4), ("audit", 2)], validate_only)
    assert got == [("orders", *DUPLICATE), ("audit", ErrorCode.topic_authorization_failed, None)]
    assert _refused(audit_log) == ["topic:audit"]
    assert _partition_counts(secured.client, secured.headers()) == {"orders": 1, "audit": 1}


@pytest.mark.usefixtures("cheap_scrypt")
def test_delete_topics_naming_a_topic_twice_refuses_nothing_for_it_to_a_principal_without_rights(
        secured: Secured, audit_log: pytest.LogCaptureFixture) -> None:
    with _as_alice(secured) as s:
        got = _delete_topics(s, 5, ["orders", "audit", "orders"])
    assert got == [("orders", None, *DUPLICATE), ("audit", None, ErrorCode.topic_authorization_failed, None)]
    assert _refused(audit_log) == ["topic:audit"]
    assert _partition_counts(secured.client, secured.headers()) == {"orders": 1, "audit": 1}


@pytest.mark.usefixtures("cheap_scrypt")
@pytest.mark.parametrize(("named", "answered", "refused"), [
    ([("orders", uuid.UUID(int=7)), (None, ZERO), ("audit", ZERO)],
     [("orders", uuid.UUID(int=7), *BOTH_WAYS), (None, None, *NEITHER_WAY),
      ("audit", None, ErrorCode.topic_authorization_failed, None)], ["topic:audit"]),
    # No entry refused: the listener holds the handler to every need of auth.RULES.
    ([("orders", uuid.UUID(int=7)), (None, ZERO)],
     [("orders", uuid.UUID(int=7), *BOTH_WAYS), (None, None, *NEITHER_WAY)], []),
], ids=["beside_a_refused_topic", "alone"])
def test_delete_topics_v6_entries_naming_a_topic_both_ways_or_neither_refuse_nothing_to_a_principal_without_rights(
        secured: Secured, audit_log: pytest.LogCaptureFixture, named: list[tuple[str | None, uuid.UUID]],
        answered: list[tuple[Any, ...]], refused: list[str]) -> None:
    with _as_alice(secured) as s:
        assert _delete_topics(s, 6, named) == answered
    assert _refused(audit_log) == refused
    assert _partition_counts(secured.client, secured.headers()) == {"orders": 1, "audit": 1}
