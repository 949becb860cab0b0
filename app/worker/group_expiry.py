"""Group expiry: removes consumer group members whose session timed out (no heartbeat within
their session_timeout_ms) and rebalances their groups, then deletes the committed offsets of
groups without members past OUTBOX_OFFSETS_RETENTION_MINUTES (GroupMaintenance.expire_offsets)
and the groups left without members and offsets for EMPTY_GROUP_RETENTION_MS
(GroupMaintenance.delete_empty_groups), both looked for every EMPTY_GROUP_CHECK_INTERVAL_MS, every
OUTBOX_COORDINATOR_INTERVAL_MS beside the coordinator worker. Several may run at once:
GroupMaintenance locks each group's row before it looks at its members or deletes it."""

from __future__ import annotations

from dataclasses import dataclass

from app import metrics
from app.domain.clock import Clock
from app.services.group_maintenance import EMPTY_GROUP_CHECK_INTERVAL_MS, GroupMaintenance
from app.worker.chore import Chore, ChoreConfig, Sleeper, wait_on


@dataclass(frozen=True, slots=True)
class GroupExpiryPass:
    expired_members: int
    deleted_groups: int  # empty groups deleted (GroupMaintenance.delete_empty_groups)
    expired_offsets: int = 0  # committed offsets past their retention deleted (GroupMaintenance.expire_offsets)

    def __bool__(self) -> bool:
        return bool(self.expired_members or self.deleted_groups or self.expired_offsets)


class GroupExpiryWorker(Chore):
    name = "group-expiry"
    passes = metrics.GROUP_EXPIRY_PASSES
    last_success = metrics.GROUP_EXPIRY_LAST_SUCCESS

    def __init__(self, groups: GroupMaintenance, clock: Clock, config: ChoreConfig, sleep: Sleeper = wait_on) -> None:
        super().__init__(clock, config, sleep)
        self.groups = groups
        # When the next pass looks for empty groups to delete; None: the first pass does.
        self._next_empty_check_ms: int | None = None

    def _pass(self, now: int) -> GroupExpiryPass:
        # Members first: a group whose last member this pass removed has just changed, and is
        # kept its EMPTY_GROUP_RETENTION_MS from now.
        expired = self.groups.expire_members(now)
        deleted = expired_offsets = 0
        if self._next_empty_check_ms is None or now >= self._next_empty_check_ms:
            # Offsets first: a group whose last offsets expire here was left empty a retention
            # ago, and goes in the same pass.
            expiry = self.groups.expire_offsets(now)
            deletion = self.groups.delete_empty_groups(now)
            deleted, expired_offsets = deletion.deleted, expiry.expired
            # After a pass whose look found EMPTY_GROUPS_PER_PASS or EXPIRED_OFFSETS_PER_PASS,
            # its most, the next looks again: more may be waiting. After any other, a check
            # interval later: a look reads every group and every committed offset, and looking
            # again after every deletion would, with groups emptied one by one, read them all
            # nearly every pass.
            self._next_empty_check_ms = (now if deletion.limit_reached or expiry.limit_reached
                                         else now + EMPTY_GROUP_CHECK_INTERVAL_MS)
        return GroupExpiryPass(expired, deleted, expired_offsets)
