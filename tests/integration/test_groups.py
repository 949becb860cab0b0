"""Consumer groups: membership, generations, and KIP-447 fencing of offsets, on both databases."""

from __future__ import annotations

from typing import Any

import pytest

from app.worker.chore import ChoreConfig
from app.worker.group_expiry import GroupExpiryWorker
from tests.helpers import batch, begin, create_topic, ident, init_producer, send


@pytest.fixture
def worker(services, clock) -> GroupExpiryWorker:  # type: ignore[no-untyped-def]
    return GroupExpiryWorker(services.group_expiry, clock, ChoreConfig(interval_ms=50))


def _join(client, group: str, topics: list[str], **extra) -> dict:  # type: ignore[no-untyped-def]
    r = client.post(f"/v1/groups/{group}/members", json={"topics": topics, "session_timeout_ms": 10_000, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _parts(membership: dict) -> list[tuple[str, int]]:
    return [(a["topic"], a["partition"]) for a in membership["assignment"]]


def test_first_member_gets_every_partition_at_generation_one(client):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 3)
    m = _join(client, "g", ["in"])
    assert m["generation_id"] == 1 and m["member_count"] == 1
    assert _parts(m) == [("in", 0), ("in", 1), ("in", 2)]


def test_a_second_member_bumps_the_generation_and_splits_the_partitions(client):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 4)
    a = _join(client, "g", ["in"])
    b = _join(client, "g", ["in"])
    assert b["generation_id"] == 2
    a_now = client.post(f"/v1/groups/g/members/{a['member_id']}/heartbeat").json()
    assert a_now["generation_id"] == 2
    assert sorted(_parts(a_now) + _parts(b)) == [("in", i) for i in range(4)]
    assert len(_parts(a_now)) == len(_parts(b)) == 2


def test_leaving_rebalances_the_remaining_members(client):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 2)
    a = _join(client, "g", ["in"])
    b = _join(client, "g", ["in"])
    assert client.delete(f"/v1/groups/g/members/{b['member_id']}").status_code == 204
    a_now = client.post(f"/v1/groups/g/members/{a['member_id']}/heartbeat").json()
    assert a_now["generation_id"] == 3 and _parts(a_now) == [("in", 0), ("in", 1)]
    r = client.post(f"/v1/groups/g/members/{b['member_id']}/heartbeat")
    assert (r.status_code, r.json()["error_code"]) == (409, "UNKNOWN_MEMBER_ID")


def test_leaving_a_group_that_does_not_exist_is_unknown_member_id_and_creates_no_group(client):  # type: ignore[no-untyped-def]
    r = client.delete("/v1/groups/nowhere/members/nobody")
    assert (r.status_code, r.json()["error_code"]) == (409, "UNKNOWN_MEMBER_ID")
    assert client.get("/v1/groups").json()["groups"] == []


def test_a_member_that_misses_its_session_timeout_is_removed(client, clock, worker):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 2)
    a = _join(client, "g", ["in"])
    b = _join(client, "g", ["in"])
    clock.advance(6_000)
    client.post(f"/v1/groups/g/members/{a['member_id']}/heartbeat")
    clock.advance(5_000)  # b last heard from 11 s ago, a 5 s ago; timeout 10 s
    assert worker.run_once().expired_members == 1
    described = client.get("/v1/groups/g").json()
    assert [m["member_id"] for m in described["members"]] == [a["member_id"]]
    assert described["generation_id"] == 3
    assert b["member_id"] not in {m["member_id"] for m in described["members"]}


def test_rejoining_with_the_same_subscription_keeps_the_generation(client):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 2)
    a = _join(client, "g", ["in"])
    again = _join(client, "g", ["in"], member_id=a["member_id"])
    assert again["generation_id"] == a["generation_id"] == 1


def test_session_timeout_outside_the_bounds_is_refused(client):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    r = client.post("/v1/groups/g/members", json={"topics": ["in"], "session_timeout_ms": 1})
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_SESSION_TIMEOUT")


def test_offset_commit_from_a_stale_generation_is_refused(client):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 2)
    a = _join(client, "g", ["in"])
    _join(client, "g", ["in"])
    body = {"offsets": [{"topic": "in", "partition": 0, "offset": 3}],
            "generation_id": a["generation_id"], "member_id": a["member_id"]}
    r = client.post("/v1/groups/g/offsets", json=body)
    assert (r.status_code, r.json()["error_code"]) == (409, "ILLEGAL_GENERATION")
    assert client.get("/v1/groups/g/offsets").json()["offsets"] == []
    r = client.post("/v1/groups/g/offsets", json={**body, "generation_id": 2})
    assert r.status_code == 200


