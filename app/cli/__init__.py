"""The `outbox` command: serve, coordinator, migrate, backup, transactions, topics, groups,
principals, acls, grant-reader, revoke-reader, grant-appender, revoke-appender, openapi.

With `--url` (or OUTBOX_URL) the admin commands (app.cli.remote.COMMANDS) call a running
service's HTTP API with an API key; without it they open the database, as every other command
does.

A mistake (an unknown transactional id, an unreachable database, a bad OUTBOX_* setting, a
port in use, …) is reported by `main` in one line on stderr, `outbox: error: …`, with an exit
status that says which kind it was (EXIT_*); `--verbose` adds the traceback. Commands raise;
they never print their own errors.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import traceback
from collections.abc import Iterator

from app.cli import admin, remote, security, server
from app.cli.common import (
    EXIT_AUTH,
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    MAX_TIMEOUT_S,
    CommandError,
    logger,
    timeout_seconds,
)
from app.cli.server import openapi_yaml
from app.log_settings import LogSettings
from app.settings import Settings

__all__ = ["EXIT_AUTH", "EXIT_FAILURE", "EXIT_USAGE", "CommandError", "build_parser", "main", "openapi_yaml"]


class _Unrecognized(CommandError):
    """Arguments a (sub)command did not know, named with the help of the one that met them."""


# Where the parse leaves the name of the innermost (sub)command that met arguments it did not
# know, for `parse_args` to point at its help.
_HELP_OF = "_outbox_help_of"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        # No abbreviated options: `grant-reader r --password SECRET` took --password for
        # --password-stdin and then echoed SECRET as an argument it did not know.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[no-untyped-def]
        # One line, like every other mistake (argparse prints the usage block first).
        raise CommandError(f"{message} (see `{self.prog} --help`)", EXIT_USAGE)

    def parse_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        parsed, unknown = self.parse_known_args(args, namespace)
        help_of = vars(parsed).pop(_HELP_OF, self.prog)
        forms = {flag: vars(parsed).pop(_OutputForm.given(flag)) for flag in _OutputForm.FLAGS
                 if hasattr(parsed, _OutputForm.given(flag))}
        if len(forms) > 1:
            raise CommandError(f"{' and '.join(forms)}: give one of them (see `{forms['--json']} --help`)", EXIT_USAGE)
        if unknown:
            # The help of the subcommand that did not know them, where their syntax is:
            # `outbox topics alter --config …` pointed at `outbox --help`.
            raise CommandError(f"unrecognized arguments: {_shown_arguments(unknown)} (see `{help_of} --help`)",
                               EXIT_USAGE)
        return parsed

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        try:
            parsed, unknown = super().parse_known_args(args, namespace)
        except _Unrecognized:
            raise  # named by a subcommand's parser below this one, with its help
        except CommandError:
            # argparse refuses a missing argument (the command, a subcommand's action) before it
            # reports an option it does not know, and that option is most often the mistake:
            # `outbox --bogus` said only that the command was missing. Parsed again with nothing
            # required, the options it did not know are named instead, if there are any.
            unknown = self._unknown_arguments(args, namespace)
            if unknown:
                raise _Unrecognized(f"unrecognized arguments: {_shown_arguments(unknown)} (see `{self.prog} --help`)",
                                    EXIT_USAGE) from None
            raise
        if unknown and not hasattr(parsed, _HELP_OF):
            # The innermost parser that met them returns first: a subcommand's, whose
            # namespace argparse copies into its parent's.
            setattr(parsed, _HELP_OF, self.prog)
        return parsed, unknown

    def _unknown_arguments(self, args, namespace) -> list[str]:  # type: ignore[no-untyped-def]
        # Relaxed in the subcommands too, so that `outbox --bogus groups` names --bogus rather
        # than the missing action of `groups`.
        relaxed = [item for parser in self._tree() for item in (*parser._actions, *parser._mutually_exclusive_groups)
                   if item.required]
        for item in relaxed:
            item.required = False
        try:
            return super().parse_known_args(args, copy.copy(namespace))[1]
        finally:
            for item in relaxed:
                item.required = True

    def _tree(self) -> Iterator[argparse.ArgumentParser]:
        """This parser and its subcommands', all the way down."""
        yield self
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for parser in action.choices.values():
                    yield from parser._tree()


