"""With OUTBOX_OFFSETS_RETENTION_MINUTES set, group expiry deletes the offsets of a group
without members that long after they were committed or the group was left empty
(GroupExpiry.expire_offsets), Kafka's offsets.retention.minutes as KIP-211 made it; unset (the
default), nothing expires. On both databases; time is the test's clock."""

from __future__ import annotations

import pytest

from app.composition import Services
from app.services.group_expiry import OffsetExpiry
from app.worker.chore import ChoreConfig
from app.worker.group_expiry import GroupExpiryPass, GroupExpiryWorker
from tests.helpers import begin, create_topic, ident, init_producer
from tests.integration.test_metrics import delta, scrape

RETENTION_MS = 10_080 * 60_000  # Kafka's default, 7 days, set here (the fixture settings)
SHORT_RETENTION_MS = 60_000  # OUTBOX_OFFSETS_RETENTION_MINUTES=1
SESSION_MS = 10_000
HEARTBEAT_MS = SESSION_MS // 2


@pytest.fixture
def settings(settings):  # type: ignore[no-untyped-def]
    """OUTBOX_OFFSETS_RETENTION_MINUTES=10080, Kafka's default: unset, nothing expires."""
    return settings.model_copy(update={"offsets_retention_minutes": 10_080})


@pytest.fixture
def unset(settings, database, clock) -> Services:  # type: ignore[no-untyped-def]
    """The services with OUTBOX_OFFSETS_RETENTION_MINUTES unset, the default."""
    return Services.build(settings.model_copy(update={"offsets_retention_minutes": None}), database, clock)


@pytest.fixture
def short(settings, database, clock) -> Services:  # type: ignore[no-untyped-def]
    """The services with OUTBOX_OFFSETS_RETENTION_MINUTES=1: a member's heartbeats across it are few."""
    return Services.build(settings.model_copy(update={"offsets_retention_minutes": 1}), database, clock)


def _commit(client, group: str, offset: int, partition: int = 0, **member: object) -> None:  # type: ignore[no-untyped-def]
    r = client.post(f"/v1/groups/{group}/offsets",
                    json={"offsets": [{"topic": "in", "partition": partition, "offset": offset}], **member})
    assert r.status_code == 200, r.text


def _offsets(client, group: str) -> list[tuple[str, int, int]]:  # type: ignore[no-untyped-def]
    r = client.get(f"/v1/groups/{group}/offsets", params={"require_stable": "false"})
    assert r.status_code == 200, r.text
    return [(o["topic"], o["partition"], o["offset"]) for o in r.json()["offsets"]]


def _simple_consumers_past_the_retention(client, clock, *group_ids: str) -> None:  # type: ignore[no-untyped-def]
    """Each group of `group_ids` commits "in" partition 0 at 1 without a member; a retention passes."""
    create_topic(client, "in", 1)
    for g in group_ids:
        _commit(client, g, 1)
    clock.advance(RETENTION_MS)


def _groups(client) -> list[str]:  # type: ignore[no-untyped-def]
    return [g["group_id"] for g in client.get("/v1/groups").json()["groups"]]


def _join(client, group: str) -> dict:  # type: ignore[no-untyped-def]
    r = client.post(f"/v1/groups/{group}/members", json={"topics": ["in"], "session_timeout_ms": SESSION_MS})
    assert r.status_code == 200, r.text
    return r.json()


