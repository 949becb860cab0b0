"""The `outbox` sink: df.write.format("outbox") and df.writeStream.format("outbox"), exactly once.

    (df.write.format("outbox").mode("append")
       .option("url", "http://127.0.0.1:8000").option("topic", "income")
       .save())
    (df.writeStream.format("outbox")
       .option("url", "http://127.0.0.1:8000").option("topic", "income").option("sinkId", "income-job")
       .option("checkpointLocation", "/var/lib/jobs/income")
       .start())

Columns: `topic` (string; or the option topic, which wins over the column, as in Spark's Kafka
sink), `partition` (integer, optional: else the client's partitioner on the key, as a Producer
places records), `key` (string, nullable), `value` (a string column holds JSON text and is sent
as that JSON; any other type is converted to JSON as Spark's to_json would: see
`json_converter`), `headers` (map<string,string>, optional). Only `value` is required.

The modules, by job:

    options.py   the write's options (SinkOptions), checked on the driver
    columns.py   the DataFrame's columns, checked on the driver; values as JSON
    task.py      a task's rows in one prepared transaction, on an executor
    commit.py    the driver's checks before any task, the one commit point, the clean-up
    writers.py   Spark's writer classes, which wire them together

docs/SPARK.md, "The sink", says why each choice.
"""
