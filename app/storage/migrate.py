"""Alembic, driven from code: move a database to a revision, and compare its schema with the code's.

Alembic's own INFO lines are kept out of the log (app.logs): `migrate_to` hands each step it
applies to its caller as soon as it is made, and returns them all; its callers say what they did
in their own words.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Engine

from app.storage.engine import MIGRATION_BUSY_TIMEOUT_MS, build_migration_engine, normalise_url
from app.storage.turns import Turn, TurnHolder, waiting_for_turn
from migrations.refusal import MigrationRefused

logger = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent.parent / "migrations"

# How often a migrator that found another migrating asks for its turn again.
MIGRATORS_POLL_S = 0.25


class SchemaMismatch(Exception):
    """The database's schema revision is not one this code can use, or move as asked."""


class NoSuchRevision(SchemaMismatch):
    """The revision asked for is none of the code's: a mistake in the request, not in the database."""


class DowngradeNotAsked(SchemaMismatch):
    """The revision asked for is older than the database's, and the request did not allow a
    downgrade: a mistake in the request (exit status 2, as NoSuchRevision), nothing changed."""


@dataclass(frozen=True, slots=True)
class Step:
    """One migration applied: from `source` to `destination` (None: no schema)."""

    source: str | None
    destination: str | None
    is_upgrade: bool
    description: str  # the first sentence of the migration's docstring

    def __str__(self) -> str:
        moved = f"{self.source or 'empty'} -> {self.destination or 'empty'}"
        if self.is_upgrade:
            return f"upgraded {moved}: {self.description}"
        return f"downgraded {moved}, undoing: {self.description}"


class StepRefused(Exception):
    """A migration refused to run (migrations.refusal.MigrationRefused). The steps before it
    stay made, each in its own transaction: the database is at `revision`, which may be neither
    where it was nor where it was asked to go."""

    def __init__(self, is_upgrade: bool, source: str | None, destination: str | None, reason: str,
                 revision: str | None, head: str | None = None) -> None:
        message = (f"{'upgrade' if is_upgrade else 'downgrade'} {source or 'empty'} -> "
                   f"{destination or 'empty'} refused: {reason}; the database is now at "
                   f"{revision or 'base (no schema)'}")
        if not is_upgrade and head is not None and revision != head:
            # Every command but `migrate` refuses a schema below this version's head, the
            # `outbox acls remove` or topic deletion a refusal asks for included: say how to
            # get back to where they run, or the operator is left with a hint no command obeys.
            message += (f", where this version's other commands refuse to run: `outbox migrate` brings it back to "
                        f"{head}, then do that and run the downgrade again")
        super().__init__(message)
        self.revision = revision


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", normalise_url(database_url).replace("%", "%%"))
    return cfg


@functools.cache
def _scripts() -> ScriptDirectory:
    # The migrations are the code's: read once per process, not on every /readyz.
    return ScriptDirectory(str(MIGRATIONS_DIR))


OnStep = Callable[[Step], None]


def upgrade(database_url: str, revision: str = "head", *, on_step: OnStep | None = None,
            sqlite_busy_timeout_ms: int = MIGRATION_BUSY_TIMEOUT_MS) -> list[Step]:
    """Upgrade to `revision` (never down); the steps applied, none if it was there already.
    `on_step` is called with each step as soon as it is made, before the next begins (alembic
    reports a step just before its transaction commits, migrations/env.py)."""
    return _run(command.upgrade, database_url, revision, on_step, sqlite_busy_timeout_ms)


