"""What /readyz says of a schema not at this process's head (SchemaRevisions.why_not_at_head),
the words the API's refusals use: migrate a database behind the code, upgrade a process behind
the database."""

from __future__ import annotations

from app.services.schema_gate import SchemaRevisions
from app.storage import migrate

HEAD = migrate.head_revision()
PREVIOUS = migrate.revisions()[-2]


def test_a_schema_behind_the_code_is_to_be_migrated() -> None:
    assert SchemaRevisions(PREVIOUS, HEAD).why_not_at_head() == (
        f"the database schema is at {PREVIOUS}, this version needs {HEAD}: run `outbox migrate`")


def test_no_schema_is_to_be_migrated() -> None:
    assert SchemaRevisions(None, HEAD).why_not_at_head() == (
        f"the database has no outbox schema: run `outbox migrate` (to {HEAD})")


def test_a_schema_a_newer_version_migrated_asks_for_this_process_to_be_upgraded() -> None:
    assert SchemaRevisions("9999", HEAD).why_not_at_head() == (
        f"the database is at revision 9999, which this version of outbox does not know (its newest is {HEAD}): "
        "a newer version migrated it; upgrade this process")
