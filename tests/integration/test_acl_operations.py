"""GET /v1/acls/operations: the operations a binding may name for each resource type
(app.domain.acl.OPERATIONS_OF), which the console's ACL form offers rather than a copy of its
own (tests/e2e/test_console_acl_admin_browser.py)."""

from __future__ import annotations


def test_the_operations_are_served_per_resource_type_in_the_operation_enums_order(client) -> None:  # type: ignore[no-untyped-def]
    assert client.get("/v1/acls/operations").json() == {"operations_of": {
        "topic": ["read", "write", "create", "delete", "alter", "describe", "describe_configs", "alter_configs", "all"],
        "group": ["read", "delete", "describe", "all"],
        "transactional_id": ["write", "describe", "all"],
        "cluster": ["create", "alter", "describe", "cluster_action", "describe_configs", "alter_configs",
                    "idempotent_write", "all"]}}
