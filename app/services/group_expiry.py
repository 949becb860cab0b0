"""Group maintenance, what the group-expiry worker (app.worker.group_expiry) runs: the expiry of
members whose session has ended (expire_members), of committed offsets past
OUTBOX_OFFSETS_RETENTION_MINUTES (expire_offsets), and the deletion of groups left without
members and offsets (delete_empty_groups). Each pass works in write transactions of a bounded
number of groups or offsets, locking groups' rows in group id order as every pass takes them.
What a request runs of it, the expiry of one group's members before it answers, is
app.services.group_service.expire_group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sqlalchemy import Connection

from app import metrics
from app.services.group_service import expire_group
from app.settings import Settings
from app.storage import groups
from app.storage.engine import Database, after_commit


# The most groups one write transaction of the expiry pass locks and expires (expire_members)
# or deletes (delete_empty_groups).
EXPIRY_CHUNK_GROUPS = 100
# How long a group without members and offsets is kept (delete_empty_groups): Kafka's
# offsets.retention.check.interval.ms, the longest its coordinator keeps such a group. Meanwhile
# ListGroups and DescribeGroups show it Empty, and its generation goes on from where it was
# when a consumer joins again.
EMPTY_GROUP_RETENTION_MS = 10 * 60 * 1000
# The most empty groups one pass deletes: a pass holds their ids; the next pass takes the rest.
EMPTY_GROUPS_PER_PASS = 1_000
# How often group expiry looks for them (GroupExpiryWorker): the look reads every group's row
# and, for each one unchanged for the retention (a Stable group's: heartbeats write members'
# rows), checks its members and offsets. For 100,000 groups Stable for a while that took 42 to
# 52 ms on SQLite and 32 to 172 ms on PostgreSQL (1 to 10 offsets a group), 5 to 25 times the
# pass's member expiry (docs/benchmarks.md): every pass (OUTBOX_COORDINATOR_INTERVAL_MS, 200 ms)
# would multiply group expiry's cost by as much; once a minute adds 1 to 8 % to it. The look
# for expired offsets (expire_offsets) runs with it and costs about as much: it reads every
# committed offset (4 to 66 ms among a million; on SQLite 488 ms when every offset is past the
# retention but its group is kept, docs/benchmarks.md). A
# group is deleted at the first look at which it has no member and no offset and its row has
# not changed for EMPTY_GROUP_RETENTION_MS: up to a minute more after it was left empty, or at
# the first look after its offsets went, if they went later (OffsetDelete, their topic's
# deletion, an aborted transaction's staged offsets: none of them writes the group's row).
EMPTY_GROUP_CHECK_INTERVAL_MS = 60 * 1000


# The most expired offsets one pass deletes (expire_offsets), and one write transaction of it:
# the pass holds their keys; the next pass takes the rest.
EXPIRED_OFFSETS_PER_PASS = 10_000
EXPIRY_CHUNK_OFFSETS = 1_000


@dataclass(frozen=True, slots=True)
class OffsetExpiry:
    """What one expire_offsets did."""

    expired: int  # committed offsets deleted
    # The look found EXPIRED_OFFSETS_PER_PASS offsets to delete, its most: more may be waiting.
    limit_reached: bool


@dataclass(frozen=True, slots=True)
class EmptyGroupDeletion:
    """What one delete_empty_groups did."""

    deleted: int  # groups deleted
    # The look found EMPTY_GROUPS_PER_PASS groups to delete, its most: more may be waiting.
    limit_reached: bool


class GroupExpiry:
    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings

    def expire_members(self, now_ms: int) -> int:
        """Remove members whose session timed out and rebalance their groups: one write
        transaction for every EXPIRY_CHUNK_GROUPS groups the pass finds, none when it finds none.

        One, not one per group: on SQLite each durable commit waits for an fsync of the WAL,
        which a loaded disk can stretch to a large part of a second, and a pass that expired
        a few groups paid it once per group, holding up every other writer of the process
        meanwhile. Not durable (Database.write): a removal lost in a crash is found again by
        the next pass, the session still being over; and whatever a client does in answer to
        it (a rejoin, a commit) is a durable write that makes it durable too. The rows are
        locked in group id order, as every pass takes them: two passes at once (several
        processes on PostgreSQL) wait for each other rather than deadlock. A transaction holds
        at most EXPIRY_CHUNK_GROUPS groups' locks: the heartbeats, joins and commits of a group
        the pass has locked wait for its transaction to end, and with thousands of groups
        expiring at once one transaction would make every one of them wait for all."""
        with self.db.read() as conn:
            candidates = groups.groups_with_expired_members(conn, now_ms)
            candidates = sorted(set(candidates) | set(groups.groups_past_rebalance_deadline(conn, now_ms)))
        return self._locked_in_chunks(candidates, lambda conn, locked: sum(
            expire_group(conn, group_id, now_ms, self.settings) for group_id in locked))

    def delete_empty_groups(self, now_ms: int) -> EmptyGroupDeletion:
        """Delete the groups that have had no member and no offset (committed, or staged by an
        unfinished transaction) for EMPTY_GROUP_RETENTION_MS, as Kafka's coordinator deletes an
        Empty group without offsets when it next checks its offsets' retention; returns how
        many, and whether the look found its most (more may be waiting). A JoinGroup creates
        its group's row, and a client that names a new group in each and goes away would
        otherwise leave a row per name forever. At most
        EMPTY_GROUPS_PER_PASS a pass, in transactions of EXPIRY_CHUNK_GROUPS groups, locked in
        group id order as expire_members locks them; not durable, as expire_members' (a
        deletion lost in a crash is made again by the next pass).

        What goes is the row (its generation, its protocol type): a commit that still carries
        one of the group's generations names a member that is gone and is refused
        UNKNOWN_MEMBER_ID, as after the member left. A simple consumer's commit racing the
        deletion keeps its offsets: the group is then one known by its offsets alone."""
        kept_since = now_ms - EMPTY_GROUP_RETENTION_MS
        with self.db.read() as conn:
            candidates = groups.empty_groups(conn, kept_since, EMPTY_GROUPS_PER_PASS)
        deleted = self._locked_in_chunks(candidates, lambda conn, locked: self._delete_if_empty(
            conn, locked, kept_since))
        return EmptyGroupDeletion(deleted, len(candidates) >= EMPTY_GROUPS_PER_PASS)

    def expire_offsets(self, now_ms: int) -> OffsetExpiry:
        """Delete the committed offsets of groups without members that
        OUTBOX_OFFSETS_RETENTION_MINUTES has expired (groups._offset_expired, Kafka's
        offsets.retention.minutes): a simple consumer that names a new group in each commit
        would otherwise leave its offsets forever. Returns how many, and whether the look found
        its most. At most EXPIRED_OFFSETS_PER_PASS a pass, in transactions of
        EXPIRY_CHUNK_OFFSETS, each locking its offsets' groups' rows in group id order, as
        expire_members locks them, a group known by its offsets alone by a row created and
        deleted again in the transaction, as DeleteGroups does (groups.lock_offsets_groups: a
        join waits for it); the offsets themselves are taken only where no other transaction
        holds them (groups.delete_expired_offsets), the rest left to the next pass; not
        durable, as delete_empty_groups' (a deletion lost in a crash is made again by the next
        pass). A group left without offsets and members then goes by delete_empty_groups.
        Nothing when OUTBOX_OFFSETS_RETENTION_MINUTES is unset (the default): offsets are kept."""
        if self.settings.offsets_retention_minutes is None:
            return OffsetExpiry(0, False)
        kept_since = now_ms - self.settings.offsets_retention_minutes * 60_000
        with self.db.read() as conn:
            candidates = groups.expired_offsets(conn, kept_since, EXPIRED_OFFSETS_PER_PASS)
        expired = 0
        for i in range(0, len(candidates), EXPIRY_CHUNK_OFFSETS):
            chunk = candidates[i:i + EXPIRY_CHUNK_OFFSETS]
            with self.db.write(durable=False) as conn:
                created = groups.lock_offsets_groups(conn, [group_id for group_id, _, _ in chunk])
                deleted = groups.delete_expired_offsets(conn, chunk, kept_since)
                groups.delete_created_groups(conn, created)
                after_commit(conn, partial(metrics.GROUP_OFFSETS_EXPIRED.inc, deleted))
            expired += deleted
        return OffsetExpiry(expired, len(candidates) >= EXPIRED_OFFSETS_PER_PASS)

    @staticmethod
    def _delete_if_empty(conn: Connection, locked: list[str], kept_since: int) -> int:
        """groups.delete_if_empty, counted once committed, as group_service.expire_group counts members."""
        deleted = groups.delete_if_empty(conn, locked, kept_since)
        after_commit(conn, partial(metrics.GROUPS_DELETED_EMPTY.inc, deleted))
        return deleted

    def _locked_in_chunks(self, group_ids: list[str], each: Callable[[Connection, list[str]], int]) -> int:
        """`each(conn, locked)` for each chunk of EXPIRY_CHUNK_GROUPS of `group_ids`, in a write
        transaction of its own, `locked` the groups of the chunk that still exist, their rows
        locked (in group id order); the sum of what it returned. Not lock_group: a group deleted
        since the caller read its id (by DeleteGroups, once its members' sessions ended, or by
        another pass) is not created again."""
        done = 0
        for i in range(0, len(group_ids), EXPIRY_CHUNK_GROUPS):
            with self.db.write(durable=False) as conn:
                done += each(conn, groups.lock_existing_groups(conn, group_ids[i:i + EXPIRY_CHUNK_GROUPS]))
        return done
