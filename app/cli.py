"""The `outbox` command: serve, coordinator, migrate, backup, transactions, topics, groups,
principals, acls, grant-reader, grant-appender, revoke-appender, openapi.

A mistake (an unknown transactional id, an unreachable database, a bad OUTBOX_* setting, a
port in use, …) is reported by `main` in one line on stderr, `outbox: error: …`, with an exit
status that says which kind it was (EXIT_*); `--verbose` adds the traceback. Commands raise;
they never print their own errors.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from urllib.parse import quote

import yaml

from app.settings import Settings

EXIT_FAILURE = 1  # the command was right but failed: database, unknown id, schema, port, file
EXIT_USAGE = 2  # the command line or a setting is wrong (argparse's status too)
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # stdout closed early (`| head`), as a shell reports SIGPIPE

logger = logging.getLogger("app.cli")  # not __name__, which is "__main__" under `python -m app.cli`


class CommandError(Exception):
    """A command's own refusal, reported as it is worded."""

    def __init__(self, message: str, exit_status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_status = exit_status


# --- commands -------------------------------------------------------------------------------


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from app import logs
    from app.api.app import create_app
    from app.gc_tuning import tune_for_service

    if args.no_coordinator:
        settings = settings.model_copy(update={"run_coordinator": False})
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    _check_exposure(settings, host)
    tls = _tls_options(settings)
    _check_jwt_key(settings)
    # Bound here rather than by uvicorn, so that a port in use is one line and exit 1, before
    # any migration, rather than uvicorn's start-up failure.
    sock = _listen(host, port)
    _prepare_database(settings, refuse_schema_mismatch=False)
    # Migrated (or checked) above, where a failure is reported like any other; not again in
    # the lifespan.
    app = create_app(settings, prepare_database=False)
    tune_for_service()

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: object) -> None:
            # uvicorn waits for every request in flight before it shuts down: waiting fetches
            # and streams end now, with what they have (app.storage.changes).
            changes = getattr(app.state, "log_changes", None)
            if changes is not None:
                changes.close()
            super().handle_exit(sig, frame)  # type: ignore[arg-type]

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:  # uvicorn says this itself only for sockets it binds
                logging.getLogger("uvicorn.error").info(
                    "Uvicorn running on %s://%s:%d (Press CTRL+C to quit)", scheme, host, sock.getsockname()[1]
                )
                # The line to wait for: start-up takes seconds on a busy machine, and on a
                # database not migrated yet it comes once `outbox migrate` has run.
                url = f"{scheme}://{f'[{host}]' if ':' in host else host}:{sock.getsockname()[1]}"
                app.state.schema_gate.on_open(
                    lambda: logger.info("outbox is ready at %s (Swagger UI: %s/docs)", url, url))

    config = uvicorn.Config(
        app,
        log_config=logs.logging_config(settings),
        log_level=settings.log_level,
        access_log=False,  # the service writes its own (outbox.access)
        timeout_keep_alive=settings.http_keep_alive_timeout_s,
        **tls,
    )
    if "mtls" in settings.authentication_methods:
        from uvicorn.config import HTTP_PROTOCOLS
        from uvicorn.importer import import_from_string

        from app.api.tls import with_client_certificate

        config.http = with_client_certificate(import_from_string(HTTP_PROTOCOLS["httptools"] if _has_httptools()
                                                                 else HTTP_PROTOCOLS["h11"]))
    if settings.authentication == "none":
        logging.getLogger("app.cli").warning(
            "authentication is off (OUTBOX_AUTHENTICATION=none): whoever reaches %s:%d may read and change "
            "everything", host, port)
    scheme = "https" if tls else "http"
    server = Server(config)
    server.run(sockets=[sock])
    return 0 if server.started else 3  # uvicorn's status for a failed start-up


