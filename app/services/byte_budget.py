"""A budget of bytes of requests held at once, one per door: Kafka's queued.max.request.bytes
(OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES) for the Kafka listener's frames, and
OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES for the HTTP door's request bodies.

Each request is bounded alone (a Kafka frame by OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES, 100 MiB;
an HTTP body by OUTBOX_MAX_REQUEST_BYTES, 32 MiB), and held while it arrives, which a slow or
stalled client can make last: without a budget only the number of connections bounded the
total (sixteen Kafka connections that each sent all but the last byte of a 100 MiB frame took
the process from 134 to 1,760 MiB; forty 32 MiB HTTP bodies at once peaked at 1.66 GB). A
request larger than FREE_BELOW_BYTES takes its size from the budget before it is read and
gives it back once it is answered. Requests of FREE_BELOW_BYTES or less never wait: a few
clients holding the budget with large requests must not stop every other client's Heartbeat,
Fetch or small Send, and those requests together are at most the connections' count x
FREE_BELOW_BYTES.

What a request that does not fit does is its door's: a Kafka frame waits (`take`: its
connection reading nothing meanwhile, as Kafka's pool mutes it) until frames held give theirs
back, in the order they asked; an HTTP request is refused at once (`take_now`), as the door
refuses a request past its other process bounds (app.api.body_limit).
"""

from __future__ import annotations

import asyncio
import collections

# The largest request read without taking from the budget: more than a typical producer's batch
# of records (librdkafka's batch.size, 1,000,000 bytes), so that producers do not queue behind
# each other, and 1,000 connections' worth is 1 GiB at most.
FREE_BELOW_BYTES = 1_048_576


class ByteBudget:
    """`max_bytes` of one door's requests, taken and given back on its event loop (so no lock)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def take(self, size: int) -> int:
        """What a frame of `size` bytes took (0 for one of FREE_BELOW_BYTES or less), once it fits
        beside the frames held and behind those that asked before it; give it back with
        `give_back`. Cancelled while waiting, it takes nothing."""
        taken = self.take_now(size)
        if taken is None:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            entry = (size, waiter)
            self._waiting.append(entry)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self.held -= size  # granted as it was cancelled: given back at once
                elif entry in self._waiting:  # `_grant` may have passed over it already
                    self._waiting.remove(entry)
                self._grant()
                raise
            return size  # `_grant` counted it
        return taken

    def take_now(self, size: int) -> int | None:
        """What a request of `size` bytes took, as `take`, where it fits at once; None where it
        would have to wait (it took nothing)."""
        if size <= FREE_BELOW_BYTES:
            return 0
        if self._waiting or self.held + size > self.max_bytes:
            return None
        self.held += size
        return size

    def give_back(self, taken: int) -> None:
        if taken:
            self.held -= taken
            self._grant()

    def _grant(self) -> None:
        # In order: the first waiter that does not fit holds the ones behind it, so that a
        # frame of the largest size is not passed over for ever by smaller ones.
        while self._waiting and self.held + self._waiting[0][0] <= self.max_bytes:
            size, waiter = self._waiting.popleft()
            if waiter.done():
                continue
            self.held += size
            waiter.set_result(None)

