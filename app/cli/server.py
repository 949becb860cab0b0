"""The commands that run or prepare the service: serve, coordinator, migrate, backup, openapi."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import resource
import signal
import socket
import ssl
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from app.cli.common import (
    EXIT_USAGE,
    Command,
    CommandError,
    listen_host,
    logger,
    open_existing,
    port_number,
    prepare_database,
    require_sqlite_directory,
)
from app.settings import Settings
from app.settings.addresses import EVERY_ADDRESS, kafka_address

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from app.services.security import SecurityState


def serve(settings: Settings, args: argparse.Namespace) -> int:
    if args.no_coordinator:
        settings = settings.model_copy(update={"run_coordinator": False})
    if args.kafka_listener is not None:
        try:
            kafka_address(args.kafka_listener)
        except ValueError as e:
            raise CommandError(f"--kafka-listener: {e}", EXIT_USAGE) from None
        settings = settings.model_copy(update={"kafka_listener": args.kafka_listener})
    if unused := settings.kafka_settings_without_listener():
        raise CommandError(f"{', '.join(unused)}: the Kafka listener's, and none runs; set OUTBOX_KAFKA_LISTENER "
                           "(or --kafka-listener), or unset them", EXIT_USAGE)
    _refuse_coordinator_settings_serve_ignores(settings)
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    _check_exposure(settings, host)
    tls = _tls_options(settings)
    _check_jwt_key(settings)
    # Bound here rather than by uvicorn, so that a port in use is one line and exit 1, before
    # any migration, rather than uvicorn's start-up failure.
    sock = _listen(host, port, "--port or OUTBOX_PORT")
    kafka_sock = _kafka_socket(settings)
    prepare_database(settings, refuse_schema_mismatch=False)
    # The server and the app imported once nothing above refused (most of the command's import
    # time): a refused setting, a port in use or a database that cannot be prepared is its one
    # line without waiting for them.
    import uvicorn

    from app import logs
    from app.api.app import create_app
    from app.api.http_protocol import protocol_class
    from app.api.tls import TlsServer
    from app.gc_tuning import tune_for_service

    # Migrated (or checked) above, where a failure is reported like any other; not again in
    # the lifespan.
    app = create_app(settings, prepare_database=False)
    # Once nothing refuses to start: a warning beside a refusal would be noise.
    _warn_of_open_file_limit(settings, http=True, pool_size=settings.db_pool_size)
    _warn_of_tls_files(settings)
    tune_for_service()

    class Server(TlsServer):
        def handle_exit(self, sig: int, frame: object) -> None:
            # uvicorn waits for every request in flight before it shuts down: waiting fetches
            # and streams end now, with what they have (app.storage.changes).
            changes = getattr(app.state, "log_changes", None)
            if changes is not None:
                changes.close()
            super().handle_exit(sig, frame)  # type: ignore[arg-type]

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if self.kafka is not None:
                await self.kafka.stop()
            await super().shutdown(sockets)

        kafka: Any = None

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and kafka_sock is not None:
                from app.kafka.server import KafkaListener

                # The same services (database, log, coordinator) as the HTTP API's, built by
                # its lifespan: a record sent through either door is read through either.
                self.kafka = KafkaListener(app.state.services, kafka_sock, security=app.state.security)
                await self.kafka.start()
                logger.info("Kafka listener at %s:%d (broker %d)", self.kafka.apis.broker.host, self.kafka.port,
                            settings.kafka_broker_id)
            if self.started:  # uvicorn says this itself only for sockets it binds
                logging.getLogger("uvicorn.error").info(
                    "Uvicorn running on %s://%s:%d (Press CTRL+C to quit)", scheme, host, sock.getsockname()[1]
                )
                # The line to wait for: start-up takes seconds on a busy machine, and on a
                # database not migrated yet it comes once `outbox migrate` has run.
                url, every = ready_url(scheme, host, sock.getsockname()[1])
                app.state.schema_gate.on_open(
                    lambda: logger.info("outbox is ready at %s (Swagger UI: %s/docs)%s", url, url, every))

    config = uvicorn.Config(
        app,
        log_config=logs.logging_config(settings),
        log_level=settings.log_level,
        access_log=False,  # the service writes its own (outbox.access)
        timeout_keep_alive=settings.http_keep_alive_timeout_s,
        h11_max_incomplete_event_size=settings.http_max_head_bytes,  # h11's own head bound, without httptools
    )
    config.http = protocol_class(settings)
    if settings.authentication == "none":
        logging.getLogger("app.cli").warning(
            "authentication is off (OUTBOX_AUTHENTICATION=none): whoever reaches %s:%d may read and change "
            "everything", host, port)
    scheme = "https" if tls else "http"
    server = Server(config)
    server.tls = _tls_listening(settings, sock, tls)
    server.run(sockets=[] if tls else [sock])
    return 0 if server.started else 3  # uvicorn's status for a failed start-up


# What only the coordinator's chores read: a `serve` that runs none (--no-coordinator,
# OUTBOX_RUN_COORDINATOR=false) would start with them set and do nothing with them.
COORDINATOR_CHORE_SETTINGS = ("coordinator_interval_ms", "cleaner_max_records_per_second")


def _set(settings: Settings, names: Iterable[str]) -> list[str]:
    """The settings among `names` given (in the environment or a .env file), as OUTBOX_ names."""
    return [f"OUTBOX_{name.upper()}" for name in names if name in settings.model_fields_set]


def _refuse_coordinator_settings_serve_ignores(settings: Settings) -> None:
    """`serve` answers its coordinator's metrics at its own GET /metrics and binds no other port:
    a metrics port set for it would be a port an operator's scrape finds closed, without a word."""
    if settings.coordinator_metrics_port is not None:
        raise CommandError("OUTBOX_COORDINATOR_METRICS_PORT: `outbox coordinator`'s; `outbox serve` serves its "
                           "coordinator's metrics at GET /metrics on its own port (--port or OUTBOX_PORT): unset it "
                           "for this command", EXIT_USAGE)
    if not settings.run_coordinator and (unused := _set(settings, COORDINATOR_CHORE_SETTINGS)):
        raise CommandError(f"{', '.join(unused)}: the coordinator's, and none runs in this process (--no-coordinator "
                           "or OUTBOX_RUN_COORDINATOR=false); unset them, or give them to `outbox coordinator`",
                           EXIT_USAGE)


