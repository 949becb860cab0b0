"""Resetting a consumer group's committed offsets (`POST /v1/groups/{group_id}/offsets/reset`,
kafka-consumer-groups --reset-offsets), on both databases: each kind of reset with the exact
offsets it commits, a dry run that commits nothing, and the refusals."""

from __future__ import annotations

import pytest

from tests.helpers import begin, create_topic, init_producer, send

# Each test's own database, as new, and one app for the module's tests: an app per test was
# a large part of a test's time here.
pytestmark = pytest.mark.shared_app


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


@pytest.mark.parametrize("dry_run", [False, True], ids=["execute", "dry run"])
def test_a_group_whose_members_session_has_ended_may_be_reset(orders, clock, settings, dry_run) -> None:  # type: ignore[no-untyped-def]
    joined = orders.post(f"/v1/groups/{GROUP}/members", json={"topics": ["orders"]})
    assert joined.status_code == 200, joined.text
    clock.advance(settings.default_session_timeout_ms + 1)  # group expiry has not run

    r = _reset(orders, to="latest", dry_run=dry_run)

    assert r.status_code == 200, r.text
    assert _planned(r.json()) == [(0, 3, 6), (1, None, 2)]


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


# --- to=current, to=shift ------------------------------------------------------------------------


def test_a_reset_to_current_keeps_each_committed_offset_and_plans_the_log_end_where_there_is_none(orders) -> None:  # type: ignore[no-untyped-def]
    r = _reset(orders, to="current", dry_run=True)

    assert r.status_code == 200, r.text
    assert _planned(r.json()) == [(0, 3, 3), (1, None, 2)]
    assert _committed(orders) == {0: 3}


@pytest.mark.parametrize(("shift_by", "new"), [(2, 5), (-1, 2), (-5, 1), (10, 6)],
                         ids=["forward", "back", "back past the log start", "forward past the log end"])
def test_a_shift_moves_the_committed_offset_by_its_number_into_the_log(orders, shift_by, new) -> None:  # type: ignore[no-untyped-def]
    r = _reset(orders, to="shift", shift_by=shift_by, partitions=[0])

    assert r.status_code == 200, r.text
    assert _planned(r.json()) == [(0, 3, new)]
    assert _committed(orders) == {0: new}


def test_a_shift_of_a_partition_without_a_committed_offset_is_refused_and_changes_nothing(orders) -> None:  # type: ignore[no-untyped-def]
    r = _reset(orders, to="shift", shift_by=1)

    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST"), r.text
    assert r.json()["details"] == {"partitions": [{"topic": "orders", "partition": 1}]}
    assert "cannot shift orders/1: the group has committed no offset there" in r.json()["message"]
    assert _committed(orders) == {0: 3}


# --- all_topics ----------------------------------------------------------------------------------


@pytest.fixture
def two_topics(orders):  # type: ignore[no-untyped-def]
    """orders as above with g also at 2 in orders/1; payments/0: offsets 0..3, g at 1; unread:
    one record, consumed by nobody; other/0: group h at 0."""
    for name, count in (("payments", 4), ("unread", 1), ("other", 1)):
        create_topic(orders, name, 1)
        assert send(orders, [{"topic": name, "partition": 0, "records": [{"value": i} for i in range(count)]}]
                    ).status_code == 200
    _commit(orders, 1, 2)
    for group, topic, offset in (("g", "payments", 1), ("h", "other", 0)):
        r = orders.post(f"/v1/groups/{group}/offsets", json={"offsets": [
            {"topic": topic, "partition": 0, "offset": offset}]})
        assert r.status_code == 200, r.text
    return orders


def _all(client, group: str = GROUP, **body):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/groups/{group}/offsets/reset", json={"all_topics": True, **body})


def _plan_by_topic(answer: dict) -> list[tuple[str, int, int | None, int]]:
    return [(o["topic"], o["partition"], o["committed_offset"], o["new_offset"]) for o in answer["offsets"]]


def _every_committed(client, group: str = GROUP) -> dict[tuple[str, int], int]:  # type: ignore[no-untyped-def]
    r = client.get(f"/v1/groups/{group}/offsets", params={"require_stable": "false"})
    assert r.status_code == 200, r.text
    return {(o["topic"], o["partition"]): o["offset"] for o in r.json()["offsets"]}


