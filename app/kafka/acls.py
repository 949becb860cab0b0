"""Kafka's ACL APIs over the service's own ACLs: DescribeAcls, CreateAcls and DeleteAcls on the
bindings /v1/acls and `outbox acls` keep (SecurityService), which the Kafka door and the HTTP
door both decide with.

Kafka's codes are translated here, and only here, to the service's enums (app.domain.acl):
resource types TOPIC, GROUP, CLUSTER and TRANSACTIONAL_ID; pattern types LITERAL and PREFIXED
(a filter's ANY and MATCH as well); Kafka's operation codes (auth.ACL_OPERATION_CODES, the ones
KIP-430's fields use too); ALLOW and DENY. Kafka's cluster is `kafka-cluster`, the service's
`outbox-cluster`: a Kafka client names and is answered the first, either is taken.

What the service's model cannot hold is refused binding by binding with INVALID_REQUEST and a
message, the code Kafka's controller answers a binding it cannot take with (AclControlManager):
a host other than `*` (a binding here holds for every host), a resource type it has no
resources of (DELEGATION_TOKEN, USER), an operation it never checks (CREATE_TOKENS,
DESCRIBE_TOKENS), and whatever check_binding, the check of
every door, refuses. A filter that names such a value matches nothing, as Kafka's would match
no binding stored here; a filter naming UNKNOWN, or a code Kafka has not, is INVALID_REQUEST,
as Kafka's request validation answers it.

Authorization as Kafka's: DescribeAcls needs DESCRIBE on the cluster, CreateAcls and
DeleteAcls ALTER (auth.RULES), as /v1/acls does. With authentication off everything is
allowed, at both doors."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from app.domain import acl
from app.domain.acl import CLUSTER, CLUSTER_NAME, AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from app.domain.errors import InvalidRequest, OutboxError
from app.kafka.api_keys import ApiKey
from app.kafka.auth import ACL_OPERATION_CODES, access, refusal_code
from app.kafka.errors import error_code
from app.kafka.protocol import NO_WAIT, build, response_module

KAFKA_CLUSTER_NAME = "kafka-cluster"
ANY_HOST = "*"


class KafkaResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class KafkaPatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class KafkaPermission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Kafka's AclOperation codes beside the service's operations (auth.ACL_OPERATION_CODES).
_UNKNOWN_OPERATION, _ANY_OPERATION = 0, 1
_KAFKA_ONLY_OPERATIONS = {13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS"}

RESOURCE_TYPES: dict[KafkaResourceType, ResourceType] = {
    KafkaResourceType.TOPIC: ResourceType.TOPIC, KafkaResourceType.GROUP: ResourceType.GROUP,
    KafkaResourceType.CLUSTER: ResourceType.CLUSTER, KafkaResourceType.TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID}
PATTERN_TYPES: dict[KafkaPatternType, PatternType] = {
    KafkaPatternType.LITERAL: PatternType.LITERAL, KafkaPatternType.PREFIXED: PatternType.PREFIXED}
PERMISSIONS: dict[KafkaPermission, Permission] = {
    KafkaPermission.DENY: Permission.DENY, KafkaPermission.ALLOW: Permission.ALLOW}
OPERATIONS: dict[int, Operation] = {code: op for op, code in ACL_OPERATION_CODES.items()}

_KAFKA_RESOURCE_TYPE = {v: k for k, v in RESOURCE_TYPES.items()}
_KAFKA_PATTERN_TYPE = {v: k for k, v in PATTERN_TYPES.items()}
_KAFKA_PERMISSION = {v: k for k, v in PERMISSIONS.items()}


class _NoMatch(Exception):
    """A filter that names what no binding here can have: it matches none."""


def _known(cls: type[enum.IntEnum], code: int, what: str) -> Any:
    """Kafka's enum member of `code`; INVALID_REQUEST for UNKNOWN or a code Kafka has not."""
    try:
        member = cls(code)
    except ValueError:
        member = cls(0)
    if member == 0:
        raise InvalidRequest(f"unknown {what} {code}")
    return member


def _resource_name(resource_type: ResourceType | None, name: str) -> str:
    """The service's name of a resource a Kafka client names: its cluster is Kafka's."""
    return CLUSTER_NAME if resource_type is ResourceType.CLUSTER and name == KAFKA_CLUSTER_NAME else name


