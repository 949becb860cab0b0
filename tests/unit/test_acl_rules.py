"""Kafka's ACL decision (app.domain.acl.is_allowed): who, which resource, which operation, and
deny over allow."""

from __future__ import annotations

import pytest

from app.domain.acl import (
    CLUSTER,
    AclFilter,
    CLUSTER_NAME,
    OPERATIONS_OF,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    check_binding,
    group,
    is_allowed,
    may_write_some_topic,
    principal_name,
    topic,
    transactional_id,
)

ALLOW, DENY = Permission.ALLOW, Permission.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
T = ResourceType.TOPIC


def binding(op: Operation, name: str = "orders", permission: Permission = ALLOW, pattern: PatternType = LITERAL,
            principal: str = "User:alice", rtype: ResourceType = T) -> AclBinding:
    return AclBinding(principal, rtype, name, pattern, op, permission)


def test_no_binding_means_no_access() -> None:
    assert not is_allowed([], "User:alice", Operation.READ, topic("orders"))


def test_an_allow_for_the_principal_operation_and_literal_name_allows() -> None:
    assert is_allowed([binding(Operation.READ)], "User:alice", Operation.READ, topic("orders"))


@pytest.mark.parametrize("other", [
    binding(Operation.READ, principal="User:bob"),
    binding(Operation.READ, name="orders2"),
    binding(Operation.WRITE),
    binding(Operation.READ, rtype=ResourceType.GROUP),
])
def test_a_binding_for_another_principal_name_operation_or_type_does_not_allow(other: AclBinding) -> None:
    assert not is_allowed([other], "User:alice", Operation.READ, topic("orders"))


def test_the_wildcard_principal_and_the_wildcard_name_match_everyone_and_everything() -> None:
    assert is_allowed([binding(Operation.READ, principal="User:*")], "User:alice", Operation.READ, topic("orders"))
    assert is_allowed([binding(Operation.READ, name="*")], "User:alice", Operation.READ, topic("anything"))


def test_a_prefixed_binding_matches_names_that_start_with_it_only() -> None:
    b = [binding(Operation.READ, name="pizza-", pattern=PREFIXED)]
    assert is_allowed(b, "User:alice", Operation.READ, topic("pizza-orders"))
    assert not is_allowed(b, "User:alice", Operation.READ, topic("pizz"))
    assert not is_allowed(b, "User:alice", Operation.READ, topic("my-pizza-orders"))


def test_a_literal_name_matches_that_name_only_and_a_star_only_as_a_literal() -> None:
    assert not is_allowed([binding(Operation.READ, name="ord", pattern=LITERAL)], "User:alice", Operation.READ,
                          topic("orders"))
    # A literal "*" matches every name; a topic named "*x" is not matched by the prefix "*" on its own.
    assert is_allowed([binding(Operation.READ, name="*")], "User:alice", Operation.READ, topic("orders"))
    assert not is_allowed([binding(Operation.READ, name="*o", pattern=PREFIXED)], "User:alice", Operation.READ,
                          topic("orders"))


def test_alter_does_not_imply_alter_configs_and_all_does() -> None:
    assert not is_allowed([binding(Operation.ALTER)], "User:alice", Operation.ALTER_CONFIGS, topic("orders"))
    assert is_allowed([binding(Operation.ALL)], "User:alice", Operation.ALTER_CONFIGS, topic("orders"))


def test_a_deny_that_covers_every_allowed_topic_takes_away_idempotent_write() -> None:
    allow = binding(Operation.WRITE, name="pay-", pattern=PREFIXED)
    assert not may_write_some_topic([allow, binding(Operation.WRITE, name="*", permission=DENY)], "User:alice")
    assert not may_write_some_topic([allow, binding(Operation.ALL, name="pa", pattern=PREFIXED, permission=DENY)],
                                    "User:alice")
    assert may_write_some_topic([allow, binding(Operation.WRITE, name="pay-x", permission=DENY)], "User:alice")


@pytest.mark.parametrize("granted", [Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER, Operation.ALL])
def test_read_write_delete_alter_and_all_imply_describe(granted: Operation) -> None:
    assert is_allowed([binding(granted)], "User:alice", Operation.DESCRIBE, topic("orders"))


@pytest.mark.parametrize("granted", [Operation.DESCRIBE, Operation.CREATE])
def test_describe_and_create_imply_nothing_else(granted: Operation) -> None:
    assert not is_allowed([binding(granted)], "User:alice", Operation.READ, topic("orders"))


