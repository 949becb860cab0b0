"""Open connections by client address, for both doors' bounds on one address
(OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP, OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP): a client that opens
connections and sends nothing could otherwise take every connection of a door and keep every
other client out."""

from __future__ import annotations


class ConnectionsPerAddress:
    """Connections open now, by client address (None: one the transport could not tell, a Unix
    socket's), against `bound` an address (None: no bound, the count kept all the same). An
    address has an entry only while it has a connection open: at most as many entries as
    connections. Used on the event loop alone: no lock."""

    def __init__(self, bound: int | None) -> None:
        self.bound = bound
        self._open: dict[str | None, int] = {}

    def take(self, host: str | None) -> bool:
        """Counts a connection from `host`, unless it has `bound` open already: False, and
        nothing counted."""
        open_now = self._open.get(host, 0)
        if self.bound is not None and open_now >= self.bound:
            return False
        self._open[host] = open_now + 1
        return True

    def give_back(self, host: str | None) -> None:
        """A connection `take` counted has closed."""
        if self._open[host] == 1:
            del self._open[host]
        else:
            self._open[host] -= 1