@pytest.mark.parametrize(("body", "plan"), [
    ({"to": "earliest"}, [("orders", 0, 3, 1), ("orders", 1, 2, 0), ("payments", 0, 1, 0)]),
    ({"to": "latest"}, [("orders", 0, 3, 6), ("orders", 1, 2, 2), ("payments", 0, 1, 4)]),
    ({"to": "shift", "shift_by": -1}, [("orders", 0, 3, 2), ("orders", 1, 2, 1), ("payments", 0, 1, 0)]),
    ({"to": "shift", "shift_by": 2}, [("orders", 0, 3, 5), ("orders", 1, 2, 2), ("payments", 0, 1, 3)]),
], ids=["earliest", "latest", "shift back", "shift forward"])
def test_all_topics_resets_every_partition_of_every_topic_the_group_consumes(two_topics, body, plan) -> None:  # type: ignore[no-untyped-def]
    r = _all(two_topics, **body)

    assert r.status_code == 200, r.text
    assert _plan_by_topic(r.json()) == plan
    assert _every_committed(two_topics) == {(t, p): new for t, p, _, new in plan}
    assert _every_committed(two_topics, "h") == {("other", 0): 0}


def test_all_topics_to_current_as_a_dry_run_shows_where_the_group_is(two_topics) -> None:  # type: ignore[no-untyped-def]
    r = _all(two_topics, to="current", dry_run=True)

    assert r.status_code == 200, r.text
    assert _plan_by_topic(r.json()) == [("orders", 0, 3, 3), ("orders", 1, 2, 2), ("payments", 0, 1, 1)]


def test_all_topics_of_a_group_that_consumes_nothing_is_an_empty_plan(two_topics) -> None:  # type: ignore[no-untyped-def]
    r = _all(two_topics, "nobody", to="earliest")

    assert r.status_code == 200, r.text
    assert r.json() == {"group_id": "nobody", "dry_run": False, "offsets": []}


def test_all_topics_of_a_group_with_members_is_refused(two_topics) -> None:  # type: ignore[no-untyped-def]
    assert two_topics.post(f"/v1/groups/{GROUP}/members", json={"topics": ["unread"]}).status_code == 200

    r = _all(two_topics, to="earliest", dry_run=True)

    assert (r.status_code, r.json()["error_code"]) == (409, "NON_EMPTY_GROUP")
    assert _every_committed(two_topics) == {("orders", 0): 3, ("orders", 1): 2, ("payments", 0): 1}


def test_all_topics_with_offsets_pending_in_a_topic_is_refused_and_changes_nothing(two_topics) -> None:  # type: ignore[no-untyped-def]
    p = init_producer(two_topics, "shop")
    begin(two_topics, "shop", p)
    staged = two_topics.post("/v1/transactions/shop/offsets", json={
        "producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"], "group_id": GROUP,
        "offsets": [{"topic": "unread", "partition": 0, "offset": 1}]})
    assert staged.status_code == 200, staged.text

    r = _all(two_topics, to="earliest")

    assert (r.status_code, r.json()["error_code"]) == (409, "UNSTABLE_OFFSET_COMMIT")
    assert r.json()["details"] == {"partitions": [{"topic": "unread", "partition": 0}]}
    assert _every_committed(two_topics) == {("orders", 0): 3, ("orders", 1): 2, ("payments", 0): 1}


@pytest.mark.parametrize("body", [
    {"all_topics": True, "topic": "orders", "to": "earliest"},
    {"to": "earliest", "topic": None},
    {"all_topics": True, "partitions": [0], "to": "earliest"},
    {"topic": "orders", "to": "offset", "offset": 1, "shift_by": 1},
    {"topic": "orders", "to": "shift"},
    {"topic": "orders", "to": "current", "shift_by": 0},
], ids=["topic and all_topics", "neither", "partitions with all_topics", "shift_by with to=offset",
        "shift without shift_by", "shift_by with to=current"])
def test_a_bad_combination_is_refused_with_invalid_request_and_changes_nothing(two_topics, body) -> None:  # type: ignore[no-untyped-def]
    r = two_topics.post(f"/v1/groups/{GROUP}/offsets/reset", json=body)

    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST"), r.text
    assert _every_committed(two_topics) == {("orders", 0): 3, ("orders", 1): 2, ("payments", 0): 1}
