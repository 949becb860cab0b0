"""Principals and ACLs, as Kafka's authorizer (AclAuthorizer / StandardAuthorizer) has them.

An ACL binding says: `principal` is `allow`ed or `deny`ed `operation` on the resources of
`resource_type` whose name matches `resource_name` by `pattern_type`. A request is allowed when
its principal is a super-user, or when no DENY binding matches it and at least one ALLOW
binding does (Kafka's allow.everyone.if.no.acl.found=false: no binding, no access).

Matching, as Kafka's:
- principal: the binding's own (`User:alice`) or the wildcard `User:*`;
- resource: LITERAL names one resource, or every resource of its type with the name `*`;
  PREFIXED matches every name that starts with it;
- operation: the binding's own, or ALL; an ALLOW of READ, WRITE, DELETE or ALTER implies
  DESCRIBE (a principal that may read a topic may see that it exists), and an ALLOW of
  ALTER_CONFIGS implies DESCRIBE_CONFIGS. DESCRIBE does not give DESCRIBE_CONFIGS: seeing that a
  topic exists is not reading its config. Implication applies to ALLOW only: a DENY of DESCRIBE
  does not deny READ, a DENY of ALL denies everything.

Pure: the bindings are handed in (app.services.security keeps them cached per process).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

PRINCIPAL_TYPE = "User"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_RESOURCE = "*"
ANONYMOUS = "User:ANONYMOUS"  # who a request is when authentication is off (Kafka's name)
CLUSTER_NAME = "outbox-cluster"  # the one cluster resource (Kafka's "kafka-cluster")


class ResourceType(str, enum.Enum):
    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactional_id"
    CLUSTER = "cluster"


class PatternType(str, enum.Enum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Operation(str, enum.Enum):
    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    CLUSTER_ACTION = "cluster_action"  # on the cluster: an operator's action (aborting a transaction)
    DESCRIBE_CONFIGS = "describe_configs"  # read a config: apart from DESCRIBE, as in Kafka
    ALTER_CONFIGS = "alter_configs"  # change a config: apart from ALTER, as in Kafka
    IDEMPOTENT_WRITE = "idempotent_write"
    ALL = "all"


class Permission(str, enum.Enum):
    ALLOW = "allow"
    DENY = "deny"


# Which operations a binding may name for each resource type (Kafka's ResourceType ×
# AclOperation table; ALL everywhere). A binding outside it could never match a request.
OPERATIONS_OF: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset({Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE,
                                   Operation.ALTER, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                                   Operation.ALTER_CONFIGS, Operation.ALL}),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DELETE, Operation.DESCRIBE, Operation.ALL}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.WRITE, Operation.DESCRIBE, Operation.ALL}),
    ResourceType.CLUSTER: frozenset({Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                                     Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                                     Operation.DESCRIBE, Operation.ALL}),
}

# The operations an ALLOW of which is also an ALLOW of the key (ALL aside, which allows every one).
_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class Resource:
    type: ResourceType
    name: str

    def __str__(self) -> str:
        return f"{self.type.value}:{self.name}"


CLUSTER = Resource(ResourceType.CLUSTER, CLUSTER_NAME)


def topic(name: str) -> Resource:
    return Resource(ResourceType.TOPIC, name)


def group(name: str) -> Resource:
    return Resource(ResourceType.GROUP, name)


def transactional_id(name: str) -> Resource:
    return Resource(ResourceType.TRANSACTIONAL_ID, name)


@dataclass(frozen=True, slots=True)
class AclBinding:
    principal: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    operation: Operation
    permission: Permission

    def matches_resource(self, resource: Resource) -> bool:
        if self.resource_type is not resource.type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return resource.name.startswith(self.resource_name)
        return self.resource_name == resource.name or self.resource_name == WILDCARD_RESOURCE

    def __str__(self) -> str:
        return (f"{self.permission.value} {self.principal} {self.operation.value} on "
                f"{self.resource_type.value}:{self.resource_name} ({self.pattern_type.value})")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: which bindings a list or a removal takes. A field left None
    matches anything.

    `match`: Kafka's MATCH pattern filter. `resource_name` then names one resource, and the
    filter takes every binding that would match it: a literal of that name or the literal `*`,
    and every prefixed pattern the name starts with (pattern_type is left None)."""

    principal: str | None = None
    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern_type: PatternType | None = None
    operation: Operation | None = None
    permission: Permission | None = None
    match: bool = False

    @property
    def matches_everything(self) -> bool:
        return all(getattr(self, name) is None for name in self.__slots__ if name != "match")

    @property
    def by_name(self) -> bool:
        """Whether resource_name and pattern_type compare exactly (else `match` compares them)."""
        return not self.match or self.resource_name is None

    def matches_name(self, binding: AclBinding) -> bool:
        """MATCH's test of a binding's resource pattern: the binding's own rule
        (matches_resource) applied to the resource the filter names."""
        return self.by_name or binding.matches_resource(Resource(binding.resource_type, self.resource_name))


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request is: `User:<name>`, and how that was established (`api_key`, `jwt`,
    `mtls`, or `none` when authentication is off)."""

    name: str
    method: str

    def __str__(self) -> str:
        return self.name


def principal_name(name: str) -> str:
    """`alice` → `User:alice`; a name already typed is kept."""
    return name if name.startswith(f"{PRINCIPAL_TYPE}:") else f"{PRINCIPAL_TYPE}:{name}"


def principal_name_problem(name: str) -> str | None:
    """What makes `name` (typed, `User:<name>`) no principal's name, or None: empty, the
    wildcard, over 255 characters, or holding a control character (names are written in audit
    lines, and a newline would forge one)."""
    if name in (f"{PRINCIPAL_TYPE}:", WILDCARD_PRINCIPAL) or not name.startswith(f"{PRINCIPAL_TYPE}:"):
        return f"{PRINCIPAL_TYPE}:<name> with a name"
    if len(name) > 255:
        return "at most 255 characters"
    if any(c < " " or c == "\x7f" for c in name):
        return "no control characters"
    return None


def check_binding(binding: AclBinding) -> str | None:
    """What is wrong with a binding to be stored, or None: the one check of every door's."""
    if binding.principal != WILDCARD_PRINCIPAL and principal_name_problem(binding.principal) is not None:
        return (f"principal must be {PRINCIPAL_TYPE}:<name> or {WILDCARD_PRINCIPAL} "
                f"({principal_name_problem(binding.principal)}), not {binding.principal!r}")
    if not binding.resource_name:
        return "resource_name must not be empty"
    if len(binding.resource_name) > 255 or any(c < " " or c == "\x7f" for c in binding.resource_name):
        return "resource_name must be at most 255 characters, none of them a control character"
    if binding.operation not in OPERATIONS_OF[binding.resource_type]:
        allowed = ", ".join(sorted(op.value for op in OPERATIONS_OF[binding.resource_type]))
        return f"operation {binding.operation.value!r} does not apply to a {binding.resource_type.value} (one of: {allowed})"
    if binding.resource_type is ResourceType.CLUSTER and (
        binding.resource_name != CLUSTER_NAME or binding.pattern_type is not PatternType.LITERAL
    ):
        return f"the cluster resource is named {CLUSTER_NAME!r}, literal"
    if binding.pattern_type is PatternType.PREFIXED and binding.resource_name == WILDCARD_RESOURCE:
        return "a prefixed pattern of '*' matches only names that start with '*'; use literal '*' for every resource"
    return None


