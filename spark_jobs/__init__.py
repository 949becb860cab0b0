"""Spark over the outbox: read committed records through JDBC, and exactly-once batch jobs.

    reader.py        read_committed(): a DataFrame of the committed records of a topic between
                     start and end positions, split into parallel JDBC queries
    positions.py     start positions (a group's committed offsets) and end positions (the log
                     end, snapshotted once) from the service's HTTP API
    source.py        the service's database URL as a JDBC URL and properties
    jars.py          Java check and JDBC driver discovery
    session.py       build_session(): a SparkSession with the drivers on its classpath
    pizza_income.py  seed 001's pizza-income pipeline as an exactly-once batch job

Needs the `spark` extra (`pip install -e '.[spark]'`), Java 17+ and the JDBC drivers; see
docs/SPARK.md.
"""