def _refuse_serve_settings_coordinator_ignores(settings: Settings) -> None:
    """`coordinator` serves no API and no Kafka door: their settings would be read and ignored
    (its metrics port is OUTBOX_COORDINATOR_METRICS_PORT, on OUTBOX_HOST)."""
    if unused := _set(settings, ("port", *sorted(Settings.kafka_door_settings()))):
        raise CommandError(f"{', '.join(unused)}: `outbox serve`'s, which `outbox coordinator` would ignore (it "
                           "serves no API and no Kafka listener; its metrics port is OUTBOX_COORDINATOR_METRICS_PORT): "
                           "unset them for this command", EXIT_USAGE)


def ready_url(scheme: str, host: str, port: int) -> tuple[str, str]:
    """The address the ready line shows, one a browser on this machine can open, and what to
    add when the service listens on every address: `--host 0.0.0.0` is where it listens, not
    an address to visit."""
    every = ""
    if host in EVERY_ADDRESS:
        every = f", listening on every address ({host or '0.0.0.0'})"
        host = "::1" if host == "::" else "127.0.0.1"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}", every


def _kafka_socket(settings: Settings) -> socket.socket | None:
    """The Kafka listener's socket, bound (OUTBOX_KAFKA_LISTENER), or None when it is off."""
    address = settings.kafka_address
    if address is None:
        return None
    from app.kafka.auth import unsupported_configuration

    problem = unsupported_configuration(settings)
    if problem is not None:
        raise CommandError(problem, EXIT_USAGE)
    # The HTTP door may be on loopback while this one is not: the line names the Kafka listener,
    # and the one method it can serve (jwt and mtls alone are refused above).
    _check_exposure(settings, address[0], "produce to and consume every topic through the Kafka listener "
                    "(OUTBOX_KAFKA_LISTENER, --kafka-listener)", methods="api_key")
    if address[0] in EVERY_ADDRESS and settings.kafka_advertised_address is None:
        # Kafka's brokers refuse this too: every client would be told to connect to 0.0.0.0.
        raise CommandError(f"Kafka listener (OUTBOX_KAFKA_LISTENER, --kafka-listener) on every address "
                           f"({address[0] or '0.0.0.0'}): clients would be told to connect there; set "
                           "OUTBOX_KAFKA_ADVERTISED_LISTENER to the host:port they reach this process at",
                           EXIT_USAGE)
    try:
        return _listen(*address, "--kafka-listener or OUTBOX_KAFKA_LISTENER")
    except CommandError as e:
        raise CommandError(f"Kafka listener (OUTBOX_KAFKA_LISTENER, --kafka-listener): {e}") from None


