"""Spark over the outbox: the `outbox` data source (batch and streaming reads, the exactly-once
sink) and exactly-once jobs. The imports go one way: common ← reader, writer ← datasource ←
the jobs (tests/unit/test_spark_jobs_imports.py holds it).

    datasource.py    the `outbox` data source and its registration: register(), and
                     read_outbox() and write_outbox(), which check on the driver first; it
                     only wires the packages below together
    reader/          the reads (spark.read / spark.readStream .format("outbox")): options,
                     checks, planning, a split's SQL, a split's read (Arrow, in Spark's
                     Python workers), the batch and the streaming reader, and the JVM read
                     (the same plan through Spark's JDBC reader)
    writer/          the exactly-once sink (df.write / df.writeStream .format("outbox")):
                     options, columns, a task's prepared transaction, the driver's one commit
    common/          what both share: the one table of options, the service's HTTP session,
                     positions (and their JSON form)
    sink.py, positions.py  the names users' code imports write_outbox and the positions
                     types by: re-exports
    jars.py          Java check and JDBC driver discovery
    session.py       build_session(): a SparkSession with the drivers on its classpath
    pizza_income.py  the pizza-income pipeline as an exactly-once batch job, reading
                     through the data source; pizza_income_stream.py the same as a stream
    cluster.py       a standalone cluster (master and worker) on 127.0.0.1: python -m spark_jobs.cluster

Needs the `spark` extra (`pip install 'outbox[spark]'`: PySpark, pyarrow, the ADBC PostgreSQL
driver) and Java 17+. The old JDBC reader, the benchmarks' baseline, is benchmarks/jdbc_reader.py.
See docs/SPARK.md.
"""