def _is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (127.0.0.0/8, ::1)."""
    import ipaddress

    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def _check_exposure(settings: Settings, host: str) -> None:
    """Secure by default: with OUTBOX_AUTHENTICATION unset, serve on loopback only."""
    if settings.authentication is None and not _is_loopback(host):
        raise CommandError(
            f"refusing to serve on {host} without authentication: anyone who reaches it could read and change "
            f"every topic. Set OUTBOX_AUTHENTICATION to api_key, jwt and/or mtls (README, \"Authentication and "
            f"ACLs\"), or to none to serve without it on purpose", EXIT_USAGE)


def _tls_options(settings: Settings) -> dict:  # type: ignore[type-arg]
    from app.api.tls import ssl_options

    try:
        return ssl_options(settings)
    except ValueError as e:
        raise CommandError(str(e), EXIT_USAGE) from None


def _check_jwt_key(settings: Settings) -> None:
    """A PEM key that does not load is one line here, not a failed start-up inside uvicorn."""
    if "jwt" in settings.authentication_methods:
        from app.domain.clock import system_clock
        from app.services.security import JwtVerifier

        try:
            JwtVerifier(settings, system_clock)
        except ValueError as e:
            raise CommandError(str(e), EXIT_USAGE) from None


def _has_httptools() -> bool:
    import importlib.util

    return importlib.util.find_spec("httptools") is not None


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise CommandError(
                f"cannot listen on {host}:{port}: the address is already in use (another process "
                f"listens there); choose another port with --port or OUTBOX_PORT"
            ) from e
        raise CommandError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    return sock


def _prepare_database(settings: Settings, *, refuse_schema_mismatch: bool) -> None:
    """Start-up of `serve` and `coordinator` (app.storage.migrate.prepare), after the one
    check that gives a clearer line here than SQLite's own."""
    from app.storage import migrate

    if settings.should_auto_migrate:
        _require_sqlite_directory(settings)
    migrate.prepare(settings.database_url, auto_migrate=settings.should_auto_migrate,
                    refuse_schema_mismatch=refuse_schema_mismatch)


def _coordinator(settings: Settings, args: argparse.Namespace) -> int:
    from app.domain.clock import system_clock
    from app.services.schema_gate import SchemaGate
    from app.composition import maintenance_chores
    from app.storage.engine import open_database

    if args.once:
        # A one-shot command: never creates or migrates a database (README, Command-line errors).
        db = _open_existing(settings, pool_size=2)
    else:
        _prepare_database(settings, refuse_schema_mismatch=True)
        db = open_database(settings, pool_size=2)
    workers = maintenance_chores(db, settings, system_clock)
    if args.once:
        try:
            for worker in workers:
                print(worker.run_once())
        finally:
            db.dispose()
        return 0
    from app.gc_tuning import tune_for_service

    tune_for_service()
    if settings.coordinator_metrics_port is not None:
        # Its counters (passes, completions, timeouts) on their own port: this process serves
        # no API. The database gauges are in every `serve`'s /metrics.
        from app.metrics import serve_metrics

        try:
            serve_metrics(settings.host, settings.coordinator_metrics_port)
        except OSError as e:
            raise CommandError(
                f"cannot serve metrics on {settings.host}:{settings.coordinator_metrics_port} "
                f"(OUTBOX_COORDINATOR_METRICS_PORT): {e.strerror or e}"
            ) from e
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    # A database that did not answer at start-up: the workers wait for it, quietly.
    schema = SchemaGate(db.engine)
    for worker in workers:
        worker.start(schema)
    logger.info("coordinator and log cleaner running against %s", db.dialect)
    stop.wait()
    for worker in workers:
        worker.stop()
    db.dispose()
    return 0


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    from app.storage import migrate
    from app.storage.engine import build_migration_engine

    _require_sqlite_directory(settings)
    for step in migrate.migrate_to(settings.database_url, args.revision, allow_downgrade=args.downgrade):
        print(step)
    engine = build_migration_engine(settings.database_url)
    try:
        print(f"database at {migrate.current_revision(engine) or 'base (no schema)'}")
    finally:
        engine.dispose()
    return 0


def _backup(settings: Settings, args: argparse.Namespace) -> int:
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


def _openapi(settings: Settings, args: argparse.Namespace) -> int:
    text = openapi_yaml(settings)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    return 0