def _is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (127.0.0.0/8, ::1)."""
    import ipaddress

    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def _check_exposure(settings: Settings, host: str, exposed: str = "read and change every topic",
                    methods: str = "api_key, jwt and/or mtls") -> None:
    """Secure by default: with OUTBOX_AUTHENTICATION unset, serve on loopback only, whichever
    door (the API, the Kafka listener, the coordinator's metrics). `exposed`: what a stranger
    could do through it; `methods`: the OUTBOX_AUTHENTICATION values that door can serve."""
    if settings.authentication is None and not _is_loopback(host):
        raise CommandError(
            f"refusing to serve on {host} without authentication: anyone who reaches it could {exposed}. "
            f"Set OUTBOX_AUTHENTICATION to {methods} (README, \"Authentication and "
            f"ACLs\"), or to none to serve without it on purpose", EXIT_USAGE)


def _tls_options(settings: Settings) -> ssl.SSLContext | None:
    from app.api.tls import ssl_context

    try:
        return ssl_context(settings)
    except ValueError as e:
        raise CommandError(str(e), EXIT_USAGE) from None


def _tls_listening(settings: Settings, sock: socket.socket,
                   context: ssl.SSLContext | None) -> tuple[socket.socket, ssl.SSLContext, float] | None:
    """app.api.tls.TlsServer's `tls`: a handshake is the first bytes of a request, bounded as
    a request that does not arrive is (OUTBOX_HTTP_REQUEST_TIMEOUT_S, at most
    app.services.tls_accept.TLS_HANDSHAKE_MAX_S)."""
    from app.services.tls_accept import handshake_timeout_s

    if context is None:
        return None
    return sock, context, handshake_timeout_s(settings.http_request_timeout_s)


def _check_jwt_key(settings: Settings) -> None:
    """A PEM key that does not load is one line here, not a failed start-up inside uvicorn."""
    if "jwt" in settings.authentication_methods:
        from app.domain.clock import system_clock
        from app.services.security import JwtVerifier

        try:
            JwtVerifier(settings, system_clock)
        except ValueError as e:
            raise CommandError(str(e), EXIT_USAGE) from None


def _listen(host: str, port: int, port_flags: str) -> socket.socket:
    """A socket bound to host:port; `port_flags` names where that port is chosen, for the hint
    when it is taken."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise CommandError(
                f"cannot listen on {host}:{port}: the address is already in use (another process "
                f"listens there); choose another port with {port_flags}"
            ) from e
        raise CommandError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    return sock


def coordinator(settings: Settings, args: argparse.Namespace) -> int:
    from app.domain.clock import system_clock
    from app.services.schema_gate import SchemaGate
    from app.composition import coordinator_chores, maintenance_chores
    from app.storage.engine import open_database

    _refuse_serve_settings_coordinator_ignores(settings)
    if args.once:
        if settings.coordinator_metrics_port is not None:
            # A pass that ends before a scrape could come: the port would be bound for nothing.
            raise CommandError("--once: OUTBOX_COORDINATOR_METRICS_PORT is a running coordinator's; a single pass "
                               "serves no metrics: unset it for this command", EXIT_USAGE)
        # A one-shot command: never creates or migrates a database (README, Command-line errors).
        db = open_existing(settings, pool_size=coordinator_pool_size(settings))
        try:
            for worker in maintenance_chores(db, settings, system_clock):
                print(worker.run_once())
        finally:
            db.dispose()
        return 0
    # Checked and bound before the database is touched, as serve does: a refused setting or a
    # port in use is one line, not a coordinator that runs without the metrics asked for.
    metrics = None if settings.coordinator_metrics_port is None else _metrics_listener(settings)
    prepare_database(settings, refuse_schema_mismatch=True)
    _warn_of_open_file_limit(settings, http=metrics is not None, pool_size=coordinator_pool_size(settings))
    if metrics is not None:
        _warn_of_tls_files(settings)
    db = open_database(settings, pool_size=coordinator_pool_size(settings))
    security = None
    if metrics is not None and settings.metrics_protected:
        from app.services.security import SecurityState

        # The API keys and ACLs a scrape is checked against, kept fresh by a refresher chore.
        security = SecurityState(db, settings, system_clock)
    workers = coordinator_chores(db, settings, system_clock, security)
    from app.gc_tuning import tune_for_service

    tune_for_service()
    # A database that did not answer at start-up: the workers wait for it, quietly.
    schema = SchemaGate(db.engine)
    if security is not None:
        schema.on_open(lambda: security.reload(unless_unchanged=False))
    stop_metrics = _serve_metrics(settings, security, *metrics) if metrics is not None else None
    stop = threading.Event()
    heard: list[int] = []

    def on_signal(sig: int, frame: object) -> None:
        heard.append(sig)
        stop.set()

    found = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    for worker in workers:
        worker.start(schema)
    logger.info("coordinator and log cleaner running against %s", db.dialect)
    stop.wait()
    for worker in workers:
        worker.stop()
    if stop_metrics is not None:
        stop_metrics()
    if security is not None:
        security.close()
    db.dispose()
    # The signal raised again, under the handlers found, once the workers have stopped, as
    # uvicorn ends `serve`: the same exit status for both (README, Command-line errors), Ctrl-C
    # 130 (a KeyboardInterrupt, which main answers) and SIGTERM the process ended by SIGTERM.
    for sig, handler in found.items():
        signal.signal(sig, handler)
    signal.raise_signal(heard[0])
    return 0  # a signal this process was started ignoring


