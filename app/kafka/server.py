"""The listener: an asyncio TCP server on the event loop of `outbox serve`, one task per
connection.

Bounded as Kafka's broker is: a frame larger than OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES closes
the connection before it is read (socket.request.max.bytes); connections past
OUTBOX_KAFKA_MAX_CONNECTIONS are closed as they are accepted (max.connections); each connection
has one request in flight, answered before the next is read, so answers go out in request
order (Kafka mutes a channel while its request is processed). Every service call runs in a
worker thread, never on the event loop. A frame that cannot be read as a request closes the
connection, as Kafka does, logged at INFO without a traceback: it is the client's mistake."""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import struct
import time
from typing import Any

from kio.schema.errors import ErrorCode

from app.domain.acl import ANONYMOUS
from app.domain.errors import OutboxError, ThrottlingQuotaExceeded
from app.kafka import protocol
from app.kafka.apis import Apis, Broker, api_versions_answer

logger = logging.getLogger("app.kafka")

_SIZE = struct.Struct(">i")
_FETCH = 1


class KafkaListener:
    def __init__(self, services: Any, sock: socket.socket, advertised: tuple[str, int] | None = None) -> None:
        """`sock`: bound, not yet listening. `advertised`: the host and port clients are told to
        connect to (Metadata, FindCoordinator); None: the socket's own."""
        self.services = services
        self.settings = services.settings
        self._sock = sock
        host, port = advertised or sock.getsockname()[:2]
        self.apis = Apis(services, Broker(self.settings.kafka_broker_id, host, port))
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, sock=self._sock)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self.settings.kafka_max_connections:
            logger.warning("Kafka listener: %d connections already (OUTBOX_KAFKA_MAX_CONNECTIONS); closing a new one "
                           "from %s", len(self._connections), _peer(writer))
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away: nothing to answer
        except asyncio.CancelledError:
            pass  # the server stops
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        limit = self.settings.kafka_socket_request_max_bytes
        idle_s = self.settings.kafka_connections_max_idle_ms / 1000
        while True:
            try:
                async with asyncio.timeout(idle_s):
                    (size,) = _SIZE.unpack(await reader.readexactly(4))
                    if 0 <= size <= limit:
                        frame = await reader.readexactly(size)
            except TimeoutError:
                logger.info("Kafka listener: closing the connection from %s: idle for %d ms "
                            "(OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS)", _peer(writer),
                            self.settings.kafka_connections_max_idle_ms)
                return
            if size < 0 or size > limit:
                logger.info("Kafka listener: closing the connection from %s: a frame of %d bytes (the limit is %d, "
                            "OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES)", _peer(writer), size, limit)
                return
            try:
                answer = await self._answer(frame, _waiter(writer))
            except protocol.Unparseable as e:
                logger.info("Kafka listener: closing the connection from %s: the request cannot be read (%s)",
                            _peer(writer), e)
                return
            except protocol.CloseConnection as e:
                logger.info("Kafka listener: closing the connection from %s: %s", _peer(writer), e)
                return
            except OutboxError as e:
                # A request without a field for an error (Metadata while the database is
                # unreachable): the client reconnects and asks again, as after a broker restart.
                logger.warning("Kafka listener: closing the connection from %s: %s %s", _peer(writer),
                               e.error_code, e.message)
                return
            except Exception:
                # A fault of the service's, not of the request: said with its traceback, and the
                # connection closed (the client reconnects), never left waiting for an answer.
                logger.exception("Kafka listener: closing the connection from %s: the request failed", _peer(writer))
                return
            if answer is not None:
                writer.write(answer)
                await writer.drain()

    async def _answer(self, frame: bytes, waiter: str) -> bytes | None:
        """The response frame to `frame`, None for none (acks=0); Unparseable to close.
        `waiter`: whose place a Fetch that waits takes (app.services.waiting)."""
        api_key, api_version, correlation_id = protocol.prefix(frame)
        if not protocol.is_served(api_key, api_version):
            if api_key == protocol.API_VERSIONS:
                # Kafka answers a version of ApiVersions it does not know with version 0 and
                # UNSUPPORTED_VERSION, listing what it serves: the client retries with one of those.
                return protocol.encode(correlation_id, api_versions_answer(0, ErrorCode.unsupported_version))
            unsupported = protocol.unsupported_version(api_key, api_version)
            if unsupported is None:
                raise protocol.Unparseable(f"API key {api_key} version {api_version} is not a Kafka request")
            logger.info("Kafka listener: API key %d version %d is not served: answered UNSUPPORTED_VERSION",
                        api_key, api_version)
            return protocol.encode(correlation_id, unsupported)
        request = protocol.parse(frame)
        handler = self.apis.handlers[api_key]
        if api_key == _FETCH:
            response = await self._fetch(request, waiter)
        elif inspect.iscoroutinefunction(handler):
            # A request that waits on other clients' (JoinGroup, SyncGroup): it waits on the
            # event loop and calls the services in worker threads itself.
            response = await handler(request.body, api_version)
        else:
            response = await asyncio.to_thread(handler, request.body, api_version)
        return None if response is None else protocol.encode(correlation_id, response)

    async def _fetch(self, request: protocol.Request, waiter: str) -> Any:
        """A Fetch, waiting up to max_wait_ms (at most OUTBOX_FETCH_MAX_WAIT_MS) until min_bytes
        of records are there, woken by the commits to the partitions read. A Fetch that would
        wait takes a place among the process's waiting requests, as an HTTP one does
        (OUTBOX_MAX_WAITING_REQUESTS, _PER_PRINCIPAL); where none is left it is answered at once
        with what is there, as a Fetch that does not wait (a Kafka client fetches again; an
        error would be no clearer to it)."""
        body = request.body
        changes = self.services.long_poll.changes
        deadline = time.monotonic() + min(max(0, body.max_wait.total_seconds()), self.settings.fetch_max_wait_ms / 1000)
        place = None
        try:
            while True:
                since = changes.now()
                answer, size, keys = await asyncio.to_thread(self.apis.fetch_now, body, request.api_version)
                left = deadline - time.monotonic()
                if size >= body.min_bytes or left <= 0 or not keys:
                    return answer
                if place is None:
                    try:
                        place = self.services.waiting.enter(waiter, "fetch")
                    except ThrottlingQuotaExceeded:
                        return answer
                await changes.wait(keys, since, left)
                if time.monotonic() >= deadline and not changes.moved(keys, since):
                    return answer
        finally:
            if place is not None:
                place.release()


def _waiter(writer: asyncio.StreamWriter) -> str:
    """Whose place a waiting Fetch of this connection takes: as over HTTP with authentication
    off, the anonymous caller of each client address counts as a principal."""
    peer = writer.get_extra_info("peername")
    return f"{ANONYMOUS} from {peer[0] if peer else 'an unknown address'}"


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if peer else "?"