def _transactions(settings: Settings, args: argparse.Namespace) -> int:
    """Operator tools against the configured database (like kafka-transactions.sh)."""
    import json

    from app.domain.clock import system_clock
    from app.domain.types import TransactionState
    from app.services.transaction_coordinator import TransactionCoordinator

    db = _open_existing(settings, pool_size=1)
    coordinator = TransactionCoordinator(db, settings, system_clock)
    now = system_clock()

    def row(m) -> dict:  # type: ignore[no-untyped-def]
        age = now - m.txn_started_ms if m.state in (TransactionState.ONGOING, TransactionState.PREPARED) and m.txn_started_ms else None
        return {"transactional_id": m.transactional_id, "state": m.state.value,
                "producer_id": m.producer_id, "producer_epoch": m.producer_epoch,
                "txn_id": m.txn_id, "age_ms": age}

    try:
        if args.action == "list":
            states = [TransactionState(s) for s in args.state] if args.state else None
            out = [row(m) for m in coordinator.list(states, args.limit, args.min_age_ms)]
        elif args.action == "hanging":
            out = [row(m) for m in coordinator.hanging(now)]
        elif args.action == "describe":
            view = coordinator.describe(args.transactional_id)
            meta, parts, pending = view.meta, view.partitions, view.pending_offsets
            out = {**row(meta),
                   "partitions": [{"topic": p.topic, "partition": p.partition, "first_offset": p.first_offset} for p in parts],
                   "pending_offsets": [{"group_id": o.group_id, "topic": o.topic, "partition": o.partition,
                                        "offset": o.committed_offset} for o in pending]}
        else:
            out = row(coordinator.admin_abort(args.transactional_id).meta)
    finally:
        db.dispose()
    print(json.dumps(out, indent=2))
    return 0


def _topics(settings: Settings, args: argparse.Namespace) -> int:
    """Topic administration against the configured database (like kafka-topics.sh and
    kafka-delete-records.sh), through the same service as the HTTP API."""
    import json
    from dataclasses import asdict

    from app.domain.clock import system_clock
    from app.services.topic_service import TopicService

    # Parsed before the database is opened: a mistake on the command line touches nothing.
    config = _config_pairs(args.config) if args.action in ("create", "alter") else {}
    db = _open_existing(settings, pool_size=1)
    service = TopicService(db, settings, system_clock)

    def summary(t) -> dict:  # type: ignore[no-untyped-def]
        # As the HTTP API answers them (cleanup_policy, a str enum, is written as its value).
        return {"name": t.name, "partition_count": t.partition_count, "config": asdict(t.config)}

    def description(t, parts) -> dict:  # type: ignore[no-untyped-def]
        return {**summary(t), "partitions": [asdict(p) for p in parts]}

    try:
        if args.action == "list":
            out: object = [summary(t) for t in service.list()]
        elif args.action == "describe":
            out = description(*service.describe(args.topic))
        elif args.action == "create":
            from app.api.schemas.topics import TopicConfigIn

            service.create(args.topic, args.partitions,
                           _convert(config, TopicConfigIn).to_domain(settings.message_max_bytes))
            out = description(*service.describe(args.topic))
        elif args.action == "alter":
            from app.api.schemas.topics import TopicConfigChanges

            out = description(*service.alter_config(args.topic, _convert(config, TopicConfigChanges).changes()))
        elif args.action == "add-partitions":
            out = description(*service.create_partitions(args.topic, args.partition_count))
        elif args.action == "delete":
            service.delete(args.topic)
            out = {"name": args.topic, "deleted": True}
        else:
            log_start = service.delete_records(args.topic, args.partition, args.offset)
            out = {"topic": args.topic, "partition": args.partition, "log_start_offset": log_start}
    finally:
        db.dispose()
    print(json.dumps(out, indent=2))
    return 0


def _groups(settings: Settings, args: argparse.Namespace) -> int:
    """A consumer group's lag, against the configured database (like kafka-consumer-groups.sh
    --describe), in the HTTP API's shape: null where the group has committed no offset."""
    from app.api.schemas.groups import GroupLag
    from app.domain.clock import system_clock
    from app.services.group_service import GroupService

    db = _open_existing(settings, pool_size=1)
    try:
        out = GroupLag.of(args.group_id, GroupService(db, settings, system_clock).lag(args.group_id))
    finally:
        db.dispose()
    print(out.model_dump_json(indent=2))
    return 0


