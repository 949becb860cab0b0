"""Spark over the outbox: the `outbox` data source (batch and streaming reads, the exactly-once
sink) and exactly-once jobs.

    datasource.py    the `outbox` data source (spark.read.format("outbox")): register(),
                     read_outbox(), planning with pruning and narrowing by pushed filters
    sink.py          the data source's exactly-once sink (df.write / df.writeStream
                     .format("outbox")): each task prepares its own transaction, the driver
                     commits them together with the batch id; write_outbox()
    arrow_read.py    one split's committed records as Arrow batches, read in Spark's Python
                     workers with the database's own driver (ADBC or psycopg; sqlite3)
    source_options.py  the data source's options, checked up front (one-line errors)
    positions.py     start positions (a group's committed offsets) and end positions (the log
                     end, snapshotted once) from the service's HTTP API
    jars.py          Java check and JDBC driver discovery
    session.py       build_session(): a SparkSession with the drivers on its classpath
    pizza_income.py  the pizza-income pipeline as an exactly-once batch job, reading
                     through the data source
    cluster.py       a standalone cluster (master and worker) on 127.0.0.1: python -m spark_jobs.cluster

Needs the `spark` extra (`pip install 'outbox[spark]'`: PySpark, pyarrow, the ADBC PostgreSQL
driver) and Java 17+. The old JDBC reader, the benchmarks' baseline, is benchmarks/jdbc_reader.py.
See docs/SPARK.md.
"""