def _operation_allows(granted: Operation, wanted: Operation) -> bool:
    return granted is wanted or granted is Operation.ALL or granted in _IMPLIED_BY.get(wanted, ())


def may_write_some_topic(bindings: Iterable[AclBinding], principal: str) -> bool:
    """An ALLOW of WRITE (or ALL) on some topics that no DENY covers: since Kafka 3.0 (KIP-679)
    that is enough for an idempotent InitProducerId, beside IDEMPOTENT_WRITE on the cluster
    (Kafka's authorizeByResourceType). The producer id alone grants nothing: each Send is still
    checked for WRITE on its topics."""
    mine = [b for b in bindings if b.resource_type is ResourceType.TOPIC
            and b.operation in (Operation.WRITE, Operation.ALL)
            and (b.principal == principal or b.principal == WILDCARD_PRINCIPAL)]
    denies = [b for b in mine if b.permission is Permission.DENY]
    return any(a.permission is Permission.ALLOW and not any(_covers(d, a) for d in denies) for a in mine)


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether every topic `allow` names is also named by `deny`."""
    if deny.pattern_type is PatternType.LITERAL:
        return deny.resource_name == WILDCARD_RESOURCE or (
            allow.pattern_type is PatternType.LITERAL and allow.resource_name == deny.resource_name)
    return allow.resource_name.startswith(deny.resource_name) and allow.resource_name != WILDCARD_RESOURCE


def authorized_operations(resource: Resource, allows: Callable[[Operation, Resource], bool]) -> list[Operation]:
    """The operations `allows` (a door's decision for its principal: super-users, the ACLs,
    and everything with authentication off) grants on `resource`, of those a binding may name
    for its type, ALL left out, in Operation's order: Kafka's KIP-430 authorized operations,
    the one answer of both doors. The cluster's are none without DESCRIBE on it, as Kafka's
    Metadata and DescribeCluster answer, rather than a refusal."""
    if resource.type is ResourceType.CLUSTER and not allows(Operation.DESCRIBE, resource):
        return []
    return [op for op in Operation if op in OPERATIONS_OF[resource.type] and op is not Operation.ALL
            and allows(op, resource)]


def is_allowed(bindings: Iterable[AclBinding], principal: str, operation: Operation, resource: Resource) -> bool:
    """Kafka's decision for one principal, operation and resource (super-users aside): no
    matching DENY, and a matching ALLOW. `bindings` may hold other principals' too."""
    allowed = False
    for b in bindings:
        if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
            continue
        if not b.matches_resource(resource):
            continue
        if b.permission is Permission.DENY:
            if b.operation is operation or b.operation is Operation.ALL:
                return False
        elif not allowed and _operation_allows(b.operation, operation):
            allowed = True
    return allowed