def _operator() -> str:
    """Who made a change from the command line, for the audit line: the operating system user."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _principals(settings: Settings, args: argparse.Namespace) -> int:
    """API keys, against the configured database. `create` prints the key once."""
    import json

    from app.domain.clock import system_clock
    from app.services.security import SecurityService

    db = _open_existing(settings, pool_size=1)
    service = SecurityService(db, system_clock)
    try:
        if args.action == "create":
            issued = service.create_api_key(args.principal, by=_operator())
            out: object = {"principal": issued.principal, "key_id": issued.key_id, "api_key": issued.api_key,
                           "created_ms": issued.created_ms}
            print("outbox: store this API key now: it is not shown again, only a hash of it is kept",
                  file=sys.stderr)
        elif args.action == "list":
            out = [{"principal": k.principal, "key_id": k.key_id, "created_ms": k.created_ms,
                    "revoked_ms": k.revoked_ms} for k in service.list_api_keys(args.principal)]
        else:
            revoked = service.revoke_api_keys(by=_operator(), principal=args.principal, key_id=args.key_id)
            if not revoked:
                which = f"API key {args.key_id!r}" if args.key_id else "API keys"
                raise CommandError(f"{args.principal} has no live {which}")
            out = {"revoked": revoked}
    finally:
        db.dispose()
    print(json.dumps(out, indent=2))
    return 0


def _acl_bindings(args: argparse.Namespace) -> list:  # type: ignore[type-arg]
    """kafka-acls.sh's way: every principal × operation × resource named."""
    from app.domain.acl import CLUSTER_NAME, AclBinding, Operation, PatternType, Permission, ResourceType, principal_name

    pattern = PatternType(args.resource_pattern_type)
    resources = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group] \
        + [(ResourceType.TRANSACTIONAL_ID, x) for x in args.transactional_id] \
        + ([(ResourceType.CLUSTER, CLUSTER_NAME)] if args.cluster else [])
    # As in kafka-acls.sh, the pattern type applies to every resource named. With a prefix for
    # one kind and a name for another (a transactional id prefix beside a topic) that would
    # also grant every topic whose name starts with the topic's: refused, so that a binding is
    # prefixed only where the operator meant it.
    prefixable = [flag for flag, named in (("--topic", args.topic), ("--group", args.group),
                                           ("--transactional-id", args.transactional_id)) if named]
    if pattern is PatternType.PREFIXED and len(prefixable) > 1:
        raise CommandError(f"--resource-pattern-type prefixed would make {' and '.join(prefixable)} all prefixes: "
                           "name one kind of resource per command, and give --resource-pattern-type prefixed "
                           "only to the one whose names are prefixes", EXIT_USAGE)
    principals = [(principal_name(p), Permission.ALLOW) for p in args.allow_principal] \
        + [(principal_name(p), Permission.DENY) for p in args.deny_principal]
    if not resources or not principals or not args.operation:
        raise CommandError("name at least one --allow-principal or --deny-principal, one --operation, and one of "
                           "--topic, --group, --transactional-id, --cluster", EXIT_USAGE)
    return [AclBinding(principal, rtype, name, PatternType.LITERAL if rtype is ResourceType.CLUSTER else pattern,
                       Operation(op), permission)
            for principal, permission in principals for rtype, name in resources for op in args.operation]


def _acls(settings: Settings, args: argparse.Namespace) -> int:
    """ACL bindings, against the configured database (like kafka-acls.sh)."""
    import json

    from app.domain.acl import AclFilter, ResourceType, principal_name
    from app.domain.clock import system_clock
    from app.services.security import SecurityService

    def row(b) -> dict:  # type: ignore[no-untyped-def]
        return {"principal": b.principal, "resource_type": b.resource_type.value, "resource_name": b.resource_name,
                "pattern_type": b.pattern_type.value, "operation": b.operation.value, "permission": b.permission.value}

    bindings = _acl_bindings(args) if args.action in ("add", "remove") else []  # checked before the database
    db = _open_existing(settings, pool_size=1)
    service = SecurityService(db, system_clock)
    try:
        if args.action == "add":
            added = service.add_acls(bindings, by=_operator())
            out: object = [{**row(b), "created": new} for b, new in zip(bindings, added, strict=True)]
        elif args.action == "list":
            named = [(ResourceType.TOPIC, args.topic), (ResourceType.GROUP, args.group),
                     (ResourceType.TRANSACTIONAL_ID, args.transactional_id)]
            rtype, name = next(((t, n) for t, n in named if n is not None), (None, None))
            if args.cluster:
                rtype = ResourceType.CLUSTER
            match = AclFilter(principal=None if args.principal is None else principal_name(args.principal),
                              resource_type=rtype, resource_name=name)
            out = [row(b) for b in service.list_acls(match)]
        else:
            removed = []
            for b in bindings:
                removed += service.remove_acls(
                    AclFilter(b.principal, b.resource_type, b.resource_name, b.pattern_type, b.operation,
                              b.permission), by=_operator())
            out = [row(b) for b in removed]
    finally:
        db.dispose()
    print(json.dumps(out, indent=2))
    return 0


