"""The HTTP door's settings (OUTBOX_HTTP_*, and OUTBOX_MAX_REQUEST_BYTES, the bound of one body
that the body budget is reckoned against): app.settings.Settings extends HttpSettings, which
extends app.settings.kafka.KafkaSettings and so takes its model_config from LogSettings. One line
of inheritance (log, Kafka listener, HTTP door, the service's own) rather than two bases beside
each other: Settings keeps one base, and each door's checks run before the service's. Apart so
that the HTTP server's bounds, and the checks among them, are read in one place. The check of
OUTBOX_MAX_WAITING_REQUESTS against OUTBOX_HTTP_MAX_CONNECTIONS stays in Settings, with the
waiting bounds it holds down."""

from __future__ import annotations

from pydantic import Field, model_validator

from app.settings.kafka import KafkaSettings


class HttpSettings(KafkaSettings):
    """The HTTP door's settings: `outbox serve`'s HTTP server (its timeouts, its head and
    connection bounds; app.api.http_protocol) and the app's request bodies (app.api.body_limit)."""

    # How long `outbox serve` keeps an idle keep-alive connection open (uvicorn's own default,
    # 5 s). Behind a load balancer or proxy that pools connections, set it above the balancer's
    # idle timeout: otherwise the service may close a connection just as the balancer sends a
    # request on it, and that request fails (a 502 from the balancer) without reaching us.
    http_keep_alive_timeout_s: int = Field(default=5, ge=1)
    # How long `outbox serve` waits for a request to arrive, so that a client cannot hold a
    # connection (and a file descriptor) by never finishing one: its head must be whole within
    # this many seconds of the connection opening (first request) or of the first byte after
    # the answer before it (later requests; until that byte, the keep-alive timeout counts),
    # even a byte that begins no request (a stray CRLF), which would otherwise leave the
    # connection with no timer; its body may go this long with no byte received. The head's is
    # a deadline, as a head is a few KB; the body's is an idle timeout, as a body of up to
    # OUTBOX_MAX_REQUEST_BYTES (32 MiB) takes 27 s at 10 Mbit/s and minutes on a slower link,
    # which a deadline from its first byte would cut. Time the service itself makes a request
    # wait does not count: reading paused until the app takes the body it has, or, for
    # requests pipelined behind a long poll or a stream, from the end of the first one's head
    # until that answer is done (hours, perhaps); `Expect: 100-continue` not yet answered.
    # Bytes that arrive while an answer is on its way start no wait, but a pipelined head that
    # begins then, reading not yet paused, must still be whole within this many seconds of its
    # first byte. A request answered before its body is all in (a 401 or 405 given without
    # reading it) is not kept alive: the rest of its body gets this many seconds in all from the
    # answer's end, a deadline its bytes do not extend, and the connection closes when the body
    # ends, or is aborted at the deadline (a lingering close, as nginx's). Otherwise each byte of
    # a body trickled after the answer kept the connection for good, and a client without
    # credentials could hold every one of OUTBOX_HTTP_MAX_CONNECTIONS; it is not closed at once
    # because closing with the client's bytes unread resets the connection, and the client
    # could lose the answer.
    http_request_timeout_s: int = Field(default=30, ge=1)
    # The most bytes of a request's head (its request line and headers) `outbox serve` reads:
    # past it the request is answered 431 (INVALID_REQUEST) and the connection closed, what the
    # client still sends read and dropped until it closes, for at most
    # OUTBOX_HTTP_REQUEST_TIMEOUT_S (closed at once, its bytes unread, the connection would be
    # reset and the answer perhaps lost). The HTTP parser holds a head whole until it ends, of
    # any size: without a bound a client without credentials sending an endless header grew
    # the process by tens of MiB a connection (the Kafka door bounds a frame before
    # authentication to 512 KiB). 64 KiB is far above any request of the API (a JWT in its
    # Authorization header is a few KB). Without httptools, uvicorn's h11 bounds a head itself,
    # and is given this bound (h11_max_incomplete_event_size).
    http_max_head_bytes: int = Field(default=65536, ge=1024, le=16 * 1024 * 1024)
    # How long `outbox serve` waits for a client that has stopped reading its answer: once the
    # answer fills the connection's buffers, the send waits for the client; a whole interval of
    # this many seconds in which the client took none of it aborts the connection, and the
    # request ends as when its client goes, giving back its connection slot
    # (OUTBOX_HTTP_MAX_CONNECTIONS) and a large Fetch's spool file. Without it such a client
    # held all three for good. Any byte the client takes starts the interval again, so a
    # slow client that keeps reading (a long stream, a large answer over a slow link) is never
    # cut: it is the silence that is bounded, as the Kafka listener's
    # OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS bounds an answer left unread.
    http_send_timeout_s: int = Field(default=60, ge=1)
    # The most HTTP connections `outbox serve` holds open at once (each of its listeners: the
    # API's, the coordinator metrics'), as OUTBOX_KAFKA_MAX_CONNECTIONS for the Kafka door: past
    # it a new connection is closed as it is accepted, so that a flood of connections runs out
    # of this count and not of the process's file descriptors, which its database connections,
    # log and other clients' connections share. Keep it, with OUTBOX_KAFKA_MAX_CONNECTIONS,
    # below `ulimit -n` (a WARNING at start says where they and the database pool could pass
    # it: app.cli.server.open_file_limit_warning). Waiting fetches and event streams hold a
    # connection each.
    http_max_connections: int = Field(default=1000, ge=1)
    # The most HTTP connections `outbox serve` holds open at once from one client address (each
    # listener counts its own), as OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP for the Kafka door, and
    # unset by default as that one is: past it a new connection from that address is closed as
    # it is accepted, before any of it is read. Unset, one address may take every one of
    # OUTBOX_HTTP_MAX_CONNECTIONS, and a client without credentials that opens them and sends a
    # byte of a head, reopening each one OUTBOX_HTTP_REQUEST_TIMEOUT_S closes, kept every other
    # client out (health checks too). Behind a reverse proxy every connection is the proxy's
    # address, and this bounds the proxy's connections in all.
    http_max_connections_per_ip: int | None = Field(default=None, ge=1)
    # The largest request body: past it the request is answered 413 (app.api.body_limit).
    max_request_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    # The bytes of HTTP request bodies larger than 1 MiB held at once in the process, while
    # they arrive and until they are answered (app.api.body_limit, app.services.byte_budget):
    # each body is bounded by OUTBOX_MAX_REQUEST_BYTES, but forty 32 MiB bodies at once took
    # the process to 1.66 GB. A body that does not fit is refused at once with
    # THROTTLING_QUOTA_EXCEEDED (429, retriable); bodies of 1 MiB or less never are. At least
    # OUTBOX_MAX_REQUEST_BYTES, or a body of the largest size would never be taken.
    http_max_queued_body_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    # Of those, the bytes one principal's bodies hold: the budget is taken before a body is read,
    # so before its ACLs are checked, and without a share a principal with a key and no ACL
    # held the whole budget with a few slow bodies, every other principal's large Send refused
    # meanwhile. Refused past it as past the total (details.bound body_bytes_per_principal).
    # Between OUTBOX_MAX_REQUEST_BYTES (one whole body fits) and the total; left unset, it
    # follows either where they leave 64 MiB outside. Authentication off, every caller is one
    # principal whose share is the whole budget (app.api.app).
    http_max_queued_body_bytes_per_principal: int = Field(default=64 * 1024 * 1024, ge=1024)

    @model_validator(mode="after")
    def _check_http_bounds(self) -> "HttpSettings":
        if (self.http_max_connections_per_ip is not None
                and self.http_max_connections_per_ip > self.http_max_connections):
            # Past OUTBOX_HTTP_MAX_CONNECTIONS every new connection is closed, whatever its
            # address: a larger bound per address would never close one.
            raise ValueError("OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP exceeds OUTBOX_HTTP_MAX_CONNECTIONS")
        if self.http_max_queued_body_bytes < self.max_request_bytes:
            raise ValueError("OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES is less than OUTBOX_MAX_REQUEST_BYTES: "
                             "a body of the largest size would always be refused")
        if "http_max_queued_body_bytes_per_principal" not in self.model_fields_set:
            # Left at its default, within the total set lower (as the waiting bounds' share) and
            # above a larger body's bound, so that a deployment which set either alone starts as
            # it did before the share existed.
            self.__dict__["http_max_queued_body_bytes_per_principal"] = min(
                max(self.http_max_queued_body_bytes_per_principal, self.max_request_bytes),
                self.http_max_queued_body_bytes)
        if self.http_max_queued_body_bytes_per_principal > self.http_max_queued_body_bytes:
            raise ValueError("OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL exceeds OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES")
        if self.http_max_queued_body_bytes_per_principal < self.max_request_bytes:
            raise ValueError("OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL is less than OUTBOX_MAX_REQUEST_BYTES: "
                             "a body of the largest size would always be refused")
        return self
