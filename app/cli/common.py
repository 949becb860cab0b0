"""What the `outbox` commands share: exit statuses, the one error a command raises, the
logger, and opening the database a command works on."""

from __future__ import annotations

import argparse
import logging
import math
import shlex
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.settings import Settings
from app.settings.addresses import host_name

if TYPE_CHECKING:
    from app.composition import Services

EXIT_FAILURE = 1  # the command was right but failed: database, unknown id, schema, port, file
EXIT_USAGE = 2  # the command line or a setting is wrong (argparse's status too)
# The service refused who is calling (401: no or a wrong API key; 403: the principal lacks the
# ACL), over --url; 3 is taken by `outbox serve` (uvicorn's start-up failure).
EXIT_AUTH = 4
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # stdout closed early (`| head`), as a shell reports SIGPIPE

logger = logging.getLogger("app.cli")  # not __name__: one logger for every command's module


class CommandError(Exception):
    """A command's own refusal, reported as it is worded."""

    def __init__(self, message: str, exit_status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def prepare_database(settings: Settings, *, refuse_schema_mismatch: bool) -> None:
    """Start-up of `serve` and `coordinator` (app.storage.migrate.prepare), after the one
    check that gives a clearer line here than SQLite's own."""
    from app.storage import migrate

    if settings.should_auto_migrate:
        require_sqlite_directory(settings)
    migrate.prepare(settings.database_url, auto_migrate=settings.should_auto_migrate,
                    refuse_schema_mismatch=refuse_schema_mismatch,
                    sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms)


def operator() -> str:
    """Who made a change from the command line, for the audit line: the operating system user."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def print_json(answer: object) -> None:
    """An answer as the HTTP API writes it: compact JSON on one line, for scripts and `jq`."""
    import json

    print(json.dumps(answer, ensure_ascii=False, separators=(",", ":")))


def config_pairs(args: argparse.Namespace) -> dict[str, str]:
    """`topics create`'s and `topics alter`'s KEY=VALUE pairs (alter's as arguments or as
    --config), at least one for alter."""
    pairs = [*args.config, *getattr(args, "config_options", [])]
    if args.action == "alter" and not pairs:
        raise CommandError("topics alter: give at least one KEY=VALUE, e.g. retention_ms=86400000", EXIT_USAGE)
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"config {pair!r} is not KEY=VALUE, e.g. retention_ms=86400000", EXIT_USAGE)
        out[key] = value
    return out


def offset_reset_request(args: argparse.Namespace) -> dict[str, object]:
    """`groups reset-offsets`' command line as the body of POST /v1/groups/{group}/offsets/reset,
    for both the direct command and the one over HTTP. As kafka-consumer-groups does, nothing
    is committed without --execute; without --dry-run either, stderr says so once the plan is
    answered (`warn_of_a_plan_only`)."""
    from datetime import datetime, timezone

    body: dict[str, object] = {"dry_run": not args.execute}
    if args.all_topics:
        if args.partition:
            raise CommandError("--partition goes with --topic, not with --all-topics", EXIT_USAGE)
        body["all_topics"] = True
    else:
        body["topic"] = args.topic
    if args.partition:
        body["partitions"] = args.partition
    if args.to_earliest:
        body["to"] = "earliest"
    elif args.to_latest:
        body["to"] = "latest"
    elif args.to_current:
        body["to"] = "current"
    elif args.to_offset is not None:
        body.update(to="offset", offset=args.to_offset)
    elif args.shift_by is not None:
        body.update(to="shift", shift_by=args.shift_by)
    else:
        try:
            at = datetime.fromisoformat(args.to_datetime)
        except ValueError:
            raise CommandError(f"--to-datetime {args.to_datetime!r}: give an ISO 8601 time, e.g. "
                               "2026-11-28T09:30:00Z (UTC when no zone is given)", EXIT_USAGE) from None
        at = at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)
        if at.timestamp() < 0:
            raise CommandError(f"--to-datetime {args.to_datetime!r} is before 1970", EXIT_USAGE)
        body.update(to="timestamp", timestamp_ms=int(at.timestamp() * 1000))
    if args.read_order is not None:
        body["read_order"] = args.read_order
    return body


def warn_of_a_plan_only(args: argparse.Namespace) -> None:
    """After a `groups reset-offsets` answered with its plan: as Kafka's tool warns, an operator
    who forgot --execute must not think it done. Not before the answer: a refused reset (an
    unknown topic) committed nothing either, and its error is the one line to read."""
    if not args.execute and not args.dry_run:
        print("outbox: the plan only, nothing is committed: add --execute to commit it (--dry-run to "
              "say so without this warning)", file=sys.stderr)


def warn_of_a_cut_list(answer: Any) -> None:
    """After `transactions list` or `hanging` answered a list its limit (or the ids one request
    reads) cut: the JSON says it in `next_after`, but a person reading the table, or the JSON
    by eye, would take the first page for the whole list."""
    after = answer.get("next_after") if isinstance(answer, dict) else None
    if after is not None:
        print(f"outbox: {len(answer['transactions']):,} listed, and more may follow: add --after {shlex.quote(after)} "
              "for the next ones (or a larger --limit)", file=sys.stderr)


def open_existing(settings: Settings, *, pool_size: int):  # type: ignore[no-untyped-def]
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


def open_services(settings: Settings) -> Services:
    """The services of a one-shot command, built where `outbox serve` builds them
    (app.composition), on the one connection of the database open_existing opens. The caller
    disposes of services.db."""
    from app.composition import Services
    from app.domain.clock import system_clock

    return Services.build(settings, open_existing(settings, pool_size=1), system_clock)


def require_sqlite_directory(settings: Settings) -> None:
    from app.storage.engine import sqlite_path

    if settings.is_sqlite and (path := sqlite_path(settings.database_url)):
        if not path.resolve().parent.is_dir():
            raise CommandError(f"cannot create the SQLite database {path}: directory "
                               f"{path.resolve().parent} does not exist")


def port_number(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise ValueError(text)
    return port


def listen_host(text: str) -> str:
    """An argparse type: a host name or address to listen on (app.settings.addresses.host_name)."""
    try:
        return host_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# The longest --timeout: a much longer one overflows the socket's wait (an OverflowError from
# the HTTP library at 1e10 s), and no admin request needs more than a day.
MAX_TIMEOUT_S = 86_400


def timeout_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0 and at most MAX_TIMEOUT_S. float() takes
    "nan", "inf" and negative numbers, each of which the HTTP library refuses only when the
    request is made, as an unexpected error; 0 would time out before connecting."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_TIMEOUT_S:  # False for nan too
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {MAX_TIMEOUT_S}, "
                                         f"not {text!r}")
    return seconds


def non_negative(text: str) -> int:
    number = int(text)
    if number < 0:
        raise ValueError(text)
    return number


def an_id(text: str) -> str:
    """An argparse type: a transactional id, group id or topic, which is never empty. An empty
    one would be an empty path segment over HTTP (another route, or none), and its refusal
    would read as a wrong --url rather than the argument's mistake."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def between(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from `low` to `high`."""
    def number(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise ValueError(text)
        return value

    number.__name__ = f"integer from {low} to {high}"  # what argparse names in its refusal
    return number


# What each command group's add_commands is handed: makes a subcommand that takes -v too.
Command = Callable[..., argparse.ArgumentParser]
