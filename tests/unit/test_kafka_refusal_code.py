"""What the Kafka door answers when a principal's ACLs refuse an operation
(app.kafka.auth.refusal_code): Kafka's code for the type of the resource refused, the refusal
counted and audited once per request, the check recorded for auth.RULES either way."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from kio.schema.errors import ErrorCode

from app.domain.acl import CLUSTER, Operation, Principal, Resource, group, topic, transactional_id
from app.kafka.auth import Access, bind, refusal_code, unbind

ALICE = Principal("User:alice", "api_key")


@dataclass
class FakeSecurity:
    """The SecurityState calls Access makes: the decision from a set of granted pairs, and the
    refusals it was told of."""

    granted: set[tuple[Operation, Resource]] = field(default_factory=set)
    writes_some_topic: bool = False
    refusals: list[tuple[str, Operation, Resource]] = field(default_factory=list)
    asked_some_topic: int = 0

    def is_allowed(self, principal: Principal, operation: Operation, resource: Resource) -> bool:
        return (operation, resource) in self.granted

    def may_write_some_topic(self, principal: Principal) -> bool:
        self.asked_some_topic += 1
        return self.writes_some_topic

    def refused(self, principal: Principal, operation: Operation, resource: Resource, door: str) -> None:
        self.refusals.append((principal.name, operation, resource))


@pytest.fixture
def security() -> FakeSecurity:
    return FakeSecurity()


@pytest.fixture
def request_access(security: FakeSecurity) -> Iterator[Access]:
    """One request's Access, bound as the listener binds it."""
    a = Access(ALICE, security)
    token = bind(a)
    yield a
    unbind(token)


@pytest.mark.parametrize(("resource", "code"), [
    (topic("orders"), ErrorCode.topic_authorization_failed),
    (group("billing"), ErrorCode.group_authorization_failed),
    (transactional_id("tx-1"), ErrorCode.transactional_id_authorization_failed),
    (CLUSTER, ErrorCode.cluster_authorization_failed),
])
def test_a_refusal_is_answered_with_the_code_of_the_resource_type(request_access: Access, resource: Resource,
                                                                  code: ErrorCode) -> None:
    assert refusal_code(Operation.DESCRIBE, resource) is code


def test_an_allowed_operation_is_no_refusal_and_is_recorded_as_checked(
        request_access: Access, security: FakeSecurity) -> None:
    security.granted.add((Operation.READ, topic("orders")))

    assert refusal_code(Operation.READ, topic("orders")) is None
    assert request_access.checked == {(Operation.READ, topic("orders"))}
    assert (request_access.refused, security.refusals) == (set(), [])


def test_a_refusal_is_recorded_and_audited_once_however_often_it_is_asked(
        request_access: Access, security: FakeSecurity) -> None:
    refusal_code(Operation.READ, topic("orders"))
    refusal_code(Operation.READ, topic("orders"))

    assert request_access.checked == {(Operation.READ, topic("orders"))}
    assert request_access.refused == {(Operation.READ, topic("orders"))}
    assert security.refusals == [("User:alice", Operation.READ, topic("orders"))]


def test_another_grant_allows_what_the_acls_on_the_resource_do_not(
        request_access: Access, security: FakeSecurity) -> None:
    security.writes_some_topic = True

    assert refusal_code(Operation.IDEMPOTENT_WRITE, CLUSTER, granted=request_access.may_write_some_topic) is None
    assert request_access.checked == {(Operation.IDEMPOTENT_WRITE, CLUSTER)}
    assert security.refusals == []


def test_the_other_grant_is_not_asked_when_the_acls_on_the_resource_allow(
        request_access: Access, security: FakeSecurity) -> None:
    security.granted.add((Operation.IDEMPOTENT_WRITE, CLUSTER))

    assert refusal_code(Operation.IDEMPOTENT_WRITE, CLUSTER, granted=request_access.may_write_some_topic) is None
    assert security.asked_some_topic == 0


def test_without_either_grant_the_refusal_names_the_resource_asked_for(
        request_access: Access, security: FakeSecurity) -> None:
    code = refusal_code(Operation.IDEMPOTENT_WRITE, CLUSTER, granted=request_access.may_write_some_topic)

    assert code is ErrorCode.cluster_authorization_failed
    assert security.refusals == [("User:alice", Operation.IDEMPOTENT_WRITE, CLUSTER)]


def test_a_hidden_resource_is_answered_with_its_code_but_not_counted_as_a_refusal(
        request_access: Access, security: FakeSecurity) -> None:
    code = refusal_code(Operation.DESCRIBE, topic("orders"), audited=False)

    assert code is ErrorCode.topic_authorization_failed
    assert request_access.checked == {(Operation.DESCRIBE, topic("orders"))}
    assert (request_access.refused, security.refusals) == (set(), [])


def test_without_authentication_nothing_is_refused() -> None:
    a = Access(ALICE, None)
    token = bind(a)
    try:
        assert refusal_code(Operation.ALTER, CLUSTER) is None
    finally:
        unbind(token)
    assert a.checked == {(Operation.ALTER, CLUSTER)}