@pytest.mark.parametrize(("given", "said"), [(1, "generation 1 is stale"),
                                              (99, "generation 99 is not one the group has had")])
def test_a_refused_generation_is_called_stale_only_when_it_is_older(client, given, said):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    a = _join(client, "g", ["in"])
    _join(client, "g", ["in"])  # the group is at generation 2
    r = client.post("/v1/groups/g/offsets", json={
        "offsets": [{"topic": "in", "partition": 0, "offset": 3}], "generation_id": given, "member_id": a["member_id"]})
    assert (r.status_code, r.json()["error_code"], r.json()["message"]) == (
        409, "ILLEGAL_GENERATION", f"{said}; group 'g' is at generation 2")


def test_add_offsets_from_a_stale_generation_is_refused(client):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    a = _join(client, "g", ["in"])
    p = init_producer(client, "X")
    begin(client, "X", p)
    _join(client, "g", ["in"])
    r = client.post("/v1/transactions/X/offsets", json={
        **ident(p), "group_id": "g", "offsets": [{"topic": "in", "partition": 0, "offset": 1}],
        "generation_id": a["generation_id"], "member_id": a["member_id"]})
    assert (r.status_code, r.json()["error_code"]) == (409, "ILLEGAL_GENERATION")
    assert client.get("/v1/transactions/X").json()["pending_offsets"] == []


def test_add_offsets_from_an_unknown_member_is_refused(client):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    _join(client, "g", ["in"])
    p = init_producer(client, "X")
    begin(client, "X", p)
    r = client.post("/v1/transactions/X/offsets", json={
        **ident(p), "group_id": "g", "offsets": [{"topic": "in", "partition": 0, "offset": 1}],
        "generation_id": 1, "member_id": "nobody"})
    assert (r.status_code, r.json()["error_code"]) == (409, "UNKNOWN_MEMBER_ID")


def test_offset_fetch_wait_returns_unstable_after_the_bound(client):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    p = init_producer(client, "X")
    begin(client, "X", p)
    client.post("/v1/transactions/X/offsets", json={
        **ident(p), "group_id": "g", "offsets": [{"topic": "in", "partition": 0, "offset": 1}]})
    r = client.get("/v1/groups/g/offsets", params={"wait_ms": 100})
    assert (r.status_code, r.json()["error_code"]) == (409, "UNSTABLE_OFFSET_COMMIT")
    client.post("/v1/transactions/X/commit", json=ident(p))
    r = client.get("/v1/groups/g/offsets", params={"wait_ms": 100})
    assert r.status_code == 200 and r.json()["offsets"][0]["offset"] == 1
    assert send(client, [batch("in", 0, ["x"])]).status_code == 200


# --- ListGroups and the lag in records -------------------------------------------------------------


def _lag(client, group: str) -> list[tuple]:  # type: ignore[no-untyped-def]
    r = client.get(f"/v1/groups/{group}/lag")
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["total_lag"], body["total_lag_unknown_reason"]) == (sum(p["lag"] for p in body["partitions"]), None)
    return [(p["topic"], p["partition"], p["committed_offset"], p["lag"], p["lag_exact"], p["pending"])
            for p in body["partitions"]]


def _lag_answer(client, group: str) -> tuple:  # type: ignore[no-untyped-def]
    """(total_lag, total_lag_unknown_reason, [(topic, partition, committed_offset, high_watermark, lag, pending)])"""
    r = client.get(f"/v1/groups/{group}/lag")
    assert r.status_code == 200, r.text
    body = r.json()
    return body["total_lag"], body["total_lag_unknown_reason"], [
        (p["topic"], p["partition"], p["committed_offset"], p["high_watermark"], p["lag"], p["pending"])
        for p in body["partitions"]]


def test_list_groups_names_groups_with_members_and_groups_with_offsets_only(client) -> None:  # type: ignore[no-untyped-def]
    from tests.helpers import create_topic

    create_topic(client, "orders", 2)
    assert client.post("/v1/groups/members-only/members", json={"topics": ["orders"]}).status_code == 200
    assert client.post("/v1/groups/offsets-only/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": 0}]}).status_code == 200
    listed = client.get("/v1/groups").json()["groups"]
    assert [(g["group_id"], g["generation_id"], g["member_count"]) for g in listed] == [
        ("members-only", 1, 1), ("offsets-only", None, 0)]


