"""The rule for transactional ids and group ids (app.domain.ids), which every door is held to:
the services check it, the HTTP schemas state it with the same constants."""

from __future__ import annotations

import typing

import pytest

from app.domain.errors import InvalidGroupId, InvalidRequest
from app.domain.ids import ID_MAX_LENGTH, ID_PATTERN, check_group_id, check_transactional_id

REFUSED = {
    "empty": "",
    "over-long": "x" * (ID_MAX_LENGTH + 1),
    "a-slash": "orders/eu",
    "a-NUL": "a\x00b",
    "a-control-character": "a\x1fb",
    "DEL": "a\x7f",
    # re's `$` matches before a final newline: the anchored pattern alone would let it through.
    "a-final-newline": "orders\n",
}
# Ids Kafka's clients and their tests use (librdkafka's suite: rdkafkatest_rnd…_0103_…), and the
# longest the rule takes.
TAKEN = ["rdkafkatest_rnd5d2a0f3c1b_0103_transactions", "connect-cluster.offsets", "sink.0", "a b:c@d",
         "ü" * ID_MAX_LENGTH]


@pytest.mark.parametrize("value", REFUSED.values(), ids=REFUSED.keys())
def test_a_transactional_id_outside_the_rule_is_invalid_request(value: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_transactional_id(value)
    assert type(refused.value) is InvalidRequest and refused.value.error_code == "INVALID_REQUEST"


@pytest.mark.parametrize("value", REFUSED.values(), ids=REFUSED.keys())
def test_a_group_id_outside_the_rule_is_invalid_group_id_an_invalid_request(value: str) -> None:
    with pytest.raises(InvalidGroupId) as refused:
        check_group_id(value)
    assert isinstance(refused.value, InvalidRequest) and refused.value.error_code == "INVALID_GROUP_ID"


@pytest.mark.parametrize("value", TAKEN)
def test_ids_kafka_clients_use_are_taken(value: str) -> None:
    check_transactional_id(value)
    check_group_id(value)


def test_the_http_schemas_state_the_domains_id_rule() -> None:
    from app.api.routers.groups import GroupPath, MemberPath
    from app.api.routers.transactions import TransactionalIdPath
    from app.api.schemas.common import GroupId, MemberId, TransactionalId

    for schema in (TransactionalId, GroupId, MemberId):
        (meta,) = typing.get_args(schema)[1:]
        assert (meta.min_length, meta.max_length, meta.pattern) == (1, ID_MAX_LENGTH, ID_PATTERN)
    for path in (TransactionalIdPath, GroupPath, MemberPath):
        (param,) = typing.get_args(path)[1:]
        limits = {k: getattr(m, k) for m in param.metadata for k in ("min_length", "max_length", "pattern")
                  if hasattr(m, k)}
        assert limits == {"min_length": 1, "max_length": ID_MAX_LENGTH, "pattern": ID_PATTERN}

