"""DeleteGroups, and the expiry pass's deletion of empty groups and of expired offsets, racing
a join, a commit or another DeleteGroups, on PostgreSQL (on SQLite the write lock
runs one write transaction at a time, so nothing can interleave).

The delete is held once it has locked the group's row (groups.lock_group_row); the second
request waits for that lock, and the delete commits: PostgreSQL's SELECT ... FOR UPDATE then
skips the deleted row, which the second request must survive.
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.composition import Services
from app.domain.errors import GroupIdNotFound, RebalanceInProgress
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder
from app.services.group_expiry import EMPTY_GROUP_RETENTION_MS, OffsetExpiry
from app.storage import groups, offsets
from app.storage import transactions as txns
from app.storage.tables import group_offsets
from tests.helpers import begin, create_topic, ident, init_producer
from tests.integration.test_topic_admin_races import Held, Run, blocked_on_a_lock, hold_then

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def emptied_group(client, services, group_id: str) -> None:  # type: ignore[no-untyped-def]
    """A group the service knows, with no members: deletable."""
    create_topic(client, "t", 1)
    m = services.groups.join(group_id, member_id=None, topic_names=["t"], session_timeout_ms=10_000)
    services.groups.leave(group_id, m.member_id)


def test_a_join_waiting_for_a_delete_creates_the_group_again(client, services, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    emptied_group(client, services, "g")
    held = Held(monkeypatch, groups, "lock_group_row")

    deleted, joined, waited = hold_then(
        held,
        lambda: services.groups.delete("g"),
        lambda: services.groups.join("g", member_id=None, topic_names=["t"], session_timeout_ms=10_000),
        database,
    )

    assert waited
    assert deleted is None
    with database.engine.connect() as conn:
        assert [m.member_id for m in groups.members(conn, "g")] == [joined.member_id]
        assert groups.generation(conn, "g") == 1


def test_of_two_concurrent_deletes_the_second_finds_no_group(client, services, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    emptied_group(client, services, "g")
    held = Held(monkeypatch, groups, "lock_group_row")

    first, second, waited = hold_then(
        held,
        lambda: services.groups.delete("g"),
        lambda: services.groups.delete("g"),
        database,
    )

    assert waited
    assert first is None
    assert isinstance(second, GroupIdNotFound), second
    with database.engine.connect() as conn:
        assert groups.known(conn, "g") is False


def test_a_join_losing_every_try_to_a_delete_is_told_to_retry(database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(groups, "lock_group_row", lambda conn, group_id, now_ms: None)

    with database.engine.begin() as conn, pytest.raises(RebalanceInProgress) as raised:
        groups.lock_group(conn, "g", 0)

    assert raised.value.retriable
    assert str(raised.value) == "group 'g' was deleted 3 times while this request waited for it: try again"


def _join_and_empty_group_pass(client, services, database, clock, monkeypatch, *, held_step: str,  # type: ignore[no-untyped-def]
                               pass_first: bool) -> tuple[int, list[str], int | None]:
    """A join and the empty-group pass on the group "g", emptied a retention ago: the one
    first (`pass_first`: the pass) held at `held_step` of app.storage.groups while the other
    waits for its lock. The pass's count of groups deleted, then g's members (the join's
    member id first) and generation."""
    emptied_group(client, services, "g")
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)
    calls = [lambda: services.groups.join("g", member_id=None, topic_names=["t"], session_timeout_ms=10_000),
             lambda: services.group_expiry.delete_empty_groups(clock()).deleted]
    first, second, waited = hold_then(Held(monkeypatch, groups, held_step), *(calls[::-1] if pass_first else calls),
                                      database)
    assert waited
    joined, deleted = (second, first) if pass_first else (first, second)
    with database.engine.connect() as conn:
        members = [m.member_id for m in groups.members(conn, "g")]
        return deleted, [joined.member_id, *members], groups.generation(conn, "g")


def test_an_empty_group_pass_waiting_for_a_join_keeps_the_group_it_added_a_member_to(  # type: ignore[no-untyped-def]
        client, services, database, clock, monkeypatch) -> None:
    deleted, (joined, *members), generation = _join_and_empty_group_pass(
        client, services, database, clock, monkeypatch, held_step="add_member", pass_first=False)

    assert (deleted, members, generation) == (0, [joined], 3)


def test_a_join_waiting_for_the_empty_group_pass_creates_the_group_again(  # type: ignore[no-untyped-def]
        client, services, database, clock, monkeypatch) -> None:
    deleted, (joined, *members), generation = _join_and_empty_group_pass(
        client, services, database, clock, monkeypatch, held_step="delete_if_empty", pass_first=True)

    assert (deleted, members, generation) == (1, [joined], 1)


OFFSETS_RETENTION_MS = 10_080 * 60_000  # OUTBOX_OFFSETS_RETENTION_MINUTES=10080 (settings), Kafka's default


@pytest.fixture
def settings(settings):  # type: ignore[no-untyped-def]
    """OUTBOX_OFFSETS_RETENTION_MINUTES set (unset, the default, nothing expires)."""
    return settings.model_copy(update={"offsets_retention_minutes": 10_080})


def _committed(database, group_id: str) -> list[tuple[int, int, int]]:  # type: ignore[no-untyped-def]
    with database.engine.connect() as conn:
        return [(o.partition, o.committed_offset, o.committed_ms) for o in offsets.fetch(conn, group_id)]


def _leader_epochs(database, group_id: str) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    with database.engine.connect() as conn:
        return [(o.partition, o.leader_epoch) for o in offsets.fetch(conn, group_id)]


SIMPLE_LEADER_EPOCH = 5


def simple_consumer_past_the_retention(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    """The group "simple", known by its offsets alone (topic "t" partition 0 at 3, leader epoch
    SIMPLE_LEADER_EPOCH), committed a retention ago."""
    create_topic(client, "t", 1)
    services.group_offsets.commit("simple", [OffsetToStage("t", 0, 3, None, SIMPLE_LEADER_EPOCH, ReadOrder.COMMIT)])
    clock.advance(OFFSETS_RETENTION_MS)


# The join held once it has locked its group's row, before it writes it (lock_group): the
# expiry waits for that lock (lock_offsets_groups' lock_existing_groups) and nothing else;
# held once it has written the row and added its member (add_member): the expiry's insert of
# a missing row waits for the row's write too, so there the lock alone is not what is tested.
@pytest.mark.parametrize("held_step", ["lock_group", "add_member"])
def test_an_offset_expiry_waiting_for_a_join_keeps_the_offsets_of_the_group_it_added_a_member_to(  # type: ignore[no-untyped-def]
        client, services, database, clock, monkeypatch, held_step: str) -> None:
    emptied_group(client, services, "g")
    services.group_offsets.commit("g", [OffsetToStage("t", 0, 3, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)])
    committed_ms = clock()
    clock.advance(OFFSETS_RETENTION_MS)

    joined, expired, waited = hold_then(
        Held(monkeypatch, groups, held_step),
        lambda: services.groups.join("g", member_id=None, topic_names=["t"], session_timeout_ms=10_000),
        lambda: services.group_expiry.expire_offsets(clock()),
        database,
    )

    assert waited
    assert expired == OffsetExpiry(0, False)
    assert _committed(database, "g") == [(0, 3, committed_ms)]
    with database.engine.connect() as conn:
        assert [m.member_id for m in groups.members(conn, "g")] == [joined.member_id]


def test_an_offset_expiry_skips_the_offset_a_commit_holds_and_keeps_it(  # type: ignore[no-untyped-def]
        client, services, database, clock, monkeypatch) -> None:
    # A simple consumer's commit holds the offset's row: the expiry takes none it would wait
    # for (a commit's order of keys is not the database's), and the refreshed offset stays.
    simple_consumer_past_the_retention(client, services, clock)

    committed, expired, waited = hold_then(
        Held(monkeypatch, offsets, "commit"),
        lambda: services.group_offsets.commit("simple", [OffsetToStage("t", 0, 4, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)]),
        lambda: services.group_expiry.expire_offsets(clock()),
        database,
    )

    assert not waited
    assert (committed, expired) == (None, OffsetExpiry(0, False))
    assert _committed(database, "simple") == [(0, 4, clock())]
    with database.engine.connect() as conn:
        assert groups.group(conn, "simple") is None  # the expiry's row for its lock is gone


def test_a_join_waits_for_the_offset_expiry_of_a_group_known_by_its_offsets_alone(  # type: ignore[no-untyped-def]
        client, services, database, clock, monkeypatch) -> None:
    # A simple consumer's group has no row for the expiry to lock: without one, a join (its row
    # inserted, a member added, the offsets fetched [(0, 3)]) completed while the expiry's
    # DELETE was pending, and the expiry then left a group with a member and no offsets.
    simple_consumer_past_the_retention(client, services, clock)

    expired, joined, waited = hold_then(
        Held(monkeypatch, groups, "delete_expired_offsets"),
        lambda: services.group_expiry.expire_offsets(clock()),
        lambda: services.groups.join("simple", member_id=None, topic_names=["t"], session_timeout_ms=10_000),
        database,
    )

    assert waited
    assert expired == OffsetExpiry(1, False)
    # The join came after the expiry: its member finds no offsets, and none go under it.
    with database.engine.connect() as conn:
        assert groups.group(conn, "simple") is not None
        assert [m.member_id for m in groups.members(conn, "simple")] == [joined.member_id]
    assert _committed(database, "simple") == []


def _staging(client, offset: int):  # type: ignore[no-untyped-def]
    """A transaction "tx", begun: the call that stages `offset` of "simple"'s t/0 in it."""
    p = init_producer(client, "tx", transaction_timeout_ms=900_000)
    begin(client, "tx", p)
    return lambda: client.post("/v1/transactions/tx/offsets", json={
        **ident(p), "group_id": "simple", "offsets": [{"topic": "t", "partition": 0, "offset": offset}]})


