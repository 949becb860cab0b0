"""The `outbox` command's answer to an operator's ordinary mistakes: one line on stderr,
`outbox: error: …`, exit status 1 (it failed) or 2 (the command line or a setting is wrong),
no traceback unless `--verbose`; and `outbox migrate`'s own report, up and down.

Where a case is about the command's own answer (its arguments, settings, database checks and
error lines), `cli` (tests/conftest.py) runs `app.cli.main` in this process: the same code as `python -m app.cli`
without a Python start-up (about 3 s of CPU each). What only a process shows (a signal's exit
status, a port, uvicorn's and alembic's own output, a long-running command) runs the real
`python -m app.cli` in a subprocess (`outbox`); the first tests below keep the two forms
answering alike, output (a library's warnings on stderr included) and exit status. `serve` and
`coordinator` without --once run until a signal: `cli` refuses them, whatever the test expects.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from app import cli as outbox_cli
from app.storage import migrate
from tests.e2e.conftest import ADMIN_URL, ROOT, migrated_copy, port_was_taken
from tests.outbox_command import Run, outbox, runner

pytestmark = pytest.mark.e2e

UNREACHABLE_PG = "postgresql+psycopg://outbox:s3cret-pw@127.0.0.1:1/outbox"
REVISIONS = migrate.revisions()  # the code's, oldest first
HEAD = REVISIONS[-1]
PREVIOUS = REVISIONS[-2]
UNKNOWN = f"{int(HEAD) + 1:04d}"  # what a newer version would have written


def one_error_line(done: subprocess.CompletedProcess, status: int) -> str:
    """The run's only stderr line, after checking the exit status and the absence of a traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("outbox: error: "), lines[0]
    assert done.returncode == status, (done.returncode, done.stderr)
    return lines[0].removeprefix("outbox: error: ")


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of each kind that exists but was never migrated."""
    if request.param == "sqlite":
        path = tmp_path / "empty.db"
        sqlite3.connect(path).close()
        yield f"sqlite:///{path}"
        return
    name = f"outbox_cli_{uuid.uuid4().hex[:10]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def migrated(empty_database: str) -> str:
    """`empty_database` at the head: a copy of a database `outbox migrate` migrated once a process
    (tests/e2e/conftest.py, `migrated_copy`) rather than a migration of its own, which was most
    of these tests' setup. `outbox migrate`'s own run on an empty database is
    test_migrate_reports_each_migration_it_applied_and_nothing_from_alembic's."""
    migrated_copy(empty_database)
    return empty_database


def revision(url: str) -> str | None:
    engine = create_engine(url, poolclass=NullPool)
    try:
        if "alembic_version" not in inspect(engine).get_table_names():
            return None
        with engine.connect() as conn:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()


@pytest.mark.parametrize("empty_database", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("args", "settings"), [
    (("transactions", "describe"), {}),  # argparse's refusal, exit 2
    (("transactions", "list"), {"port": "abc"}),  # a setting's, exit 2
    (("transactions", "describe", "pizza-income-0"), {}),  # the service's error, exit 1
    (("-v", "transactions", "abort", "pizza-income-0"), {}),  # and its traceback
    (("migrate",), {}),  # a command's output on stdout, exit 0
], ids=["usage", "setting", "failure", "verbose", "output"])
def test_the_command_in_this_process_answers_as_the_process(migrated: str, cli: Run, args: tuple[str, ...],
                                                            settings: dict[str, str]) -> None:
    in_process, process = cli(migrated, *args, **settings), outbox(migrated, *args, **settings)
    assert (in_process.returncode, in_process.stdout, in_process.stderr) == (
        process.returncode, process.stdout, process.stderr)


@pytest.mark.parametrize("empty_database", ["postgresql"], indirect=True)
@pytest.mark.parametrize(("database", "args", "settings"), [
    ("unreachable", ("transactions", "list"), {}),
    ("no-sqlite-file", ("transactions", "list"), {}),
    ("unmigrated", ("transactions", "list"), {"auto_migrate": "false"}),
    ("unmigrated", ("backup", "/tmp/never-written.db"), {}),
], ids=["unreachable-postgresql", "missing-sqlite-file", "unmigrated", "backup-of-postgresql"])
def test_the_command_in_this_process_fails_as_the_process(empty_database: str, tmp_path: Path, cli: Run,
                                                          database: str, args: tuple[str, ...],
                                                          settings: dict[str, str]) -> None:
    # The database error paths, where a library's warning (SQLAlchemy's, the driver's) would
    # come out on stderr beside the one line.
    url = {"unreachable": UNREACHABLE_PG, "no-sqlite-file": f"sqlite:///{tmp_path}/outbox.db",
           "unmigrated": empty_database}[database]
    in_process, process = cli(url, *args, **settings), outbox(url, *args, **settings)
    assert process.returncode in (1, 2) and "outbox: error: " in process.stderr, process.stderr
    assert (in_process.returncode, in_process.stdout, in_process.stderr) == (
        process.returncode, process.stdout, process.stderr)


def test_cli_refuses_a_command_that_runs_until_a_signal(cli: Run) -> None:
    for args in [("serve", "--port", "0"), ("coordinator",), ("-v", "coordinator")]:
        with pytest.raises(AssertionError, match="runs until a signal"):
            cli(UNREACHABLE_PG, *args)


