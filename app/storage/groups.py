"""Consumer groups: members, generations and assignments."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Connection, delete, exists, func, insert, select, tuple_, union, update

from app.domain.errors import IllegalGeneration, RebalanceInProgress
from app.domain.group import GroupState, StoredGroupState, check_current_member, member_client
from app.domain.offsets import GroupMetadata
from app.storage import dialect, offsets
from app.storage.dialect import RowLock
from app.storage.tables import consumer_groups, group_members, group_offsets, topics, transaction_offsets


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    topics: list[str]
    assignment: list[tuple[str, int]]
    session_timeout_ms: int
    last_heartbeat_ms: int
    joined_ms: int
    # A Kafka member's (None for the HTTP door's): [(protocol name, its metadata)] in the
    # member's order of preference, and the rest of its rebalance (tables.group_members).
    protocols: list[tuple[str, bytes]] | None = None
    rebalance_timeout_ms: int | None = None
    join_generation: int | None = None
    member_assignment: bytes | None = None
    group_instance_id: str | None = None  # a static member's (KIP-345); None: a dynamic member
    # What DescribeGroups shows: the client id it joined with and the address it joined from
    # (None where not known; app.domain.group.member_client bounds them).
    client_id: str | None = None
    client_host: str | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols or [] if name == protocol), b"")


@dataclass(frozen=True, slots=True)
class Group:
    """A group's row: its generation and, for a group of the Kafka door's, its rebalance."""

    group_id: str
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    state: StoredGroupState
    leader_id: str | None
    rebalance_deadline_ms: int | None
    # Kafka's initial rebalance delay under way (tables.consumer_groups): what is left to extend
    # it by (None: no delay under way), and whether a member was added in its current period.
    initial_rebalance_remaining_ms: int | None = None
    new_member_added: bool = False


def group(conn: Connection, group_id: str, *, lock: RowLock | None = None) -> Group | None:
    """The group's row; its initial rebalance delay only if one is under way: begun at the
    generation the group is at (initial_rebalance_generation). A delay's columns left from an
    earlier generation are not one: a process from before migration 0028 that ended the
    delayed join phase (or a later one) wrote the new generation without clearing them, and
    if such a process then began the next rebalance, taking them for a delay would hold it
    until its deadline instead of ending it when every member has joined again."""
    stmt = select(consumer_groups).where(consumer_groups.c.group_id == group_id)
    r = conn.execute(dialect.lock_row(conn.dialect.name, stmt, lock)).one_or_none()
    if r is None:
        return None
    delayed = r.initial_rebalance_remaining_ms is not None and r.initial_rebalance_generation == r.generation_id
    return Group(r.group_id, r.generation_id, r.protocol_type, r.protocol_name, StoredGroupState(r.state),
                 r.leader_id, r.rebalance_deadline_ms, r.initial_rebalance_remaining_ms if delayed else None,
                 delayed and bool(r.new_member_added))


def update_group(conn: Connection, group_id: str, **values: object) -> None:
    if isinstance(values.get("state"), StoredGroupState):
        values["state"] = values["state"].value  # type: ignore[union-attr]
    conn.execute(update(consumer_groups).where(consumer_groups.c.group_id == group_id).values(**values))


def _protocols_text(protocols: list[tuple[str, bytes]] | None) -> str | None:
    if protocols is None:
        return None
    return orjson.dumps([[name, base64.b64encode(m).decode()] for name, m in protocols]).decode()


def _protocols(text: str | None) -> list[tuple[str, bytes]] | None:
    return None if text is None else [(name, base64.b64decode(m)) for name, m in orjson.loads(text)]


def generation(conn: Connection, group_id: str, *, lock: RowLock | None = None) -> int | None:
    stmt = select(consumer_groups.c.generation_id).where(consumer_groups.c.group_id == group_id)
    return conn.execute(dialect.lock_row(conn.dialect.name, stmt, lock)).scalar_one_or_none()


# How many times lock_group creates the group again after a concurrent DeleteGroups removed
# its row while it waited: each time another delete has to win the race, so the third loss
# is answered with a retriable error rather than a loop.
LOCK_GROUP_TRIES = 3


def lock_group(conn: Connection, group_id: str, now_ms: int) -> int:
    """Create the group if needed and lock its row: membership changes of one group are
    serialized, so two joins cannot both compute an assignment from the same old members.
    For a join only, the one request that creates a group. DeleteGroups takes one try of it
    (lock_group_row) and deletes the row in the same transaction, or rolls back; the others
    lock a group that exists (lock_existing_group), or none."""
    for _ in range(LOCK_GROUP_TRIES):
        gen = lock_group_row(conn, group_id, now_ms)
        if gen is not None:
            return gen
    raise RebalanceInProgress(f"group {group_id!r} was deleted {LOCK_GROUP_TRIES} times while this request "
                              "waited for it: try again")


def lock_group_row(conn: Connection, group_id: str, now_ms: int) -> int | None:
    """One try of lock_group: None when a DeleteGroups holding the row deleted it while this
    waited for its lock. PostgreSQL's SELECT ... FOR UPDATE then skips the deleted row (READ
    COMMITTED), though the insert-or-ignore before it saw the row and inserted none; the next
    insert-or-ignore, in a new snapshot, creates it. (SQLite runs one write at a time.)"""
    conn.execute(
        dialect.insert_ignore(conn, consumer_groups).values(
            group_id=group_id, generation_id=0, updated_ms=now_ms
        )
    )
    return generation(conn, group_id, lock=RowLock.UPDATE)


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
            _protocols(r.protocols),
            r.rebalance_timeout_ms,
            r.join_generation,
            r.member_assignment,
            r.group_instance_id,
            r.client_id,
            r.client_host,
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
            protocols=_protocols_text(member.protocols),
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            join_generation=member.join_generation,
            member_assignment=member.member_assignment,
            group_instance_id=member.group_instance_id,
            client_id=member_client(member.client_id),
            client_host=member_client(member.client_host),
        )
    )


def update_member(conn: Connection, group_id: str, member_id: str, **values: object) -> None:
    for key in ("topics", "assignment"):
        if key in values:
            values[key] = orjson.dumps(values[key]).decode()
    if "protocols" in values:
        values["protocols"] = _protocols_text(values["protocols"])  # type: ignore[arg-type]
    conn.execute(
        update(group_members)
        .where(group_members.c.group_id == group_id, group_members.c.member_id == member_id)
        .values(**values)
    )


def instances(members: list[Member]) -> dict[str, str | None]:
    """Each member's group instance id, by member id (app.domain.group.check_current_member)."""
    return {m.member_id: m.group_instance_id for m in members}