def _shown_arguments(unknown: list[str]) -> str:
    """Arguments argparse did not know, as an error names them: each option, but not its value
    (`--ulr http://user:password@host`, `--apikey TOKEN`, `--passwd=SECRET`), which may be a
    secret given to an option misspelt; an argument after no option is shown as it is."""
    shown, after_option = [], False
    for argument in unknown:
        if argument.startswith("-") and len(argument) > 1:
            option, eq, _ = argument.partition("=")
            shown.append(f"{option}=***" if eq else option)
            after_option = not eq
        else:
            shown.append("***" if after_option else argument)
            after_option = False
    return " ".join(shown)


class _OutputForm(argparse.Action):
    """--json or --table: sets `output`, and notes the flag under an attribute of its own, so
    that `_Parser.parse_args` refuses both given, which would otherwise keep the last silently."""

    FLAGS = ("--json", "--table")

    def __init__(self, option_strings, dest, const=None, default=None, help=None):  # type: ignore[no-untyped-def]
        super().__init__(option_strings, dest, nargs=0, const=const, default=default, help=help)

    @staticmethod
    def given(flag: str) -> str:
        return f"_given{flag.replace('-', '_')}"

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        setattr(namespace, self.dest, self.const)
        setattr(namespace, self.given(option_string), parser.prog)  # whose --help to point at


def build_parser() -> argparse.ArgumentParser:
    # -v is accepted after the subcommand too (`outbox transactions list -v`); SUPPRESS leaves
    # the top-level value alone when a subcommand's flag is absent.
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                         help="on an error, print the traceback too")
    # --json and --table after the subcommand too (`outbox --url U topics list --json`).
    output = argparse.ArgumentParser(add_help=False, parents=[verbose])
    output.add_argument("--json", dest="output", action=_OutputForm, const="json", default=argparse.SUPPRESS,
                        help="print the HTTP API's answer as one line of JSON (the default when stdout is not "
                        "a terminal)")
    output.add_argument("--table", dest="output", action=_OutputForm, const="table", default=argparse.SUPPRESS,
                        help="print a table (the default on a terminal)")
    # --url and the key flags after the subcommand too (`outbox topics list --url U`), as a
    # newcomer writes them after --table.
    _service_flags(output, default=argparse.SUPPRESS)
    admin_commands = ", ".join(sorted(remote.COMMANDS))
    parser = _Parser(
        prog="outbox",
        description="Kafka-style transactions over HTTP. Settings come from OUTBOX_* variables "
        "(OUTBOX_DATABASE_URL, default sqlite:///./outbox.db). The admin commands "
        f"({admin_commands}) call a running service instead when given --url or OUTBOX_URL, "
        "with the API key of OUTBOX_API_KEY or --api-key-file; every other command opens the "
        "database itself. Exit status: 0 done, 1 failed (database or service unreachable, "
        "unknown id, schema, port in use), 2 bad command line or OUTBOX_* setting, 4 refused by the "
        "service's authentication (401) or ACLs (403).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", default=False,
                        help="on an error, print the traceback too")
    _service_flags(parser, default=None)
    parser.set_defaults(output="auto")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, **kwargs: object) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[verbose], **kwargs)  # type: ignore[arg-type]

    # In the order `outbox --help` lists them.
    server.add_commands(command)
    admin.add_commands(command, output)
    security.add_commands(command, output)
    server.add_openapi_command(command)
    return parser


