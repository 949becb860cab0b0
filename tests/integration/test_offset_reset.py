"""Resetting a consumer group's committed offsets (`POST /v1/groups/{group_id}/offsets/reset`,
kafka-consumer-groups --reset-offsets), on both databases: each kind of reset with the exact
offsets it commits, a dry run that commits nothing, and the refusals."""

from __future__ import annotations

import pytest

from tests.helpers import begin, create_topic, init_producer, send

GROUP = "g"


@pytest.fixture
def orders(client):  # type: ignore[no-untyped-def]
    """orders/0: offsets 0..5 with timestamps 1000..6000, the log start moved to 1; orders/1:
    offsets 0..1 with timestamps 1000, 2000. Group g has committed 3 in orders/0, nothing in
    orders/1."""
    create_topic(client, "orders", 2)
    for partition, count in ((0, 6), (1, 2)):
        records = [{"value": i, "timestamp_ms": 1000 * (i + 1)} for i in range(count)]
        r = send(client, [{"topic": "orders", "partition": partition, "records": records}])
        assert r.status_code == 200, r.text
    r = client.post("/v1/topics/orders/partitions/0/delete-records", json={"offset": 1})
    assert r.status_code == 200, r.text
    _commit(client, 0, 3)
    return client


def _commit(client, partition: int, offset: int) -> None:  # type: ignore[no-untyped-def]
    r = client.post(f"/v1/groups/{GROUP}/offsets", json={"offsets": [
        {"topic": "orders", "partition": partition, "offset": offset}]})
    assert r.status_code == 200, r.text


def _reset(client, **body):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/groups/{GROUP}/offsets/reset", json={"topic": "orders", **body})


def _committed(client) -> dict[int, int]:  # type: ignore[no-untyped-def]
    r = client.get(f"/v1/groups/{GROUP}/offsets", params={"require_stable": "false"})
    assert r.status_code == 200, r.text
    return {o["partition"]: o["offset"] for o in r.json()["offsets"]}


def _planned(answer: dict) -> list[tuple[int, int | None, int]]:
    return [(o["partition"], o["committed_offset"], o["new_offset"]) for o in answer["offsets"]]


@pytest.mark.parametrize(("body", "plan"), [
    ({"to": "earliest"}, [(0, 3, 1), (1, None, 0)]),
    ({"to": "latest"}, [(0, 3, 6), (1, None, 2)]),
    ({"to": "offset", "offset": 4}, [(0, 3, 4), (1, None, 2)]),  # orders/1 ends at 2
    ({"to": "offset", "offset": 0}, [(0, 3, 1), (1, None, 0)]),  # orders/0 starts at 1
    ({"to": "timestamp", "timestamp_ms": 3500}, [(0, 3, 3), (1, None, 2)]),  # orders/1 has nothing that late
    ({"to": "timestamp", "timestamp_ms": 0}, [(0, 3, 1), (1, None, 0)]),
], ids=["earliest", "latest", "offset", "offset below the log start", "timestamp", "timestamp before all"])
def test_a_reset_commits_the_offsets_of_its_kind_in_every_partition(orders, body, plan) -> None:  # type: ignore[no-untyped-def]
    r = _reset(orders, **body)

    assert r.status_code == 200, r.text
    assert r.json()["group_id"] == GROUP and r.json()["dry_run"] is False
    assert _planned(r.json()) == plan
    assert _committed(orders) == {p: new for p, _, new in plan}


def test_a_reset_of_named_partitions_leaves_the_others_alone(orders) -> None:  # type: ignore[no-untyped-def]
    r = _reset(orders, to="latest", partitions=[1])

    assert r.status_code == 200, r.text
    assert _planned(r.json()) == [(1, None, 2)]
    assert _committed(orders) == {0: 3, 1: 2}


def test_a_dry_run_answers_the_plan_and_commits_nothing(orders) -> None:  # type: ignore[no-untyped-def]
    r = _reset(orders, to="earliest", dry_run=True)

    assert r.status_code == 200, r.text
    assert r.json()["dry_run"] is True
    assert _planned(r.json()) == [(0, 3, 1), (1, None, 0)]
    assert _committed(orders) == {0: 3}


@pytest.mark.parametrize("dry_run", [False, True], ids=["execute", "dry run"])
def test_a_group_with_active_members_is_refused_and_keeps_its_offsets(orders, dry_run) -> None:  # type: ignore[no-untyped-def]
    joined = orders.post(f"/v1/groups/{GROUP}/members", json={"topics": ["orders"]})
    assert joined.status_code == 200, joined.text

    r = _reset(orders, to="earliest", dry_run=dry_run)

    assert (r.status_code, r.json()["error_code"], r.json()["retriable"]) == (409, "NON_EMPTY_GROUP", False)
    assert "1 active member" in r.json()["message"]
    assert _committed(orders) == {0: 3}


def test_a_group_whose_members_left_may_be_reset(orders) -> None:  # type: ignore[no-untyped-def]
    member = orders.post(f"/v1/groups/{GROUP}/members", json={"topics": ["orders"]}).json()["member_id"]
    assert orders.delete(f"/v1/groups/{GROUP}/members/{member}").status_code == 204

    r = _reset(orders, to="latest")

    assert r.status_code == 200, r.text
    assert _committed(orders) == {0: 6, 1: 2}


def test_a_partition_with_offsets_pending_in_a_transaction_is_refused(orders) -> None:  # type: ignore[no-untyped-def]
    p = init_producer(orders, "shop")
    begin(orders, "shop", p)
    staged = orders.post("/v1/transactions/shop/offsets", json={
        "producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"], "group_id": GROUP,
        "offsets": [{"topic": "orders", "partition": 1, "offset": 1}]})
    assert staged.status_code == 200, staged.text

    refused = _reset(orders, to="earliest")
    other = _reset(orders, to="earliest", partitions=[0])

    assert (refused.status_code, refused.json()["error_code"]) == (409, "UNSTABLE_OFFSET_COMMIT")
    assert refused.json()["details"] == {"partitions": [{"topic": "orders", "partition": 1}]}
    assert other.status_code == 200, other.text
    assert _committed(orders) == {0: 1}


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"to": "offset"}, 400, "INVALID_REQUEST"),
    ({"to": "earliest", "offset": 1}, 400, "INVALID_REQUEST"),
    ({"to": "timestamp"}, 400, "INVALID_REQUEST"),
    ({"to": "latest", "timestamp_ms": 1}, 400, "INVALID_REQUEST"),
    ({"to": "somewhere"}, 422, "INVALID_REQUEST"),
    ({"to": "offset", "offset": -1}, 422, "INVALID_REQUEST"),
    ({"to": "latest", "partitions": [0, 0]}, 400, "INVALID_REQUEST"),
    ({"to": "latest", "partitions": [2]}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    ({"to": "latest", "topic": "nowhere"}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
], ids=["offset without one", "offset with earliest", "timestamp without one", "timestamp with latest",
        "unknown kind", "negative offset", "partition twice", "unknown partition", "unknown topic"])
def test_a_bad_reset_is_refused_with_its_code_and_changes_nothing(orders, body, status, code) -> None:  # type: ignore[no-untyped-def]
    r = _reset(orders, **body)

    assert (r.status_code, r.json()["error_code"]) == (status, code), r.text
    assert _committed(orders) == {0: 3}