def _grant_reader(settings: Settings, args: argparse.Namespace) -> int:
    """PostgreSQL: a role that may read the committed_records view and nothing else (Spark's)."""
    from app.storage import roles

    if settings.is_sqlite:
        raise CommandError("grant-reader is for PostgreSQL: an SQLite file has no roles; give a Spark job a "
                           "read-only copy or open it read-only (docs/SPARK.md)")
    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else None
    db = _open_existing(settings, pool_size=1)
    try:
        created = roles.grant_reader(db.engine, args.role, password=password)
    finally:
        db.dispose()
    print(f"{'created role' if created else 'role'} {args.role}: SELECT on committed_records only")
    return 0


def _appender(settings: Settings, args: argparse.Namespace) -> int:
    """PostgreSQL: which roles may call outbox.append in their own transactions, topic by topic."""
    import json

    from app.storage import roles

    if settings.is_sqlite:
        raise CommandError(f"{args.command} is for PostgreSQL: an SQLite file has no roles (whoever can write the "
                           "file can append to it)")
    topics = [*args.topic, *(["*"] if args.all_topics else [])]
    granting = args.command == "grant-appender"
    if granting and not (topics or args.topic_prefix):
        raise CommandError("name what the role may append to: --topic NAME, --topic-prefix PREFIX or --all-topics",
                           EXIT_USAGE)
    password = sys.stdin.readline().rstrip("\n") if granting and args.password_stdin else None
    db = _open_existing(settings, pool_size=1)
    try:
        if granting:
            created = roles.grant_appender(db.engine, args.role, topics=topics, prefixes=args.topic_prefix,
                                           password=password)
            if created:
                print(f"created role {args.role}")
        else:
            roles.revoke_appender(db.engine, args.role, topics=topics, prefixes=args.topic_prefix)
        grants = roles.appender_grants(db.engine, args.role)
    finally:
        db.dispose()
    print(json.dumps({"role": args.role, "may_append_to": [
        {"topic": topic, "pattern_type": pattern} for _, topic, pattern in grants]}))
    return 0


def _config_pairs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"config {pair!r} is not KEY=VALUE, e.g. retention_ms=86400000", EXIT_USAGE)
        out[key] = value
    return out


def _convert(config: dict[str, str], struct: type):  # type: ignore[no-untyped-def]
    """KEY=VALUE strings as the HTTP body's config (the same msgspec Struct, so the same keys
    and types), numbers and booleans parsed from their text."""
    import msgspec

    from app.api.json_body import with_known_fields

    try:
        return msgspec.convert(config, struct, strict=False)
    except msgspec.ValidationError as e:
        raise CommandError(f"config: {with_known_fields(str(e), struct)}", EXIT_USAGE) from None


def _open_existing(settings: Settings, *, pool_size: int):  # type: ignore[no-untyped-def]
    """The database of a one-shot command, which must exist and be at the code's schema."""
    from app.storage import migrate
    from app.storage.engine import sqlite_path
    from app.storage.engine import open_database

    if settings.is_sqlite and (path := sqlite_path(settings.database_url)) and not path.exists():
        # Opening it would create an empty file, in whatever directory this ran from.
        raise CommandError(f"no SQLite database at {path.resolve()}; set OUTBOX_DATABASE_URL, "
                           f"or create one with `outbox migrate`")
    db = open_database(settings, pool_size=pool_size)
    try:
        migrate.require_head(db.engine)
    except BaseException:
        db.dispose()
        raise
    return db


def _require_sqlite_directory(settings: Settings) -> None:
    from app.storage.engine import sqlite_path

    if settings.is_sqlite and (path := sqlite_path(settings.database_url)):
        if not path.resolve().parent.is_dir():
            raise CommandError(f"cannot create the SQLite database {path}: directory "
                               f"{path.resolve().parent} does not exist")