def _service_flags(parser: argparse.ArgumentParser, *, default: object) -> None:
    """The flags that point an admin command at a service over HTTP (default: the top level's
    value, None; SUPPRESS after the subcommand, so that an absent flag leaves it alone)."""
    admin_commands = ", ".join(sorted(remote.COMMANDS))
    parser.add_argument("--url", default=default, metavar="URL",
                        help=f"the service to administer ({admin_commands} only), e.g. "
                        f"http://127.0.0.1:8000; default ${remote.URL_VARIABLE}")
    parser.add_argument("--api-key-file", default=default, metavar="FILE",
                        help="with --url: a file holding the API key; without it, the key itself is read "
                        f"from ${remote.API_KEY_VARIABLE} (the variable holds the key, not a file)")
    parser.add_argument("--api-key", default=default, metavar="KEY",
                        help="with --url: the API key itself (visible to other users in `ps`: prefer "
                        f"${remote.API_KEY_VARIABLE} or --api-key-file)")
    parser.add_argument("--timeout", dest="timeout_s", type=timeout_seconds, default=default, metavar="SECONDS",
                        help=f"with --url: how long to wait for the service's answer (default {remote.TIMEOUT_S:g}, "
                        f"at most {MAX_TIMEOUT_S})")


def main(argv: list[str] | None = None) -> int:
    verbose = False
    argv = sys.argv[1:] if argv is None else argv
    keys = _api_keys(argv)
    try:
        args = build_parser().parse_args(argv)
        verbose = args.verbose
        over_http = _remote(args)
        # Over HTTP the log's settings alone (LogSettings says why).
        settings = LogSettings() if over_http else Settings()
        from app import logs

        logs.configure(settings)
        if not over_http:
            # Once the log is configured, for every command that reads the settings.
            from app.settings.misspelt import warn_of_misspelt_settings

            warn_of_misspelt_settings(os.environ, logger)
        status = remote.run(args) if over_http else args.func(settings, args)
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
            sys.stderr.write(_redact("".join(traceback.format_exception(exc)), keys))
        sys.stderr.write(f"outbox: error: {_redact(' '.join(message.split()), keys)}\n")
        return status


def _remote(args: argparse.Namespace) -> bool:
    """Whether this command goes to a service over HTTP (and not to the database)."""
    given, explicit = args.url, args.url is not None
    if given == "":
        # Read as "no --url" below, an admin command would open the database, or be told that
        # --url is not for it.
        raise CommandError("--url: empty; give the service's address, e.g. http://127.0.0.1:8000", EXIT_USAGE)
    args.url = given or os.environ.get(remote.URL_VARIABLE) or None
    if args.command in remote.COMMANDS and args.url:
        # Before anything is asked: a mistake in the address is the command line's or the
        # variable's, named as such, and not a service that cannot be reached.
        remote.check_url(args.url, "--url" if given else remote.URL_VARIABLE)
        return True
    # A flag that would do nothing here is a mistake; OUTBOX_URL in the environment is not
    # (it is meant for the admin commands, and `outbox migrate` may run in the same shell).
    given = [flag for flag, value in (("--url", explicit), ("--api-key", args.api_key is not None),
                                      ("--api-key-file", args.api_key_file is not None),
                                      ("--timeout", args.timeout_s is not None),
                                      ("--json", args.output == "json"), ("--table", args.output == "table"))
             if value]
    if not given and args.command in remote.COMMANDS and os.environ.get(remote.API_KEY_VARIABLE):
        # The key is set for a service, so the command was meant for one: run on the database
        # instead (a mistyped or unset OUTBOX_URL), it would act with no ACL checked.
        raise CommandError(f"{remote.API_KEY_VARIABLE} is set but neither --url nor {remote.URL_VARIABLE} is: "
                           f"`outbox {args.command}` would open the database (OUTBOX_DATABASE_URL), "
                           f"no ACL checked, not the service as the key's principal; set {remote.URL_VARIABLE}, or unset "
                           f"{remote.API_KEY_VARIABLE} to administer the database", EXIT_USAGE)
    if given:
        where = (f"`outbox {args.command}` opens the database (OUTBOX_DATABASE_URL)"
                 if args.command not in remote.COMMANDS else "without --url or OUTBOX_URL")
        raise CommandError(f"{', '.join(given)}: only for the admin commands over HTTP ({', '.join(sorted(remote.COMMANDS))} "
                           f"with --url); {where}", EXIT_USAGE)
    return False


