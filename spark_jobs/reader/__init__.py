"""The `outbox` data source's reads: spark.read.format("outbox") and
spark.readStream.format("outbox").

    options.py   a read's options (SourceOptions), checked before Spark runs anything
    checks.py    the database, the service, and that the one is the other's (one-line errors)
    planning.py  pushed filters, the snapshot of log bounds, the ranges and splits (Bounds, Split)
    statement.py a split's SQL (its bounds as a condition on the view), for both reads
    split.py     one split's committed records as Arrow batches, in Spark's Python workers
    jvm.py       the JVM read: the same plan, read by Spark's JDBC reader (read_outbox's
                 reader=jvm, and auto's choice when the JDBC driver is loaded)
    batch.py     Spark's batch reader
    stream.py    Spark's streaming reader: offsets, admission control, commitGroup

docs/SPARK.md, "The data source `outbox`" and "Streaming", says how and why.
"""