def _groups_with_offsets(client: Any, *group_ids: str) -> None:
    create_topic(client, "orders", 1)
    for g in group_ids:
        assert client.post(f"/v1/groups/{g}/offsets", json={"offsets": [
            {"topic": "orders", "partition": 0, "offset": 0}]}).status_code == 200


def test_list_groups_is_cut_at_its_limit_and_continues_after_the_id_it_answers(client) -> None:  # type: ignore[no-untyped-def]
    _groups_with_offsets(client, "c", "a", "b")

    first = client.get("/v1/groups", params={"limit": 2}).json()
    rest = client.get("/v1/groups", params={"limit": 2, "after": first["next_after"]}).json()

    assert ([g["group_id"] for g in first["groups"]], first["next_after"]) == (["a", "b"], "b")
    assert ([g["group_id"] for g in rest["groups"]], rest["next_after"]) == (["c"], None)
    assert client.get("/v1/groups", params={"limit": 0}).status_code == 422


def test_list_groups_reads_a_bounded_number_of_ids_a_page_and_says_where_it_stopped(  # type: ignore[no-untyped-def]
        client, monkeypatch) -> None:
    from app.services import group_service

    _groups_with_offsets(client, "g1", "g2", "g3", "g4", "g5")
    monkeypatch.setattr(group_service, "GROUP_LIST_CHUNK", 2)
    monkeypatch.setattr(group_service, "GROUP_LIST_EXAMINED_MAX", 3)

    first = client.get("/v1/groups").json()
    rest = client.get("/v1/groups", params={"after": first["next_after"]}).json()

    assert ([g["group_id"] for g in first["groups"]], first["next_after"]) == (["g1", "g2", "g3"], "g3")
    assert ([g["group_id"] for g in rest["groups"]], rest["next_after"]) == (["g4", "g5"], None)


def test_list_groups_pages_through_groups_of_every_kind_once_each_in_id_order(  # type: ignore[no-untyped-def]
        client, monkeypatch) -> None:
    """A group is known by its row (members), its committed offsets or a transaction's staged
    ones; each page takes the first ids of each kind after the last page's, and every group
    between a page's first and last id is on it, with its own generation and member count."""
    from app.services import group_service

    _groups_with_offsets(client, "a-offsets", "d-offsets", "e-members")
    for g in ("b-members", "e-members", "e-members"):
        assert client.post(f"/v1/groups/{g}/members", json={"topics": ["orders"]}).status_code == 200
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    for g in ("c-staged", "f-staged"):
        r = client.post("/v1/transactions/tx/offsets", json={
            **ident(p), "group_id": g, "offsets": [{"topic": "orders", "partition": 0, "offset": 0}]})
        assert r.status_code == 200, r.text
    monkeypatch.setattr(group_service, "GROUP_LIST_CHUNK", 2)

    pages, after = [], None
    while True:
        body = client.get("/v1/groups", params={"limit": 2, **({"after": after} if after else {})}).json()
        pages.append([(g["group_id"], g["generation_id"], g["member_count"]) for g in body["groups"]])
        after = body["next_after"]
        if after is None:
            break

    assert pages == [[("a-offsets", None, 0), ("b-members", 1, 1)],
                     [("c-staged", None, 0), ("d-offsets", None, 0)],
                     [("e-members", 2, 2), ("f-staged", None, 0)],
                     []]


def test_a_group_with_committed_offsets_only_is_described_without_generation_nor_members(client) -> None:  # type: ignore[no-untyped-def]
    from tests.helpers import create_topic

    create_topic(client, "orders", 1)
    assert client.post("/v1/groups/offsets-only/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": 0}]}).status_code == 200

    r = client.get("/v1/groups/offsets-only")

    assert (r.status_code, r.json()) == (200, {"group_id": "offsets-only", "generation_id": None, "members": []})


