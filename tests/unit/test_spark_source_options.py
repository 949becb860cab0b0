"""The read options that choose among values (spark_jobs.reader.options.parse_options): each is
read without case as its enum's member, and another value is refused in one line naming the
enum's values (spark_jobs.common.options.choices)."""

from __future__ import annotations

import re

import pytest

from spark_jobs.common.options import HeadersFormat, PostgresDriver
from spark_jobs.errors import OutboxSourceError
from spark_jobs.reader.options import parse_options

_BASE = {"url": "http://127.0.0.1:9", "databaseUrl": "postgresql://127.0.0.1/outbox", "topics": "orders"}


def test_the_driver_is_read_without_case_as_its_enum_member() -> None:
    assert parse_options({**_BASE, "driver": " PsyCopg "}, env={}).driver is PostgresDriver.PSYCOPG


def test_the_driver_not_given_is_adbc() -> None:
    assert parse_options(_BASE, env={}).driver is PostgresDriver.ADBC


def test_an_unknown_driver_is_refused_naming_the_drivers() -> None:
    with pytest.raises(OutboxSourceError) as caught:
        parse_options({**_BASE, "driver": "jdbc"}, env={})
    assert str(caught.value) == "option driver: expected adbc or psycopg, not 'jdbc'"


def test_an_unknown_headers_format_is_refused_naming_the_formats() -> None:
    with pytest.raises(OutboxSourceError) as caught:
        parse_options({**_BASE, "headersFormat": "xml"}, env={})
    assert str(caught.value) == "option headersFormat: expected map or json, not 'xml'"


def test_the_headers_format_is_read_as_its_enum_member() -> None:
    assert parse_options({**_BASE, "headersFormat": "JSON"}, env={}).headers_format is HeadersFormat.JSON


def test_the_driver_with_a_sqlite_database_is_refused() -> None:
    # A SQLite file is read with sqlite3: the option would do nothing.
    with pytest.raises(OutboxSourceError) as caught:
        parse_options({**_BASE, "databaseUrl": "sqlite:///./outbox.db", "driver": "psycopg"}, env={})
    assert str(caught.value).startswith("option driver is only read with a PostgreSQL databaseUrl")


@pytest.mark.parametrize("option, value", [("maxOffsetsPerTrigger", "100"), ("commitGroup", "lag-for-operators")])
def test_a_streaming_option_in_a_batch_read_is_refused(option: str, value: str) -> None:
    # A batch read would ignore it: every position up to endingPositions, no group committed.
    from pyspark.sql.types import StructType

    from spark_jobs.datasource import OutboxDataSource, read_outbox

    expected = f"option {option} is for streaming reads (spark.readStream)"
    with pytest.raises(OutboxSourceError, match=re.escape(expected)):
        OutboxDataSource({**_BASE, option: value}).reader(StructType())
    # read_outbox refuses it before it asks Spark, the database or the service anything.
    with pytest.raises(OutboxSourceError, match=re.escape(expected)):
        read_outbox(None, **{**_BASE, option: value})


@pytest.mark.parametrize("flag", ["--max-positions", "--transaction-timeout-ms"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_the_pizza_income_job_refuses_a_bound_below_one(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    # --max-positions 0 read nothing and left the group where it was, run after run; both are
    # refused before Spark starts.
    from spark_jobs.pizza_income import main

    with pytest.raises(SystemExit) as exited:
        main([flag, value])
    assert exited.value.code == 2
    assert f"{flag} must be at least 1" in capsys.readouterr().err
