"""Kafka's ACL APIs (DescribeAcls, CreateAcls, DeleteAcls; app.kafka.acls) on the bindings the
HTTP door keeps: through librdkafka's AdminClient (confluent-kafka) and kafka-python's
KafkaAdminClient, each checked against what /v1/acls of the same process lists; bad input and
Kafka codes in raw frames. On SQLite and PostgreSQL."""

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
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import Listener, ask

pytestmark = pytest.mark.kafka

TIMEOUT_S = 20
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


@pytest.fixture
def admin(kafka: Listener) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap})


def _binding(name: str, principal: str = "User:alice", operation: AclOperation = AclOperation.READ,
             kind: ResourceType = ResourceType.TOPIC, pattern: ResourcePatternType = LITERAL,
             permission: AclPermissionType = ALLOW, host: str = "*") -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, operation, permission)


def _filter(name: str | None = None, pattern: ResourcePatternType = ResourcePatternType.ANY,
            kind: ResourceType = ResourceType.ANY, principal: str | None = None) -> AclBindingFilter:
    return AclBindingFilter(kind, name, pattern, principal, None, AclOperation.ANY, AclPermissionType.ANY)


def _created(admin: AdminClient, bindings: list[AclBinding]) -> dict[AclBinding, Any]:
    """Each binding's outcome: None, or the KafkaError it was refused with."""
    out = {}
    for b, future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).items():
        try:
            out[b] = future.result(TIMEOUT_S)
        except KafkaException as e:
            out[b] = e.args[0]
    return out


def _described(admin: AdminClient, f: AclBindingFilter) -> set[tuple]:
    return {(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)
            for b in admin.describe_acls(f, request_timeout=TIMEOUT_S).result(TIMEOUT_S)}


def _key(b: AclBinding) -> tuple:
    return (b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)


def _http_acls(kafka: Listener) -> set[tuple]:
    r = kafka.client.get("/v1/acls")
    assert r.status_code == 200, r.text
    return {(a["principal"], a["resource_type"], a["resource_name"], a["pattern_type"], a["operation"],
             a["permission"]) for a in r.json()["acls"]}


def test_create_acls_stores_the_bindings_http_lists(kafka: Listener, admin: AdminClient) -> None:
    made = [_binding("orders"), _binding("web-", "User:bob", AclOperation.DESCRIBE, ResourceType.GROUP, PREFIXED, DENY)]
    assert _created(admin, made) == {b: None for b in made}
    assert _http_acls(kafka) == {("User:alice", "topic", "orders", "literal", "read", "allow"),
                                 ("User:bob", "group", "web-", "prefixed", "describe", "deny")}


def test_describe_acls_answers_the_bindings_http_created(kafka: Listener, admin: AdminClient) -> None:
    r = kafka.client.post("/v1/acls", json={"acls": [
        {"principal": "User:alice", "resource_type": "transactional_id", "resource_name": "tx", "operation": "write"},
        {"principal": "User:alice", "resource_type": "topic", "resource_name": "orders", "operation": "alter_configs",
         "permission": "deny"}]})
    assert r.status_code == 200, r.text
    assert _described(admin, _filter()) == {
        (ResourceType.TRANSACTIONAL_ID, "tx", LITERAL, "User:alice", "*", AclOperation.WRITE, ALLOW),
        (ResourceType.TOPIC, "orders", LITERAL, "User:alice", "*", AclOperation.ALTER_CONFIGS, DENY)}


def test_the_cluster_is_kafka_cluster_to_a_kafka_client_and_outbox_cluster_over_http(
        kafka: Listener, admin: AdminClient) -> None:
    made = _binding("kafka-cluster", operation=AclOperation.IDEMPOTENT_WRITE, kind=ResourceType.BROKER)
    assert _created(admin, [made]) == {made: None}
    assert _http_acls(kafka) == {("User:alice", "cluster", "outbox-cluster", "literal", "idempotent_write", "allow")}
    assert _described(admin, _filter(kind=ResourceType.BROKER)) == {_key(made)}


def test_kafkas_config_and_cluster_action_operations_are_stored_as_the_services(
        kafka: Listener, admin: AdminClient) -> None:
    made = [_binding("kafka-cluster", operation=AclOperation.CLUSTER_ACTION, kind=ResourceType.BROKER),
            _binding("orders", operation=AclOperation.DESCRIBE_CONFIGS)]
    assert _created(admin, made) == {b: None for b in made}
    assert _http_acls(kafka) == {("User:alice", "cluster", "outbox-cluster", "literal", "cluster_action", "allow"),
                                 ("User:alice", "topic", "orders", "literal", "describe_configs", "allow")}
    assert _described(admin, _filter()) == {_key(b) for b in made}