def _pending(client) -> tuple[str, list[tuple[str, int, int]]]:  # type: ignore[no-untyped-def]
    described = client.get("/v1/transactions/tx").json()
    return described["state"], [(o["group_id"], o["partition"], o["offset"]) for o in described["pending_offsets"]]


def test_an_offset_expiry_skips_the_committed_offset_a_transaction_is_staging_a_new_one_for(  # type: ignore[no-untyped-def]
        client, services, database, clock, monkeypatch) -> None:
    # The staging's rows are not seen by the expiry until they commit: without the staging's
    # hold on the committed offset (offsets.hold_committed) the expiry deleted it, and the
    # unfinished transaction was left with a staged offset and no committed one.
    simple_consumer_past_the_retention(client, services, clock)
    committed_ms = clock() - OFFSETS_RETENTION_MS

    staged, expired, waited = hold_then(
        Held(monkeypatch, txns, "stage_offsets"), _staging(client, 9),
        lambda: services.group_expiry.expire_offsets(clock()),
        database,
    )

    assert not waited
    assert (staged.status_code, expired) == (200, OffsetExpiry(0, False))
    assert _committed(database, "simple") == [(0, 3, committed_ms)]
    assert _pending(client) == ("Ongoing", [("simple", 0, 9)])


def test_a_transaction_staging_an_offset_waits_for_the_offset_expiry_deleting_its_committed_one(  # type: ignore[no-untyped-def]
        client, services, database, clock, monkeypatch) -> None:
    # The staging comes after the expiry, as if the expiry had run before it: without the wait
    # the staging committed first, a committed offset and a staged one were both seen, and the
    # expiry's commit then took the committed one from the unfinished transaction.
    simple_consumer_past_the_retention(client, services, clock)
    stage = _staging(client, 9)

    expired, staged, waited = hold_then(
        Held(monkeypatch, groups, "delete_expired_offsets"),
        lambda: services.group_expiry.expire_offsets(clock()),
        stage,
        database,
    )

    assert waited
    assert (expired, staged.status_code) == (OffsetExpiry(1, False), 200)
    assert _committed(database, "simple") == []
    assert _pending(client) == ("Ongoing", [("simple", 0, 9)])