def binding(c: Any) -> AclBinding:
    """The service's binding of a CreateAcls creation; InvalidRequest saying why it cannot be one."""
    kind = _known(KafkaResourceType, c.resource_type, "resource type")
    if kind not in RESOURCE_TYPES:
        raise InvalidRequest(f"resource type {kind.name} has no ACLs here: a binding names a TOPIC, GROUP, "
                             "CLUSTER or TRANSACTIONAL_ID")
    pattern = _known(KafkaPatternType, c.resource_pattern_type, "pattern type")
    if pattern not in PATTERN_TYPES:
        raise InvalidRequest(f"invalid pattern type {pattern.name}: a binding is LITERAL or PREFIXED")
    try:
        operation = _operation(c.operation)
    except _NoMatch as e:
        raise InvalidRequest(f"{e}: a binding of it would never match a request") from None
    if operation is None:
        raise InvalidRequest(f"invalid operation {c.operation}: ANY is for filters")
    permission = _known(KafkaPermission, c.permission_type, "permission type")
    if permission not in PERMISSIONS:
        raise InvalidRequest("invalid permission type ANY: a binding ALLOWs or DENYs")
    if c.host != ANY_HOST:
        raise InvalidRequest(f"host {c.host!r} is not served: a binding here holds for every host ('*')")
    resource_type = RESOURCE_TYPES[kind]
    if resource_type is ResourceType.CLUSTER and c.resource_name not in (KAFKA_CLUSTER_NAME, CLUSTER_NAME):
        raise InvalidRequest(f"the only valid name for the CLUSTER resource is {KAFKA_CLUSTER_NAME}")
    made = AclBinding(c.principal, resource_type, _resource_name(resource_type, c.resource_name),
                      PATTERN_TYPES[pattern], operation, PERMISSIONS[permission])
    problem = acl.check_binding(made)
    if problem is not None:
        raise InvalidRequest(f"invalid ACL binding: {problem}")
    return made


def _operation(code: int) -> Operation | None:
    """The service's operation of a Kafka code; None for ANY; _NoMatch for one the service
    never checks; InvalidRequest for UNKNOWN and codes Kafka has not."""
    if code == _ANY_OPERATION:
        return None
    if code in _KAFKA_ONLY_OPERATIONS:
        raise _NoMatch(f"operation {_KAFKA_ONLY_OPERATIONS[code]} is not one the service checks")
    if code not in OPERATIONS:
        raise InvalidRequest(f"unknown operation {code}")
    return OPERATIONS[code]


def acl_filters(f: Any) -> tuple[AclFilter, ...]:
    """The service's filters of a DescribeAcls request or a DeleteAcls filter, whose bindings
    together are the ones it takes; none where it matches no binding the service can hold;
    InvalidRequest for UNKNOWN values. Two for a filter of any resource type naming Kafka's
    cluster: that name is the cluster's (which the service names CLUSTER_NAME), and also
    any other resource's of that name (a topic may be called kafka-cluster)."""
    kind = _known(KafkaResourceType, f.resource_type_filter, "resource type")
    pattern = _known(KafkaPatternType, f.pattern_type_filter, "pattern type")
    permission = _known(KafkaPermission, f.permission_type, "permission type")
    try:
        operation = _operation(f.operation)
    except _NoMatch:
        return ()
    if kind != KafkaResourceType.ANY and kind not in RESOURCE_TYPES:
        return ()
    if f.host_filter is not None and f.host_filter != ANY_HOST:
        return ()  # every binding here is for host '*'

    def of(resource_type: ResourceType | None) -> AclFilter:
        name = None if f.resource_name_filter is None else _resource_name(resource_type, f.resource_name_filter)
        return AclFilter(principal=f.principal_filter, resource_type=resource_type, resource_name=name,
                         pattern_type=PATTERN_TYPES.get(pattern), operation=operation,
                         permission=PERMISSIONS.get(permission), match=pattern == KafkaPatternType.MATCH)

    if kind == KafkaResourceType.ANY and f.resource_name_filter == KAFKA_CLUSTER_NAME:
        # Disjoint: no cluster binding is named kafka-cluster here (binding() renames it).
        return of(ResourceType.CLUSTER), of(None)
    return (of(RESOURCE_TYPES.get(kind)),)


