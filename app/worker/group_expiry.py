"""Group expiry: removes consumer group members whose session timed out (no heartbeat within
their session_timeout_ms) and rebalances their groups, every OUTBOX_COORDINATOR_INTERVAL_MS
beside the coordinator worker. Several may run at once: GroupService.expire_members locks
each group's row before it looks at its members."""

from __future__ import annotations

from dataclasses import dataclass

from app import metrics
from app.domain.clock import Clock
from app.services.group_service import GroupService
from app.worker.chore import Chore, ChoreConfig, Sleeper, wait_on


@dataclass(frozen=True, slots=True)
class GroupExpiryPass:
    expired_members: int

    def __bool__(self) -> bool:
        return bool(self.expired_members)


class GroupExpiryWorker(Chore):
    name = "group-expiry"
    passes = metrics.GROUP_EXPIRY_PASSES
    last_success = metrics.GROUP_EXPIRY_LAST_SUCCESS

    def __init__(self, groups: GroupService, clock: Clock, config: ChoreConfig, sleep: Sleeper = wait_on) -> None:
        super().__init__(clock, config, sleep)
        self.groups = groups

    def _pass(self, now: int) -> GroupExpiryPass:
        return GroupExpiryPass(self.groups.expire_members(now))
