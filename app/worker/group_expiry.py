"""Group expiry: removes consumer group members whose session timed out (no heartbeat within
their session_timeout_ms) and rebalances their groups, then deletes the committed offsets of
groups without members past OUTBOX_OFFSETS_RETENTION_MINUTES (GroupExpiry.expire_offsets)
and the groups left without members and offsets for EMPTY_GROUP_RETENTION_MS
(GroupExpiry.delete_empty_groups), both looked for every EMPTY_GROUP_CHECK_INTERVAL_MS, every
OUTBOX_COORDINATOR_INTERVAL_MS beside the coordinator worker. Several may run at once:
GroupExpiry locks each group's row before it looks at its members or deletes it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from app import metrics
from app.domain.clock import Clock
from app.services.group_expiry import EMPTY_GROUP_CHECK_INTERVAL_MS, GroupExpiry
from app.worker.chore import Chore, ChoreConfig, Sleeper, wait_on

_Result = TypeVar("_Result")
_Default = TypeVar("_Default")


@dataclass(frozen=True, slots=True)
class GroupExpiryPass:
    expired_members: int
    deleted_groups: int  # empty groups deleted (GroupExpiry.delete_empty_groups)
    expired_offsets: int = 0  # committed offsets past their retention deleted (GroupExpiry.expire_offsets)

    def __bool__(self) -> bool:
        return bool(self.expired_members or self.deleted_groups or self.expired_offsets)


class GroupExpiryWorker(Chore):
    name = "group-expiry"
    passes = metrics.GROUP_EXPIRY_PASSES
    last_success = metrics.GROUP_EXPIRY_LAST_SUCCESS

    def __init__(self, groups: GroupExpiry, clock: Clock, config: ChoreConfig, sleep: Sleeper = wait_on) -> None:
        super().__init__(clock, config, sleep)
        self.groups = groups
        # When the next pass looks for empty groups to delete; None: the first pass does.
        self._next_empty_check_ms: int | None = None

    def _pass(self, now: int) -> GroupExpiryPass:
        # Each look on its own: one that fails (its error raised once the others ran, so that
        # the pass is logged and counted as failed) leaves the others to do their work, and a
        # failing look at offsets or empty groups waits its check interval as any other would,
        # rather than read every offset or group again every pass.
        failures: list[Exception] = []
        # Members first: a group whose last member this pass removed has just changed, and is
        # kept its EMPTY_GROUP_RETENTION_MS from now.
        expired = _look(failures, self.groups.expire_members, now, 0)
        deleted = expired_offsets = 0
        if self._next_empty_check_ms is None or now >= self._next_empty_check_ms:
            # Offsets first: a group whose last offsets expire here was left empty a retention
            # ago, and goes in the same pass.
            expiry = _look(failures, self.groups.expire_offsets, now, None)
            deletion = _look(failures, self.groups.delete_empty_groups, now, None)
            deleted = deletion.deleted if deletion is not None else 0
            expired_offsets = expiry.expired if expiry is not None else 0
            # After a pass whose look found EMPTY_GROUPS_PER_PASS or EXPIRED_OFFSETS_PER_PASS,
            # its most, the next looks again: more may be waiting. After any other, a check
            # interval later: a look reads every group and every committed offset, and looking
            # again after every deletion would, with groups emptied one by one, read them all
            # nearly every pass.
            more = any(look is not None and look.limit_reached for look in (expiry, deletion))
            self._next_empty_check_ms = now if more else now + EMPTY_GROUP_CHECK_INTERVAL_MS
        done = GroupExpiryPass(expired, deleted, expired_offsets)
        if not failures:
            return done
        # What the looks that succeeded did, logged as a successful pass logs it: the failure,
        # raised instead of the result, would hide it.
        self._log_done(done)
        if len(failures) == 1:
            raise failures[0]
        raise ExceptionGroup("group expiry: several looks failed", failures)


def _look(failures: list[Exception], look: Callable[[int], _Result], now: int, failed: _Default) -> _Result | _Default:
    """`look(now)`, or `failed` with its exception added to `failures`."""
    try:
        return look(now)
    except Exception as e:  # raised again by _pass once the other looks ran
        failures.append(e)
        return failed
