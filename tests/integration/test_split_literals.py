"""A split's topic literal (spark_jobs.reader.statement.sql_string) reads back as the topic's
name on each database, whatever PostgreSQL's standard_conforming_strings says: topic names may
hold quotes and backslashes, and a literal the database reads otherwise would let a topic's
name end it early and run the rest as SQL in a Spark job's read."""

from __future__ import annotations

import pytest
from sqlalchemy import NullPool, create_engine

from spark_jobs.reader.statement import sql_string

NAMES = ["orders", "it's", "x\\' OR 1=1 --", "a\\\\b", "\\", "'\\''", "tab\\tname", "ünï'cödé\\"]


@pytest.mark.parametrize("name", NAMES)
def test_a_topic_literal_reads_back_as_the_name_on_sqlite(name: str, tmp_path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'literals.db'}", poolclass=NullPool)
    with engine.connect() as conn:
        assert conn.exec_driver_sql(f"SELECT {sql_string(name, 'sqlite')}").scalar_one() == name


@pytest.mark.parametrize("conforming", ["on", "off"])
@pytest.mark.parametrize("name", NAMES)
def test_a_topic_literal_reads_back_as_the_name_on_postgresql_whatever_standard_conforming_strings(
        name: str, conforming: str, postgres_url: str) -> None:
    engine = create_engine(postgres_url, poolclass=NullPool)
    with engine.connect() as conn:
        conn.exec_driver_sql("SET escape_string_warning = off")
        conn.exec_driver_sql(f"SET standard_conforming_strings = {conforming}")
        assert conn.exec_driver_sql(f"SELECT {sql_string(name, 'postgresql')}").scalar_one() == name