# --- the command line -----------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[no-untyped-def]
        # One line, like every other mistake (argparse prints the usage block first).
        raise CommandError(f"{message} (see `{self.prog} --help`)", EXIT_USAGE)


def port_number(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise ValueError(text)
    return port


def non_negative(text: str) -> int:
    number = int(text)
    if number < 0:
        raise ValueError(text)
    return number


def build_parser() -> argparse.ArgumentParser:
    # -v is accepted after the subcommand too (`outbox transactions list -v`); SUPPRESS leaves
    # the top-level value alone when a subcommand's flag is absent.
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                         help="on an error, print the traceback too")
    parser = _Parser(
        prog="outbox",
        description="Kafka-style transactions over HTTP. Settings come from OUTBOX_* variables "
        "(OUTBOX_DATABASE_URL, default sqlite:///./outbox.db). Exit status: 0 done, 1 failed "
        "(database, unknown id, schema, port in use), 2 bad command line or OUTBOX_* setting.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", default=False,
                        help="on an error, print the traceback too")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, **kwargs: object) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[verbose], **kwargs)  # type: ignore[arg-type]

    serve = command("serve", help="run the HTTP API (with the coordinator worker in-process)")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=port_number, default=None)
    serve.add_argument("--no-coordinator", action="store_true",
                       help="do not run the coordinator worker in this process")
    serve.set_defaults(func=_serve)
    coord = command("coordinator", help="run the coordinator worker alone")
    coord.add_argument("--once", action="store_true", help="one pass, then exit")
    coord.set_defaults(func=_coordinator)
    mig = command("migrate", help="move the configured database's schema to a revision (default: head)")
    mig.add_argument("revision", nargs="?", default="head", help="head (default), base, or a revision such as 0003")
    mig.add_argument("--downgrade", action="store_true",
                     help="allow moving to an older revision, which drops what later migrations added")
    mig.set_defaults(func=_migrate)
    bk = command("backup", help="copy the live SQLite database to a new file (PostgreSQL: pg_dump)")
    bk.add_argument("path", help="the backup file to create (it must not exist)")
    bk.set_defaults(func=_backup)
    tx = command("transactions", help="operator tools: list, describe, hanging, abort")
    txs = tx.add_subparsers(dest="action", required=True)
    tl = txs.add_parser("list", parents=[verbose], help="transactions, by state and age")
    tl.add_argument("--state", action="append", help="e.g. Ongoing (repeatable)")
    tl.add_argument("--min-age-ms", type=int, default=None)
    tl.add_argument("--limit", type=int, default=1000)
    txs.add_parser("hanging", parents=[verbose],
                   help="open (or completing) longer than the maximum transaction timeout")
    td = txs.add_parser("describe", parents=[verbose])
    td.add_argument("transactional_id")
    ta = txs.add_parser("abort", parents=[verbose], help="abort an open transaction and fence its producer")
    ta.add_argument("transactional_id")
    tx.set_defaults(func=_transactions)
    tp = command("topics", help="topic administration: list, describe, create, alter, add-partitions, "
                 "delete, delete-records")
    tps = tp.add_subparsers(dest="action", required=True)
    tps.add_parser("list", parents=[verbose], help="every topic with its partition count and config")
    tpd = tps.add_parser("describe", parents=[verbose], help="a topic and its partitions' offsets and sizes")
    tpd.add_argument("topic")
    tpc = tps.add_parser("create", parents=[verbose], help="create a topic (CreateTopics)")
    tpc.add_argument("topic")
    tpc.add_argument("--partitions", type=int, default=1)
    tpc.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                     help="e.g. retention_ms=86400000 (repeatable)")
    tpa = tps.add_parser("alter", parents=[verbose],
                         help="set config keys, keep the others (IncrementalAlterConfigs)")
    tpa.add_argument("topic")
    tpa.add_argument("config", nargs="+", metavar="KEY=VALUE",
                     help="cleanup_policy, retention_ms, retention_bytes, delete_retention_ms, "
                     "check_expected_offsets, max_message_bytes")
    tpp = tps.add_parser("add-partitions", parents=[verbose],
                         help="grow a topic to PARTITION_COUNT partitions (CreatePartitions)")
    tpp.add_argument("topic")
    tpp.add_argument("partition_count", type=int)
    tpx = tps.add_parser("delete", parents=[verbose],
                         help="delete a topic (DeleteTopics); refused while transactions use it")
    tpx.add_argument("topic")
    tpr = tps.add_parser("delete-records", parents=[verbose],
                         help="move a partition's log start to OFFSET (DeleteRecords)")
    tpr.add_argument("topic")
    tpr.add_argument("partition", type=non_negative)
    tpr.add_argument("offset", type=non_negative)
    tp.set_defaults(func=_topics)
    gp = command("groups", help="consumer groups: lag")
    gps = gp.add_subparsers(dest="action", required=True)
    gpl = gps.add_parser("lag", parents=[verbose], help="a group's position and lag in records per partition of the "
                         "topics it consumes; null (unknown) where it has committed no offset")
    gpl.add_argument("group_id")
    gp.set_defaults(func=_groups)
    pr = command("principals", help="API keys: create (prints the key once), list, revoke")
    prs = pr.add_subparsers(dest="action", required=True)
    prc = prs.add_parser("create", parents=[verbose], help="a new API key for PRINCIPAL (User:<name>, or <name>)")
    prc.add_argument("principal")
    prl = prs.add_parser("list", parents=[verbose], help="API key ids by principal (never the keys)")
    prl.add_argument("principal", nargs="?", default=None)
    prr = prs.add_parser("revoke", parents=[verbose], help="revoke PRINCIPAL's API keys, or one with --key-id")
    prr.add_argument("principal")
    prr.add_argument("--key-id", default=None)
    pr.set_defaults(func=_principals)
    from app.domain.acl import Operation

    ac = command("acls", help="ACL bindings: add, list, remove (like kafka-acls.sh)")
    acs = ac.add_subparsers(dest="action", required=True)
    for action, text in (("add", "allow or deny principals operations on resources"),
                         ("remove", "remove the bindings named (the same flags as add)")):
        a = acs.add_parser(action, parents=[verbose], help=text)
        a.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
        a.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
        a.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                       choices=[op.value for op in Operation])
        a.add_argument("--topic", action="append", default=[])
        a.add_argument("--group", action="append", default=[])
        a.add_argument("--transactional-id", action="append", default=[])
        a.add_argument("--cluster", action="store_true")
        a.add_argument("--resource-pattern-type", choices=["literal", "prefixed"], default="literal",
                       help="applies to every --topic, --group and --transactional-id named (as in kafka-acls.sh); "
                       "prefixed takes one kind of resource per command")
    acl_list = acs.add_parser("list", parents=[verbose], help="the bindings, all or of one principal or resource")
    acl_list.add_argument("--principal", default=None)
    which = acl_list.add_mutually_exclusive_group()
    which.add_argument("--topic", default=None)
    which.add_argument("--group", default=None)
    which.add_argument("--transactional-id", default=None)
    which.add_argument("--cluster", action="store_true")
    ac.set_defaults(func=_acls)
    gr = command("grant-reader", help="PostgreSQL: create or grant ROLE read access to committed_records only")
    gr.add_argument("role")
    gr.add_argument("--password-stdin", action="store_true",
                    help="create the role with LOGIN and the password read from standard input")
    gr.set_defaults(func=_grant_reader)
    for name, verb in (("grant-appender", "create or grant ROLE"), ("revoke-appender", "take back from ROLE")):
        ap = command(name, help=f"PostgreSQL: {verb} the right to call outbox.append for these topics "
                     "(revoke-appender with no topic: every topic, and EXECUTE on outbox.append)")
        ap.add_argument("role")
        ap.add_argument("--topic", action="append", default=[], help="a topic's name (repeatable)")
        ap.add_argument("--topic-prefix", action="append", default=[],
                        help="every topic whose name starts with it (repeatable)")
        ap.add_argument("--all-topics", action="store_true", help="every topic, present and future")
        if name == "grant-appender":
            ap.add_argument("--password-stdin", action="store_true",
                            help="create the role with LOGIN and the password read from standard input")
        ap.set_defaults(func=_appender)
    oa = command("openapi", help="write the OpenAPI document as YAML")
    oa.add_argument("--output", "-o", default="openapi.yaml")
    oa.set_defaults(func=_openapi)
    return parser