def replace_member_id(conn: Connection, group_id: str, old_member_id: str, new_member_id: str) -> None:
    """The member `old_member_id` is `new_member_id` from now on, with all it holds (a static
    member's replacement, KIP-345)."""
    conn.execute(update(group_members).where(group_members.c.group_id == group_id,
                                             group_members.c.member_id == old_member_id)
                 .values(member_id=new_member_id))


def remove_members(conn: Connection, group_id: str, member_ids: list[str]) -> None:
    conn.execute(
        delete(group_members).where(
            group_members.c.group_id == group_id, group_members.c.member_id.in_(member_ids)
        )
    )


def delete_group(conn: Connection, group_id: str) -> None:
    """The group's row and its committed offsets: what Kafka's DeleteGroups removes of an
    empty group (offsets an unfinished transaction staged are the transaction's)."""
    conn.execute(delete(group_offsets).where(group_offsets.c.group_id == group_id))
    conn.execute(delete(consumer_groups).where(consumer_groups.c.group_id == group_id))


def lock_existing_group(conn: Connection, group_id: str) -> bool:
    """Lock the group's row if there is one, never creating it (lock_group would): what a
    request or pass that must not bring a group into being locks. False: there is none (on
    PostgreSQL also when a DeleteGroups or the empty-group pass deleted it while this waited)."""
    return generation(conn, group_id, lock=RowLock.UPDATE) is not None


def lock_existing_groups(conn: Connection, group_ids: list[str]) -> list[str]:
    """lock_existing_group for several groups in one statement: the rows of those that exist,
    locked in group id order (the order every pass locks them in, so that two passes wait for
    each other rather than deadlock), and their ids in that order."""
    stmt = (select(consumer_groups.c.group_id).where(consumer_groups.c.group_id.in_(group_ids))
            .order_by(consumer_groups.c.group_id))
    return list(conn.execute(dialect.lock_row(conn.dialect.name, stmt, RowLock.UPDATE)).scalars())


