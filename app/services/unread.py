"""How much of what a connection was written its client has not taken yet, for both doors'
bounds on a client that stops reading its answers (the Kafka listener's
OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS, the HTTP door's OUTBOX_HTTP_SEND_TIMEOUT_S): a send
makes progress while this shrinks."""

from __future__ import annotations

import asyncio
import fcntl
import sys
import termios

_INT_ZERO = bytes(4)  # the ioctl's int, filled in by the kernel


def unread_bytes(transport: asyncio.BaseTransport) -> int:
    """The bytes written to the connection that its client has not taken yet: the transport's
    buffer and, on Linux, the kernel's send queue. The transport's buffer alone moves only when
    the kernel wakes it to write, after the client has read about a third of the socket's send
    buffer (megabytes): a consumer reading steadily but slowly looked idle and was closed."""
    size = transport.get_write_buffer_size()  # type: ignore[attr-defined]
    sock = transport.get_extra_info("socket")
    if sock is None:
        return size
    try:
        queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, _INT_ZERO)
    except (OSError, ValueError, AttributeError):  # not Linux, or the socket already gone
        return size
    return size + int.from_bytes(queued, sys.byteorder, signed=True)