def main(argv: list[str] | None = None) -> int:
    verbose = False
    try:
        args = build_parser().parse_args(argv)
        verbose = args.verbose
        settings = Settings()
        from app import logs

        logs.configure(settings)
        status = args.func(settings, args)
        sys.stdout.flush()  # here, where a reader that went away is caught below
        return status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of stdout stopped reading (`outbox topics list | head -1`): end quietly, as
        # Unix tools do. Python ignores SIGPIPE, so the write failed instead of ending the
        # process; stdout goes to /dev/null so that flushing it at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # noqa: BLE001 - every mistake ends here, as one line
        message, status = _explain(exc)
        if verbose:
            sys.stderr.write(_redact("".join(traceback.format_exception(exc))))
        sys.stderr.write(f"outbox: error: {_redact(' '.join(message.split()))}\n")
        return status


# --- errors → one line ------------------------------------------------------------------------


def _explain(exc: Exception) -> tuple[str, int]:
    """The line and exit status for an exception that reached `main`."""
    import psycopg

    from app.storage.errors import first_line
    from pydantic import ValidationError
    from sqlalchemy.exc import DBAPIError

    from app.domain.errors import OutboxError, StorageUnavailable
    from app.storage.backup import BackupRefused
    from app.storage.migrate import SchemaMismatch

    if isinstance(exc, CommandError):
        return str(exc), exc.exit_status
    if isinstance(exc, ValidationError) and exc.title == Settings.__name__:
        return _settings_problems(exc), EXIT_USAGE
    if isinstance(exc, (SchemaMismatch, BackupRefused)):
        return str(exc), EXIT_FAILURE
    if isinstance(exc, StorageUnavailable):
        return _database_problem(exc.message), EXIT_FAILURE
    if isinstance(exc, OutboxError):
        return f"{exc.error_code}: {exc.message}", EXIT_FAILURE
    if isinstance(exc, (DBAPIError, psycopg.Error)):
        # Raised outside the service layer's translation: alembic's connection, a schema check.
        orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        return _database_problem(f"database unavailable: {first_line(orig)}"), EXIT_FAILURE
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}{where}", EXIT_FAILURE
    return (f"unexpected {type(exc).__name__}: {first_line(exc)} (run with --verbose for the "
            f"traceback)"), EXIT_FAILURE


