"""The `outbox` command: serve, coordinator, migrate, backup, transactions, topics, groups,
principals, acls, grant-reader, grant-appender, revoke-appender, openapi.

A mistake (an unknown transactional id, an unreachable database, a bad OUTBOX_* setting, a
port in use, …) is reported by `main` in one line on stderr, `outbox: error: …`, with an exit
status that says which kind it was (EXIT_*); `--verbose` adds the traceback. Commands raise;
they never print their own errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from urllib.parse import quote

from app.cli import admin, security, server
from app.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CommandError,
)
from app.cli.server import openapi_yaml
from app.settings import Settings

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "CommandError", "build_parser", "main", "openapi_yaml"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[no-untyped-def]
        # One line, like every other mistake (argparse prints the usage block first).
        raise CommandError(f"{message} (see `{self.prog} --help`)", EXIT_USAGE)


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

    # In the order `outbox --help` lists them.
    server.add_commands(command)
    admin.add_commands(command, verbose)
    security.add_commands(command, verbose)
    server.add_openapi_command(command)
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

