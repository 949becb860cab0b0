"""app.storage.groups.consumed_topics: the topics a group consumes (its members'
subscriptions, the topics it has committed offsets in, those an unfinished transaction has
staged offsets in for it), the one definition its lag, the lag gauges and a reset of all its
topics read, on both databases."""

from __future__ import annotations

import pytest

from app.storage import groups
from tests.helpers import begin, create_topic, init_producer


@pytest.fixture
def consuming(client):  # type: ignore[no-untyped-def]
    """Group g: a member subscribed to `subscribed`, an offset committed in `committed`, one
    staged in `staged` by an open transaction. Group h: an offset committed in `other`.
    `unread`: consumed by nobody."""
    for name in ("subscribed", "committed", "staged", "other", "unread"):
        create_topic(client, name, 2)
    assert client.post("/v1/groups/g/members", json={"topics": ["subscribed"]}).status_code == 200
    for group, topic in (("g", "committed"), ("h", "other")):
        r = client.post(f"/v1/groups/{group}/offsets", json={"offsets": [{"topic": topic, "partition": 1, "offset": 0}]})
        assert r.status_code == 200, r.text
    p = init_producer(client, "shop")
    begin(client, "shop", p)
    r = client.post("/v1/transactions/shop/offsets", json={
        "producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"], "group_id": "g",
        "offsets": [{"topic": "staged", "partition": 0, "offset": 0}]})
    assert r.status_code == 200, r.text
    return client


def test_one_groups_topics_are_its_subscriptions_committed_and_staged_offsets(consuming, database) -> None:  # type: ignore[no-untyped-def]
    with database.read() as conn:
        assert groups.consumed_topics(conn, "g") == {"g": {"subscribed", "committed", "staged"}}


def test_every_groups_topics_are_read_at_once(consuming, database) -> None:  # type: ignore[no-untyped-def]
    with database.read() as conn:
        assert groups.consumed_topics(conn) == {"g": {"subscribed", "committed", "staged"}, "h": {"other"}}


def test_a_group_that_consumes_nothing_is_absent(consuming, database) -> None:  # type: ignore[no-untyped-def]
    with database.read() as conn:
        assert groups.consumed_topics(conn, "nobody") == {}


def test_a_deleted_topics_committed_offsets_go_with_it_but_a_subscription_keeps_its_name(consuming, database) -> None:  # type: ignore[no-untyped-def]
    assert consuming.delete("/v1/topics/committed").status_code == 204
    assert consuming.delete("/v1/topics/subscribed").status_code == 204

    with database.read() as conn:
        assert groups.consumed_topics(conn, "g") == {"g": {"subscribed", "staged"}}
