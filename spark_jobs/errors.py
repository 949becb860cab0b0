"""Errors of the Spark jobs: one root, each kind with a message that names the fix."""

from __future__ import annotations


class SparkJobError(Exception):
    """A Spark job cannot run as configured."""


class JavaNotFound(SparkJobError):
    """No Java runtime, or one too old for this PySpark."""


class JdbcDriverNotFound(SparkJobError):
    """No JDBC driver jar for the database."""


class DataLossError(SparkJobError):
    """A batch would skip records the group never read: its committed position is below the
    partition's log start (retention or DeleteRecords deleted them), and the job was asked
    to fail on data loss (Spark's Kafka source option failOnDataLoss)."""


class OutboxSourceError(SparkJobError):
    """The `outbox` data source cannot read as asked: an unknown or malformed option, a
    database that cannot be reached or is not migrated, a service that does not answer, a
    topic that does not exist. One line, naming the option or the fix."""


class OutboxSinkError(SparkJobError):
    """The `outbox` sink cannot write as asked: an unknown or malformed option, a column of the
    wrong name or type, a save mode other than append, a service that does not answer, an
    output topic that does not exist. One line, naming the option, the column or the fix."""