def _empty_since(updated_before_ms: int) -> Any:
    """Of the groups' rows: those with no member and no offset, committed or staged by an
    unfinished transaction, whose row has not changed since before `updated_before_ms` (a
    membership change, a rebalance or the last member going writes updated_ms). The one
    definition of a group the empty-group pass deletes (empty_groups, delete_if_empty)."""
    of_group = consumer_groups.c.group_id
    return (consumer_groups.c.updated_ms < updated_before_ms,
            ~exists().where(group_members.c.group_id == of_group),
            ~exists().where(group_offsets.c.group_id == of_group),
            ~exists().where(transaction_offsets.c.group_id == of_group))


def empty_groups(conn: Connection, updated_before_ms: int, limit: int) -> list[str]:
    """At most `limit` of the groups empty since before `updated_before_ms` (_empty_since), by id."""
    return sorted(conn.execute(
        select(consumer_groups.c.group_id).where(*_empty_since(updated_before_ms)).limit(limit)).scalars())


def delete_if_empty(conn: Connection, group_ids: list[str], updated_before_ms: int) -> int:
    """Deletes the rows of those of `group_ids` still empty since before `updated_before_ms`;
    how many. The caller has locked the rows (lock_existing_groups) in an earlier statement: a
    join adds its member under that lock, and this statement, which starts once it is held,
    sees what the join committed. A statement that waited for a join's lock itself would have
    PostgreSQL re-check the group's row alone, not the members it counted before it waited: it
    would then keep a joined group only because every join also writes the row's updated_ms."""
    return conn.execute(delete(consumer_groups).where(
        consumer_groups.c.group_id.in_(group_ids), *_empty_since(updated_before_ms))).rowcount


def _offset_expired(kept_since_ms: int) -> Any:
    """Of the committed offsets (group_offsets): those OUTBOX_OFFSETS_RETENTION_MINUTES expires,
    `kept_since_ms` being now less the retention. Kafka's rule (offsets.retention.minutes as
    KIP-211 made it, GroupMetadata.removeExpiredOffsets): a group with members keeps every
    offset; a group without a row (a simple consumer's, or a transactional producer's, that
    never joined) loses each offset the retention after it was committed; a group that had
    members loses them the retention after it was left empty, when its row last changed (the
    last member leaving or expiring writes updated_ms), so that an offset committed long ago
    by a member of a Stable group is kept a whole retention once the group empties. Unlike
    Kafka, whose Empty group counts from that moment alone, the offset's own commit counts there
    too: an offset reset or a simple consumer's commit into an emptied group is never gone
    sooner than a retention after it. Kept as Kafka keeps it: an offset that an unfinished
    transaction has staged a new one for, which its commit would overwrite or its abort leave
    in place (the staged offsets themselves are the transaction's, transaction_offsets). The
    rule reads them in its statement's snapshot: delete_expired_offsets keeps, besides, the
    offsets a staging holds (offsets.hold_committed) and those a staging committed during its
    statement, so an offset is taken only as if the expiry ran before a staging it overlaps
    (the staging then finds no committed offset under its staged one). Expired
    when the time since is the retention or more, as in Kafka. The one definition of an expired
    offset (expired_offsets, delete_expired_offsets)."""
    of_offset = group_offsets.c
    return (of_offset.committed_ms <= kept_since_ms,
            ~exists().where(group_members.c.group_id == of_offset.group_id),
            ~exists().where(consumer_groups.c.group_id == of_offset.group_id,
                            consumer_groups.c.updated_ms > kept_since_ms),
            ~exists().where(transaction_offsets.c.group_id == of_offset.group_id,
                            transaction_offsets.c.topic_id == of_offset.topic_id,
                            transaction_offsets.c.partition == of_offset.partition))


def expired_offsets(conn: Connection, kept_since_ms: int, limit: int) -> list[offsets.OffsetKey]:
    """At most `limit` of the expired committed offsets (_offset_expired), in key order."""
    # The order is what delete_expired_offsets' range needs: a chunk's keys in the order the
    # table gives them (offsets committed c, b, a: the chunk c, b) span no range from its first
    # to its last, and its offsets are never deleted (test_offset_expiry_chunks).
    return [(r[0], r[1], r[2]) for r in conn.execute(
        select(*offsets.OFFSET_KEY).where(*_offset_expired(kept_since_ms)).order_by(*offsets.OFFSET_KEY).limit(limit))]


