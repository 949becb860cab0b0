"""Alembic environment: one migration chain for SQLite and PostgreSQL."""

from __future__ import annotations

import os
from contextlib import nullcontext
from logging.config import fileConfig

from alembic import context

from app.storage.engine import build_migration_engine, take_write_lock_at_begin
from app.storage.migrate import one_migrator_at_a_time
from app.storage.tables import metadata

config = context.config
if config.config_file_name is not None:
    # The alembic command line: alembic.ini's logging, so that `alembic upgrade head` names each
    # migration it runs (`outbox migrate` has no file and reports the steps itself). The
    # service's loggers, created by the imports above, stay enabled.
    fileConfig(config.config_file_name, disable_existing_loggers=False)
if config.config_file_name is not None and os.environ.get("OUTBOX_DATABASE_URL"):
    # The alembic command line, pointed at the service's database by the same setting.
    config.set_main_option("sqlalchemy.url", os.environ["OUTBOX_DATABASE_URL"].replace("%", "%%"))


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        _run(connectable)
        return
    # The service's OUTBOX_SQLITE_BUSY_TIMEOUT_MS when app.storage.migrate runs this.
    busy = config.attributes.get("sqlite_busy_timeout_ms")
    engine = build_migration_engine(config.get_main_option("sqlalchemy.url"),
                                    **({} if busy is None else {"sqlite_busy_timeout_ms": busy}))
    # Several processes may migrate one database at once: on PostgreSQL each waits for the
    # migrators' lock; on SQLite for the write lock (up to OUTBOX_SQLITE_BUSY_TIMEOUT_MS; at 0
    # the later ones fail at once, "database is locked"). The ones after the first find the
    # schema where it left it. Not taken here where app.storage.migrate holds it already, nor
    # for what changes nothing (`alembic current`), which would wait out a whole migration.
    lock_held = config.attributes.get("migrators_lock_held", False)
    read_only = context._proxy.context_opts.get("dont_mutate", False)  # type: ignore[attr-defined]
    turn = nullcontext() if lock_held or read_only else one_migrator_at_a_time(engine)
    with turn, engine.connect() as connection:
        take_write_lock_at_begin(connection)
        _run(connection)
    engine.dispose()


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things in place; batch mode rebuilds tables when needed.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        # app.storage.migrate reports each step applied itself, as soon as it is made.
        on_version_apply=config.attributes.get("on_version_apply"),
        # Each migration commits with its own alembic_version row, as SQLite's always did. In one
        # transaction for all, PostgreSQL's autocommit blocks (0032's, 0026's, …) committed every
        # step before them but not the version row of their own step: a later refusal rolled
        # that row back and left the database claiming a revision whose schema it no longer had.
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