@pytest.mark.parametrize("granted", [Operation.ALTER_CONFIGS, Operation.ALL])
def test_alter_configs_and_all_imply_describe_configs(granted: Operation) -> None:
    assert is_allowed([binding(granted)], "User:alice", Operation.DESCRIBE_CONFIGS, topic("orders"))


@pytest.mark.parametrize("granted", [Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                     Operation.ALTER, Operation.CREATE])
def test_describe_and_what_implies_it_do_not_give_describe_configs(granted: Operation) -> None:
    # Kafka's rule: seeing that a topic exists is not reading its config.
    assert not is_allowed([binding(granted)], "User:alice", Operation.DESCRIBE_CONFIGS, topic("orders"))


def test_describe_configs_implies_nothing_else() -> None:
    for op in (Operation.DESCRIBE, Operation.ALTER_CONFIGS):
        assert not is_allowed([binding(Operation.DESCRIBE_CONFIGS)], "User:alice", op, topic("orders"))


def test_a_deny_of_describe_configs_wins_over_alter_configs_and_does_not_deny_it() -> None:
    # Implication widens allows only: ALTER_CONFIGS stays allowed, its implied DESCRIBE_CONFIGS does not.
    bindings = [binding(Operation.ALTER_CONFIGS), binding(Operation.DESCRIBE_CONFIGS, permission=DENY)]
    assert not is_allowed(bindings, "User:alice", Operation.DESCRIBE_CONFIGS, topic("orders"))
    assert is_allowed(bindings, "User:alice", Operation.ALTER_CONFIGS, topic("orders"))


def test_cluster_action_is_its_own_operation_on_the_cluster() -> None:
    assert is_allowed([binding(Operation.CLUSTER_ACTION, name=CLUSTER_NAME, rtype=ResourceType.CLUSTER)],
                      "User:alice", Operation.CLUSTER_ACTION, CLUSTER)
    assert not is_allowed([binding(Operation.CLUSTER_ACTION, name=CLUSTER_NAME, rtype=ResourceType.CLUSTER)],
                          "User:alice", Operation.ALTER, CLUSTER)
    assert not is_allowed([binding(Operation.ALTER, name=CLUSTER_NAME, rtype=ResourceType.CLUSTER)],
                          "User:alice", Operation.CLUSTER_ACTION, CLUSTER)


def test_the_operations_of_each_resource_type_are_kafkas() -> None:
    assert OPERATIONS_OF[ResourceType.TOPIC] == {
        Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER, Operation.DESCRIBE,
        Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.ALL}
    assert OPERATIONS_OF[ResourceType.CLUSTER] == {
        Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE, Operation.ALL}


def test_all_allows_every_operation() -> None:
    for op in (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER):
        assert is_allowed([binding(Operation.ALL)], "User:alice", op, topic("orders"))


def test_a_deny_wins_over_any_allow() -> None:
    bindings = [binding(Operation.ALL, principal="User:*", name="*"), binding(Operation.READ, permission=DENY)]
    assert not is_allowed(bindings, "User:alice", Operation.READ, topic("orders"))
    assert is_allowed(bindings, "User:alice", Operation.WRITE, topic("orders"))


def test_a_deny_of_all_denies_every_operation_and_a_prefixed_deny_covers_its_names() -> None:
    bindings = [binding(Operation.ALL), binding(Operation.ALL, name="ord", pattern=PREFIXED, permission=DENY)]
    for op in (Operation.READ, Operation.DESCRIBE, Operation.WRITE):
        assert not is_allowed(bindings, "User:alice", op, topic("orders"))


def test_a_deny_of_alter_configs_does_not_deny_the_describe_configs_it_implies() -> None:
    # A deny covers the operation it names only (and ALL), not those that operation implies.
    bindings = [binding(Operation.ALTER_CONFIGS, permission=DENY), binding(Operation.DESCRIBE_CONFIGS)]
    assert is_allowed(bindings, "User:alice", Operation.DESCRIBE_CONFIGS, topic("orders"))
    assert not is_allowed(bindings, "User:alice", Operation.ALTER_CONFIGS, topic("orders"))


def test_a_deny_of_describe_does_not_deny_read() -> None:
    # Kafka's rule: implication widens allows only.
    bindings = [binding(Operation.READ), binding(Operation.DESCRIBE, permission=DENY)]
    assert is_allowed(bindings, "User:alice", Operation.READ, topic("orders"))
    assert not is_allowed(bindings, "User:alice", Operation.DESCRIBE, topic("orders"))


