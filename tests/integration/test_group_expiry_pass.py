"""What a group-expiry pass (GroupExpiry.expire_members) costs the database, on both: one
write transaction for up to a chunk of groups (on SQLite each durable commit is an fsync,
and every other writer of the process waits for the pass), none when nothing has expired."""

from __future__ import annotations

from sqlalchemy import event

from app.storage import groups
from tests.helpers import create_topic

SESSION_MS = 10_000


def _joined_then_counting_commits(client, services, database, clock, *group_ids: str,  # type: ignore[no-untyped-def]
                                  waited_ms: int) -> list[int]:
    """A member joined to each of `group_ids` with a session of SESSION_MS,
    then the clock moved on `waited_ms`: the database's commits from then on, one item each."""
    create_topic(client, "t", 1)
    for group_id in group_ids:
        services.groups.join(group_id, member_id=None, topic_names=["t"], session_timeout_ms=SESSION_MS)
    clock.advance(waited_ms)
    counted: list[int] = []
    event.listen(database.engine, "commit", lambda _conn: counted.append(1))
    return counted


def test_a_pass_that_expires_the_members_of_three_groups_is_one_read_and_one_write_transaction(  # type: ignore[no-untyped-def]
        client, services, database, clock) -> None:
    commits = _joined_then_counting_commits(client, services, database, clock, "a", "b", "c",
                                            waited_ms=SESSION_MS + 1)

    removed = services.group_expiry.expire_members(clock())

    assert (removed, len(commits)) == (3, 2)
    with database.read() as conn:
        assert [len(groups.members(conn, g)) for g in ("a", "b", "c")] == [0, 0, 0]


def test_a_pass_that_finds_no_ended_session_only_reads(client, services, database, clock) -> None:  # type: ignore[no-untyped-def]
    commits = _joined_then_counting_commits(client, services, database, clock, "a",
                                            waited_ms=SESSION_MS)  # the session's last moment

    assert (services.group_expiry.expire_members(clock()), len(commits)) == (0, 1)


def test_a_pass_locks_at_most_a_chunk_of_groups_in_one_write_transaction(  # type: ignore[no-untyped-def]
        client, services, database, clock, monkeypatch) -> None:
    from app.services import group_expiry
    monkeypatch.setattr(group_expiry, "EXPIRY_CHUNK_GROUPS", 2)
    commits = _joined_then_counting_commits(client, services, database, clock, "a", "b", "c", "d", "e",
                                            waited_ms=SESSION_MS + 1)

    removed = services.group_expiry.expire_members(clock())

    # One read, then three writes: groups a-b, c-d, e.
    assert (removed, len(commits)) == (5, 4)
    with database.read() as conn:
        assert [len(groups.members(conn, g)) for g in ("a", "b", "c", "d", "e")] == [0, 0, 0, 0, 0]


def test_a_group_deleted_after_the_pass_found_it_is_not_created_again(  # type: ignore[no-untyped-def]
        client, services, database, clock, monkeypatch) -> None:
    # The pass read "g" among the groups with an ended session; a DeleteGroups (which counts
    # ended sessions as gone) deleted it before the pass's write transaction locked it.
    create_topic(client, "t", 1)
    monkeypatch.setattr(groups, "groups_with_expired_members", lambda conn, now_ms: ["g"])

    assert services.group_expiry.expire_members(clock()) == 0
    with database.read() as conn:
        assert (groups.generation(conn, "g"), groups.known(conn, "g")) == (None, False)