def test_cli_puts_back_what_the_command_changed_in_this_process(cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    def main(argv: list[str]) -> int:
        # What `serve` and `coordinator` do to their process (app/cli/server.py), and a warning.
        signal.signal(signal.SIGTERM, lambda *_: None)
        gc.freeze()
        gc.disable()
        gc.set_threshold(1)
        logging.getLogger("outbox.a-logger-made-by-the-command").addHandler(logging.StreamHandler(sys.stderr))
        warnings.warn("a library's warning")
        raise SystemExit()

    handler, threshold = signal.getsignal(signal.SIGTERM), gc.get_threshold()
    frozen, enabled = gc.get_freeze_count(), gc.isenabled()
    monkeypatch.setattr(outbox_cli, "main", main)
    done = cli(None, "topics", "list")

    assert done.returncode == 0  # SystemExit() exits a process with 0
    assert "UserWarning: a library's warning" in done.stderr.splitlines()[0]
    assert signal.getsignal(signal.SIGTERM) is handler
    assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == (threshold, frozen, enabled)
    assert logging.getLogger("outbox.a-logger-made-by-the-command").handlers == []


def test_cli_leaves_the_handlers_of_this_process_open(tmp_path: Path, cli: Run) -> None:
    handler = logging.FileHandler(tmp_path / "pytest.log", mode="w")  # as pytest's --log-file handler is
    logging.root.addHandler(handler)
    try:
        cli(f"sqlite:///{tmp_path}/outbox.db", "transactions", "list")  # main() configures logging
        assert handler in logging.root.handlers
        logging.root.warning("still written")  # a closed "w" handler drops it
        handler.flush()
        assert "still written" in (tmp_path / "pytest.log").read_text()
    finally:
        logging.root.removeHandler(handler)
        handler.close()

# --- runtime failures: exit 1 ---------------------------------------------------------------------


@pytest.mark.parametrize("action", ["describe", "abort"])
def test_an_unknown_transactional_id_is_one_line_and_exit_1(migrated: str, action: str, cli: Run) -> None:
    line = one_error_line(cli(migrated, "transactions", action, "pizza-income-0"), 1)
    assert line == ("TRANSACTIONAL_ID_NOT_FOUND: no producer was initialised with transactional_id "
                    "'pizza-income-0'")


@pytest.mark.parametrize("args", [("transactions", "list"), ("migrate",), ("coordinator", "--once")])
def test_an_unreachable_postgresql_is_one_line_naming_it_without_its_password(args: tuple[str, ...], cli: Run) -> None:
    line = one_error_line(cli(UNREACHABLE_PG, *args), 1)
    assert line.startswith("database unavailable: connection failed:"), line
    assert line.endswith("(postgresql+psycopg://outbox:***@127.0.0.1:1/outbox)"), line
    assert "s3cret-pw" not in line


@pytest.mark.parametrize("query", ["password=s3cret-pw", "sslpassword=s3cret-pw", "PASSWORD=s3cret-pw",
                                   "password=s3cret%40pw"])
def test_an_unreachable_postgresql_is_named_without_a_password_given_in_its_query(query: str, cli: Run) -> None:
    key = query.partition("=")[0]
    line = one_error_line(cli(f"postgresql+psycopg://outbox@127.0.0.1:1/outbox?{query}", "transactions", "list"), 1)
    assert line.endswith(f"(postgresql+psycopg://outbox@127.0.0.1:1/outbox?{key}=***)"), line
    assert "s3cret" not in line


def test_a_database_url_variable_named_in_lower_case_is_the_one_named_without_its_password(
        cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    # The settings take OUTBOX_* names in any case: the message names the database they used.
    monkeypatch.setenv("outbox_database_url", UNREACHABLE_PG)
    line = one_error_line(cli(None, "transactions", "list"), 1)
    assert line.endswith("(postgresql+psycopg://outbox:***@127.0.0.1:1/outbox)"), line
    assert "s3cret-pw" not in line


def test_what_is_printed_never_shows_a_password_given_in_the_query(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every line main() writes to stderr, a -v traceback's too, passes through _redact. (psycopg's
    # own messages do not repeat a password: a traceback of a real failure would pass unhidden.)
    url = "postgresql+psycopg://outbox@127.0.0.1:1/outbox?password=s3cret-pw"
    monkeypatch.setenv("OUTBOX_DATABASE_URL", url)
    printed = outbox_cli._redact(f'connect({url!r})\nconninfo: host=127.0.0.1 password=s3cret-pw dbname=outbox')
    assert printed == ("connect('postgresql+psycopg://outbox@127.0.0.1:1/outbox?password=***')\n"
                       "conninfo: host=127.0.0.1 password=*** dbname=outbox")


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql+psycopg://outbox:s3c@ret@127.0.0.1:1/outbox", "postgresql+psycopg://outbox:***@127.0.0.1:1/outbox"),
    ("postgresql+psycopg://outbox:s3c@r/e?t@127.0.0.1:1/outbox", "postgresql+psycopg://outbox:***@127.0.0.1:1/outbox"),
    ("postgresql+psycopg://outbox:s3c@ret?x@127.0.0.1:1/outbox", "postgresql+psycopg://outbox:***@127.0.0.1:1/outbox"),
    # An "@" in a parameter's value is the URL's own: the host is still the one given.
    ("postgresql+psycopg://outbox:s3cret@127.0.0.1:1/outbox?application_name=me@work",
     "postgresql+psycopg://outbox:***@127.0.0.1:1/outbox?application_name=me%40work"),
    ("postgresql+psycopg://outbox:s3cret@127.0.0.1:1/outbox?sslpassword=s3cret&passfile=/pgpass",
     "postgresql+psycopg://outbox:***@127.0.0.1:1/outbox?passfile=%2Fpgpass&sslpassword=***"),
])
def test_a_database_url_shown_in_a_message_never_shows_any_part_of_a_password(url: str, shown: str) -> None:
    # Every message and log line that names the database shows it through this function.
    from app.database_url import redacted_url

    assert redacted_url(url) == shown


def test_serve_waiting_for_postgresql_names_it_without_a_password_given_in_its_query() -> None:
    done = _uvicorn("postgresql+psycopg://outbox@127.0.0.1:1/outbox?password=s3cret-pw")
    assert done.returncode == 0, done.stderr
    assert "database postgresql+psycopg://outbox@127.0.0.1:1/outbox?password=*** does not answer yet" in done.stderr
    assert "s3cret" not in done.stderr + done.stdout


@pytest.mark.parametrize("args", [("migrate",), ("serve", "--port", "0"), ("coordinator",)])
def test_a_sqlite_file_in_a_missing_directory_cannot_be_created(tmp_path: Path, args: tuple[str, ...]) -> None:
    url = f"sqlite:///{tmp_path}/no/such/dir/outbox.db"
    line = one_error_line(outbox(url, *args), 1)
    assert line == (f"cannot create the SQLite database {tmp_path}/no/such/dir/outbox.db: "
                    f"directory {tmp_path}/no/such/dir does not exist")


@pytest.mark.parametrize("args", [("transactions", "list"), ("coordinator", "--once")])
def test_one_shot_commands_do_not_create_a_sqlite_file_that_is_not_there(tmp_path: Path, args: tuple[str, ...],
                                                                         cli: Run) -> None:
    # SQLite's default is to migrate on start-up (OUTBOX_AUTO_MIGRATE unset): not these.
    line = one_error_line(cli(f"sqlite:///{tmp_path}/outbox.db", *args), 1)
    assert line.startswith(f"no SQLite database at {tmp_path}/outbox.db;"), line
    assert not (tmp_path / "outbox.db").exists()


def _uvicorn(database_url: str, **settings: str) -> subprocess.CompletedProcess:
    """`uvicorn app.main:app` until it has started (or failed): the app's own start-up path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env.update({"OUTBOX_DATABASE_URL": database_url, **{f"OUTBOX_{k.upper()}": v for k, v in settings.items()}})
    code = ("import uvicorn, sys; from uvicorn.config import Config; "
            "server = uvicorn.Server(Config('app.main:app', port=0)); "
            "server.should_exit = True; server.run(); sys.exit(0 if server.started else 3)")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def test_uvicorn_never_echoes_a_refused_database_url(tmp_path: Path) -> None:
    done = _uvicorn("mysql://outbox:s3cret-pw@db.example/outbox")
    assert done.returncode != 0
    assert "database_url" in done.stderr  # pydantic names the field it refused
    assert "s3cret-pw" not in done.stderr + done.stdout


def test_uvicorn_migrates_a_new_sqlite_file_and_says_so(tmp_path: Path) -> None:
    done = _uvicorn(f"sqlite:///{tmp_path}/outbox.db")
    assert done.returncode == 0, done.stderr
    assert f"upgraded {REVISIONS[-2]} -> {HEAD}" in done.stderr, done.stderr


def test_uvicorn_on_a_schema_of_a_newer_version_starts_not_ready_instead_of_failing(migrated: str) -> None:
    engine = create_engine(migrated, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE alembic_version SET version_num = '{UNKNOWN}'"))
    engine.dispose()
    done = _uvicorn(migrated, auto_migrate="true")
    assert done.returncode == 0, done.stderr
    assert f"the database is at revision {UNKNOWN}, which this version of outbox does not know" in done.stderr


@pytest.mark.parametrize("args", [("transactions", "list"), ("transactions", "hanging"), ("coordinator", "--once"),
                                  ("coordinator",)])
def test_an_unmigrated_database_is_one_line_that_says_to_migrate(empty_database: str, args: tuple[str, ...],
                                                                 cli: Run) -> None:
    line = one_error_line(runner(args, cli)(empty_database, *args, auto_migrate="false"), 1)
    assert line == f"SCHEMA_NOT_MIGRATED: the database has no outbox schema: run `outbox migrate` (to {HEAD})"


def test_an_older_schema_is_one_line_that_says_to_migrate(empty_database: str, cli: Run) -> None:
    assert cli(empty_database, "migrate", "0003").returncode == 0
    line = one_error_line(cli(empty_database, "transactions", "list"), 1)
    assert line == f"SCHEMA_NOT_MIGRATED: the database schema is at 0003, this version needs {HEAD}: run `outbox migrate`"


def test_serve_on_a_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = outbox(f"sqlite:///{tmp_path}/outbox.db", "serve", "--port", str(port))
    line = one_error_line(done, 1)
    assert line.startswith(f"cannot listen on 127.0.0.1:{port}: the address is already in use"), line
    # The e2e harness starts `serve` again on another port when it reads this line.
    assert port_was_taken(line)


def test_a_kafka_listener_on_a_port_in_use_names_the_listener_s_flags_to_change_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = outbox(f"sqlite:///{tmp_path}/outbox.db", "serve", "--port", "0",
                      "--kafka-listener", f"127.0.0.1:{port}")
    assert one_error_line(done, 1) == (
        f"Kafka listener (OUTBOX_KAFKA_LISTENER, --kafka-listener): cannot listen on 127.0.0.1:{port}: the address "
        "is already in use (another process listens there); choose another port with --kafka-listener or "
        "OUTBOX_KAFKA_LISTENER")


# --- the command line or a setting is wrong: exit 2 ------------------------------------------------


def test_a_bad_setting_names_the_variable_and_the_problem(tmp_path: Path) -> None:
    line = one_error_line(outbox(f"sqlite:///{tmp_path}/outbox.db", "serve", port="abc"), 2)
    assert line == "OUTBOX_PORT: Input should be a valid integer, unable to parse string as an integer"


def _encrypted_key_and_its_certificate(d: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization

    from tests.kafka.secured import self_signed_certificate

    cert_file, key_file = self_signed_certificate(d)
    key = serialization.load_pem_private_key(key_file.read_bytes(), None)
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.BestAvailableEncryption(b"pass phrase")))
    return cert_file, key_file


@pytest.mark.parametrize("args", [("serve", "--port", "0"), ("serve", "--port", "0", "--kafka-listener", "127.0.0.1:0")])
def test_serve_refuses_an_encrypted_key_in_one_line_rather_than_asking_for_its_pass_phrase(
        tmp_path: Path, args: tuple[str, ...]) -> None:
    cert_file, key_file = _encrypted_key_and_its_certificate(tmp_path)
    line = one_error_line(outbox(f"sqlite:///{tmp_path}/outbox.db", *args, tls_cert_file=str(cert_file),
                                 tls_key_file=str(key_file)), 2)
    assert line == (f"OUTBOX_TLS_KEY_FILE: the private key in {key_file} is encrypted (it has a pass phrase), which "
                    "the service cannot be given; write it unencrypted (openssl pkey -in KEY -out PLAIN_KEY), "
                    "readable by the service's user only")


def test_settings_that_contradict_each_other_are_named(tmp_path: Path, cli: Run) -> None:
    done = cli(f"sqlite:///{tmp_path}/outbox.db", "transactions", "list",
                  default_transaction_timeout_ms="20000", max_transaction_timeout_ms="10000")
    assert one_error_line(done, 2) == (
        "OUTBOX_DEFAULT_TRANSACTION_TIMEOUT_MS exceeds OUTBOX_MAX_TRANSACTION_TIMEOUT_MS")


def test_a_misspelt_setting_is_a_warning_naming_the_setting_it_is_near(tmp_path: Path, cli: Run) -> None:
    # pydantic-settings ignores a variable that is no setting: misspelt, its setting would stay
    # at its default without a word.
    done = cli(f"sqlite:///{tmp_path}/outbox.db", "migrate", fetch_max_wait="1000")

    assert done.returncode == 0, done.stderr
    assert ("OUTBOX_FETCH_MAX_WAIT is no setting, and is ignored: OUTBOX_FETCH_MAX_WAIT_MS misspelt?"
            in done.stderr)


def test_a_database_url_that_is_not_one_is_refused_without_repeating_it(cli: Run) -> None:
    line = one_error_line(cli("mysql://outbox:s3cret-pw@db/outbox", "migrate"), 2)
    assert line == "OUTBOX_DATABASE_URL: 'mysql' databases are not supported; use sqlite or postgresql"


@pytest.mark.parametrize(("url", "problem"), [
    ("postgresql+psycopg2://outbox:s3cret-pw@db/outbox", "the driver 'postgresql+psycopg2' is not supported; use "),
    ("postgresql+pg8000://outbox:s3cret-pw@db/outbox", "the driver 'postgresql+pg8000' is not supported; use "),
    ("postgresql+asyncpg://outbox:s3cret-pw@db/outbox", "the driver 'postgresql+asyncpg' is not supported; use "),
    ("sqlite://", "SQLite needs a database file, not an in-memory database "),
    ("sqlite:///:memory:", "SQLite needs a database file, not an in-memory database "),
    ("postgresql+psycopg://outbox:s3c@ret-pw@db/outbox", "the user, password or database holds an '@' as it is: write it %40"),
    ("postgresql+psycopg://outbox:s3c@ret/pw@db/outbox", "the user, password or database holds an '@' as it is: write it %40"),
    ("postgresql+psycopg://outbox:s3cret-pw@db..example/outbox", "'db..example' is not a valid host name"),
])
def test_a_database_url_the_service_cannot_run_with_is_a_setting_error(url: str, problem: str, cli: Run) -> None:
    line = one_error_line(cli(url, "groups", "list"), 2)
    assert line.startswith(f"OUTBOX_DATABASE_URL: {problem}"), line
    assert "s3c" not in line


def test_serve_on_an_in_memory_sqlite_database_is_refused_before_it_migrates() -> None:
    line = one_error_line(outbox("sqlite:///:memory:", "serve", "--port", "0"), 2)
    assert line == ("OUTBOX_DATABASE_URL: SQLite needs a database file, not an in-memory database (each process "
                    "would have its own, empty): sqlite:///path.db")


def test_a_missing_argument_is_one_line_and_exit_2(tmp_path: Path, cli: Run) -> None:
    line = one_error_line(cli(f"sqlite:///{tmp_path}/outbox.db", "transactions", "describe"), 2)
    assert line == ("the following arguments are required: transactional_id "
                    "(see `outbox transactions describe --help`)")


@pytest.mark.parametrize(("args", "help_of"), [(("--bogus",), "outbox"), (("--bogus", "groups"), "outbox"),
                                               (("groups", "--bogus"), "outbox groups")],
                         ids=["no command", "a command missing its action", "after the command"])
def test_an_unknown_option_is_the_mistake_named_though_an_argument_is_missing(tmp_path: Path, cli: Run,
                                                                             args: tuple[str, ...],
                                                                             help_of: str) -> None:
    line = one_error_line(cli(f"sqlite:///{tmp_path}/outbox.db", *args), 2)
    assert line == f"unrecognized arguments: --bogus (see `{help_of} --help`)"


@pytest.mark.parametrize(("args", "help_of"), [
    (("topics", "alter", "orders", "--retention", "1000"), "outbox topics alter"),
    (("topics", "delete-records", "orders", "--bogus"), "outbox topics delete-records"),
    (("topics", "list", "--bogus"), "outbox topics list"),
    (("--bogus", "topics", "list"), "outbox"),
], ids=["a subcommand's", "a subcommand's, an argument missing too", "a listing's", "the command's own"])
def test_an_unknown_option_points_at_the_help_of_the_command_that_did_not_know_it(
        tmp_path: Path, cli: Run, args: tuple[str, ...], help_of: str) -> None:
    line = one_error_line(cli(f"sqlite:///{tmp_path}/outbox.db", *args), 2)
    assert line.endswith(f"(see `{help_of} --help`)"), line


@pytest.mark.parametrize(("args", "settings", "message"), [
    (("serve", "--host", "nohost..x"), {},
     "argument --host: 'nohost..x' is not a valid host name (label empty or too long) (see `outbox serve --help`)"),
    (("serve",), {"host": "not..a..host"},
     "OUTBOX_HOST: 'not..a..host' is not a valid host name (label empty or too long)"),
    (("serve", "--kafka-listener", "nohost..x:9092"), {},
     "--kafka-listener: 'nohost..x' is not a valid host name (label empty or too long)"),
], ids=["--host", "OUTBOX_HOST", "--kafka-listener"])
def test_serve_on_a_host_name_no_resolver_takes_is_one_line_naming_where_it_came_from(
        tmp_path: Path, args: tuple[str, ...], settings: dict[str, str], message: str) -> None:
    done = outbox(f"sqlite:///{tmp_path}/outbox.db", *args, **settings)
    assert one_error_line(done, 2) == message


@pytest.mark.parametrize("empty_database", ["postgresql"], indirect=True)
def test_backup_of_postgresql_names_what_to_use_instead(migrated: str, cli: Run) -> None:
    line = one_error_line(cli(migrated, "backup", "/tmp/never-written.db"), 2)
    assert line.startswith("outbox backup copies SQLite databases; back up PostgreSQL with `pg_dump -Fc`")
    assert not Path("/tmp/never-written.db").exists()


@pytest.mark.parametrize("empty_database", ["sqlite"], indirect=True)
@pytest.mark.parametrize("args", [("grant-reader", "spark_reader"), ("revoke-reader", "spark_reader"),
                                  ("grant-appender", "shop", "--all-topics"), ("revoke-appender", "shop")],
                         ids=lambda a: a[0])
def test_the_role_commands_on_sqlite_do_not_apply_exit_2_as_backup_on_postgresql(
        migrated: str, cli: Run, args: tuple[str, ...]) -> None:
    # README, Command-line errors: 2 is "the command does not apply", as `outbox backup` on
    # PostgreSQL is; these are its mirror, PostgreSQL's roles asked of an SQLite file.
    line = one_error_line(cli(migrated, *args), 2)
    assert f"{args[0]} is for PostgreSQL: an SQLite file has no roles" in line


# --- --verbose ------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag_position", ["before", "after"])
def test_verbose_prints_the_traceback_then_the_same_line(migrated: str, flag_position: str, cli: Run) -> None:
    args = ["transactions", "describe", "pizza-income-0"]
    args = ["--verbose", *args] if flag_position == "before" else [*args, "-v"]
    done = cli(migrated, *args)
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):"), done.stderr
    assert "app.domain.errors.TransactionalIdNotFound" in done.stderr
    assert done.stderr.splitlines()[-1] == ("outbox: error: TRANSACTIONAL_ID_NOT_FOUND: no producer was "
                                            "initialised with transactional_id 'pizza-income-0'")


def test_verbose_hides_the_database_password_in_the_traceback_too(cli: Run) -> None:
    done = cli(UNREACHABLE_PG, "-v", "transactions", "list")
    assert "Traceback" in done.stderr
    assert "s3cret-pw" not in done.stderr


# --- outbox migrate -------------------------------------------------------------------------------


def test_migrate_reports_each_migration_it_applied_and_nothing_from_alembic(empty_database: str) -> None:
    done = outbox(empty_database, "migrate")
    assert done.returncode == 0, done.stderr
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == [
        f"upgraded {older or 'empty'} -> {newer}" for older, newer in zip([None, *REVISIONS], REVISIONS)
    ] + [f"database at {HEAD}"]
    assert done.stderr == ""
    again = outbox(empty_database, "migrate")
    assert (again.stdout, again.stderr) == (f"database at {HEAD}\n", "")


def test_the_alembic_command_line_names_each_migration_it_runs(empty_database: str) -> None:
    """`alembic upgrade head` from the repository root, as an operator runs it: alembic.ini's
    logging acts (migrations/env.py reads it), so each step is named, not a silent exit."""
    alembic = Path(sys.executable).with_name("alembic")
    env = {**os.environ, "OUTBOX_DATABASE_URL": empty_database}
    done = subprocess.run([str(alembic), "upgrade", "head"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [line.split(", ")[0].split("] ")[1] for line in done.stderr.splitlines() if "Running upgrade" in line] == [
        f"Running upgrade {older or ''} -> {newer}" for older, newer in zip([None, *REVISIONS], REVISIONS)
    ]
    assert revision(empty_database) == HEAD


def test_migrate_to_an_older_revision_refuses_without_downgrade(migrated: str, cli: Run) -> None:
    line = one_error_line(cli(migrated, "migrate", PREVIOUS), 2)  # a mistake in the command line
    assert line.startswith(f"the database is at {HEAD}, newer than {PREVIOUS}: moving it there is a downgrade")
    assert revision(migrated) == HEAD


def _write_a_committed_transaction(url: str) -> None:
    """A topic, a committed transaction with group offsets, and a group member: a row in every
    table family the migrations touch."""
    from fastapi.testclient import TestClient

    from app.api.app import create_app
    from app.settings import Settings
    from tests.helpers import batch, begin, create_topic, ident, init_producer, send

    settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
    with TestClient(create_app(settings)) as client:
        create_topic(client, "orders", 1)
        p = init_producer(client, "pizza-income-0")
        begin(client, "pizza-income-0", p)
        send(client, [batch("orders", 0, ["a", "b"], 0)], p, "pizza-income-0")
        r = client.post("/v1/transactions/pizza-income-0/offsets", json={
            **ident(p), "group_id": "pizza-income", "offsets": [{"topic": "orders", "partition": 0, "offset": 2}]})
        assert r.status_code == 200, r.text
        assert client.post("/v1/transactions/pizza-income-0/commit", json=ident(p)).status_code == 200
        r = client.post("/v1/groups/pizza-income/members", json={"topics": ["orders"]})
        assert r.status_code == 200, r.text


def test_every_migration_downgrades_with_data_and_upgrades_again(migrated: str, cli: Run) -> None:
    _write_a_committed_transaction(migrated)
    for older in [*reversed(REVISIONS[:-1]), "base"]:
        done = cli(migrated, "migrate", older, "--downgrade")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == f"database at {'base (no schema)' if older == 'base' else older}"
        assert revision(migrated) == (None if older == "base" else older)
    engine = create_engine(migrated, poolclass=NullPool)
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    engine.dispose()
    up = cli(migrated, "migrate")
    assert up.returncode == 0 and revision(migrated) == HEAD, up.stderr


def test_migrate_to_an_unknown_revision_is_a_wrong_command_line_that_lists_the_known_ones(migrated: str,
                                                                                         cli: Run) -> None:
    line = one_error_line(cli(migrated, "migrate", UNKNOWN), 2)
    assert line == f"no migration '{UNKNOWN}'; this version has {', '.join(REVISIONS)}"
    assert revision(migrated) == HEAD


# 0031's downgrade refuses while a binding names an operation 0030 cannot store: the steps from
# the head down to 0031 are made, then that one is refused.
REFUSING = "0031"


def _bind_describe_configs(url: str) -> None:
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO acls (acl_id, principal, resource_type, resource_name, pattern_type, operation, permission, "
            "created_ms) VALUES (20, 'User:alice', 'topic', 'orders', 'literal', 'describe_configs', 'allow', 1)"))
    engine.dispose()


def test_a_refused_downgrade_reports_each_step_it_made_before_the_refusal(migrated: str, cli: Run) -> None:
    _bind_describe_configs(migrated)
    done = cli(migrated, "migrate", REVISIONS[REVISIONS.index(REFUSING) - 1], "--downgrade")
    made = REVISIONS[REVISIONS.index(REFUSING):]  # the revisions it went through, the head included
    assert [line.split(",")[0] for line in done.stdout.splitlines()] == [
        f"downgraded {newer} -> {older}" for newer, older in zip(reversed(made), reversed(made[:-1]))]
    assert revision(migrated) == REFUSING


def test_a_refused_downgrade_is_one_line_naming_the_refusal_and_the_revision_the_database_is_at(
        migrated: str, cli: Run) -> None:
    _bind_describe_configs(migrated)
    older = REVISIONS[REVISIONS.index(REFUSING) - 1]
    line = one_error_line(cli(migrated, "migrate", older, "--downgrade"), 1)
    assert line == (f"downgrade {REFUSING} -> {older} refused: 1 ACL binding(s) name an operation revision {older} "
                    "does not know; remove them before downgrading (outbox acls remove --allow-principal User:alice "
                    "--operation describe_configs --topic orders): they are not dropped silently, since dropping a "
                    f"deny would allow what it denied; the database is now at {REFUSING}, where this version's other "
                    f"commands refuse to run: `outbox migrate` brings it back to {HEAD}, then do that and run the "
                    "downgrade again")


def test_a_refused_downgrade_is_undone_by_doing_what_its_line_says(migrated: str, cli: Run) -> None:
    # The line's advice, followed to the letter: at the refusing revision `outbox acls remove`
    # refuses (the schema is not this version's head), so it says to migrate back up first, and
    # names each binding as the command that removes it (no command shows an acl_id).
    import re
    import shlex

    _bind_describe_configs(migrated)
    older = REVISIONS[REVISIONS.index(REFUSING) - 1]
    line = one_error_line(cli(migrated, "migrate", older, "--downgrade"), 1)
    remove = re.search(r"\((outbox acls remove [^)]*)\)", line)
    assert remove is not None, line
    assert cli(migrated, *shlex.split(remove.group(1))[1:]).returncode == 1  # as the line warns
    assert cli(migrated, "migrate").returncode == 0
    removed = cli(migrated, *shlex.split(remove.group(1))[1:])
    assert removed.returncode == 0, removed.stderr
    done = cli(migrated, "migrate", older, "--downgrade")
    assert done.returncode == 0, done.stderr
    assert revision(migrated) == older


def test_after_a_refused_downgrade_migrate_brings_back_the_whole_schema_of_the_head(migrated: str,
                                                                                    cli: Run) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from app.storage.tables import metadata

    _bind_describe_configs(migrated)
    assert cli(migrated, "migrate", REVISIONS[REVISIONS.index(REFUSING) - 1], "--downgrade").returncode == 1
    up = cli(migrated, "migrate")
    assert up.returncode == 0 and revision(migrated) == HEAD, up.stderr
    engine = create_engine(migrated, poolclass=NullPool)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    engine.dispose()
    assert diff == []


@pytest.mark.parametrize("empty_database", ["sqlite"], indirect=True)
def test_a_reader_that_stops_reading_does_not_stop_a_migration_half_way(empty_database: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env["OUTBOX_DATABASE_URL"] = empty_database
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "app.cli", "migrate"], cwd=ROOT, env=env, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")
    assert revision(empty_database) == HEAD


@pytest.mark.parametrize("args", [("transactions", "list"), ("migrate",), ("coordinator",)])
def test_a_database_migrated_by_a_newer_version_is_refused(migrated: str, args: tuple[str, ...], cli: Run) -> None:
    engine = create_engine(migrated, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE alembic_version SET version_num = '{UNKNOWN}'"))
    engine.dispose()
    line = one_error_line(runner(args, cli)(migrated, *args, auto_migrate="true"), 1)
    assert line == (f"SCHEMA_NOT_MIGRATED: the database is at revision {UNKNOWN}, which this version of outbox does not know "
                    f"(its newest is {HEAD}): a newer version migrated it; upgrade this process")


def test_coordinator_on_a_database_that_does_not_answer_warns_and_keeps_trying(tmp_path: Path) -> None:
    from tests.e2e.conftest import Backend, Launcher

    launcher = Launcher(Backend("postgresql", UNREACHABLE_PG, tmp_path))
    try:
        worker = launcher.coordinator()
        worker.wait_for_log("coordinator and log cleaner running")
        time.sleep(3)  # its workers look for the database again and again meanwhile, quietly
        assert worker.alive()
        (warning,) = [line for line in worker.log_text().splitlines() if " WARNING " in line]
        assert "database postgresql+psycopg://outbox:***@127.0.0.1:1/outbox does not answer yet" in warning
        assert "Traceback" not in worker.log_text() and " ERROR " not in worker.log_text()
        assert "s3cret-pw" not in worker.log_text()
    finally:
        launcher.close()


@pytest.mark.parametrize("empty_database", ["sqlite"], indirect=True)
@pytest.mark.parametrize("args", [("topics", "list"), ("transactions", "list"), ("transactions", "hanging"),
                                  ("acls", "list"), ("principals", "list"), ("migrate",), ("openapi", "-o", "-"),
                                  ("coordinator", "--once")])
def test_a_reader_that_stops_reading_ends_the_command_quietly_as_unix_tools_do(migrated: str,
                                                                               args: tuple[str, ...]) -> None:
    """A long `outbox topics list` into `head -c 100`: no message, no traceback, the status a
    shell gives a command that SIGPIPE ended (128 + 13)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env["OUTBOX_DATABASE_URL"] = migrated
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: deterministic
    try:
        done = subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_password_that_is_also_a_word_of_the_url_is_hidden_only_where_it_is_the_password(cli: Run) -> None:
    line = one_error_line(cli("postgresql+psycopg://postgres:postgres@127.0.0.1:1/x", "transactions", "list"), 1)
    assert line.endswith("(postgresql+psycopg://postgres:***@127.0.0.1:1/x)"), line
    assert ":postgres@" not in line


def test_uvicorn_refuses_a_kafka_listener_it_would_not_serve(tmp_path: Path) -> None:
    # Only `outbox serve` runs the Kafka door: under uvicorn the setting would do nothing.
    done = _uvicorn(f"sqlite:///{tmp_path}/outbox.db", kafka_listener="127.0.0.1:0")
    assert done.returncode != 0
    assert ("OUTBOX_KAFKA_LISTENER: `outbox serve`'s, which `uvicorn app.main:app` would ignore (it serves the "
            "HTTP API alone): unset them here, or run `outbox serve`") in done.stderr, done.stderr


def test_a_kafka_listener_on_every_address_needs_an_address_to_tell_clients(tmp_path: Path) -> None:
    line = one_error_line(outbox(f"sqlite:///{tmp_path}/outbox.db", "serve", "--port", "0",
                                 "--kafka-listener", "0.0.0.0:0", authentication="none"), 2)
    assert line == ("Kafka listener (OUTBOX_KAFKA_LISTENER, --kafka-listener) on every address (0.0.0.0): clients "
                    "would be told to connect there; set OUTBOX_KAFKA_ADVERTISED_LISTENER to the host:port they "
                    "reach this process at")


def test_a_kafka_listener_on_every_address_without_authentication_is_named_with_the_method_it_serves(
        tmp_path: Path) -> None:
    # The README's command with its advertised listener, the HTTP door left on loopback.
    line = one_error_line(outbox(f"sqlite:///{tmp_path}/outbox.db", "serve", "--port", "0",
                                 "--kafka-listener", "0.0.0.0:0",
                                 kafka_advertised_listener="kafka.example.com:9092"), 2)
    assert line == ("refusing to serve on 0.0.0.0 without authentication: anyone who reaches it could produce to "
                    "and consume every topic through the Kafka listener (OUTBOX_KAFKA_LISTENER, "
                    "--kafka-listener). Set OUTBOX_AUTHENTICATION to api_key (README, \"Authentication and "
                    "ACLs\"), or to none to serve without it on purpose")


def test_serve_refuses_the_kafka_listener_s_settings_when_no_listener_runs(tmp_path: Path) -> None:
    line = one_error_line(outbox(f"sqlite:///{tmp_path}/outbox.db", "serve", "--port", "0",
                                 kafka_num_partitions="3", kafka_auto_create_topics="true"), 2)
    assert line == ("OUTBOX_KAFKA_AUTO_CREATE_TOPICS, OUTBOX_KAFKA_NUM_PARTITIONS: the Kafka listener's, and none "
                    "runs; set OUTBOX_KAFKA_LISTENER (or --kafka-listener), or unset them")


def test_serve_refuses_a_coordinator_metrics_port_it_would_never_open(tmp_path: Path) -> None:
    line = one_error_line(outbox(f"sqlite:///{tmp_path}/outbox.db", "serve", "--port", "0",
                                 coordinator_metrics_port="18111"), 2)
    assert line == ("OUTBOX_COORDINATOR_METRICS_PORT: `outbox coordinator`'s; `outbox serve` serves its coordinator's "
                    "metrics at GET /metrics on its own port (--port or OUTBOX_PORT): unset it for this command")


@pytest.mark.parametrize("off", [("--no-coordinator",), ()], ids=["flag", "setting"])
def test_serve_without_a_coordinator_refuses_the_coordinator_s_settings(tmp_path: Path, off: tuple[str, ...]) -> None:
    setting = {} if off else {"run_coordinator": "false"}
    line = one_error_line(outbox(f"sqlite:///{tmp_path}/outbox.db", "serve", "--port", "0", *off,
                                 coordinator_interval_ms="500", cleaner_max_records_per_second="1000", **setting), 2)
    assert line == ("OUTBOX_COORDINATOR_INTERVAL_MS, OUTBOX_CLEANER_MAX_RECORDS_PER_SECOND: the coordinator's, and "
                    "none runs in this process (--no-coordinator or OUTBOX_RUN_COORDINATOR=false); unset them, or "
                    "give them to `outbox coordinator`")


@pytest.mark.parametrize("once", [("--once",), ()], ids=["once", "running"])
def test_coordinator_refuses_the_api_port_and_kafka_listener_it_would_never_serve(tmp_path: Path,
                                                                                 once: tuple[str, ...]) -> None:
    line = one_error_line(outbox(f"sqlite:///{tmp_path}/outbox.db", "coordinator", *once, port="18112",
                                 kafka_listener="127.0.0.1:0"), 2)
    assert line == ("OUTBOX_PORT, OUTBOX_KAFKA_LISTENER: `outbox serve`'s, which `outbox coordinator` would ignore "
                    "(it serves no API and no Kafka listener; its metrics port is OUTBOX_COORDINATOR_METRICS_PORT): "
                    "unset them for this command")


def test_serve_takes_the_kafka_listener_s_settings_with_a_listener_given_by_its_flag(tmp_path: Path) -> None:
    # Past the check above, serve stops at the Kafka port in use: the settings were taken.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = outbox(f"sqlite:///{tmp_path}/outbox.db", "serve", "--port", "0",
                      "--kafka-listener", f"127.0.0.1:{port}", kafka_num_partitions="3")
    assert one_error_line(done, 1).startswith("Kafka listener (OUTBOX_KAFKA_LISTENER, --kafka-listener): cannot "
                                              f"listen on 127.0.0.1:{port}")