def lock_offsets_groups(conn: Connection, group_ids: list[str]) -> list[str]:
    """For the offset expiry (delete_expired_offsets): the rows of `group_ids` locked, in group
    id order, those missing created first, as a join creates its group's row (lock_group_row);
    returns the ids it created, which the caller deletes again before it commits
    (delete_created_groups), so that the expiry creates no group. A group known by its offsets
    alone (a simple consumer's) has no row for the expiry to lock: without one, a join could
    insert its row, add a member and fetch the offsets while the expiry's DELETE waited to
    commit, and the expiry then left a group with a member and no offsets. The created row,
    uncommitted, makes a concurrent join's insert wait for the expiry's end (PostgreSQL's
    unique index), after which the join creates it again and finds what the expiry left. Its
    updated_ms is 0, before any retention: it is no membership change (_offset_expired). The
    inserts in id order (one statement, executemany's batches: with a VALUES list of 1,000 rows
    compiled afresh, the inserts and locks took 32 to 202 ms a transaction, docs/benchmarks.md),
    then the locks in id order: two expiries wait for each other rather than deadlock. Each
    group once, however many of its offsets the chunk holds."""
    ids = sorted(set(group_ids))
    created = list(conn.execute(dialect.insert_ignore(conn, consumer_groups).returning(consumer_groups.c.group_id),
                                [{"group_id": g, "generation_id": 0, "updated_ms": 0} for g in ids]).scalars())
    lock_existing_groups(conn, ids)
    return created


def delete_created_groups(conn: Connection, group_ids: list[str]) -> None:
    """The rows lock_offsets_groups created, deleted in its transaction: no other transaction
    has seen them (a join that names one waits for this transaction's end)."""
    if group_ids:
        conn.execute(delete(consumer_groups).where(consumer_groups.c.group_id.in_(group_ids)))


