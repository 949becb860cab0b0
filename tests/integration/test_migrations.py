"""One alembic chain builds the schema of app.storage.tables, identically on both databases."""

from __future__ import annotations

import re

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import CheckConstraint, create_engine, inspect

from app.domain.acl import Operation, PatternType
from app.domain.transaction import STORED_STATES
from app.domain.types import CleanupPolicy, ControlType, TransactionVersion
from app.storage import migrate
from app.storage.tables import RECORD_LEAF, metadata


def _not_a_leaf(name, type_, _parent_names) -> bool:  # type: ignore[no-untyped-def]
    """A leaf of `records` (PostgreSQL) is a table of the log, not of the schema."""
    return not (type_ == "table" and RECORD_LEAF.fullmatch(name or ""))


def test_migrated_schema_matches_the_table_definitions(db_url: str) -> None:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "include_name": _not_a_leaf})
        diff = compare_metadata(context, metadata)
    engine.dispose()
    assert diff == []


def test_database_is_at_the_head_revision(db_url: str) -> None:
    engine = create_engine(db_url)
    assert migrate.current_revision(engine) == migrate.head_revision()
    engine.dispose()


def test_both_databases_get_the_same_tables_columns_and_indexes(postgres_url: str, sqlite_template) -> None:  # type: ignore[no-untyped-def]
    def shape(url: str) -> dict:
        engine = create_engine(url)
        insp = inspect(engine)

        def index_names(t: str) -> list[str]:
            # PostgreSQL lists the index behind a unique constraint as an index too.
            names = {i["name"] for i in insp.get_indexes(t) if not i.get("duplicates_constraint")}
            if engine.dialect.name == "sqlite":
                # SQLAlchemy does not reflect SQLite's indexes on expressions
                # (ix_record_batches_txn_span): those created by CREATE INDEX, from the catalog.
                with engine.connect() as conn:
                    names |= {n for (n,) in conn.exec_driver_sql(
                        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
                        (t,))}
            return sorted(names)

        out = {
            t: (
                [c["name"] for c in insp.get_columns(t)],
                sorted(insp.get_pk_constraint(t)["constrained_columns"]),
                index_names(t),
                sorted(u["name"] for u in insp.get_unique_constraints(t)),
            )
            for t in insp.get_table_names()
            if not RECORD_LEAF.fullmatch(t)
        }
        engine.dispose()
        return out

    assert shape(postgres_url) == shape(f"sqlite:///{sqlite_template}")


def test_upgrade_is_idempotent_and_downgrade_removes_everything(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'm.db'}"
    migrate.upgrade(url)
    migrate.upgrade(url)
    from alembic import command

    command.downgrade(migrate.alembic_config(url), "base")
    engine = create_engine(url)
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    engine.dispose()


def test_each_migration_applied_is_reported_with_the_whole_first_sentence_of_its_docstring(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # 0008's first sentence wraps onto a second line of its docstring.
    steps = migrate.upgrade(f"sqlite:///{tmp_path / 'm.db'}", "0008")

    assert str(steps[-1]) == ("upgraded 0007 -> 0008: An index of control markers by transaction: which marker "
                              "(COMMIT or ABORT) ended a transaction in a partition, found without reading the "
                              "partition.")


def allowed(sqltext: str) -> set[str]:
    """The values a CHECK's text allows: text values quoted; an integer enum's bare, after its
    column's name."""
    return set(re.findall(r"'([^']*)'", sqltext)) or set(re.findall(r"(?<![\w_])(\d+)(?![\w_])", sqltext))


def test_the_migrated_check_constraints_allow_exactly_the_values_of_their_enums(db_url: str) -> None:
    """tables.py writes each CHECK from its enum (one_of); the migrations wrote their own copy of
    the text. Compared by the quoted values each allows, as PostgreSQL rewrites `IN (…)`."""
    defined = {
        (table.name, f"ck_{table.name}_{constraint.name}" if not str(constraint.name).startswith("ck_")
         else str(constraint.name)): allowed(str(constraint.sqltext))
        for table in metadata.tables.values() for constraint in table.constraints
        if isinstance(constraint, CheckConstraint)
    }
    engine = create_engine(db_url)
    insp = inspect(engine)
    stored = {(table, c["name"]): allowed(c["sqltext"])
              for table in insp.get_table_names() if not RECORD_LEAF.fullmatch(table)
              for c in insp.get_check_constraints(table)}
    engine.dispose()
    assert defined == stored
    assert defined[("records", "ck_records_control_type")] == {t.value for t in ControlType}
    assert defined[("acls", "ck_acls_operation")] == {o.value for o in Operation}
    assert defined[("transactions", "ck_transactions_transaction_version")] == {str(v.value) for v in TransactionVersion}
    assert defined[("transactions", "ck_transactions_state")] == {s.value for s in STORED_STATES}
    assert defined[("topics", "ck_topics_cleanup_policy")] == {p.value for p in CleanupPolicy}


# The enum of each column of PostgreSQL's schema `outbox` (its tables are the migrations' SQL, not
# app.storage.tables) that holds one, by table and column.
OUTBOX_ENUMS = {("append_grants", "pattern_type"): PatternType}


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_the_outbox_schema_s_check_constraints_of_enums_allow_exactly_their_values(db_url: str) -> None:
    """Named as tables.one_of names a CHECK (ck_<table>_<column>); the schema's other CHECKs
    are not of an enum."""
    engine = create_engine(db_url)
    insp = inspect(engine)
    stored = {(table, c["name"]): allowed(c["sqltext"])
              for table in insp.get_table_names(schema="outbox")
              for c in insp.get_check_constraints(table, schema="outbox") if c["name"].startswith("ck_")}
    engine.dispose()
    assert stored == {(table, f"ck_{table}_{column}"): {member.value for member in enum}
                      for (table, column), enum in OUTBOX_ENUMS.items()}
