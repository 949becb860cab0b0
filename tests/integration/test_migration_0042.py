"""Upgrading to 0042 and back on PostgreSQL: outbox.append, publish_pending and
check_topic_config resolve nothing in the log's schema by search_path and read their string
constants as written under any standard_conforming_strings, and a top-level statement is taken
for a SET CONSTRAINTS only when it holds one; the downgrade puts the texts before it back."""

from __future__ import annotations

import psycopg
import pytest
from alembic import command

from tests.migration_helpers import at_revision, topic_t

PARTITION = 'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 0, 0)'
FUNCTIONS = ("append", "publish_pending", "check_topic_config")


def _psycopg(url: str) -> str:
    return url.replace("postgresql+psycopg", "postgresql")


def _settings(url: str) -> dict[str, list[str]]:
    with psycopg.connect(_psycopg(url)) as conn:
        return dict(conn.execute("SELECT p.proname, p.proconfig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                                 "WHERE n.nspname = 'outbox' AND p.proname = ANY(%s)", (list(FUNCTIONS),)).fetchall())


def _appends(url: str) -> list[str]:
    """What outbox.append and its commit answer, in an implicit transaction, to a value that
    mentions setting constraints (in the statement's text, as the commit's test reads it), and
    under standard_conforming_strings = off."""
    answers = []
    for setting, value in (("on", '{"note": "please set the constraints"}'), ("off", "1")):
        with psycopg.connect(_psycopg(url), autocommit=True) as conn:
            conn.execute(f"SET standard_conforming_strings = {setting}")
            try:
                conn.execute(f"SELECT outbox.append('t', 0, 'k', '{value}')")
                answers.append("published")
            except psycopg.Error as e:
                answers.append(e.sqlstate or "")
    return answers


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0042_pins_the_functions_settings_and_the_downgrade_puts_0039_s_back(empty_url: str) -> None:
    config = at_revision(empty_url, "0040", topic_t(1), PARTITION)
    assert _appends(empty_url) == ["55000", "42601"]
    assert _settings(empty_url) == {
        "append": ["search_path=pg_catalog, public, pg_temp"],
        "publish_pending": ["search_path=pg_catalog, public, pg_temp", "plan_cache_mode=force_custom_plan"],
        "check_topic_config": ["search_path=pg_catalog, pg_temp"]}

    command.upgrade(config, "0042")
    assert _appends(empty_url) == ["published", "published"]
    assert _settings(empty_url) == {
        "append": ["search_path=pg_catalog, pg_temp", "standard_conforming_strings=on"],
        "publish_pending": ["search_path=pg_catalog, pg_temp", "standard_conforming_strings=on",
                            "plan_cache_mode=force_custom_plan"],
        "check_topic_config": ["search_path=pg_catalog, pg_temp", "standard_conforming_strings=on"]}

    command.downgrade(config, "0040")
    assert _appends(empty_url) == ["55000", "42601"]
    assert _settings(empty_url)["append"] == ["search_path=pg_catalog, public, pg_temp"]


def _flags_and_view(url: str) -> tuple[list[tuple[int, bool]], bool]:
    """Each stored batch's first offset and self_committed flag, after one more append and its
    commit; and whether partition 0's view reads flagged records without their batch rows."""
    with psycopg.connect(_psycopg(url)) as conn:
        conn.execute("SELECT outbox.append('t', 0, 'k', '1')")
        conn.commit()
        flags = conn.execute('SELECT base_offset, self_committed FROM record_batches ORDER BY base_offset').fetchall()
        (view,) = conn.execute("SELECT pg_get_viewdef('committed_records.partition_1_0'::regclass)").fetchone()
    return flags, "self_committed" in view


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0042_and_its_downgrade_keep_0041_s_self_committed_records(empty_url: str) -> None:
    # 0042 follows 0041: its publishing commit and its leaves' functions are 0041's, hardened;
    # its downgrade puts 0041's back, which still flag.
    config = at_revision(empty_url, "0041", topic_t(1), PARTITION)
    command.upgrade(config, "0042")
    assert _flags_and_view(empty_url) == ([(0, True)], True)

    command.downgrade(config, "0041")
    assert _flags_and_view(empty_url) == ([(0, True), (1, True)], True)