def _expiry_with_a_commit_inside_its_delete(services, clock, database, monkeypatch, during):  # type: ignore[no-untyped-def]
    """The offset expiry's outcome, `during()` run and committed after its DELETE took its
    snapshot and before it locks the rows it deletes (the rule, checked row by row before the
    lock, waits there on an advisory lock the test holds); `during()`'s result."""
    rule, delete_expired = groups._offset_expired, groups.delete_expired_offsets
    key = 0x6F666672  # an advisory lock key no code of the service takes

    def delete_waiting_in_the_rule(conn, chunk, kept_since_ms):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(groups, "_offset_expired", lambda kept: (
            *rule(kept), func.pg_advisory_xact_lock_shared(key).is_not(None)))
        return delete_expired(conn, chunk, kept_since_ms)

    monkeypatch.setattr(groups, "delete_expired_offsets", delete_waiting_in_the_rule)
    with database.engine.connect() as gate:
        gate.execute(select(func.pg_advisory_lock(key)))
        expiry = Run(lambda: services.group_expiry.expire_offsets(clock()))
        try:
            assert blocked_on_a_lock(database, expiry)
            done = during()
        finally:
            gate.execute(select(func.pg_advisory_unlock(key)))
            gate.commit()
        return expiry.outcome(), done


def test_an_offset_expiry_keeps_the_committed_offset_a_staging_committed_beside_inside_its_delete(  # type: ignore[no-untyped-def]
        client, services, database, clock, monkeypatch) -> None:
    # The staging commits inside the DELETE, before its lock: the rule's NOT EXISTS cannot see
    # the staged row, and the released hold leaves PostgreSQL nothing to check again. Without
    # the second statement of groups.delete_expired_offsets the committed offset was deleted
    # beside the staged one.
    simple_consumer_past_the_retention(client, services, clock)
    committed_ms = clock() - OFFSETS_RETENTION_MS

    expired, staged = _expiry_with_a_commit_inside_its_delete(services, clock, database, monkeypatch,
                                                              _staging(client, 9))

    assert (staged.status_code, expired) == (200, OffsetExpiry(0, False))
    assert _committed(database, "simple") == [(0, 3, committed_ms)]
    assert _leader_epochs(database, "simple") == [(0, SIMPLE_LEADER_EPOCH)]  # put back with the rest of the row
    assert _pending(client) == ("Ongoing", [("simple", 0, 9)])