def _settings_problems(exc) -> str:  # type: ignore[no-untyped-def]
    problems = []
    for err in exc.errors(include_input=False):
        # A model-level check names its variables itself; a field's problem is named here.
        name = "OUTBOX_" + "_".join(str(p) for p in err["loc"]).upper() if err["loc"] else None
        msg = err["msg"].removeprefix("Value error, ")
        problems.append(f"{name}: {msg}" if name else msg)
    return "; ".join(problems)


def _database_problem(message: str) -> str:
    """A database failure, with the database it was (password hidden) and, for SQLite, why."""
    from app.storage.engine import sqlite_path
    from app.storage.engine import redacted_url

    url = os.environ.get("OUTBOX_DATABASE_URL", Settings.model_fields["database_url"].default)
    if url.startswith("sqlite") and "unable to open database file" in message:
        path = sqlite_path(url)
        if path is not None and not path.resolve().parent.is_dir():
            return f"cannot open the SQLite database {path}: directory {path.resolve().parent} does not exist"
    return f"{message} ({redacted_url(url)})"


def _redact(text: str) -> str:
    """Hide the database password wherever it appears (a driver's message, a traceback)."""
    from sqlalchemy.engine import make_url

    url = os.environ.get("OUTBOX_DATABASE_URL")
    if not url:
        return text
    try:
        password = make_url(url).password
        secrets = [password, quote(password, safe="")] if password else []
    except Exception:  # noqa: BLE001 - unparsable: hide the whole value
        secrets = [url]
    for secret in secrets:
        # Where a URL holds it (":secret@"): a bare replace would also hide "postgres" in
        # "postgresql://" when that is the password.
        text = text.replace(f":{secret}@", ":***@") if secret != url else text.replace(secret, "***")
    return text


if __name__ == "__main__":
    sys.exit(main())
