"""OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES in ClassicGroupProtocol.join: the group's members'
protocols together are checked in the transaction that writes the member, under the group's
row lock, so joins at once cannot pass the bound together; and a join that adds no bytes is
taken even where the group is past a bound lowered since it grew."""

from __future__ import annotations

import pytest

from app.domain.errors import GroupMetadataTooLarge
from app.services.classic_group_protocol import Joined, Joining
from app.storage import groups
from tests.helpers import create_topic
from tests.integration.test_topic_admin_races import Held, hold_then

BOUND = 2048
TOTAL = 3072


@pytest.fixture
def settings(settings):  # type: ignore[no-untyped-def]
    return settings.model_copy(update={"kafka_group_max_metadata_bytes": BOUND,
                                       "kafka_group_max_total_metadata_bytes": TOTAL})


def _join(kafka, size: int, member_id: str = ""):  # type: ignore[no-untyped-def]
    """A join of "g" whose protocol, its name and all, is `size` bytes."""
    return kafka.join("g", member_id=member_id, client_id=None, protocol_type="consumer",
                      protocols=[("range", b"x" * (size - len("range")))], topic_names=["t"],
                      session_timeout_ms=10_000, rebalance_timeout_ms=10_000)


def _members(database) -> list[str]:  # type: ignore[no-untyped-def]
    with database.engine.connect() as conn:
        return [m.member_id for m in groups.members(conn, "g")]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_of_two_joins_at_once_that_pass_the_total_together_the_second_is_refused(  # type: ignore[no-untyped-def]
        client, services, database, monkeypatch) -> None:
    # The first held once it has added its member, inside its transaction: the second waits for
    # the group's row lock and then counts the first's protocols. Checked before the lock, each
    # would find room for itself alone. (On SQLite one write runs at a time.)
    create_topic(client, "t", 1)
    kafka = services.classic_group_protocol

    first, second, waited = hold_then(Held(monkeypatch, groups, "add_member"),
                                      lambda: _join(kafka, BOUND), lambda: _join(kafka, BOUND), database)

    assert waited
    assert isinstance(first, Joined)
    assert isinstance(second, GroupMetadataTooLarge), second
    assert _members(database) == [first.member_id]


def test_a_join_that_adds_no_bytes_is_taken_in_a_group_past_a_bound_lowered_since(  # type: ignore[no-untyped-def]
        client, services, database) -> None:
    create_topic(client, "t", 1)
    kafka = services.classic_group_protocol
    first = _join(kafka, BOUND)
    second = _join(kafka, TOTAL - BOUND)
    assert isinstance(first, Joined) and isinstance(second, Joining)
    kafka.settings = kafka.settings.model_copy(update={"kafka_group_max_total_metadata_bytes": BOUND})  # a restart

    assert isinstance(_join(kafka, TOTAL - BOUND, second.member_id), Joining)  # as many bytes as it held
    with pytest.raises(GroupMetadataTooLarge):
        _join(kafka, TOTAL - BOUND + 1, second.member_id)  # one more
    assert isinstance(_join(kafka, TOTAL - BOUND - 1, second.member_id), Joining)  # fewer: still past, but taken
    assert sorted(_members(database)) == sorted([first.member_id, second.member_id])