def test_uvicorn_refuses_the_kafka_listener_s_settings_it_would_not_act_on(tmp_path: Path) -> None:
    done = _uvicorn(f"sqlite:///{tmp_path}/outbox.db", kafka_max_connections="5")
    assert done.returncode != 0
    assert ("OUTBOX_KAFKA_MAX_CONNECTIONS: `outbox serve`'s, which `uvicorn app.main:app` would ignore (it serves "
            "the HTTP API alone): unset them here, or run `outbox serve`") in done.stderr, done.stderr


def test_uvicorn_refuses_the_request_and_send_timeouts_and_connection_bound_it_would_not_act_on(tmp_path: Path) -> None:
    # It is `outbox serve`'s protocol class that times a request or its answer's send out and
    # bounds a request's head (uvicorn has no such flags: its h11 bound is not httptools') and
    # connections (uvicorn's nearest is --limit-concurrency).
    done = _uvicorn(f"sqlite:///{tmp_path}/outbox.db", http_request_timeout_s="10")
    assert done.returncode != 0
    assert ("OUTBOX_HTTP_REQUEST_TIMEOUT_S: `outbox serve`'s, which `uvicorn app.main:app` would ignore (it serves "
            "the HTTP API alone): unset them here, or run `outbox serve`") in done.stderr, done.stderr
    done = _uvicorn(f"sqlite:///{tmp_path}/outbox.db", http_send_timeout_s="10")
    assert done.returncode != 0
    assert ("OUTBOX_HTTP_SEND_TIMEOUT_S: `outbox serve`'s, which `uvicorn app.main:app` would ignore (it serves "
            "the HTTP API alone): unset them here, or run `outbox serve`") in done.stderr, done.stderr
    done = _uvicorn(f"sqlite:///{tmp_path}/outbox.db", http_max_head_bytes="4096")
    assert done.returncode != 0
    assert ("OUTBOX_HTTP_MAX_HEAD_BYTES: `outbox serve`'s, which `uvicorn app.main:app` would ignore (it serves "
            "the HTTP API alone): unset them here, or run `outbox serve`") in done.stderr, done.stderr
    done = _uvicorn(f"sqlite:///{tmp_path}/outbox.db", http_max_connections="2000")
    assert done.returncode != 0
    assert ("OUTBOX_HTTP_MAX_CONNECTIONS: `outbox serve`'s, which `uvicorn app.main:app` would ignore (it serves "
            "the HTTP API alone; give uvicorn --limit-concurrency instead): unset them here, or run `outbox serve`"
            ) in done.stderr, done.stderr


