"""What each principal holds of a process bound, at most `max_per_principal` each: the one
ledger of the bounds that keep one client from taking what every client shares. Two bounds
use it: the HTTP door's body bytes (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL,
app.api.body_limit, counted in bytes) and the places of waiting requests
(OUTBOX_MAX_WAITING_REQUESTS_PER_PRINCIPAL, app.services.waiting, counted in requests). Each
is taken and given back on its door's event loop, as its total is, so no lock."""

from __future__ import annotations

from collections import Counter


class Shares:
    def __init__(self, max_per_principal: int) -> None:
        self.max_per_principal = max_per_principal
        self._by_principal: Counter[str] = Counter()

    def of(self, principal: str) -> int:
        return self._by_principal[principal]

    def take_now(self, principal: str, amount: int = 1) -> bool:
        """Whether `amount` more fit in `principal`'s share; if so they are counted in it."""
        if self._by_principal[principal] + amount > self.max_per_principal:
            return False
        self._by_principal[principal] += amount
        return True

    def give_back(self, principal: str, amount: int = 1) -> None:
        # A principal holding nothing is forgotten: principals come and go, and a counter of
        # every one ever seen would grow without bound.
        left = self._by_principal[principal] - amount
        if left:
            self._by_principal[principal] = left
        else:
            del self._by_principal[principal]