def _heartbeat_for(client, clock, group: str, member_id: str, ms: int) -> None:  # type: ignore[no-untyped-def]
    for _ in range(ms // HEARTBEAT_MS):
        clock.advance(HEARTBEAT_MS)
        r = client.post(f"/v1/groups/{group}/members/{member_id}/heartbeat")
        assert r.status_code == 200, r.text


def _member_commits_and_leaves(client, clock, offset: int, *, held_ms: int = 0) -> None:  # type: ignore[no-untyped-def]
    """A member joins group "g", commits "in" partition 0 at `offset` with its generation,
    heartbeats for `held_ms` and leaves: the group is left empty now, its offset committed then."""
    m = _join(client, "g")
    _commit(client, "g", offset, generation_id=1, member_id=m["member_id"])
    _heartbeat_for(client, clock, "g", m["member_id"], held_ms)
    assert client.delete(f"/v1/groups/g/members/{m['member_id']}").status_code == 204


def test_a_simple_consumers_offsets_expire_a_retention_after_their_commit(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    _commit(client, "simple", 3)  # no member, no generation: a group known by its offsets alone
    clock.advance(RETENTION_MS - 1)

    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
    assert _offsets(client, "simple") == [("in", 0, 3)]
    clock.advance(1)
    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(1, False)

    assert _offsets(client, "simple") == []
    assert _groups(client) == []


def test_unset_no_offset_expires_however_old(client, unset, clock) -> None:  # type: ignore[no-untyped-def]
    # What the Spark jobs and the sinks keep their positions in (docs/SPARK.md): a simple
    # consumer's group, and a group its member left.
    create_topic(client, "in", 1)
    _commit(client, "simple", 3)
    _member_commits_and_leaves(client, clock, 5)
    clock.advance(100 * 365 * 24 * 3_600_000)
    worker = GroupExpiryWorker(unset.group_expiry, clock, ChoreConfig(interval_ms=50))

    assert unset.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
    assert worker.run_once(clock()) == GroupExpiryPass(0, 0, 0)
    assert (_offsets(client, "simple"), _offsets(client, "g")) == ([("in", 0, 3)], [("in", 0, 5)])
    assert sorted(_groups(client)) == ["g", "simple"]


def test_the_retention_is_the_settings(client, short, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    _commit(client, "simple", 3)
    clock.advance(SHORT_RETENTION_MS - 1)

    assert short.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
    clock.advance(1)
    assert short.group_expiry.expire_offsets(clock()) == OffsetExpiry(1, False)
    assert _offsets(client, "simple") == []


def test_a_commit_counts_the_retention_again(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    _commit(client, "simple", 3)
    clock.advance(RETENTION_MS // 2)
    _commit(client, "simple", 4)
    clock.advance(RETENTION_MS // 2)

    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
    assert _offsets(client, "simple") == [("in", 0, 4)]
    clock.advance(RETENTION_MS // 2)
    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(1, False)


def test_the_offsets_of_a_group_with_a_live_member_are_kept_however_old(client, short, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    m = _join(client, "g")
    _commit(client, "g", 3, generation_id=1, member_id=m["member_id"])
    _heartbeat_for(client, clock, "g", m["member_id"], 3 * SHORT_RETENTION_MS)

    assert short.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
    assert _offsets(client, "g") == [("in", 0, 3)]


def test_an_emptied_groups_offsets_are_kept_a_retention_from_when_it_was_left_empty(  # type: ignore[no-untyped-def]
        client, short, clock) -> None:
    # Committed two retentions before its member left: Kafka counts an Empty group's retention
    # from its becoming empty, not from the commit.
    create_topic(client, "in", 1)
    _member_commits_and_leaves(client, clock, 3, held_ms=2 * SHORT_RETENTION_MS)
    clock.advance(SHORT_RETENTION_MS - 1)

    assert short.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
    assert _offsets(client, "g") == [("in", 0, 3)]
    clock.advance(1)
    assert short.group_expiry.expire_offsets(clock()) == OffsetExpiry(1, False)
    assert _offsets(client, "g") == []


def test_an_offset_committed_into_an_emptied_group_is_kept_a_retention_from_its_commit(  # type: ignore[no-untyped-def]
        client, short, clock) -> None:
    # Kafka would count it from the group's becoming empty too, and delete it with the others.
    create_topic(client, "in", 2)
    m = _join(client, "g")
    assert client.delete(f"/v1/groups/g/members/{m['member_id']}").status_code == 204
    clock.advance(SHORT_RETENTION_MS - 1)
    _commit(client, "g", 5, partition=1)  # a simple consumer's, into the group left empty
    clock.advance(1)

    assert short.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
    clock.advance(SHORT_RETENTION_MS - 1)
    assert short.group_expiry.expire_offsets(clock()) == OffsetExpiry(1, False)
    assert _offsets(client, "g") == []


def test_a_reset_commits_its_offsets_at_its_time(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    _commit(client, "simple", 0)
    clock.advance(RETENTION_MS - 1)
    r = client.post("/v1/groups/simple/offsets/reset", json={"topic": "in", "to": "latest"})
    assert r.status_code == 200, r.text
    clock.advance(1)

    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
    assert _offsets(client, "simple") == [("in", 0, 0)]


def test_a_transactions_offsets_are_committed_at_its_completion(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "in", 1)
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    r = client.post("/v1/transactions/tx/offsets", json={
        **ident(p), "group_id": "g", "offsets": [{"topic": "in", "partition": 0, "offset": 7}]})
    assert r.status_code == 200, r.text
    clock.advance(1_000)
    assert client.post("/v1/transactions/tx/commit", json=ident(p)).status_code == 200
    clock.advance(RETENTION_MS - 1)

    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
    assert _offsets(client, "g") == [("in", 0, 7)]
    clock.advance(1)
    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(1, False)


def test_a_committed_offset_a_transaction_has_staged_a_new_one_for_is_kept(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    # Its abort would leave the committed offset in place. The group's other offset goes.
    create_topic(client, "in", 2)
    _commit(client, "g", 3, partition=0)
    _commit(client, "g", 4, partition=1)
    p = init_producer(client, "tx", transaction_timeout_ms=900_000)
    begin(client, "tx", p)
    r = client.post("/v1/transactions/tx/offsets", json={
        **ident(p), "group_id": "g", "offsets": [{"topic": "in", "partition": 0, "offset": 9}]})
    assert r.status_code == 200, r.text
    clock.advance(RETENTION_MS)

    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(1, False)
    assert _offsets(client, "g") == [("in", 0, 3)]
    described = client.get("/v1/transactions/tx").json()
    assert [(o["group_id"], o["topic"], o["partition"], o["offset"]) for o in described["pending_offsets"]] \
        == [("g", "in", 0, 9)]


def test_a_pass_expires_at_most_its_most_and_the_next_pass_looks_again(  # type: ignore[no-untyped-def]
        client, services, clock, monkeypatch) -> None:
    from app.services import group_expiry
    monkeypatch.setattr(group_expiry, "EXPIRED_OFFSETS_PER_PASS", 2)
    monkeypatch.setattr(group_expiry, "EXPIRY_CHUNK_OFFSETS", 1)
    _simple_consumers_past_the_retention(client, clock, "a", "b", "c")
    worker = GroupExpiryWorker(services.group_expiry, clock, ChoreConfig(interval_ms=50))

    assert worker.run_once(clock()) == GroupExpiryPass(0, 0, 2)
    assert worker.run_once(clock()) == GroupExpiryPass(0, 0, 1)
    assert _groups(client) == []


def test_an_offset_between_two_expired_ones_of_a_transaction_is_kept_if_it_is_not(  # type: ignore[no-untyped-def]
        client, services, clock, monkeypatch) -> None:
    # A transaction of the pass deletes a range of keys: b's lies between a's and c's.
    from app.services import group_expiry
    monkeypatch.setattr(group_expiry, "EXPIRY_CHUNK_OFFSETS", 2)
    create_topic(client, "in", 1)
    _commit(client, "a", 1)
    _commit(client, "c", 1)
    clock.advance(1)
    _commit(client, "b", 1)
    clock.advance(RETENTION_MS - 1)

    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(2, False)
    assert _groups(client) == ["b"]


def test_an_offset_between_two_expired_ones_of_its_own_group_is_kept_if_it_is_not(  # type: ignore[no-untyped-def]
        client, services, clock) -> None:
    # One transaction's key range runs from partition 0 to partition 2 of "simple": partition
    # 1, committed later, lies inside it.
    create_topic(client, "in", 3)
    _commit(client, "simple", 1, partition=0)
    _commit(client, "simple", 1, partition=2)
    clock.advance(1)
    _commit(client, "simple", 1, partition=1)
    clock.advance(RETENTION_MS - 1)

    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(2, False)
    assert _offsets(client, "simple") == [("in", 1, 1)]


def test_a_transaction_deletes_only_the_offsets_of_the_groups_its_look_named(  # type: ignore[no-untyped-def]
        client, services, clock, monkeypatch) -> None:
    # b's offset lies between a's and c's, expired when the transaction deletes, but the look
    # did not name it (kept then, say, by a transaction that staged an offset for it and has
    # since aborted): its group's row was not locked, and it waits for the next pass.
    from app.storage import groups
    look = groups.expired_offsets
    monkeypatch.setattr(groups, "expired_offsets", lambda conn, kept_since_ms, limit: [
        key for key in look(conn, kept_since_ms, limit) if key[0] != "b"])
    _simple_consumers_past_the_retention(client, clock, "a", "b", "c")

    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(2, False)
    assert _offsets(client, "b") == [("in", 0, 1)]


def test_the_pass_deletes_the_group_its_offsets_left_empty_and_counts_them(  # type: ignore[no-untyped-def]
        client, services, clock) -> None:
    # Left empty a retention ago, far more than EMPTY_GROUP_RETENTION_MS: the group goes in the
    # pass that expires its last offset.
    create_topic(client, "in", 1)
    _member_commits_and_leaves(client, clock, 3)
    worker = GroupExpiryWorker(services.group_expiry, clock, ChoreConfig(interval_ms=50))
    assert worker.run_once(clock()) == GroupExpiryPass(0, 0, 0)
    clock.advance(RETENTION_MS)
    before = scrape(client)

    assert worker.run_once(clock()) == GroupExpiryPass(0, 1, 1)
    assert delta(before, scrape(client), "outbox_group_offsets_expired_total") == 1
    assert _groups(client) == []