def delete_expired_offsets(conn: Connection, chunk: list[offsets.OffsetKey], kept_since_ms: int) -> int:
    """Of the committed offsets `chunk` names (keys in key order, as expired_offsets gives
    them): deletes those of its groups, from its first key to its last, that are expired
    (_offset_expired), that no other transaction holds and that no staging committed before its
    second statement has staged a new offset for; how many. The caller has locked the chunk's
    groups' rows (lock_offsets_groups) in an earlier statement: a join adds its member
    under that lock, and the statement here, which starts once it is held, sees what the join
    committed.

    A statement that DELETEs the keys a SELECT ... FOR UPDATE SKIP LOCKED of them returned
    (on SQLite, whose write lock lets no other transaction hold a row, the SELECT alone).
    The expiry never waits for an offset's row: a commit (offsets.commit, keys sorted by
    Python's collation), a transaction's staging (offsets.hold_committed) or a topic's
    deletion (its groups' offsets in scan order) may hold
    those rows in an order the database's collation does not share (the README allows
    en_US), and a wait could close a cycle with it; a row one holds is skipped, and the next
    pass looks at it again. The rule is checked by the SELECT: a commit that refreshed the row
    after the statement's snapshot but before the lock made PostgreSQL check the SELECT's
    WHERE again on the newest version (READ COMMITTED's re-check of a locked row), which the
    lock then keeps as it is until the DELETE, so the DELETE does not check it again. The
    rule's other tables are read in the statement's one snapshot: a staging
    (offsets.hold_committed) that committed after it but before the lock left neither a row
    the snapshot sees nor a change to the offset's row for PostgreSQL to check again. So, on
    PostgreSQL, a second statement, in a snapshot of its own, looks for staged offsets of
    the deleted keys and puts those offsets back as they were. test_group_delete_races places
    a commit that still holds the row, a commit and a staging committing inside the
    statement. On SQLite nothing changes a row during the statement.

    A range of keys, read in the primary key's order, and the chunk's group ids: a list of a
    thousand keys was a filter PostgreSQL applied to every row of the table (a pass expiring
    10,000 offsets among 11,000 took 2.6 s, with ranges 0.25 s; docs/benchmarks.md). The
    group ids (a hashed list on PostgreSQL) keep the DELETE to groups whose rows the caller
    locked; an offset of one of them inside the range that the look did not name is deleted
    only if it is expired too, which is the rule's own answer."""
    first, last = chunk[0], chunk[-1]
    # The group ids' range too, though the keys' implies it: PostgreSQL's planner, without
    # statistics (a table that grew since autovacuum last analyzed it), read the whole table
    # for the keys' alone (72 ms a range among a million offsets; with it, 3.4 ms).
    in_chunk = (group_offsets.c.group_id >= first[0], group_offsets.c.group_id <= last[0],
                group_offsets.c.group_id.in_(sorted({group_id for group_id, _, _ in chunk})),
                tuple_(*offsets.OFFSET_KEY) >= tuple_(*first), tuple_(*offsets.OFFSET_KEY) <= tuple_(*last),
                *_offset_expired(kept_since_ms))
    # A CTE, which PostgreSQL runs once (a locking subquery in the DELETE's WHERE beside the
    # range was run again for every row of the range: a pass expiring 10,000 took 108 s), and
    # the DELETE names its keys alone, not the range again: with both, PostgreSQL's planner
    # (no statistics) read the CTE again for every row of the range, 117 to 218 ms a
    # transaction of 1,000, against 22 to 70 ms (benchmarks/empty_groups.py, --groups 2000).
    not_held = dialect.lock_for_update_skip_locked(
        conn.dialect.name, select(*offsets.OFFSET_KEY).where(*in_chunk)).cte("not_held")
    # Counted by RETURNING: Python's sqlite3 has no rowcount for a statement that starts with WITH.
    deleted = conn.execute(delete(group_offsets).where(
        tuple_(*offsets.OFFSET_KEY).in_(select(*not_held.c))).returning(*group_offsets.c)).all()
    if not deleted or conn.dialect.name != "postgresql":
        return len(deleted)
    # A second statement, with a snapshot of its own (READ COMMITTED): the staged offsets of
    # the deleted keys that a staging committed after the DELETE's snapshot, which the rule's
    # NOT EXISTS could not see, and whose hold (offsets.hold_committed) it released at that
    # commit, before the CTE's lock, leaving PostgreSQL nothing to check again. Without it such
    # a committed offset was deleted beside an unfinished transaction's staged one
    # (test_group_delete_races). Those offsets are put back as they were, committed_ms
    # included, and not counted. A staging that comes after the lock waits on its hold for
    # this transaction's end and finds the offset gone, the expiry before it; one whose offset
    # was put back finds it gone too and holds nothing of the new row, which the committed
    # staging that had it put back keeps from the expiry until that staging's transaction ends.
    staged_key = (transaction_offsets.c.group_id, transaction_offsets.c.topic_id, transaction_offsets.c.partition)
    staged = {(r[0], r[1], r[2]) for r in conn.execute(select(*staged_key).where(
        transaction_offsets.c.group_id.in_(sorted({r.group_id for r in deleted})),
        tuple_(*staged_key).in_([(r.group_id, r.topic_id, r.partition) for r in deleted])))}
    kept = [r._asdict() for r in deleted if (r.group_id, r.topic_id, r.partition) in staged]
    if kept:
        conn.execute(insert(group_offsets), kept)
    return len(deleted) - len(kept)


def groups_with_expired_members(conn: Connection, now_ms: int) -> list[str]:
    return list(
        conn.execute(
            select(group_members.c.group_id)
            .where(group_members.c.last_heartbeat_ms + group_members.c.session_timeout_ms < now_ms)
            .distinct()
        ).scalars()
    )


def groups_past_rebalance_deadline(conn: Connection, now_ms: int) -> list[str]:
    """Kafka door's groups whose join phase is over by time: the members that did not join
    again are to be removed even if no request of theirs waits (GroupExpiry.expire_members)."""
    return list(conn.execute(
        select(consumer_groups.c.group_id).where(
            consumer_groups.c.state == StoredGroupState.PREPARING_REBALANCE.value,
            consumer_groups.c.rebalance_deadline_ms < now_ms)).scalars())


def check_group_metadata(conn: Connection, group_id: str, meta: GroupMetadata | None) -> None:
    """KIP-447: offsets that carry group metadata are fenced by the group's generation."""
    if meta is None:
        return
    # Shared lock until the offsets are staged: a rebalance (which locks the row for update)
    # cannot slip in between this check and the write it guards.
    current = generation(conn, group_id, lock=RowLock.SHARE)
    check_current_member(group_id, meta.member_id, meta.group_instance_id, instances(members(conn, group_id)))
    if meta.generation_id != current:
        raise IllegalGeneration.of(group_id, meta.generation_id, current)


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    generation_id: int | None  # None: the group has never had members (offsets only)
    member_count: int
    protocol_type: str | None = None  # None: the HTTP door's group, or one the Kafka door never had
    state: GroupState = GroupState.EMPTY


