"""The administration of consumer groups at the Kafka door: DeleteGroups through librdkafka's
AdminClient (confluent-kafka), OffsetDelete in raw frames (no Python client sends it), each
checked against what the HTTP door of the same process answers. On SQLite and PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)

from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask
from tests.kafka.test_groups import join, subscription

pytestmark = pytest.mark.kafka

TIMEOUT_S = 20


@pytest.fixture
def admin(kafka: Listener) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap})


@pytest.fixture
def topics(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 2)
    create_topic(kafka.client, "audit", 1)


def _commit(kafka: Listener, group: str, offsets: dict[tuple[str, int], int]) -> None:
    r = kafka.client.post(f"/v1/groups/{group}/offsets", json={"offsets": [
        {"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()]})
    assert r.status_code == 200, r.text


def _committed(kafka: Listener, group: str) -> dict[tuple[str, int], int]:
    r = kafka.client.get(f"/v1/groups/{group}/offsets")
    assert r.status_code == 200, r.text
    return {(o["topic"], o["partition"]): o["offset"] for o in r.json()["offsets"]}


def _listed(kafka: Listener) -> list[str]:
    return [g["group_id"] for g in kafka.client.get("/v1/groups").json()["groups"]]


def _deleted(admin: AdminClient, *groups: str) -> dict[str, Any]:
    """Each group's outcome: None, or the error code it was refused with."""
    out: dict[str, Any] = {}
    for g, future in admin.delete_consumer_groups(list(groups), request_timeout=TIMEOUT_S).items():
        try:
            out[g] = future.result(TIMEOUT_S)
        except KafkaException as e:
            out[g] = e.args[0].code()
    return out


def test_delete_groups_deletes_an_empty_group_and_its_offsets(kafka: Listener, admin: AdminClient,
                                                              topics: None) -> None:
    _commit(kafka, "billing", {("orders", 0): 5})
    _commit(kafka, "audit-readers", {("audit", 0): 2})
    assert _deleted(admin, "billing") == {"billing": None}
    assert _listed(kafka) == ["audit-readers"]
    assert _committed(kafka, "billing") == {}
    assert _committed(kafka, "audit-readers") == {("audit", 0): 2}


def test_delete_groups_of_two_groups_in_one_call_deletes_both(kafka: Listener, admin: AdminClient,
                                                            topics: None) -> None:
    _commit(kafka, "billing", {("orders", 0): 5})
    _commit(kafka, "web", {("orders", 1): 3})
    _commit(kafka, "audit-readers", {("audit", 0): 2})
    assert _deleted(admin, "billing", "web") == {"billing": None, "web": None}
    assert _listed(kafka) == ["audit-readers"]
    assert (_committed(kafka, "billing"), _committed(kafka, "web")) == ({}, {})


def test_delete_groups_answers_each_of_two_groups_on_its_own(kafka: Listener, admin: AdminClient,
                                                             topics: None) -> None:
    assert kafka.client.post("/v1/groups/web/members", json={"topics": ["orders"]}).status_code == 200
    _commit(kafka, "billing", {("orders", 0): 5})
    assert _deleted(admin, "billing", "web", "nobody") == {
        "billing": None, "web": ErrorCode.non_empty_group.value, "nobody": ErrorCode.group_id_not_found.value}
    assert _listed(kafka) == ["web"]


def test_delete_groups_refuses_a_group_with_members_and_keeps_it(kafka: Listener, admin: AdminClient,
                                                                 topics: None) -> None:
    assert kafka.client.post("/v1/groups/web/members", json={"topics": ["orders"]}).status_code == 200
    _commit(kafka, "web", {("orders", 1): 3})
    assert _deleted(admin, "web") == {"web": ErrorCode.non_empty_group.value}
    assert _committed(kafka, "web") == {("orders", 1): 3}


def test_delete_groups_of_an_unknown_group_is_group_id_not_found(kafka: Listener, admin: AdminClient) -> None:
    assert _deleted(admin, "nobody") == {"nobody": ErrorCode.group_id_not_found.value}


def test_a_group_with_offsets_staged_by_an_open_transaction_is_not_deleted(kafka: Listener, admin: AdminClient,
                                                                          topics: None) -> None:
    from tests.helpers import begin, ident, init_producer

    producer = init_producer(kafka.client, "tx")
    begin(kafka.client, "tx", producer)
    r = kafka.client.post("/v1/transactions/tx/offsets", json={**ident(producer), "group_id": "staged", "offsets": [
        {"topic": "orders", "partition": 0, "offset": 4}]})
    assert r.status_code == 200, r.text
    assert _deleted(admin, "staged") == {"staged": ErrorCode.non_empty_group.value}
    assert _listed(kafka) == ["staged"]


