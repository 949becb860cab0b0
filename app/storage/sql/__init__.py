"""The SQL that lives in the database (views, functions, triggers), current version, one named
file each, beside the code that relies on it.

A migration never loads these files: it runs its own frozen copy (migrations/versions/sql/),
so that upgrading an old database replays exactly what each revision created. A test holds
the newest migration's copy equal to the file here (tests/unit/test_sql_catalogue.py),
which is how a change to database-side SQL is noticed as needing a migration."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).parent


def load(name: str) -> str:
    """The text of app/storage/sql/<name>."""
    return (_HERE / name).read_text()


# The values that render committed_records.postgresql.sql (a template: migrations/sql_files.py's
# render) as the view of every log partition, the run's partition the batch row's own, for a
# reader of the current text (tests, benchmarks); each migration renders its frozen copy with
# values of its own.
EVERY_PARTITION = {"topic_id": "b.topic_id", "partition": 'b."partition"', "of_partition": "",
                   "records_of_partition": "", "topic": "t.name",
                   "records_joins": ("\nJOIN topics t ON t.topic_id = r.topic_id"
                                     '\nJOIN partitions p ON p.topic_id = r.topic_id AND p."partition" = r."partition"'),
                   "log_start": "p.log_start_offset", "batches_topic_join": "\nJOIN topics t ON t.topic_id = b.topic_id"}