def _known(group_id: str | None = None) -> Any:
    """The ids of the groups the service knows: those with members or a generation, and those
    that only have offsets, committed or staged in a transaction (a transactional producer's
    group need not join). Of one group (`group_id`) or of every group."""
    def of_group(table: Any) -> Any:
        stmt = select(table.c.group_id)
        return stmt if group_id is None else stmt.where(table.c.group_id == group_id)

    return union(*(of_group(table) for table in (consumer_groups, group_offsets, transaction_offsets)))


def known(conn: Connection, group_id: str) -> bool:
    """Whether `list_groups` lists the group."""
    return conn.execute(select(func.count()).select_from(_known(group_id).subquery())).scalar_one() > 0


def list_groups(conn: Connection, *, after: str | None = None, limit: int | None = None) -> list[GroupListing]:
    """The groups the service knows (_known), by id: all of them, or up to `limit` of those whose
    id sorts after `after` (keyset paging, so that a page costs its own size)."""
    if limit is None:
        ids = _known()
    else:
        # Each table's first `limit` ids after `after`, then their union's first `limit`: each a
        # range of an index led by group_id. With the bound applied outside the union, each page
        # read, de-duplicated and sorted every id after `after` of the three tables, and walking
        # the groups a page at a time cost the square of their number (4.95 s for 100,000 groups
        # on PostgreSQL, 101 pages; 0.89 s now, each page the same: docs/benchmarks.md, "Walking
        # every consumer group a page at a time").
        def first(table: Any) -> Any:
            stmt = select(table.c.group_id).distinct()
            if after is not None:
                stmt = stmt.where(table.c.group_id > after)
            page = stmt.order_by(table.c.group_id).limit(limit).subquery()
            return select(page.c.group_id)

        ids = union(*(first(table) for table in (consumer_groups, group_offsets, transaction_offsets)))
    listed = ids.subquery()
    stmt = select(listed.c.group_id).order_by(listed.c.group_id)
    page = list(conn.execute(stmt if limit is None else stmt.limit(limit)).scalars())
    if not page:
        return []
    # The page's groups' rows and member counts, read as one range of ids each: every group
    # between the page's first and last id is on the page. (Joined to the page's ids instead,
    # PostgreSQL's plan hashed the whole of consumer_groups for each page.)
    def of_page(column: Any) -> Any:
        return column.between(page[0], page[-1])

    stored = {g: (gen, protocol_type, state) for g, gen, protocol_type, state in conn.execute(
        select(consumer_groups.c.group_id, consumer_groups.c.generation_id, consumer_groups.c.protocol_type,
               consumer_groups.c.state).where(of_page(consumer_groups.c.group_id)))}
    counts: dict[str, int] = {g: n for g, n in conn.execute(
        select(group_members.c.group_id, func.count()).where(of_page(group_members.c.group_id))
        .group_by(group_members.c.group_id))}
    listings = []
    for g in page:
        gen, protocol_type, state = stored.get(g, (None, None, None))
        n = counts.get(g, 0)
        listings.append(GroupListing(g, gen, n, protocol_type, GroupState(state) if n else GroupState.EMPTY))
    return listings


def consumed_topics(conn: Connection, group_id: str | None = None) -> dict[str, set[str]]:
    """The topics each group consumes, by group id: its members' subscriptions, the topics it
    has committed offsets in, and those an unfinished transaction has staged offsets in for
    it. Of one group (`group_id`) or of every group. A subscription may name a topic deleted
    since; committed and staged offsets name topics that exist. The one definition of a
    group's topics: its lag, the lag gauges and a reset of all its topics use it."""
    def of_group(stmt: Any, column: Any) -> Any:
        return stmt if group_id is None else stmt.where(column == group_id)

    consumed: dict[str, set[str]] = {}
    with_offsets = union(*(of_group(select(table.c.group_id, topics.c.name)
                                    .join(topics, topics.c.topic_id == table.c.topic_id), table.c.group_id)
                           for table in (group_offsets, transaction_offsets)))
    for g, name in conn.execute(with_offsets):
        consumed.setdefault(g, set()).add(name)
    for g, subscribed in conn.execute(of_group(select(group_members.c.group_id, group_members.c.topics),
                                               group_members.c.group_id)):
        consumed.setdefault(g, set()).update(orjson.loads(subscribed))
    return consumed
