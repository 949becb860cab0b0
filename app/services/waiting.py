"""The bound on requests that wait: a Fetch with max_wait_ms, a stream, an offset fetch with
wait_ms. Each holds a place from the moment it has to wait until it ends, however it ends (an
answer, the client gone, the server stopping); past OUTBOX_MAX_WAITING_REQUESTS in the process,
or OUTBOX_MAX_WAITING_REQUESTS_PER_PRINCIPAL of one principal, a request that would wait is
refused at once with THROTTLING_QUOTA_EXCEEDED.

What a waiting request costs once it waits is little (no connection, no thread; woken only by
its own partitions' commits, sharing its reads: app.services.long_poll), but not nothing: a
socket, a task, and its part of every wake. The bound keeps that finite, and the per-principal
bound keeps one client from taking every place.

Places are taken and given back on the event loop only, so the counts need no lock.
"""

from __future__ import annotations

from typing import Literal

from app import metrics
from app.domain.errors import ThrottlingQuotaExceeded
from app.services.shares import Shares

WaitKind = Literal["fetch", "stream", "offset_fetch"]

_GAUGES = {kind: metrics.WAITING_REQUESTS.labels(kind) for kind in ("fetch", "stream", "offset_fetch")}


class WaitingRequests:
    def __init__(self, max_total: int, max_per_principal: int) -> None:
        self.max_total = max_total
        self.max_per_principal = max_per_principal
        self.total = 0
        self._shares = Shares(max_per_principal)

    def of(self, principal: str) -> int:
        return self._shares.of(principal)

    def enter(self, principal: str, kind: WaitKind) -> Place:
        """A place for one waiting request of `principal`, or ThrottlingQuotaExceeded."""
        if self.total >= self.max_total:
            raise ThrottlingQuotaExceeded(
                f"{self.total} requests already wait in this process, its most (OUTBOX_MAX_WAITING_REQUESTS): "
                "retry later, or ask without waiting", bound="process", limit=self.max_total)
        if not self._shares.take_now(principal):
            raise ThrottlingQuotaExceeded(
                f"{principal} already has {self._shares.of(principal)} requests waiting in this process, its "
                "most (OUTBOX_MAX_WAITING_REQUESTS_PER_PRINCIPAL): retry later, or ask without waiting",
                bound="principal", limit=self.max_per_principal)
        self.total += 1
        _GAUGES[kind].inc()
        return Place(self, principal, kind)

    def _leave(self, place: Place) -> None:
        self.total -= 1
        self._shares.give_back(place.principal)
        _GAUGES[place.kind].dec()


class Place:
    """One waiting request's place; `release` gives it back (once, however often called)."""

    __slots__ = ("_of", "principal", "kind")

    def __init__(self, of: WaitingRequests, principal: str, kind: WaitKind) -> None:
        self._of: WaitingRequests | None = of
        self.principal = principal
        self.kind = kind

    def release(self) -> None:
        of, self._of = self._of, None
        if of is not None:
            of._leave(self)