def test_describe_acls_of_any_resource_type_named_kafka_cluster_answers_the_cluster_and_resources_of_that_name(
        kafka: Listener, admin: AdminClient) -> None:
    named = [_binding("kafka-cluster", operation=AclOperation.IDEMPOTENT_WRITE, kind=ResourceType.BROKER),
             _binding("kafka-cluster")]
    others = [_binding("orders"), _binding("outbox-cluster", kind=ResourceType.GROUP)]
    assert _created(admin, named + others) == {b: None for b in named + others}
    assert _described(admin, _filter("kafka-cluster")) == {_key(b) for b in named}


def test_delete_acls_of_any_resource_type_named_kafka_cluster_deletes_the_cluster_and_resources_of_that_name(
        kafka: Listener, admin: AdminClient) -> None:
    named = [_binding("kafka-cluster", operation=AclOperation.IDEMPOTENT_WRITE, kind=ResourceType.BROKER),
             _binding("kafka-cluster")]
    kept = [_binding("orders")]
    assert _created(admin, named + kept) == {b: None for b in named + kept}
    f = _filter("kafka-cluster", LITERAL)
    deleted = admin.delete_acls([f], request_timeout=TIMEOUT_S)[f].result(TIMEOUT_S)
    assert {_key(b) for b in deleted} == {_key(b) for b in named}
    assert _http_acls(kafka) == {("User:alice", "topic", "orders", "literal", "read", "allow")}


def test_describe_acls_with_a_match_filter_answers_every_binding_that_applies_to_the_name(
        kafka: Listener, admin: AdminClient) -> None:
    applies = [_binding("orders"), _binding("*"), _binding("ord", pattern=PREFIXED),
               _binding("orders", "User:bob", AclOperation.WRITE)]
    others = [_binding("orders-eu"), _binding("orders-", pattern=PREFIXED), _binding("orders", kind=ResourceType.GROUP)]
    assert _created(admin, applies + others) == {b: None for b in applies + others}
    assert _described(admin, _filter("orders", ResourcePatternType.MATCH, ResourceType.TOPIC)) == {
        _key(b) for b in applies}


def test_describe_acls_filters_by_principal_and_exact_pattern(kafka: Listener, admin: AdminClient) -> None:
    bindings = [_binding("orders"), _binding("orders", pattern=PREFIXED), _binding("orders", "User:bob")]
    assert _created(admin, bindings) == {b: None for b in bindings}
    assert _described(admin, _filter("orders", LITERAL, principal="User:alice")) == {_key(bindings[0])}


def test_delete_acls_deletes_what_the_filter_matches_and_answers_it(kafka: Listener, admin: AdminClient) -> None:
    gone, kept = [_binding("orders"), _binding("orders", operation=AclOperation.WRITE)], [_binding("orders", "User:bob")]
    assert _created(admin, gone + kept) == {b: None for b in gone + kept}
    f = _filter("orders", LITERAL, ResourceType.TOPIC, "User:alice")
    deleted = admin.delete_acls([f], request_timeout=TIMEOUT_S)[f].result(TIMEOUT_S)
    assert {_key(b) for b in deleted} == {_key(b) for b in gone}
    assert _http_acls(kafka) == {("User:bob", "topic", "orders", "literal", "read", "allow")}


def test_create_acls_refuses_what_the_service_cannot_hold_binding_by_binding(
        kafka: Listener, admin: AdminClient) -> None:
    fine = _binding("orders")
    on_a_host = _binding("orders", "User:bob", host="10.0.0.1")
    not_a_user = _binding("orders", "Group:ops")
    wrong_operation = _binding("web", operation=AclOperation.WRITE, kind=ResourceType.GROUP)
    got = _created(admin, [fine, on_a_host, not_a_user, wrong_operation])
    assert got[fine] is None
    assert {b: (e.code(), e.str()) for b, e in got.items() if e is not None} == {
        on_a_host: (ErrorCode.invalid_request.value,
                    "host '10.0.0.1' is not served: a binding here holds for every host ('*')"),
        not_a_user: (ErrorCode.invalid_request.value,
                     "invalid ACL binding: principal must be User:<name> or User:* (User:<name> with a name), "
                     "not 'Group:ops'"),
        wrong_operation: (ErrorCode.invalid_request.value,
                          "invalid ACL binding: operation 'write' does not apply to a group (one of: all, delete, "
                          "describe, read)"),
    }
    assert _http_acls(kafka) == {("User:alice", "topic", "orders", "literal", "read", "allow")}