# The connections `outbox coordinator` keeps when OUTBOX_DB_POOL_SIZE is not set: its chores
# (coordinator, group expiry, producer expiry, cleaner, security refresher) run one statement at a time each.
COORDINATOR_POOL_SIZE = 2


def coordinator_pool_size(settings: Settings) -> int:
    """OUTBOX_DB_POOL_SIZE where it is set, as `serve` takes it; else COORDINATOR_POOL_SIZE."""
    return settings.db_pool_size if "db_pool_size" in settings.model_fields_set else COORDINATOR_POOL_SIZE


# The file descriptors a started process holds besides its clients' connections and its
# database pool's: stdin, stdout and stderr, the event loop's, its listening sockets, the
# database's notifications (about 17 on an idle `outbox serve`, SQLite or PostgreSQL,
# 2026-12-05), with room to spare.
PROCESS_OWN_FILES = 32
# A SQLite connection's files: the database's and its write-ahead log's (the shared memory
# file is one for the process).
SQLITE_FILES_PER_CONNECTION = 2


def open_file_limit_warning(settings: Settings, *, http: bool, pool_size: int, limit: int) -> str | None:
    """What to say when the file descriptors the process may come to hold pass `limit`, its
    open-file limit (RLIMIT_NOFILE's soft limit, `ulimit -n`): every connection its bounds let
    clients open (OUTBOX_HTTP_MAX_CONNECTIONS where `http`, OUTBOX_KAFKA_MAX_CONNECTIONS with
    the Kafka listener), every one its database pool may open, and PROCESS_OWN_FILES; None
    when they fit.

    A warning, not a refusal: the bounds are ceilings against a flood, not what the service
    expects to hold, and the defaults (1,000 HTTP connections and a pool of up to 50) pass
    1,024, the soft limit of many a shell and of systemd's services, where they serve well
    until a flood comes. Nor is the limit raised here: a library that waits on a descriptor
    with select() fails on one numbered 1,024 or more, which is why the soft limit is low."""
    from app.storage.engine import pool_connections_max

    settings_named: list[str] = []
    clients = 0
    if http:
        clients += settings.http_max_connections
        settings_named.append(f"OUTBOX_HTTP_MAX_CONNECTIONS={settings.http_max_connections}")
    if settings.kafka_listener is not None:
        clients += settings.kafka_max_connections
        settings_named.append(f"OUTBOX_KAFKA_MAX_CONNECTIONS={settings.kafka_max_connections}")
    database = pool_connections_max(pool_size)
    files = database * (SQLITE_FILES_PER_CONNECTION if settings.is_sqlite else 1)
    needed = clients + files + PROCESS_OWN_FILES
    if needed <= limit:
        return None
    settings_named.append(f"OUTBOX_DB_POOL_SIZE={pool_size}: up to {database} database connections"
                          + (f" of {SQLITE_FILES_PER_CONNECTION} files each" if settings.is_sqlite else ""))
    return (f"this process may need {needed} file descriptors ({', '.join(settings_named)}; and about "
            f"{PROCESS_OWN_FILES} of its own), above its open-file limit of {limit} (ulimit -n): a flood of "
            "connections would run out of descriptors before these bounds refuse it, failing health checks and "
            "database connections with it; lower the settings or raise the limit")


