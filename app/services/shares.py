"""What each principal holds of a process bound, at most `max_per_principal` each: the one
ledger of the bounds that keep one client from taking what every client shares. Three bounds
use it: the HTTP door's body bytes (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL,
app.api.body_limit, counted in bytes), the Kafka door's frame bytes
(OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES_PER_PRINCIPAL, app.kafka.server, in bytes) and the
places of waiting requests (OUTBOX_MAX_WAITING_REQUESTS_PER_PRINCIPAL, app.services.waiting,
in requests). Each is taken and given back on its door's event loop, as its total is, so no
lock. What does not fit is the door's: the HTTP door refuses it at once (`take_now`), the
Kafka door's frame waits for room (`take`), as its total's frames do (app.services.byte_budget)."""

from __future__ import annotations

import asyncio
import collections
from collections import Counter


class Shares:
    def __init__(self, max_per_principal: int) -> None:
        self.max_per_principal = max_per_principal
        self._by_principal: Counter[str] = Counter()
        # The amounts waiting for room in a principal's share (`take`), in the order asked; a
        # principal none of whose amounts waits has no entry.
        self._waiting: dict[str, collections.deque[tuple[int, asyncio.Future[None]]]] = {}

    def of(self, principal: str) -> int:
        return self._by_principal[principal]

    def take_now(self, principal: str, amount: int = 1) -> bool:
        """Whether `amount` more fit in `principal`'s share; if so they are counted in it."""
        if self._by_principal[principal] + amount > self.max_per_principal:
            return False
        self._by_principal[principal] += amount
        return True

    async def take(self, principal: str, amount: int) -> None:
        """Counts `amount` in `principal`'s share once it fits beside what the principal holds
        and behind what it asked for before (in order, so that its largest amount is not
        passed over for ever by smaller ones). Cancelled while waiting, nothing is counted. At
        most `max_per_principal`, or it would wait for ever."""
        if principal not in self._waiting and self.take_now(principal, amount):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (amount, waiter)
        queue = self._waiting.setdefault(principal, collections.deque())
        queue.append(entry)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give_back(principal, amount)  # granted as it was cancelled: given back at once
            else:
                if entry in queue:  # `_grant` may have passed over it already
                    queue.remove(entry)
                self._grant(principal)
            raise

    def give_back(self, principal: str, amount: int = 1) -> None:
        # A principal holding nothing is forgotten: principals come and go, and a counter of
        # every one ever seen would grow without bound.
        left = self._by_principal[principal] - amount
        if left:
            self._by_principal[principal] = left
        else:
            del self._by_principal[principal]
        self._grant(principal)

    def _grant(self, principal: str) -> None:
        queue = self._waiting.get(principal)
        if queue is None:
            return
        while queue and self._by_principal[principal] + queue[0][0] <= self.max_per_principal:
            amount, waiter = queue.popleft()
            if waiter.done():
                continue
            self._by_principal[principal] += amount
            waiter.set_result(None)
        if not queue:
            del self._waiting[principal]