def test_a_deny_for_everyone_denies_the_principal_too() -> None:
    bindings = [binding(Operation.READ), binding(Operation.READ, principal="User:*", permission=DENY)]
    assert not is_allowed(bindings, "User:alice", Operation.READ, topic("orders"))


def test_resources_of_each_type_are_told_apart() -> None:
    bindings = [binding(Operation.READ, name="x", rtype=ResourceType.GROUP)]
    assert is_allowed(bindings, "User:alice", Operation.READ, group("x"))
    assert not is_allowed(bindings, "User:alice", Operation.READ, topic("x"))
    assert not is_allowed(bindings, "User:alice", Operation.READ, transactional_id("x"))


def test_write_on_some_topic_is_an_idempotent_producers_right_and_nothing_else_is() -> None:
    assert may_write_some_topic([binding(Operation.WRITE, name="t-", pattern=PREFIXED)], "User:alice")
    assert may_write_some_topic([binding(Operation.ALL, principal="User:*")], "User:alice")
    assert not may_write_some_topic([binding(Operation.READ)], "User:alice")
    assert not may_write_some_topic([binding(Operation.WRITE, permission=DENY)], "User:alice")
    assert not may_write_some_topic([binding(Operation.WRITE, rtype=ResourceType.TRANSACTIONAL_ID)], "User:alice")


@pytest.mark.parametrize(("bad", "problem"), [
    (binding(Operation.READ, principal="alice"), "principal must be User:<name>"),
    (binding(Operation.READ, principal="User:"), "principal must be User:<name>"),
    (binding(Operation.WRITE, rtype=ResourceType.GROUP), "does not apply to a group"),
    (binding(Operation.CLUSTER_ACTION), "does not apply to a topic"),
    (binding(Operation.DESCRIBE_CONFIGS, rtype=ResourceType.GROUP), "does not apply to a group"),
    (binding(Operation.READ, rtype=ResourceType.TRANSACTIONAL_ID), "does not apply to a transactional_id"),
    (binding(Operation.ALTER, name="other", rtype=ResourceType.CLUSTER), "the cluster resource is named"),
    (binding(Operation.READ, name="*", pattern=PREFIXED), "use literal '*'"),
    (binding(Operation.READ, principal="User:al\nice"), "no control characters"),
    (binding(Operation.READ, principal="User:" + "a" * 251), "at most 255 characters"),
    (binding(Operation.READ, name="a\x7fb"), "none of them a control character"),
    (binding(Operation.READ, name="o" * 256), "resource_name must be at most 255 characters"),
])
def test_a_binding_that_could_never_match_is_refused(bad: AclBinding, problem: str) -> None:
    assert problem in (check_binding(bad) or "")


def test_a_binding_of_each_kind_kafka_knows_is_taken() -> None:
    assert check_binding(binding(Operation.IDEMPOTENT_WRITE, name=CLUSTER_NAME, rtype=ResourceType.CLUSTER)) is None
    assert check_binding(binding(Operation.WRITE, name="tx-", pattern=PREFIXED, rtype=ResourceType.TRANSACTIONAL_ID)) is None
    assert CLUSTER.name == CLUSTER_NAME


def test_the_wildcard_principal_is_a_bindings_principal() -> None:
    assert check_binding(binding(Operation.READ, principal="User:*")) is None


def test_a_match_filter_takes_every_binding_that_applies_to_the_name_it_names() -> None:
    # No resource type in the filter: a group's binding that applies to the name is taken too.
    match = AclFilter(resource_name="orders", match=True)
    applies = [binding(Operation.READ), binding(Operation.READ, name="*"),
               binding(Operation.READ, name="ord", pattern=PREFIXED),
               binding(Operation.READ, rtype=ResourceType.GROUP, name="o", pattern=PREFIXED)]
    others = [binding(Operation.READ, name="orders-eu"), binding(Operation.READ, name="orders-", pattern=PREFIXED)]
    assert [b for b in applies + others if match.matches_name(b)] == applies


def test_a_filter_without_match_compares_the_name_exactly_in_storage() -> None:
    assert AclFilter(resource_name="orders").by_name
    assert AclFilter(match=True).by_name  # MATCH without a name matches any name, as Kafka's
    assert not AclFilter(resource_name="orders", match=True).by_name
    assert AclFilter(match=True).matches_everything


def test_a_bare_name_becomes_a_user_principal() -> None:
    assert (principal_name("alice"), principal_name("User:alice")) == ("User:alice", "User:alice")
