"""HTTPS for `outbox serve`, and the client certificate in the ASGI scope for mtls.

A TLS connection is accepted by TlsListener rather than by asyncio's server, which hands a
connection to uvicorn's protocol only once its handshake is done: it is held to
OUTBOX_HTTP_MAX_CONNECTIONS and OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP as it is accepted, and its
handshake bounded (app.services.tls_accept).

uvicorn verifies a client certificate against OUTBOX_TLS_CLIENT_CA_FILE during the handshake
but does not put it in the request's scope (the ASGI TLS extension). `with_client_certificate`
wraps uvicorn's HTTP protocol: once a connection's handshake is done, the verified
certificate's subject goes into every request of that connection as
scope["extensions"]["tls"]["client_cert_name"] (RFC 4514), where app.api.security reads it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

import uvicorn
from cryptography import x509

from app.api.http_answers import CLOSED, logger, peer
from app.logs import RateLimitedLog
from app.services.tls_accept import accepting, server_context
from app.settings import Settings


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The HTTP door's TLS context, None without OUTBOX_TLS_CERT_FILE; ValueError, saying why,
    if its files do not load (a clear error here rather than a traceback at start-up). Client
    certificates are asked for but optional: a request without one (or without any other
    credentials) gets the service's JSON 401 rather than a failed handshake."""
    if not settings.tls_cert_file:
        return None
    context = server_context(settings.tls_cert_file, settings.tls_key_file)
    if settings.tls_client_ca_file:
        try:
            context.load_verify_locations(settings.tls_client_ca_file)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"OUTBOX_TLS_CLIENT_CA_FILE: cannot load the CA certificates: {e}") from None
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


class TlsServer(uvicorn.Server):
    """uvicorn's server, serving HTTPS with a TlsListener when `tls` is set (its listening
    socket, its context and the handshake's bound) rather than with asyncio's server, which
    counts a connection only once its handshake is done: `run(sockets=[])` then, the socket
    being the listener's."""

    tls: tuple[socket.socket, ssl.SSLContext, float] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.tls is None or not self.started:
            return
        sock, context, timeout_s = self.tls
        config, loop = self.config, asyncio.get_running_loop()

        def new_protocol() -> Any:  # as uvicorn's startup makes each connection's
            return config.http_protocol_class(config=config, server_state=self.server_state,  # type: ignore[call-arg]
                                              app_state=self.lifespan.state, _loop=loop)

        self.servers.append(TlsListener(sock, context, timeout_s, new_protocol, config.backlog))  # type: ignore[arg-type]


class TlsListener:
    """Accepts the connections of `sock` itself (app.services.tls_accept), each counted against
    OUTBOX_HTTP_MAX_CONNECTIONS and OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP as it is accepted (the
    protocol's `admit`, app.api.http_limits), and gives its TLS handshake `timeout_s` before
    it reaches uvicorn's protocol. What uvicorn's shutdown needs of a server: close()."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, timeout_s: float,
                 new_protocol: Callable[[], Any], backlog: int) -> None:
        self._sock = sock
        self._context = context
        self._timeout_s = timeout_s
        self._new_protocol = new_protocol
        self._handshakes: set[asyncio.Task[None]] = set()
        self._acceptor = accepting(sock, backlog, self._accepted)

    def close(self) -> None:
        """Stops accepting; the handshakes under way end (uvicorn shuts down the connections
        past them)."""
        self._acceptor.cancel()
        for task in list(self._handshakes):
            task.cancel()
        self._sock.close()

    async def wait_closed(self) -> None:
        await asyncio.gather(self._acceptor, *self._handshakes, return_exceptions=True)

    def _accepted(self, conn: socket.socket, address: Any) -> None:
        protocol = self._new_protocol()
        if not protocol.admit(address[:2]):
            conn.close()
            return
        task = asyncio.get_running_loop().create_task(self._handshake(protocol, conn, address))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, protocol: Any, conn: socket.socket, address: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._timeout_s):
                # The protocol's connection_made comes once the handshake is done, in this call;
                # the socket is the transport's from here: the loop closes it if this fails.
                await loop.connect_accepted_socket(lambda: protocol, conn, ssl=self._context)
        except TimeoutError:
            protocol.handshake_failed()
            _handshake_too_long("closing the HTTPS connection from %s: its TLS handshake did not end within %g s",
                                peer(address[:2]), self._timeout_s)
            CLOSED["idle"].inc()
        except (OSError, ssl.SSLError):
            protocol.handshake_failed()  # the client went away, or its handshake failed: nothing to answer
        except asyncio.CancelledError:
            protocol.handshake_failed()
            raise


# A flood of such clients is not a flood of the log.
_handshake_too_long = RateLimitedLog(logger, level=logging.INFO)


def with_client_certificate(protocol_class: type) -> type:
    """A subclass of uvicorn's HTTP protocol class that adds the TLS extension to the scope."""

    class ClientCertificateProtocol(protocol_class):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if not der:
                return
            # Verified by the handshake (CERT_OPTIONAL still refuses a certificate the CA did
            # not sign); only its subject is needed.
            name = x509.load_der_x509_certificate(der).subject.rfc4514_string()
            tls = {"client_cert_name": name, "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)],
                   "client_cert_error": None}
            app = self.app

            async def app_with_tls(scope: Any, receive: Any, send: Any) -> None:
                scope["extensions"] = {**scope.get("extensions", {}), "tls": tls}
                await app(scope, receive, send)

            self.app = app_with_tls

    return ClientCertificateProtocol