def test_a_group_whose_offsets_an_open_transaction_stages_is_described_without_generation_nor_members(client) -> None:  # type: ignore[no-untyped-def]
    from tests.helpers import begin, create_topic, ident, init_producer

    create_topic(client, "orders", 1)
    producer = init_producer(client, "t")
    begin(client, "t", producer)
    assert client.post("/v1/transactions/t/offsets", json={**ident(producer), "group_id": "staged-only", "offsets": [
        {"topic": "orders", "partition": 0, "offset": 0}]}).status_code == 200

    r = client.get("/v1/groups/staged-only")

    assert (r.status_code, r.json()) == (200, {"group_id": "staged-only", "generation_id": None, "members": []})


def test_a_group_the_service_does_not_know_is_group_id_not_found(client) -> None:  # type: ignore[no-untyped-def]
    r = client.get("/v1/groups/nobody")

    assert (r.status_code, r.json()["error_code"]) == (404, "GROUP_ID_NOT_FOUND")


def test_the_lag_counts_committed_records_not_markers_nor_open_or_aborted_ones(client) -> None:  # type: ignore[no-untyped-def]
    from tests.helpers import batch, begin, create_topic, ident, init_producer, send

    create_topic(client, "orders", 1)
    assert send(client, [batch("orders", 0, ["p0", "p1"])]).status_code == 200  # offsets 0, 1
    aborted = init_producer(client, "a")
    begin(client, "a", aborted)
    assert send(client, [batch("orders", 0, ["a0", "a1"], 0)], aborted, "a").status_code == 200  # 2, 3
    assert client.post("/v1/transactions/a/abort", json=ident(aborted)).status_code == 200  # marker 4
    committed = init_producer(client, "c")
    begin(client, "c", committed)
    assert send(client, [batch("orders", 0, ["c0", "c1", "c2"], 0)], committed, "c").status_code == 200  # 5-7
    assert client.post("/v1/transactions/c/commit", json=ident(committed)).status_code == 200  # marker 8
    assert send(client, [batch("orders", 0, ["p9"])]).status_code == 200  # 9
    opened = init_producer(client, "o")
    begin(client, "o", opened)
    assert send(client, [batch("orders", 0, ["o0"], 0)], opened, "o").status_code == 200  # 10, open
    for position, lag in ((0, 6), (2, 4), (5, 4), (8, 4), (9, 1), (10, 0), (11, 0)):
        assert client.post("/v1/groups/g/offsets", json={"offsets": [
            {"topic": "orders", "partition": 0, "offset": position}]}).status_code == 200
        assert _lag(client, "g") == [("orders", 0, position, lag, True, False)], position
    # What a consumer at 0 would read is what the lag at 0 said.
    records = client.get("/v1/topics/orders/partitions/0/records", params={"offset": 0}).json()["records"]
    assert len(records) == 6


def test_the_lag_falls_to_zero_when_the_transaction_that_reads_the_rest_commits(client) -> None:  # type: ignore[no-untyped-def]
    from tests.helpers import batch, begin, create_topic, ident, init_producer, send

    create_topic(client, "orders", 1)
    assert send(client, [batch("orders", 0, ["o1", "o2", "o3"])]).status_code == 200
    assert client.post("/v1/groups/g/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": 0}]}).status_code == 200
    p = init_producer(client, "copier")
    begin(client, "copier", p)
    r = client.post("/v1/transactions/copier/offsets", json={**ident(p), "group_id": "g", "offsets": [
        {"topic": "orders", "partition": 0, "offset": 3}]})
    assert r.status_code == 200, r.text
    assert _lag(client, "g") == [("orders", 0, 0, 3, True, True)]
    assert client.post("/v1/transactions/copier/commit", json=ident(p)).status_code == 200
    assert _lag(client, "g") == [("orders", 0, 3, 0, True, False)]


def test_a_group_that_never_committed_has_an_unknown_lag_not_zero(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 2)
    assert send(client, [batch("orders", 0, ["o1", "o2"]), batch("orders", 1, ["o3"])]).status_code == 200
    _join(client, "g1", ["orders"])
    assert _lag_answer(client, "g1") == (None, "no_committed_offset", [
        ("orders", 0, None, 2, None, False), ("orders", 1, None, 1, None, False)])


def test_a_group_whose_only_offsets_are_staged_in_an_open_transaction_has_an_unknown_lag(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 1)
    assert send(client, [batch("orders", 0, ["o1", "o2"])]).status_code == 200
    p = init_producer(client, "copier")
    begin(client, "copier", p)
    r = client.post("/v1/transactions/copier/offsets", json={**ident(p), "group_id": "g", "offsets": [
        {"topic": "orders", "partition": 0, "offset": 2}]})
    assert r.status_code == 200, r.text
    assert _lag_answer(client, "g") == (None, "no_committed_offset", [("orders", 0, None, 2, None, True)])


