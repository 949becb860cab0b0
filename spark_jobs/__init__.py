"""Spark over the outbox: the `outbox` data source, committed records through JDBC, and
exactly-once batch jobs.

    datasource.py    the `outbox` data source (spark.read.format("outbox")): register(),
                     read_outbox(), planning with pruning and narrowing by pushed filters
    sink.py          the data source's exactly-once sink (df.write / df.writeStream
                     .format("outbox")): each task prepares its own transaction, the driver
                     commits them together with the batch id; write_outbox()
    arrow_read.py    one split's committed records as Arrow batches, read in Spark's Python
                     workers with the database's own driver (ADBC or psycopg; sqlite3)
    source_options.py  the data source's options, checked up front (one-line errors)
    reader.py        read_committed(): a DataFrame of the committed records of a topic between
                     start and end positions, split into parallel JDBC queries; no job uses it:
                     it is the JDBC baseline the benchmarks measure the data source against
    positions.py     start positions (a group's committed offsets) and end positions (the log
                     end, snapshotted once) from the service's HTTP API
    source.py        the service's database URL as a JDBC URL and properties
    jars.py          Java check and JDBC driver discovery
    session.py       build_session(): a SparkSession with the drivers on its classpath
    pizza_income.py  the pizza-income pipeline as an exactly-once batch job, reading
                     through the data source
    cluster.py       a standalone cluster (master and worker) on 127.0.0.1: python -m spark_jobs.cluster

Needs the `spark` extra (`pip install 'outbox[spark]'`: PySpark, pyarrow, the ADBC PostgreSQL
driver) and Java 17+; the JDBC reader also needs the JDBC drivers. See docs/SPARK.md.
"""