# --- errors → one line ------------------------------------------------------------------------


def _explain(exc: Exception) -> tuple[str, int]:
    """The line and exit status for an exception that reached `main`."""
    import psycopg

    from app.domain.errors import first_line
    from pydantic import ValidationError
    from sqlalchemy.exc import DBAPIError

    from app.domain.errors import OutboxError, SchemaNotMigrated, StorageUnavailable
    from app.storage.backup import BackupRefused
    from app.storage.migrate import DowngradeNotAsked, NoSuchRevision, SchemaMismatch, StepRefused

    if isinstance(exc, CommandError):
        return str(exc), exc.exit_status
    if isinstance(exc, ValidationError) and exc.title in (Settings.__name__, LogSettings.__name__):
        return _settings_problems(exc), EXIT_USAGE
    if isinstance(exc, (NoSuchRevision, DowngradeNotAsked)):
        return str(exc), EXIT_USAGE
    if isinstance(exc, SchemaMismatch):
        # The service's code for it, which the same command with --url prints: one line, one
        # code, whichever door the command went through.
        return f"{SchemaNotMigrated.error_code}: {exc}", EXIT_FAILURE
    if isinstance(exc, (StepRefused, BackupRefused)):
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
    from app.database_url import redacted_url

    url = _database_url_variable() or Settings.model_fields["database_url"].default
    if url.startswith("sqlite") and "unable to open database file" in message:
        path = sqlite_path(url)
        if path is not None and not path.resolve().parent.is_dir():
            return f"cannot open the SQLite database {path}: directory {path.resolve().parent} does not exist"
    return f"{message} ({redacted_url(url)})"


def _database_url_variable() -> str | None:
    """OUTBOX_DATABASE_URL as Settings reads it: its name in any case (outbox_database_url too),
    the last one in the environment winning where two are given."""
    found = None
    for name, value in os.environ.items():
        if name.upper() == "OUTBOX_DATABASE_URL":
            found = value
    return found


def _api_keys(argv: list[str]) -> list[str]:
    """The API keys this run was given: argparse repeats a misplaced argument in its error
    (`outbox serve --api-key KEY`: "unrecognized arguments: --api-key KEY"), and an ambiguous
    abbreviation of the flag with its value (`--api-ke=KEY`: "ambiguous option: --api-ke=KEY
    could match ..."), so a key is one given after `--api-key` or any prefix of it."""
    def names_the_key(flag: str) -> bool:
        return len(flag) > 2 and "--api-key".startswith(flag)

    given = [value for flag, value in zip(argv, argv[1:]) if names_the_key(flag)]
    given += [value for flag, eq, value in (arg.partition("=") for arg in argv) if eq and names_the_key(flag)]
    given.append(os.environ.get(remote.API_KEY_VARIABLE, ""))
    return [key for key in given if key]


# A value given as a key but shorter than this is no key the service issues, and hiding it
# would mangle the message (OUTBOX_API_KEY=list hid every "list" in it).
_SHORTEST_KEY = 8


def _redact(text: str, api_keys: list[str] | tuple[str, ...] = ()) -> str:
    """Hide the database password and the API keys wherever they appear (a driver's message,
    a traceback, argparse's echo of the command line)."""
    from app.services.security import API_KEY_IN_TEXT
    from app.database_url import hidden_passwords

    # Anything shaped like a key the service hands out, however it reached the message: a flag
    # argparse did not recognise (`--api_key KEY`), a key file's contents in a library's error.
    text = API_KEY_IN_TEXT.sub("***", text)
    # Longest first: a key that holds a shorter one is hidden whole, not with its rest shown.
    for key in sorted((k for k in api_keys if len(k) >= _SHORTEST_KEY), key=len, reverse=True):
        text = text.replace(key, "***")
    url = _database_url_variable()
    if url:
        for secret, shown in hidden_passwords(url):
            text = text.replace(secret, shown)
    return text