def _creation(**fields: Any) -> CreateAclsRequest:
    return CreateAclsRequest(creations=(AclCreation(**{
        "resource_type": 2, "resource_name": "orders", "resource_pattern_type": 3, "principal": "User:alice",
        "host": "*", "operation": 3, "permission_type": 3, **fields}),))


@pytest.mark.parametrize(("fields", "message"), [
    ({"resource_type": 7}, "resource type USER has no ACLs here: a binding names a TOPIC, GROUP, CLUSTER or "
                           "TRANSACTIONAL_ID"),
    ({"resource_type": 0}, "unknown resource type 0"),
    ({"resource_type": 42}, "unknown resource type 42"),
    ({"resource_pattern_type": 2}, "invalid pattern type MATCH: a binding is LITERAL or PREFIXED"),
    ({"operation": 13}, "operation CREATE_TOKENS is not one the service checks: a binding of it would never match "
                        "a request"),
    ({"operation": 9}, "invalid ACL binding: operation 'cluster_action' does not apply to a topic (one of: all, alter, "
                       "alter_configs, create, delete, describe, describe_configs, read, write)"),
    ({"operation": 1}, "invalid operation 1: ANY is for filters"),
    ({"permission_type": 1}, "invalid permission type ANY: a binding ALLOWs or DENYs"),
    ({"resource_type": 4, "resource_name": "other"}, "the only valid name for the CLUSTER resource is kafka-cluster"),
    ({"resource_name": "a\nb"}, "invalid ACL binding: resource_name must be at most 255 characters, none of them a "
                                "control character"),
])
def test_create_acls_answers_invalid_request_with_why_for_a_binding_kafka_or_the_service_cannot_take(
        kafka: Listener, fields: dict[str, Any], message: str) -> None:
    with kafka.connect() as s:
        answer = ask(s, 30, 3, _creation(**fields))
    assert [(r.error_code, r.error_message) for r in answer.results] == [(ErrorCode.invalid_request, message)]
    assert _http_acls(kafka) == set()


def _describe_request(**fields: Any) -> DescribeAclsRequest:
    return DescribeAclsRequest(**{"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                  "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1, **fields})


def test_describe_acls_of_an_unknown_resource_type_is_invalid_request(kafka: Listener) -> None:
    with kafka.connect() as s:
        answer = ask(s, 29, 3, _describe_request(resource_type_filter=0))
    assert (answer.error_code, answer.error_message, answer.resources) == (
        ErrorCode.invalid_request, "unknown resource type 0", ())


@pytest.mark.parametrize("fields", [{"host_filter": "10.0.0.1"}, {"resource_type_filter": 6},
                                    {"operation": 10}])
def test_a_filter_naming_what_no_binding_here_has_matches_none(kafka: Listener, admin: AdminClient,
                                                               fields: dict[str, Any]) -> None:
    assert _created(admin, [_binding("orders")]) == {_binding("orders"): None}
    with kafka.connect() as s:
        answer = ask(s, 29, 3, _describe_request(**fields))
    assert (answer.error_code, answer.resources) == (ErrorCode.none, ())


def test_kafka_pythons_admin_client_creates_describes_and_deletes_acls(kafka: Listener) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KafkaPythonResourceType
    from kafka.errors import NoError

    client = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        made = ACL("User:alice", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                   ResourcePattern(KafkaPythonResourceType.TOPIC, "orders", ACLResourcePatternType.PREFIXED))
        assert client.create_acls([made])["failed"] == []
        every = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY, ResourcePatternFilter(
            KafkaPythonResourceType.ANY, None, ACLResourcePatternType.ANY))
        described, error = client.describe_acls(every)
        assert error is NoError
        assert [(a.principal, a.host, a.operation, a.permission_type, a.resource_pattern.resource_type,
                 a.resource_pattern.resource_name, a.resource_pattern.pattern_type) for a in described] == [
            ("User:alice", "*", ACLOperation.WRITE, ACLPermissionType.DENY, KafkaPythonResourceType.TOPIC, "orders",
             ACLResourcePatternType.PREFIXED)]
        ((_, deleted, error),) = client.delete_acls([every])
        assert (error, len(deleted)) == (NoError, 1)
    finally:
        client.close()
    assert _http_acls(kafka) == set()
