"""The bytes of request frames the Kafka listener holds at once: Kafka's queued.max.request.bytes
(OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES).

A connection reads a frame whole before it is parsed, up to OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES
(100 MiB), and holds it while it arrives, until OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS: without
this budget only the number of connections bounded the total (sixteen connections that each
sent all but the last byte of a 100 MiB frame took the process from 134 to 1,760 MiB; a
thousand could take 100 GB). A frame larger than FREE_BELOW_BYTES takes its size from the
budget before it is read and gives it back once it is answered; one that does not fit waits
(its connection reading nothing meanwhile, as Kafka's pool mutes it) until frames held give
theirs back, in the order they asked. Frames of FREE_BELOW_BYTES or less never wait: a few
clients holding the budget with large frames must not stop every other client's Heartbeat,
Fetch or small Produce, and those frames together are at most OUTBOX_KAFKA_MAX_CONNECTIONS x
FREE_BELOW_BYTES.
"""

from __future__ import annotations

import asyncio
import collections

# The largest frame read without taking from the budget: more than a typical producer's batch
# of records (librdkafka's batch.size, 1,000,000 bytes), so that producers do not queue behind
# each other, and 1,000 connections' worth is 1 GiB at most.
FREE_BELOW_BYTES = 1_048_576


class FrameBudget:
    """OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES of one listener, taken and given back on its event
    loop."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def take(self, size: int) -> int:
        """What a frame of `size` bytes took (0 for one of FREE_BELOW_BYTES or less), once it fits
        beside the frames held and behind those that asked before it; give it back with
        `give_back`. Cancelled while waiting, it takes nothing."""
        if size <= FREE_BELOW_BYTES:
            return 0
        if self._waiting or self.held + size > self.max_bytes:
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
