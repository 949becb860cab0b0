"""Consumer groups: members, generations and assignments."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from sqlalchemy import Connection, delete, func, insert, select, update

from app.domain.errors import IllegalGeneration, UnknownMemberId
from app.domain.offsets import GroupMetadata
from app.storage import dialect
from app.storage.dialect import RowLock
from app.storage.tables import consumer_groups, group_members


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    topics: list[str]
    assignment: list[tuple[str, int]]
    session_timeout_ms: int
    last_heartbeat_ms: int
    joined_ms: int


def generation(conn: Connection, group_id: str, *, lock: RowLock | None = None) -> int | None:
    stmt = select(consumer_groups.c.generation_id).where(consumer_groups.c.group_id == group_id)
    return conn.execute(dialect.lock_row(conn.dialect.name, stmt, lock)).scalar_one_or_none()


def lock_group(conn: Connection, group_id: str, now_ms: int) -> int:
    """Create the group if needed and lock its row: membership changes of one group are
    serialized, so two joins cannot both compute an assignment from the same old members."""
    conn.execute(
        dialect.insert_ignore(conn, consumer_groups).values(
            group_id=group_id, generation_id=0, updated_ms=now_ms
        )
    )
    gen = generation(conn, group_id, lock=RowLock.UPDATE)
    assert gen is not None
    return gen


def set_generation(conn: Connection, group_id: str, generation_id: int, now_ms: int) -> None:
    conn.execute(
        update(consumer_groups)
        .where(consumer_groups.c.group_id == group_id)
        .values(generation_id=generation_id, updated_ms=now_ms)
    )


def members(conn: Connection, group_id: str) -> list[Member]:
    rows = conn.execute(
        select(group_members).where(group_members.c.group_id == group_id).order_by(group_members.c.member_id)
    )
    return [
        Member(
            r.member_id,
            orjson.loads(r.topics),
            [tuple(x) for x in orjson.loads(r.assignment)],  # type: ignore[misc]
            r.session_timeout_ms,
            r.last_heartbeat_ms,
            r.joined_ms,
        )
        for r in rows
    ]


def add_member(conn: Connection, group_id: str, member: Member) -> None:
    conn.execute(
        insert(group_members).values(
            group_id=group_id,
            member_id=member.member_id,
            topics=orjson.dumps(member.topics).decode(),
            assignment=orjson.dumps(member.assignment).decode(),
            session_timeout_ms=member.session_timeout_ms,
            last_heartbeat_ms=member.last_heartbeat_ms,
            joined_ms=member.joined_ms,
        )
    )


def update_member(conn: Connection, group_id: str, member_id: str, **values: object) -> None:
    for key in ("topics", "assignment"):
        if key in values:
            values[key] = orjson.dumps(values[key]).decode()
    conn.execute(
        update(group_members)
        .where(group_members.c.group_id == group_id, group_members.c.member_id == member_id)
        .values(**values)
    )


def remove_members(conn: Connection, group_id: str, member_ids: list[str]) -> None:
    conn.execute(
        delete(group_members).where(
            group_members.c.group_id == group_id, group_members.c.member_id.in_(member_ids)
        )
    )


def groups_with_expired_members(conn: Connection, now_ms: int) -> list[str]:
    return list(
        conn.execute(
            select(group_members.c.group_id)
            .where(group_members.c.last_heartbeat_ms + group_members.c.session_timeout_ms < now_ms)
            .distinct()
        ).scalars()
    )


def check_group_metadata(conn: Connection, group_id: str, meta: GroupMetadata | None) -> None:
    """KIP-447: offsets that carry group metadata are fenced by the group's generation."""
    if meta is None:
        return
    # Shared lock until the offsets are staged: a rebalance (which locks the row for update)
    # cannot slip in between this check and the write it guards.
    current = generation(conn, group_id, lock=RowLock.SHARE)
    if meta.member_id not in {m.member_id for m in members(conn, group_id)}:
        raise UnknownMemberId(f"{meta.member_id!r} is not a member of group {group_id!r}")
    if meta.generation_id != current:
        raise IllegalGeneration(
            f"generation {meta.generation_id} is stale; group {group_id!r} is at generation {current}",
            generation_id=current,
        )


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    generation_id: int | None  # None: the group has never had members (offsets only)
    member_count: int


def list_groups(conn: Connection) -> list[GroupListing]:
    """Every group the service knows: those with members or a generation, and those that only
    have offsets, committed or staged in a transaction (a transactional producer's group
    need not join), by id."""
    from app.storage.tables import group_offsets, transaction_offsets

    known = select(consumer_groups.c.group_id).union(
        select(group_offsets.c.group_id), select(transaction_offsets.c.group_id)).subquery()
    members = (select(group_members.c.group_id, func.count().label("n"))
               .group_by(group_members.c.group_id).subquery())
    rows = conn.execute(
        select(known.c.group_id, consumer_groups.c.generation_id, func.coalesce(members.c.n, 0))
        .select_from(known.outerjoin(consumer_groups, consumer_groups.c.group_id == known.c.group_id)
                     .outerjoin(members, members.c.group_id == known.c.group_id))
        .order_by(known.c.group_id)
    ).all()
    return [GroupListing(g, gen, n) for g, gen, n in rows]