def _offset_delete(kafka: Listener, group: str, parts: dict[str, list[int]]) -> tuple[ErrorCode, dict]:
    with kafka.connect() as s:
        answer = ask(s, 47, 0, OffsetDeleteRequest(group_id=group, topics=tuple(
            OffsetDeleteRequestTopic(name=t, partitions=tuple(OffsetDeleteRequestPartition(partition_index=p)
                                                              for p in ps))
            for t, ps in parts.items())))
    return answer.error_code, {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def test_offset_delete_deletes_the_partitions_named_and_keeps_the_others(kafka: Listener, topics: None) -> None:
    _commit(kafka, "billing", {("orders", 0): 5, ("orders", 1): 6, ("audit", 0): 7})
    assert _offset_delete(kafka, "billing", {"orders": [0]}) == (ErrorCode.none, {("orders", 0): ErrorCode.none})
    assert _committed(kafka, "billing") == {("orders", 1): 6, ("audit", 0): 7}


def test_offset_delete_of_a_partition_without_an_offset_or_unknown_answers_each(kafka: Listener,
                                                                                topics: None) -> None:
    _commit(kafka, "billing", {("orders", 0): 5})
    assert _offset_delete(kafka, "billing", {"orders": [1, 2], "gone": [0]}) == (ErrorCode.none, {
        ("orders", 1): ErrorCode.none, ("orders", 2): ErrorCode.unknown_topic_or_partition,
        ("gone", 0): ErrorCode.unknown_topic_or_partition})
    assert _committed(kafka, "billing") == {("orders", 0): 5}


def test_offset_delete_refuses_a_topic_a_member_subscribes_to(kafka: Listener, topics: None) -> None:
    assert kafka.client.post("/v1/groups/web/members", json={"topics": ["orders"]}).status_code == 200
    _commit(kafka, "web", {("orders", 0): 5, ("audit", 0): 1})
    assert _offset_delete(kafka, "web", {"orders": [0], "audit": [0]}) == (ErrorCode.none, {
        ("orders", 0): ErrorCode.group_subscribed_to_topic, ("audit", 0): ErrorCode.none})
    assert _committed(kafka, "web") == {("orders", 0): 5}


def test_offset_delete_refuses_a_kafka_consumers_subscribed_topic(kafka: Listener, topics: None) -> None:
    _commit(kafka, "g", {("audit", 0): 1, ("orders", 0): 2})
    with kafka.connect() as s:
        assert join(s, "g", protocols=(("range", subscription("audit")),)).error_code == ErrorCode.none
        assert _offset_delete(kafka, "g", {"audit": [0], "orders": [0]}) == (ErrorCode.none, {
            ("audit", 0): ErrorCode.group_subscribed_to_topic, ("orders", 0): ErrorCode.none})
    assert _committed(kafka, "g") == {("audit", 0): 1}


def test_offset_delete_of_a_group_whose_members_are_not_consumers_is_non_empty_group(kafka: Listener,
                                                                                      topics: None) -> None:
    _commit(kafka, "workers", {("orders", 0): 2})
    with kafka.connect() as s:
        assert join(s, "workers", protocol_type="connect", protocols=(("default", b"x"),)).error_code \
            == ErrorCode.none
        assert _offset_delete(kafka, "workers", {"orders": [0]}) == (ErrorCode.non_empty_group, {})
    assert _committed(kafka, "workers") == {("orders", 0): 2}


def test_offset_delete_of_an_unknown_group_is_group_id_not_found(kafka: Listener, topics: None) -> None:
    assert _offset_delete(kafka, "nobody", {"orders": [0]}) == (ErrorCode.group_id_not_found, {})


def test_describe_consumer_groups_shows_a_members_client_id_and_host(kafka: Listener, admin: AdminClient,
                                                                       topics: None) -> None:
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "g", "client.id": "x",
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 100, "fetch.wait.max.ms": 100})
    try:
        c.subscribe(["orders"])
        deadline = time.monotonic() + TIMEOUT_S
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.1)
        assert c.assignment(), "the consumer was never assigned"
        described = admin.describe_consumer_groups(["g"], request_timeout=TIMEOUT_S)["g"].result(TIMEOUT_S)
    finally:
        c.close()
    assert [(m.client_id, m.host) for m in described.members] == [("x", "/127.0.0.1")]