def _kafka_name(b: AclBinding) -> str:
    return KAFKA_CLUSTER_NAME if b.resource_type is ResourceType.CLUSTER else b.resource_name


class AclApis:
    def __init__(self, services: Any) -> None:
        self.services = services
        self.handlers = {ApiKey.DESCRIBE_ACLS: self.describe_acls, ApiKey.CREATE_ACLS: self.create_acls,
                         ApiKey.DELETE_ACLS: self.delete_acls}

    def describe_acls(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.DESCRIBE_ACLS, version)
        assert m is not None

        def answer(code: ErrorCode, message: str | None = None, found: Sequence[AclBinding] = ()) -> Any:
            by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
            for b in found:
                by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
            return build(m.DescribeAclsResponse, throttle_time=NO_WAIT, error_code=code, error_message=message,
                         resources=tuple(
                             build(m.DescribeAclsResource, resource_type=_KAFKA_RESOURCE_TYPE[kind],
                                   resource_name=_kafka_name(bs[0]), pattern_type=_KAFKA_PATTERN_TYPE[pattern],
                                   acls=tuple(build(m.AclDescription, principal=b.principal, host=ANY_HOST,
                                                    operation=ACL_OPERATION_CODES[b.operation],
                                                    permission_type=_KAFKA_PERMISSION[b.permission])
                                              for b in bs))
                             for (kind, _, pattern), bs in by_resource.items()))

        if (denied := refusal_code(Operation.DESCRIBE, CLUSTER)) is not None:
            return answer(denied)
        try:
            found = [b for match in acl_filters(body) for b in self.services.security.list_acls(match)]
            return answer(ErrorCode.none, None, found)
        except OutboxError as e:
            return answer(error_code(e), e.message)

    def create_acls(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.CREATE_ACLS, version)
        assert m is not None
        denied = refusal_code(Operation.ALTER, CLUSTER)
        outcomes: list[tuple[ErrorCode, str | None]] = []
        valid: list[tuple[int, AclBinding]] = []
        for i, c in enumerate(body.creations):
            if denied is not None:
                outcomes.append((denied, None))
                continue
            try:
                valid.append((i, binding(c)))
                outcomes.append((ErrorCode.none, None))
            except OutboxError as e:
                outcomes.append((error_code(e), e.message))
        if valid:
            # One write for every valid binding; one stored already is left as it is (Kafka's too).
            try:
                self.services.security.add_acls([b for _, b in valid], by=access().principal)
            except OutboxError as e:
                for i, _ in valid:
                    outcomes[i] = (error_code(e), e.message)
        return build(m.CreateAclsResponse, throttle_time=NO_WAIT, results=tuple(
            build(m.AclCreationResult, error_code=code, error_message=message) for code, message in outcomes))

    def delete_acls(self, body: Any, version: int) -> Any:
        """Each filter deletes what it matches, as Kafka's: a filter of ANY everywhere deletes
        every binding (the HTTP door asks for one field at least; a Kafka client does not)."""
        m = response_module(ApiKey.DELETE_ACLS, version)
        assert m is not None
        denied = refusal_code(Operation.ALTER, CLUSTER)
        results = []
        for f in body.filters:
            if denied is not None:
                results.append(build(m.DeleteAclsFilterResult, error_code=denied, error_message=None,
                                     matching_acls=()))
                continue
            try:
                removed = [b for match in acl_filters(f)
                           for b in self.services.security.remove_acls(match, by=access().principal)]
            except OutboxError as e:
                results.append(build(m.DeleteAclsFilterResult, error_code=error_code(e), error_message=e.message,
                                     matching_acls=()))
                continue
            results.append(build(m.DeleteAclsFilterResult, error_code=ErrorCode.none, error_message=None,
                                 matching_acls=tuple(
                                     build(m.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                                           resource_type=_KAFKA_RESOURCE_TYPE[b.resource_type],
                                           resource_name=_kafka_name(b),
                                           pattern_type=_KAFKA_PATTERN_TYPE[b.pattern_type], principal=b.principal,
                                           host=ANY_HOST, operation=ACL_OPERATION_CODES[b.operation],
                                           permission_type=_KAFKA_PERMISSION[b.permission])
                                     for b in removed)))
        return build(m.DeleteAclsResponse, throttle_time=NO_WAIT, filter_results=tuple(results))