def _warn_of_open_file_limit(settings: Settings, *, http: bool, pool_size: int) -> None:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit != resource.RLIM_INFINITY:
        warning = open_file_limit_warning(settings, http=http, pool_size=pool_size, limit=limit)
        if warning is not None:
            logger.warning("%s", warning)


def _warn_of_tls_files(settings: Settings) -> None:
    import datetime

    from app.services.tls_accept import tls_file_warnings

    if settings.tls_cert_file:
        for warning in tls_file_warnings(settings.tls_cert_file, settings.tls_key_file,
                                         datetime.datetime.now(datetime.UTC)):
            logger.warning("%s", warning)


def _metrics_listener(settings: Settings) -> tuple[socket.socket, ssl.SSLContext | None]:
    """The coordinator's metrics socket, bound, and its TLS options, under serve's rules: not
    beyond loopback with authentication unset, HTTPS with OUTBOX_TLS_CERT_FILE, a JWT key that
    loads when jwt may be asked for."""
    host, port = settings.host, settings.coordinator_metrics_port
    assert port is not None
    _check_exposure(settings, host, "read this process's metrics (OUTBOX_COORDINATOR_METRICS_PORT)")
    if settings.authentication == "none":
        logger.warning("authentication is off (OUTBOX_AUTHENTICATION=none): whoever reaches %s:%d may read "
                       "this process's metrics", host, port)
    tls = _tls_options(settings)
    if settings.metrics_protected:
        _check_jwt_key(settings)
    try:
        return _listen(host, port, "OUTBOX_COORDINATOR_METRICS_PORT"), tls
    except CommandError as e:
        raise CommandError(f"coordinator metrics (OUTBOX_COORDINATOR_METRICS_PORT): {e}") from None


_METRICS_START_S = 30.0


_METRICS_STOP_S = 5.0


def _serve_metrics(settings: Settings, security: SecurityState | None, sock: socket.socket,
                   tls: ssl.SSLContext | None) -> Callable[[], None]:
    """Serve app.api.coordinator_metrics on `sock` with uvicorn, with serve's HTTP protocol and
    TLS, in a daemon thread (the main thread waits for signals; uvicorn installs no handlers
    outside it); returns once it has started, with what stops it.

    The stop lets a scrape being answered finish, its access line included, for up to
    _METRICS_STOP_S: a process ended with the daemon thread mid-request loses the line of a
    scrape whose answer the scraper already has."""
    import uvicorn

    from app.api.coordinator_metrics import create_metrics_app
    from app.api.http_protocol import protocol_class
    from app.api.tls import TlsServer

    config = uvicorn.Config(
        create_metrics_app(settings, security),
        log_config=None,  # the process's logging is configured already (app.logs)
        log_level=settings.log_level,
        access_log=False,  # the app writes its own (outbox.access), as serve's does
        lifespan="off",
        timeout_keep_alive=settings.http_keep_alive_timeout_s,
        h11_max_incomplete_event_size=settings.http_max_head_bytes,  # h11's own head bound, without httptools
    )
    config.http = protocol_class(settings)
    server = TlsServer(config)
    server.tls = _tls_listening(settings, sock, tls)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [] if tls else [sock]}, name="outbox-metrics",
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + _METRICS_START_S
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        thread.join(0.05)
    if not server.started:
        raise CommandError(f"cannot serve metrics on {sock.getsockname()[0]}:{sock.getsockname()[1]} "
                           "(OUTBOX_COORDINATOR_METRICS_PORT): the listener did not start; see the log above")
    scheme = "https" if tls else "http"
    url, every = ready_url(scheme, settings.host, sock.getsockname()[1])
    logger.info("coordinator metrics at %s/metrics%s%s", url, every,
                " (credentials needed: authentication is on)" if settings.metrics_protected
                else "")

    def stop() -> None:
        server.should_exit = True
        thread.join(_METRICS_STOP_S)

    return stop


