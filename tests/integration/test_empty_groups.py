"""Empty groups do not stay forever: the group-expiry pass deletes a group that has had no
member and no offset (committed, or staged by an unfinished transaction) for
EMPTY_GROUP_RETENTION_MS (GroupExpiry.delete_empty_groups), as Kafka's coordinator deletes an
Empty group without offsets. On both databases; time is the test's clock."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.services.group_expiry import EMPTY_GROUP_CHECK_INTERVAL_MS, EMPTY_GROUP_RETENTION_MS, EmptyGroupDeletion
from app.storage.tables import consumer_groups
from app.worker.chore import ChoreConfig
from app.worker.group_expiry import GroupExpiryPass, GroupExpiryWorker
from tests.helpers import begin, create_topic, ident, init_producer

SESSION_MS = 10_000
HEARTBEAT_MS = SESSION_MS // 2


@pytest.fixture
def worker(services, clock) -> GroupExpiryWorker:  # type: ignore[no-untyped-def]
    return GroupExpiryWorker(services.group_expiry, clock, ChoreConfig(interval_ms=50))


def _join(client, group: str) -> dict:  # type: ignore[no-untyped-def]
    r = client.post(f"/v1/groups/{group}/members", json={"topics": ["in"], "session_timeout_ms": SESSION_MS})
    assert r.status_code == 200, r.text
    return r.json()


def _group_rows(database) -> list[tuple[str, int]]:  # type: ignore[no-untyped-def]
    with database.read() as conn:
        return [tuple(r) for r in conn.execute(  # type: ignore[misc]
            select(consumer_groups.c.group_id, consumer_groups.c.generation_id).order_by(consumer_groups.c.group_id))]


def _emptied_with_an_offset(client) -> None:  # type: ignore[no-untyped-def]
    """Group "g" with offset 3 of in/0 committed by its member, which then left (generation 2)."""
    create_topic(client, "in", 1)
    m = _join(client, "g")
    r = client.post("/v1/groups/g/offsets", json={"offsets": [{"topic": "in", "partition": 0, "offset": 3}],
                                                   "generation_id": 1, "member_id": m["member_id"]})
    assert r.status_code == 200, r.text
    client.delete(f"/v1/groups/g/members/{m['member_id']}")


def test_a_group_its_last_member_left_is_kept_for_the_retention_then_deleted(  # type: ignore[no-untyped-def]
        client, services, database, clock) -> None:
    create_topic(client, "in", 1)
    m = _join(client, "g")
    assert client.delete(f"/v1/groups/g/members/{m['member_id']}").status_code == 204
    clock.advance(EMPTY_GROUP_RETENTION_MS)  # its last moment

    assert services.group_expiry.delete_empty_groups(clock()) == EmptyGroupDeletion(0, False)
    assert _group_rows(database) == [("g", 2)]
    clock.advance(1)
    assert services.group_expiry.delete_empty_groups(clock()) == EmptyGroupDeletion(1, False)

    assert _group_rows(database) == []
    assert client.get("/v1/groups").json()["groups"] == []
    r = client.get("/v1/groups/g")
    assert (r.status_code, r.json()["error_code"]) == (404, "GROUP_ID_NOT_FOUND")


def test_a_group_whose_client_went_away_is_deleted_a_retention_after_its_member_expired(  # type: ignore[no-untyped-def]
        client, database, clock, worker) -> None:
    create_topic(client, "in", 1)
    _join(client, "g")
    clock.advance(SESSION_MS + 1)

    assert worker.run_once(clock()) == GroupExpiryPass(1, 0)  # emptied now: kept from now on
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)
    assert worker.run_once(clock()) == GroupExpiryPass(0, 1)
    assert _group_rows(database) == []


def test_a_group_whose_member_keeps_heartbeating_is_kept(client, database, clock, worker) -> None:  # type: ignore[no-untyped-def]
    # Heartbeats write the member's row, not the group's: the row of a Stable group is as old
    # as its last rebalance, here past the retention. Its member keeps it.
    create_topic(client, "in", 1)
    m = _join(client, "g")
    for _ in range(EMPTY_GROUP_RETENTION_MS // HEARTBEAT_MS + 1):
        clock.advance(HEARTBEAT_MS)
        r = client.post(f"/v1/groups/g/members/{m['member_id']}/heartbeat")
        assert r.status_code == 200, r.text

    assert worker.run_once(clock()) == GroupExpiryPass(0, 0)
    assert _group_rows(database) == [("g", 1)]
    assert [x["member_id"] for x in client.get("/v1/groups/g").json()["members"]] == [m["member_id"]]


def test_an_empty_group_with_committed_offsets_is_kept(client, database, clock, worker) -> None:  # type: ignore[no-untyped-def]
    _emptied_with_an_offset(client)
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)

    assert worker.run_once(clock()) == GroupExpiryPass(0, 0)
    assert _group_rows(database) == [("g", 2)]
    assert [(o["topic"], o["partition"], o["offset"]) for o in client.get("/v1/groups/g/offsets").json()["offsets"]] \
        == [("in", 0, 3)]


def test_a_group_whose_offsets_go_after_the_retention_is_deleted_at_the_next_look(  # type: ignore[no-untyped-def]
        client, services, database, clock, worker) -> None:
    # The retention counts from the group's row's last change (its last member leaving here):
    # OffsetDelete does not write the row, so the group is not kept another retention.
    _emptied_with_an_offset(client)
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)
    assert worker.run_once(clock()) == GroupExpiryPass(0, 0)  # its offsets keep it

    assert services.group_offsets.delete_offsets("g", [("in", 0)]) == {}
    clock.advance(EMPTY_GROUP_CHECK_INTERVAL_MS)
    assert worker.run_once(clock()) == GroupExpiryPass(0, 1)
    assert _group_rows(database) == []


def test_an_empty_group_whose_offsets_an_unfinished_transaction_staged_is_kept(  # type: ignore[no-untyped-def]
        client, database, clock, worker) -> None:
    create_topic(client, "in", 1)
    m = _join(client, "g")
    client.delete(f"/v1/groups/g/members/{m['member_id']}")
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    r = client.post("/v1/transactions/tx/offsets", json={
        **ident(p), "group_id": "g", "offsets": [{"topic": "in", "partition": 0, "offset": 1}]})
    assert r.status_code == 200, r.text
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)

    assert worker.run_once(clock()) == GroupExpiryPass(0, 0)
    assert _group_rows(database) == [("g", 2)]


def test_a_deleted_group_refuses_its_former_members_commit_and_starts_again_at_generation_one(  # type: ignore[no-untyped-def]
        client, database, clock, worker) -> None:
    create_topic(client, "in", 1)
    m = _join(client, "g")
    client.delete(f"/v1/groups/g/members/{m['member_id']}")
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)
    assert worker.run_once(clock()) == GroupExpiryPass(0, 1)

    r = client.post("/v1/groups/g/offsets", json={"offsets": [{"topic": "in", "partition": 0, "offset": 3}],
                                                   "generation_id": 1, "member_id": m["member_id"]})
    assert (r.status_code, r.json()["error_code"]) == (409, "UNKNOWN_MEMBER_ID")
    again = _join(client, "g")
    assert again["generation_id"] == 1
    assert _group_rows(database) == [("g", 1)]


def test_the_pass_looks_for_empty_groups_once_a_check_interval(client, database, clock, worker) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    client.delete(f"/v1/groups/g/members/{_join(client, 'g')['member_id']}")
    clock.advance(EMPTY_GROUP_RETENTION_MS)
    assert worker.run_once(clock()) == GroupExpiryPass(0, 0)  # looked: kept until now
    clock.advance(1)

    assert worker.run_once(clock()) == GroupExpiryPass(0, 0)  # to delete, not looked for yet
    clock.advance(EMPTY_GROUP_CHECK_INTERVAL_MS - 1)
    assert worker.run_once(clock()) == GroupExpiryPass(0, 1)
    assert _group_rows(database) == []


def test_a_pass_deletes_at_most_empty_groups_per_pass(  # type: ignore[no-untyped-def]
        client, database, clock, worker, monkeypatch) -> None:
    from app.services import group_expiry
    monkeypatch.setattr(group_expiry, "EMPTY_GROUPS_PER_PASS", 2)
    create_topic(client, "in", 1)
    for g in ("a", "b", "c"):
        client.delete(f"/v1/groups/{g}/members/{_join(client, g)['member_id']}")
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)

    # A pass whose look found EMPTY_GROUPS_PER_PASS looks again at the next.
    assert [worker.run_once(clock()).deleted_groups for _ in range(2)] == [2, 1]
    assert _group_rows(database) == []


def test_after_a_pass_that_deleted_fewer_than_its_most_the_next_look_is_a_check_interval_later(  # type: ignore[no-untyped-def]
        client, database, clock, worker, monkeypatch) -> None:
    # Groups emptied one after another: each deletion below the limit would otherwise make the
    # next pass read every group again.
    from app.services import group_expiry
    monkeypatch.setattr(group_expiry, "EMPTY_GROUPS_PER_PASS", 2)
    create_topic(client, "in", 1)
    client.delete(f"/v1/groups/a/members/{_join(client, 'a')['member_id']}")
    clock.advance(200)
    client.delete(f"/v1/groups/b/members/{_join(client, 'b')['member_id']}")
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1 - 200)
    assert worker.run_once(clock()) == GroupExpiryPass(0, 1)  # a; b has 200 ms to go
    clock.advance(200)

    assert worker.run_once(clock()) == GroupExpiryPass(0, 0)  # b to delete, not looked for yet
    clock.advance(EMPTY_GROUP_CHECK_INTERVAL_MS - 200)
    assert worker.run_once(clock()) == GroupExpiryPass(0, 1)
    assert _group_rows(database) == []