def test_partitions_a_group_has_not_committed_have_an_unknown_lag_beside_the_others(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 3)
    assert send(client, [batch("orders", 0, ["o1", "o2", "o3"]), batch("orders", 2, ["o4"])]).status_code == 200
    assert client.post("/v1/groups/g/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": 1}]}).status_code == 200
    assert _lag_answer(client, "g") == (None, "partitions_without_committed_offset", [
        ("orders", 0, 1, 3, 2, False), ("orders", 1, None, 0, None, False), ("orders", 2, None, 1, None, False)])


def test_a_topic_a_member_subscribes_to_is_in_the_lag_beside_the_topics_committed(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 1)
    create_topic(client, "refunds", 1)
    assert client.post("/v1/groups/g/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": 0}]}).status_code == 200
    _join(client, "g", ["refunds"])
    assert _lag_answer(client, "g") == (None, "partitions_without_committed_offset", [
        ("orders", 0, 0, 0, 0, False), ("refunds", 0, None, 0, None, False)])


def test_a_deleted_topic_a_member_still_subscribes_to_is_left_out_of_the_lag(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 1)
    create_topic(client, "gone", 1)
    _join(client, "g", ["orders", "gone"])
    assert client.post("/v1/groups/g/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": 0}]}).status_code == 200
    assert client.delete("/v1/topics/gone").status_code == 204
    assert _lag_answer(client, "g") == (0, None, [("orders", 0, 0, 0, 0, False)])


def test_a_caught_up_group_has_lag_zero(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 2)
    assert send(client, [batch("orders", 0, ["o1", "o2"]), batch("orders", 1, ["o3"])]).status_code == 200
    _join(client, "g", ["orders"])
    assert client.post("/v1/groups/g/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": 2}, {"topic": "orders", "partition": 1, "offset": 1}]}).status_code == 200
    assert _lag_answer(client, "g") == (0, None, [("orders", 0, 2, 2, 0, False), ("orders", 1, 1, 1, 0, False)])


def test_control_markers_are_not_lag_on_a_transactional_topic(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "income", 1)
    committed = init_producer(client, "c")
    begin(client, "c", committed)
    assert send(client, [batch("income", 0, ["c0", "c1"], 0)], committed, "c").status_code == 200  # 0, 1
    assert client.post("/v1/transactions/c/commit", json=ident(committed)).status_code == 200  # COMMIT at 2
    aborted = init_producer(client, "a")
    begin(client, "a", aborted)
    assert send(client, [batch("income", 0, ["a0"], 0)], aborted, "a").status_code == 200  # 3
    assert client.post("/v1/transactions/a/abort", json=ident(aborted)).status_code == 200  # ABORT at 4
    assert client.post("/v1/groups/g/offsets", json={"offsets": [
        {"topic": "income", "partition": 0, "offset": 3}]}).status_code == 200
    # In offsets it would be 5 - 3 = 2: an aborted record and a marker, nothing to read.
    assert _lag_answer(client, "g") == (0, None, [("income", 0, 3, 5, 0, False)])


def test_the_lag_of_an_unknown_group_is_group_id_not_found(client) -> None:  # type: ignore[no-untyped-def]
    r = client.get("/v1/groups/nobody/lag")
    assert (r.status_code, r.json()["error_code"]) == (404, "GROUP_ID_NOT_FOUND")


def test_a_lag_past_the_count_cap_says_it_is_a_lower_bound(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tests.helpers import batch, create_topic, send

    monkeypatch.setattr("app.services.group_offsets.LAG_COUNT_CAP", 3)
    create_topic(client, "orders", 1)
    assert send(client, [batch("orders", 0, list(range(5)))]).status_code == 200
    assert client.post("/v1/groups/g/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": 0}]}).status_code == 200
    assert _lag(client, "g") == [("orders", 0, 0, 3, False, False)]


def test_a_member_joined_over_http_is_described_with_its_clients_address_and_no_client_id(client):  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    m = _join(client, "g", ["in"])

    (described,) = client.get("/v1/groups/g").json()["members"]

    # The test client's address is "testclient"; the HTTP API has no client id.
    assert (described["member_id"], described["client_id"], described["client_host"]) == (
        m["member_id"], None, "testclient")