def test_an_offset_expiry_keeps_the_offset_a_commit_refreshed_inside_its_delete(  # type: ignore[no-untyped-def]
        client, services, database, clock, monkeypatch) -> None:
    # The commit refreshes the row inside the DELETE, before its lock: PostgreSQL checks the
    # rule again on the refreshed row, which is not expired.
    simple_consumer_past_the_retention(client, services, clock)

    expired, _ = _expiry_with_a_commit_inside_its_delete(
        services, clock, database, monkeypatch,
        lambda: services.group_offsets.commit("simple", [OffsetToStage("t", 0, 7, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)]))

    assert expired == OffsetExpiry(0, False)
    assert _committed(database, "simple") == [(0, 7, clock())]


@pytest.mark.parametrize("retention_minutes", [None, 10_080])
def test_a_staging_holds_the_committed_offsets_only_with_the_retention_set(  # type: ignore[no-untyped-def]
        client, settings, database, clock, retention_minutes) -> None:
    # Unset, nothing expires and the hold (offsets.hold_committed) would be a staging's cost for
    # nothing: the staging does not wait for a committed offset another transaction locks.
    create_topic(client, "t", 1)
    services = Services.build(settings.model_copy(update={"offsets_retention_minutes": retention_minutes}),
                              database, clock)
    services.group_offsets.commit("simple", [OffsetToStage("t", 0, 3, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)])
    p = services.coordinator.init_producer_id(transactional_id="tx", transaction_timeout_ms=900_000)
    services.coordinator.begin("tx", p.producer_id, p.producer_epoch)

    with database.engine.connect() as locker:
        locker.execute(select(group_offsets.c.group_id).where(group_offsets.c.group_id == "simple").with_for_update())
        staging = Run(lambda: services.coordinator.add_offsets("tx", p.producer_id, p.producer_epoch, "simple",
                                                               [OffsetToStage("t", 0, 9, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)]))
        waited = blocked_on_a_lock(database, staging)
        locker.rollback()
    assert not isinstance(staging.outcome(), BaseException)

    assert waited == (retention_minutes is not None)
    assert _pending(client) == ("Ongoing", [("simple", 0, 9)])