def migrate_to(database_url: str, revision: str = "head", *, allow_downgrade: bool = False,
               on_step: OnStep | None = None, sqlite_busy_timeout_ms: int = MIGRATION_BUSY_TIMEOUT_MS) -> list[Step]:
    """Move the database to `revision`, up or (only if allowed) down; the steps applied, each
    also given to `on_step` as soon as it is made. A migration's refusal is StepRefused, naming
    the revision the steps before it left the database at."""
    target = resolve(revision)
    engine = build_migration_engine(database_url, sqlite_busy_timeout_ms=sqlite_busy_timeout_ms)
    try:
        # The direction is chosen from the revision read under the lock: read before it, a
        # migrator that waited for another's upgrade would then "upgrade" to an older revision,
        # which alembic takes as nothing to do, and say it was done.
        with one_migrator_at_a_time(engine):
            current = current_revision(engine)
            known(current)
            if target == current:
                return []
            if target is not None and (current is None or _is_ancestor(current, target)):
                return _run(command.upgrade, database_url, target, on_step, sqlite_busy_timeout_ms, lock_held=True)
            if not allow_downgrade:
                raise DowngradeNotAsked(
                    f"the database is at {current}, newer than {target or 'base'}: moving it there is a "
                    f"downgrade, which drops what the later migrations added; add --downgrade to do it"
                )
            return _run(command.downgrade, database_url, target or "base", on_step, sqlite_busy_timeout_ms,
                        lock_held=True)
    finally:
        engine.dispose()


def resolve(revision: str) -> str | None:
    """A revision the code has ('head', 'base' or an id); None stands for base (no schema)."""
    if revision == "base":
        return None
    if revision == "head":
        return head_revision()
    try:
        script = _scripts().get_revision(revision)
    except CommandError:
        script = None
    if script is None:
        raise NoSuchRevision(f"no migration {revision!r}; this version has {', '.join(revisions())}")
    return script.revision


def revisions() -> list[str]:
    """The code's revisions, oldest first."""
    return [s.revision for s in reversed(list(_scripts().walk_revisions()))]


def known(current: str | None) -> None:
    """Refuse a database migrated by a newer version of the code."""
    if current is not None and current not in revisions():
        raise SchemaMismatch(
            f"the database is at revision {current}, which this version of outbox does not know "
            f"(its newest is {head_revision()}): a newer version migrated it; upgrade this process"
        )


def require_head(engine: Engine) -> None:
    """Refuse to work on a database whose schema is not the one this code was written for."""
    require_head_at(current_revision(engine))


def require_head_at(current: str | None) -> None:
    """`require_head` for a database found at revision `current`."""
    known(current)
    head = head_revision()
    if current is None:
        raise SchemaMismatch(f"the database has no outbox schema: run `outbox migrate` (to {head})")
    if current != head:
        raise SchemaMismatch(f"the database schema is at {current}, this version needs {head}: run `outbox migrate`")


def _is_ancestor(older: str, newer: str) -> bool:
    return any(s.revision == older for s in _scripts().iterate_revisions(newer, "base"))


