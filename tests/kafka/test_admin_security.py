"""The ACL checks of the Kafka door's ACL and group administration (auth.RULES: DescribeAcls
DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER on it, DeleteGroups DELETE on the
group, OffsetDelete DELETE on the group and READ on each topic), with authentication on: each
refusal answered with Kafka's code, and nothing changed. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)

from tests.kafka.conftest import ask
from tests.kafka import test_security
from tests.kafka.secured import Secured

pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("cheap_scrypt")]

TIMEOUT_S = 20
ORDERS_READ = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
EVERY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)


def _admin(w: Secured, who: str) -> AdminClient:
    return AdminClient(w.client_config(who))


def _error(future: Any) -> Any:
    """The code a future failed with, or its result."""
    try:
        return future.result(TIMEOUT_S)
    except KafkaException as e:
        return e.args[0].code()


def _stored(w: Secured) -> list[tuple[str, str, str]]:
    r = w.client.get("/v1/acls", headers=w.headers())
    assert r.status_code == 200, r.text
    return [(a["principal"], a["resource_name"], a["operation"]) for a in r.json()["acls"]]


def test_acls_are_changed_and_read_with_alter_and_describe_on_the_cluster(secured: Secured) -> None:
    secured.grant("User:alice", "cluster", "outbox-cluster", "alter")
    admin = _admin(secured, "alice")
    assert _error(admin.create_acls([ORDERS_READ], request_timeout=TIMEOUT_S)[ORDERS_READ]) is None
    # ALTER implies DESCRIBE, as in Kafka.
    described = admin.describe_acls(EVERY_ACL, request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert sorted((b.principal, b.name, b.operation) for b in described) == [
        ("User:alice", "kafka-cluster", AclOperation.ALTER), ("User:bob", "orders", AclOperation.READ)]


def test_acls_without_alter_on_the_cluster_are_refused_and_unchanged(secured: Secured) -> None:
    secured.grant("User:alice", "cluster", "outbox-cluster", "describe")
    admin = _admin(secured, "alice")
    assert _error(admin.create_acls([ORDERS_READ], request_timeout=TIMEOUT_S)[ORDERS_READ]) \
        == ErrorCode.cluster_authorization_failed.value
    assert _error(admin.delete_acls([EVERY_ACL], request_timeout=TIMEOUT_S)[EVERY_ACL]) \
        == ErrorCode.cluster_authorization_failed.value
    assert _stored(secured) == [("User:alice", "outbox-cluster", "describe")]


def test_describe_acls_without_describe_on_the_cluster_is_refused(secured: Secured) -> None:
    # In raw frames: confluent-kafka's describe_acls answers an empty list for this refusal.
    secured.grant("User:alice", "topic", "orders", "read")
    with secured.connect() as s:
        assert test_security._sasl(s, "bob", secured.keys["bob"]).error_code == ErrorCode.none
        answer = ask(s, 29, 3, DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
            host_filter=None, operation=1, permission_type=1), correlation_id=9)
    assert (answer.error_code, answer.resources) == (ErrorCode.cluster_authorization_failed, ())


def _commit(w: Secured, group: str, offsets: dict[tuple[str, int], int]) -> None:
    r = w.client.post(f"/v1/groups/{group}/offsets", headers=w.headers(), json={"offsets": [
        {"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()]})
    assert r.status_code == 200, r.text


def _committed(w: Secured, group: str) -> dict[tuple[str, int], int]:
    r = w.client.get(f"/v1/groups/{group}/offsets", headers=w.headers())
    assert r.status_code == 200, r.text
    return {(o["topic"], o["partition"]): o["offset"] for o in r.json()["offsets"]}


def test_delete_groups_needs_delete_on_the_group(secured: Secured) -> None:
    _commit(secured, "billing", {("orders", 0): 5})
    _commit(secured, "web", {("orders", 0): 6})
    secured.grant("User:alice", "group", "billing", "delete")
    # DESCRIBE, which its FindCoordinator needs (librdkafka asks again until it times out).
    secured.grant("User:alice", "group", "web", "describe")
    admin = _admin(secured, "alice")
    got = {g: _error(admin.delete_consumer_groups([g], request_timeout=TIMEOUT_S)[g]) for g in ("billing", "web")}
    assert got == {"billing": None, "web": ErrorCode.group_authorization_failed.value}
    assert (_committed(secured, "billing"), _committed(secured, "web")) == ({}, {("orders", 0): 6})


def _offset_delete(w: Secured, who: str, group: str, parts: dict[str, list[int]]) -> tuple[ErrorCode, dict]:
    with w.connect() as s:
        assert test_security._sasl(s, who, w.keys[who]).error_code == ErrorCode.none
        answer = ask(s, 47, 0, OffsetDeleteRequest(group_id=group, topics=tuple(
            OffsetDeleteRequestTopic(name=t, partitions=tuple(OffsetDeleteRequestPartition(partition_index=p)
                                                              for p in ps))
            for t, ps in parts.items())), correlation_id=9)
    return answer.error_code, {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def test_offset_delete_needs_delete_on_the_group_and_read_on_each_topic(secured: Secured) -> None:
    _commit(secured, "billing", {("orders", 0): 5, ("audit", 0): 6})
    secured.grant("User:alice", "group", "billing", "delete")
    secured.grant("User:alice", "topic", "orders", "read")
    assert _offset_delete(secured, "alice", "billing", {"orders": [0], "audit": [0]}) == (ErrorCode.none, {
        ("orders", 0): ErrorCode.none, ("audit", 0): ErrorCode.topic_authorization_failed})
    assert _committed(secured, "billing") == {("audit", 0): 6}


def test_offset_delete_without_delete_on_the_group_is_refused_whole(secured: Secured) -> None:
    _commit(secured, "billing", {("orders", 0): 5})
    secured.grant("User:alice", "group", "billing", "read")
    secured.grant("User:alice", "topic", "orders", "read")
    assert _offset_delete(secured, "alice", "billing", {"orders": [0]}) == (ErrorCode.group_authorization_failed, {})
    assert _committed(secured, "billing") == {("orders", 0): 5}


def test_delete_groups_of_two_groups_in_one_call_answers_each(secured: Secured) -> None:
    _commit(secured, "billing", {("orders", 0): 5})
    _commit(secured, "web", {("orders", 0): 6})
    _commit(secured, "audit", {("orders", 0): 7})
    secured.grant("User:alice", "group", "billing", "delete")
    secured.grant("User:alice", "group", "web", "delete")
    # Held while its futures are waited on: an AdminClient garbage-collected before its
    # answers come fails them never (librdkafka's handle is destroyed under them).
    admin = _admin(secured, "alice")
    futures = admin.delete_consumer_groups(["billing", "web"], request_timeout=TIMEOUT_S)
    assert {g: _error(f) for g, f in futures.items()} == {"billing": None, "web": None}
    assert [_committed(secured, g) for g in ("billing", "web", "audit")] == [{}, {}, {("orders", 0): 7}]


def test_delete_groups_of_two_groups_in_one_call_refuses_the_one_without_delete_alone(secured: Secured) -> None:
    _commit(secured, "billing", {("orders", 0): 5})
    _commit(secured, "web", {("orders", 0): 6})
    secured.grant("User:alice", "group", "billing", "delete")
    secured.grant("User:alice", "group", "web", "describe")  # as its FindCoordinator needs
    admin = _admin(secured, "alice")
    futures = admin.delete_consumer_groups(["billing", "web"], request_timeout=TIMEOUT_S)
    assert {g: _error(f) for g, f in futures.items()} == {
        "billing": None, "web": ErrorCode.group_authorization_failed.value}
    assert (_committed(secured, "billing"), _committed(secured, "web")) == ({}, {("orders", 0): 6})
