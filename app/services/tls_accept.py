"""Accepting a TLS listener's connections before their handshake, for both doors (the HTTP
door's app.api.tls, the Kafka door's app.kafka.server).

asyncio's servers with `ssl=` (and uvloop's) hand a connection to the application only once
its TLS handshake is done, and give the handshake 60 s: a connection that never sends its
ClientHello escaped every bound on connections (OUTBOX_HTTP_MAX_CONNECTIONS(_PER_IP),
OUTBOX_KAFKA_MAX_CONNECTIONS(_PER_IP)) for that long, and 1,100 of them took every file
descriptor of a process with `ulimit -n 1024`. So a TLS listener accepts its TCP connections
itself (`accepting`), each door counting and bounding one as it is accepted, before any
of its bytes are read, and then does its handshake (loop.connect_accepted_socket with the
context), bounded by `handshake_timeout_s`. Not accepted plain and upgraded with start_tls:
uvloop starts reading a transport as soon as its protocol's connection_made returns, and the
ClientHello read before start_tls takes the transport over would be lost to the handshake.
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import logging
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any

from app.logs import RateLimitedLog

logger = logging.getLogger("app.services.tls_accept")

# The longest a TLS handshake is given, whatever the door's own bound (handshake_timeout_s): a
# handshake is two round trips and a certificate, well under a second even across the world,
# and a few seconds over a lossy link that retransmits. Each one under way holds a connection
# of the door's bounds and a file descriptor; asyncio's own 60 s let a client that sends
# nothing keep them a minute.
TLS_HANDSHAKE_MAX_S = 10.0

# How long accepting pauses when the process has no file descriptor (or kernel memory) left
# for another connection, as asyncio's own servers do: the listening socket stays readable,
# and retrying at once would spin.
_ACCEPT_RETRY_S = 1.0
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

_out_of_resources = RateLimitedLog(logger)


def handshake_timeout_s(door_bound_s: float) -> float:
    """How long a connection's TLS handshake may take: its door's bound for a client's silence
    (OUTBOX_HTTP_REQUEST_TIMEOUT_S, OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS), at most
    TLS_HANDSHAKE_MAX_S."""
    return min(door_bound_s, TLS_HANDSHAKE_MAX_S)


def accepting(sock: socket.socket, backlog: int, accepted: Callable[[socket.socket, Any], None]) -> asyncio.Task[None]:
    """Listens on `sock` (bound) at once, and hands each connection accepted, with its
    client's address, to `accepted`, in the task returned, until it is cancelled. `accepted`
    owns the socket: it counts it against its door's bounds and closes it or starts its
    handshake before the next one is accepted, so that a burst of connections is counted one
    by one."""
    sock.setblocking(False)
    sock.listen(backlog)
    return asyncio.get_running_loop().create_task(_accept_forever(sock, accepted))


async def _accept_forever(sock: socket.socket, accepted: Callable[[socket.socket, Any], None]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            conn, address = await loop.sock_accept(sock)
        except OSError as e:
            if e.errno in _OUT_OF_RESOURCES:
                _out_of_resources("cannot accept a connection on %s: %s; accepting again in %g s",
                                  _name(sock), e, _ACCEPT_RETRY_S)
                await asyncio.sleep(_ACCEPT_RETRY_S)
            elif e.errno != errno.ECONNABORTED:  # the client gave up before it was accepted
                raise
            continue
        accepted(conn, address)


def _name(sock: socket.socket) -> str:
    try:
        host, port = sock.getsockname()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


class _EncryptedKey(Exception):
    """The key file asks for a pass phrase (server_context)."""


def _no_pass_phrase() -> str:
    raise _EncryptedKey


def server_context(cert_file: str, key_file: str | None) -> ssl.SSLContext:
    """A server's TLS context with OUTBOX_TLS_CERT_FILE and OUTBOX_TLS_KEY_FILE loaded, both
    doors' (app.api.tls, app.kafka.auth); ValueError, saying why, if they do not load. An
    encrypted key is refused: without a password callback OpenSSL asks for its pass phrase on
    the terminal, and `outbox serve` waited there at "Enter PEM pass phrase:" (or, with no
    terminal, failed with "[Errno 22] Invalid argument"); the service has no setting for one."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_file, key_file, password=_no_pass_phrase)
    except _EncryptedKey:
        raise ValueError(f"OUTBOX_TLS_KEY_FILE: the private key in {key_file or cert_file} is encrypted (it has a "
                         "pass phrase), which the service cannot be given; write it unencrypted (openssl pkey -in "
                         "KEY -out PLAIN_KEY), readable by the service's user only") from None
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"OUTBOX_TLS_CERT_FILE / OUTBOX_TLS_KEY_FILE: cannot load the certificate and key: {e}") from None
    return context


def tls_file_warnings(cert_file: str, key_file: str | None, now: datetime.datetime) -> list[str]:
    """What to warn of at start about files server_context loaded: a certificate that has
    expired by `now` (clients refuse the handshake, which the service itself never sees), and a
    key file that its group or others may read (whoever reads it can pose as the service)."""
    from cryptography import x509

    warnings = []
    with open(cert_file, "rb") as f:
        certificate = x509.load_pem_x509_certificate(f.read())
    if certificate.not_valid_after_utc < now:
        warnings.append(f"OUTBOX_TLS_CERT_FILE: the certificate in {cert_file} "
                        f"({certificate.subject.rfc4514_string()}) expired on "
                        f"{certificate.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC: TLS clients will refuse it")
    key_path = key_file or cert_file
    mode = os.stat(key_path).st_mode & 0o777
    if mode & 0o044:
        warnings.append(f"OUTBOX_TLS_KEY_FILE: {key_path} (mode {mode:04o}) is readable by its group or others, "
                        "who may then pose as this service; make it readable by the service's user only "
                        f"(chmod 600 {key_path})")
    return warnings