def migrate(settings: Settings, args: argparse.Namespace) -> int:
    from app.storage import migrate
    from app.storage.engine import build_migration_engine

    require_sqlite_directory(settings)
    reader_gone = False

    def say(step: migrate.Step) -> None:
        # Each line as its step is made: a later step's failure must not hide how far the
        # database moved. A reader that stopped reading must not stop the migration half-way
        # either (the error would roll back the step being made): the rest goes to /dev/null,
        # and main() ends quietly once the migration is done.
        nonlocal reader_gone
        if reader_gone:
            return
        try:
            print(step, flush=True)
        except BrokenPipeError:
            reader_gone = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    migrate.migrate_to(settings.database_url, args.revision, allow_downgrade=args.downgrade, on_step=say,
                       sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms)
    if reader_gone:
        raise BrokenPipeError
    engine = build_migration_engine(settings.database_url, sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms)
    try:
        print(f"database at {migrate.current_revision(engine) or 'base (no schema)'}")
    finally:
        engine.dispose()
    return 0


def backup(settings: Settings, args: argparse.Namespace) -> int:
    from app.storage import backup
    from app.storage.engine import sqlite_path

    if not settings.is_sqlite:
        raise CommandError(
            "outbox backup copies SQLite databases; back up PostgreSQL with `pg_dump -Fc` (and "
            "pg_restore), or base backups with WAL archiving for point-in-time recovery "
            "(README: Backup and restore)",
            EXIT_USAGE,
        )
    destination = Path(args.path)
    revision = backup.backup_sqlite(
        settings.database_url, destination, busy_timeout_ms=settings.sqlite_busy_timeout_ms
    )
    print(f"backed up {sqlite_path(settings.database_url)} to {destination} "
          f"(schema {revision or 'none'})")
    return 0


def openapi_yaml(settings: Settings) -> str:
    """The document as a service with these settings serves it: the limits that are settings
    are stated from them (openapi.yaml at the repository root is written with the defaults)."""
    from app.api.app import create_app

    return yaml.safe_dump(create_app(settings).openapi(), sort_keys=False, allow_unicode=True)


def openapi(settings: Settings, args: argparse.Namespace) -> int:
    text = openapi_yaml(settings)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        # Said, since the default file is a tracked one at the repository root: a newcomer who
        # ran it to see the document learns where it went, and what it replaced.
        path = Path(args.output)
        replaced = path.exists()
        path.write_text(text)
        print(f"{'replaced' if replaced else 'wrote'} {path} ({len(text.encode())} bytes); "
              "`outbox openapi -o -` prints it instead", file=sys.stderr)
    return 0


def add_commands(command: Command) -> None:
    sv = command("serve", help="run the HTTP API (with the coordinator worker in-process)")
    sv.add_argument("--host", type=listen_host, default=None,
                    help="the address to listen on (OUTBOX_HOST; default 127.0.0.1, 0.0.0.0 for every interface)")
    sv.add_argument("--port", type=port_number, default=None,
                    help="the HTTP port (OUTBOX_PORT; default 8000, 0 for any free one)")
    sv.add_argument("--kafka-listener", default=None, metavar="HOST:PORT",
                    help="also serve Kafka's protocol there (OUTBOX_KAFKA_LISTENER; off by default)")
    sv.add_argument("--no-coordinator", action="store_true",
                       help="do not run the coordinator worker in this process")
    sv.set_defaults(func=serve)
    coord = command("coordinator", help="run the coordinator worker alone")
    coord.add_argument("--once", action="store_true", help="one pass, then exit")
    coord.set_defaults(func=coordinator)
    mig = command("migrate", help="move the configured database's schema to a revision (default: head)")
    mig.add_argument("revision", nargs="?", default="head", help="head (default), base, or a revision such as 0003")
    mig.add_argument("--downgrade", action="store_true",
                     help="allow moving to an older revision, which drops what later migrations added")
    mig.set_defaults(func=migrate)
    bk = command("backup", help="copy the live SQLite database to a new file (PostgreSQL: pg_dump)")
    bk.add_argument("path", help="the backup file to create (it must not exist)")
    bk.set_defaults(func=backup)


def add_openapi_command(command: Command) -> None:
    oa = command("openapi", help="write the OpenAPI document as YAML")
    # Said in --help: run with no option, the command prints nothing and overwrites
    # ./openapi.yaml, which at the repository root is a tracked file.
    oa.add_argument("--output", "-o", default="openapi.yaml", metavar="FILE",
                    help="the file to write, replaced if it exists (default: openapi.yaml in the current "
                         "directory; - writes to standard output); the limits that are OUTBOX_* settings "
                         "are stated from this process's settings")
    oa.set_defaults(func=openapi)