def test_uvicorn_refuses_tls_and_the_address_it_would_not_act_on(tmp_path: Path) -> None:
    # uvicorn's own flags set its address and TLS: the settings would leave it speaking plain
    # HTTP where the operator asked for HTTPS.
    done = _uvicorn(f"sqlite:///{tmp_path}/outbox.db", port="9999", tls_cert_file=str(tmp_path / "cert.pem"),
                    tls_key_file=str(tmp_path / "key.pem"))
    assert done.returncode != 0
    assert ("OUTBOX_PORT, OUTBOX_TLS_CERT_FILE, OUTBOX_TLS_KEY_FILE: `outbox serve`'s, which `uvicorn app.main:app` "
            "would ignore (it serves the HTTP API alone; give uvicorn --port, --ssl-certfile, --ssl-keyfile instead): "
            "unset them here, or run `outbox serve`") in done.stderr, done.stderr


def test_migrate_waits_for_sqlites_write_lock_as_long_as_the_busy_timeout_says(tmp_path: Path) -> None:
    # OUTBOX_SQLITE_BUSY_TIMEOUT_MS is every SQLite writer's wait, a migration's too: with 300 ms
    # it gives up in well under the 30 s a migration waited whatever the setting.
    path = tmp_path / "outbox.db"
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("PRAGMA journal_mode=WAL")
        holder.execute("CREATE TABLE held (a)")
        path.chmod(0o600)
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO held VALUES (1)")
        started = time.monotonic()
        done = outbox(f"sqlite:///{path}", "migrate", sqlite_busy_timeout_ms="300")
        waited = time.monotonic() - started
    finally:
        holder.close()
    assert done.returncode == 1
    assert "database is locked" in done.stderr, done.stderr
    assert waited < 15, waited


def test_coordinator_once_refuses_a_metrics_port_it_would_never_serve(tmp_path: Path, cli: Run) -> None:
    line = one_error_line(cli(f"sqlite:///{tmp_path}/outbox.db", "coordinator", "--once",
                              coordinator_metrics_port="18110"), 2)
    assert line == ("--once: OUTBOX_COORDINATOR_METRICS_PORT is a running coordinator's; a single pass serves no "
                    "metrics: unset it for this command")


def test_uvicorn_refuses_mtls_which_it_cannot_serve(tmp_path: Path) -> None:
    done = _uvicorn(f"sqlite:///{tmp_path}/outbox.db", authentication="api_key,mtls",
                    tls_cert_file=str(tmp_path / "cert.pem"), tls_key_file=str(tmp_path / "key.pem"),
                    tls_client_ca_file=str(tmp_path / "ca.pem"))
    assert done.returncode != 0
    assert ("OUTBOX_AUTHENTICATION: mtls is `outbox serve`'s; `uvicorn app.main:app` cannot tell the app a client "
            "certificate: run `outbox serve`, or authenticate with api_key or jwt here") in done.stderr, done.stderr
