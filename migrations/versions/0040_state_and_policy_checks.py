"""CHECKs of transactions.state and topics.cleanup_policy: the stored transaction states
(app.domain.transaction.STORED_STATES: every TransactionState but PrepareEpochFence, which is
computed and never stored) and Kafka's cleanup policies (app.domain.types.CleanupPolicy), as
tables.one_of writes them. Every other column that holds an enum's value had its CHECK; these
two took any text. And on PostgreSQL outbox.append_grants' CHECK of pattern_type, written
inline at 0012 and so named by PostgreSQL (append_grants_pattern_type_check), is renamed
ck_append_grants_pattern_type, as one_of names a CHECK: the same values (PatternType's).

Every value an older process writes is in the lists, so nothing stored is rewritten and older
processes keep working. A row outside them (only a hand edit could store one) makes the upgrade
refuse, naming the rows, rather than fail on the constraint. On PostgreSQL adding a CHECK reads
the table under its ACCESS EXCLUSIVE lock: one row per topic, one per transactional id. Every
Send reads `topics`, and a transactional one `transactions`: the three tables are taken first,
together, a moment at a time (migrations.locks), so that a long transaction holding one of them
does not stop the service's statements behind the migration's wait for it.

SQLite adds a CHECK only to a new table. `transactions` is copied (batch_alter_table), as 0014
and 0025 did. `topics` cannot be: partitions reference it ON DELETE CASCADE, and the migrations
run with foreign keys on (which cannot be turned off inside a transaction), so dropping the old
copy would delete every partition. Its stored definition is edited instead, the column given
its CHECK as 0015 gave value_format's (CONSTRAINT ck_topics_cleanup_policy on the column), by
SQLite's documented procedure for such changes (writable_schema and a new schema_version, in
the migration's transaction), after the rows were checked against it.

The downgrade drops the two CHECKs (SQLite: the same two ways back) and gives the pattern_type
CHECK its old name.

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-06
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

from migrations import locks
from migrations.refusal import MigrationRefused

revision = "0040"
down_revision = "0039"
branch_labels = None
depends_on = None

# Frozen: app.domain.transaction.STORED_STATES and app.domain.types.CleanupPolicy when this
# revision was written, in their order (tables.one_of's text of the CHECK).
_STATES = ("Empty", "Ongoing", "Prepared", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead")
_POLICIES = ("delete", "compact", "compact,delete")
# How many offending rows a refusal names.
_NAMED = 10


def _check(column: str, values: tuple[str, ...]) -> str:
    return "{} IN ({})".format(column, ", ".join(f"'{v}'" for v in values))


_POLICY_CHECK = f"CONSTRAINT ck_topics_cleanup_policy CHECK ({_check('cleanup_policy', _POLICIES)})"
# The column as 0001 wrote it into SQLite's stored definition of `topics`.
_POLICY_COLUMN = "cleanup_policy VARCHAR(16) NOT NULL"


def _refuse_values_outside(table: str, key: str, column: str, values: tuple[str, ...], fix: str) -> None:
    rows = sa.table(table, sa.column(key), sa.column(column))
    outside = op.get_bind().execute(sa.select(rows.c[key], rows.c[column]).where(rows.c[column].not_in(values))
                                    .order_by(rows.c[key])).all()
    if outside:
        raise MigrationRefused(
            f"{len(outside)} row(s) of {table} hold a {column} outside {', '.join(values)}, which no revision "
            "writes (an edit by hand?): "
            + ", ".join(f"{r[0]!r} ({r[1]!r})" for r in outside[:_NAMED]) + (", …" if len(outside) > _NAMED else "")
            + f"; {fix} before upgrading")


def _sqlite_edit_topics(old: str, new: str) -> None:
    """Replace `old` by `new` in SQLite's stored CREATE TABLE of `topics` (which must hold `old`
    once): SQLite's procedure for changing a table's constraints without copying it. A text
    that does not parse would leave the database unreadable; tests/integration/test_migration_0040.py
    reads the result back on a database at each side."""
    bind = op.get_bind()
    definition = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'topics'").scalar_one()
    found = len(re.findall(re.escape(old) + r"(?=\s*,)", definition))
    if found != 1:
        raise RuntimeError(f"the stored definition of topics holds {old!r} {found} times, not once: {definition}")
    edited = re.sub(re.escape(old) + r"(?=\s*,)", lambda _: new, definition)
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    try:
        try:
            bind.exec_driver_sql("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'topics'",
                                 (edited,))
        except sa.exc.OperationalError as e:
            # A SQLite built or configured defensive (SQLITE_DBCONFIG_DEFENSIVE) refuses the
            # edit; Python's sqlite3 does not turn that on. The migration's transaction rolls
            # back whole: the database stays at 0039.
            raise MigrationRefused(
                f"this SQLite refuses to edit the stored definition of topics ({e.orig}): it runs in defensive "
                "mode, which migration 0040 needs off to give topics.cleanup_policy its CHECK") from None
        # Every connection reads the schema again at its next statement.
        bind.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
    finally:
        bind.exec_driver_sql("PRAGMA writable_schema = OFF")


# What the revision alters on PostgreSQL, in the order a transactional Send reads the first two.
_ALTERED = ("topics", "transactions", "outbox.append_grants")


def _take_altered() -> None:
    if op.get_bind().dialect.name == "postgresql":
        locks.take(_ALTERED, "ACCESS EXCLUSIVE", "0040")


def upgrade() -> None:
    _take_altered()  # before the rows are checked: none can change between the check and the CHECK
    _refuse_values_outside("transactions", "transactional_id", "state", _STATES,
                           "set each to one of those states or delete it")
    _refuse_values_outside("topics", "name", "cleanup_policy", _POLICIES, "set each to one of those policies")
    # Named as tables.one_of names it; alembic applies the naming convention (ck_transactions_state).
    with op.batch_alter_table("transactions") as batch:
        batch.create_check_constraint("state", _check("state", _STATES))
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_edit_topics(_POLICY_COLUMN, f"{_POLICY_COLUMN} {_POLICY_CHECK}")
    else:
        op.execute(f"ALTER TABLE topics ADD {_POLICY_CHECK}")
        op.execute("ALTER TABLE outbox.append_grants RENAME CONSTRAINT append_grants_pattern_type_check "
                   "TO ck_append_grants_pattern_type")


def downgrade() -> None:
    _take_altered()
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_edit_topics(f"{_POLICY_COLUMN} {_POLICY_CHECK}", _POLICY_COLUMN)
    else:
        op.execute("ALTER TABLE outbox.append_grants RENAME CONSTRAINT ck_append_grants_pattern_type "
                   "TO append_grants_pattern_type_check")
        op.execute("ALTER TABLE topics DROP CONSTRAINT ck_topics_cleanup_policy")
    with op.batch_alter_table("transactions") as batch:
        batch.drop_constraint("state", type_="check")