def _first_sentence(doc: str | None) -> str:
    """A migration's docstring up to its first full stop: its first line alone stops mid-sentence
    where the docstring wraps, and `outbox migrate` prints this to the operator."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = re.search(r"[.!?](\s|$)", paragraph)
    return paragraph[: end.start() + 1] if end else paragraph


def _run(cmd, database_url: str, revision: str, on_step: OnStep | None,  # type: ignore[no-untyped-def]
         sqlite_busy_timeout_ms: int = MIGRATION_BUSY_TIMEOUT_MS, *, lock_held: bool = False) -> list[Step]:
    """Run alembic's `cmd`. `lock_held`: the caller holds the migrators' lock already
    (one_migrator_at_a_time), which migrations/env.py then does not take again: a second
    session of this process asking for it would wait for this one forever."""
    steps: list[Step] = []

    def applied(*, step: MigrationInfo, **_: object) -> None:
        (source,) = step.source_revision_ids or (None,)
        (destination,) = step.destination_revision_ids or (None,)
        script = step.up_revision
        steps.append(Step(source, destination, step.is_upgrade, _first_sentence(script.doc if script else None)))
        if on_step is not None:
            on_step(steps[-1])

    cfg = alembic_config(database_url)
    cfg.attributes["on_version_apply"] = applied  # migrations/env.py passes it to alembic
    cfg.attributes["sqlite_busy_timeout_ms"] = sqlite_busy_timeout_ms  # and builds its engine with it
    cfg.attributes["migrators_lock_held"] = lock_held
    try:
        cmd(cfg, revision)
    except MigrationRefused as e:
        raise _refused(database_url, is_upgrade=cmd is command.upgrade, reason=str(e),
                       sqlite_busy_timeout_ms=sqlite_busy_timeout_ms) from e
    return steps


def _refused(database_url: str, *, is_upgrade: bool, reason: str,
             sqlite_busy_timeout_ms: int = MIGRATION_BUSY_TIMEOUT_MS) -> StepRefused:
    """The refusal of the step after the last one made: the database's revision, read back
    rather than inferred from the steps reported, is where the operator must start from."""
    engine = build_migration_engine(database_url, sqlite_busy_timeout_ms=sqlite_busy_timeout_ms)
    try:
        current = current_revision(engine)
    finally:
        engine.dispose()
    chain: list[str | None] = [None, *revisions()]  # base first: the chain is linear
    at = chain.index(current)
    refusing = chain[at + 1] if is_upgrade else chain[at - 1]
    return StepRefused(is_upgrade, current, refusing, reason, current, head=chain[-1])


@contextmanager
def one_migrator_at_a_time(engine: Engine) -> Iterator[None]:
    """PostgreSQL: hold the migrators' turn (app.storage.turns.Turn.MIGRATE), on a connection
    of its own, while the migrations run; a migrator that finds another migrating waits for it,
    then finds the schema where the first left it. SQLite's migrators wait for its write lock
    instead (app.storage.engine.take_write_lock_at_begin)."""
    if engine.dialect.name != "postgresql":
        yield
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as lock:
        with waiting_for_turn(lock, Turn.MIGRATE, poll_s=MIGRATORS_POLL_S, on_wait=_say_waiting):
            yield


def _say_waiting(holder: TurnHolder | None) -> None:
    logger.warning("another process is migrating this database%s; waiting for it to finish",
                   "" if holder is None else f" ({holder})")


def head_revision() -> str | None:
    """The newest revision of the code (the same whatever the database)."""
    return _scripts().get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()



def prepare(database_url: str, *, auto_migrate: bool, refuse_schema_mismatch: bool,
            sqlite_busy_timeout_ms: int = MIGRATION_BUSY_TIMEOUT_MS) -> None:
    """Start-up of `serve` (`outbox serve` and `uvicorn app.main:app` alike) and `coordinator`:
    migrate if they should, else check the schema, saying what they did in the log.

    A database that does not answer yet is only warned about: both processes keep trying
    (/readyz answers 503 meanwhile). A schema they cannot use stops the coordinator
    (`refuse_schema_mismatch`); `serve` warns, once, and waits for it to be migrated
    (app.services.schema_gate): /readyz and the API answer 503 until then."""
    from sqlalchemy.exc import DBAPIError

    from app.database_url import redacted_url
    from app.domain.errors import first_line

    engine = build_migration_engine(database_url, sqlite_busy_timeout_ms=sqlite_busy_timeout_ms)
    try:
        current = current_revision(engine)
        if auto_migrate:
            known(current)
            if current != head_revision():
                logger.info("migrating %s from %s to %s", redacted_url(database_url), current or "empty",
                            head_revision())
        else:
            require_head_at(current)
    except DBAPIError as e:
        if auto_migrate:
            raise
        logger.warning("database %s does not answer yet: %s", redacted_url(database_url), first_line(e.orig or e))
        return
    except SchemaMismatch as e:
        if refuse_schema_mismatch:
            raise
        logger.warning("%s; until then /readyz and the API answer 503 (SCHEMA_NOT_MIGRATED) and background "
                       "work waits", e)
        return
    finally:
        engine.dispose()
    if auto_migrate:
        upgrade(database_url, on_step=lambda step: logger.info("%s", step),
                sqlite_busy_timeout_ms=sqlite_busy_timeout_ms)
