"""The security refresher: each API process looks for ACL and API key changes made elsewhere
(another process's admin endpoint, `outbox acls` / `outbox principals`) every
OUTBOX_SECURITY_REFRESH_INTERVAL_MS, one indexed read of the counter `security_version`, and
reloads its cache (app.services.security.SecurityState) when it moved. That interval is the
bound on how long a removed ACL or a revoked key may still work in a process that did not
make the change."""

from __future__ import annotations

from dataclasses import dataclass

from app import metrics
from app.domain.clock import Clock
from app.services.security import SecurityState
from app.worker.chore import Chore, ChoreConfig, Sleeper, wait_on


@dataclass(frozen=True, slots=True)
class RefreshPass:
    reloaded: int  # 1 when the stored state had changed
    version: int

    def __bool__(self) -> bool:
        return bool(self.reloaded)


class SecurityRefresher(Chore):
    name = "security-refresh"
    passes = metrics.SECURITY_REFRESH_PASSES

    def __init__(self, state: SecurityState, clock: Clock, config: ChoreConfig, sleep: Sleeper = wait_on) -> None:
        super().__init__(clock, config, sleep)
        self.state = state

    def _pass(self, now: int) -> RefreshPass:
        return RefreshPass(int(self.state.reload()), self.state.version)
