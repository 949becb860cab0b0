"""The SparkSession of a job: Java checked, JDBC drivers found, small-batch defaults.

Run with `python -m …`, PySpark starts its own JVM, and the JDBC jars found by
spark_jobs.jars go into `spark.jars` before it starts, with the JVM read's headers parser
where a JDK can build it (spark_jobs.headers_jar). Run under `spark-submit`, the JVM is
already up with what `--jars` / `--packages` gave it: the jars are checked, not added (a jar
added after the driver JVM started would reach the executors but not the driver, which
needs the driver class to plan the read), and a missing driver is an error that names the
`--jars` to add. The headers parser is not checked there: without it in `--jars`
(`python -m spark_jobs.headers_jar` prints its path), the JVM read parses with from_json.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path

from spark_jobs.errors import JdbcDriverNotFound
from spark_jobs.headers_jar import headers_jar
from spark_jobs.jars import (
    JarResolution,
    check_java,
    jar_drivers,
    local_jar_path,
    required_java_major,
    resolve_jdbc_jars,
    split_jar_list,
)

logger = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"
# Defaults for batch jobs over a few partitions; the caller's conf wins.
DEFAULT_CONF = {
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}


def use_this_python_for_workers(env: MutableMapping[str, str]) -> None:
    """Spark's Python workers (the `outbox` data source plans and reads in them) run
    PYSPARK_PYTHON, else `python3` from PATH, which need not be the interpreter that has
    pyarrow and this package: unless PYSPARK_PYTHON says which, they run this one. (PySpark
    reads the variable, not spark.pyspark.python, when it wraps a Python data source.)"""
    if not env.get("PYSPARK_PYTHON"):
        env["PYSPARK_PYTHON"] = sys.executable


def under_spark_submit() -> bool:
    """True when spark-submit started this Python process (its JVM is already running)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    app_name: str,
    *,
    databases: Iterable[str],
    master: str | None = None,
    jdbc_jars: Iterable[str] | None = None,
    conf: Mapping[str, str] | None = None,
):  # type: ignore[no-untyped-def]
    """(SparkSession, JarResolution) for reading the given databases ("postgresql", "sqlite")."""
    import pyspark
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    databases = sorted(set(databases))
    if under_spark_submit():
        # spark-submit found Java itself; what matters is what it put on the classpath.
        from pyspark import SparkContext

        SparkContext._ensure_initialized()  # connects to spark-submit's JVM
        submitted = SparkConf()
        resolution = check_submitted_jars(databases, submitted.get("spark.jars", "") or "")
        builder = SparkSession.builder.appName(app_name)
        if master is not None:
            builder = builder.master(master)
        extra = {k: v for k, v in DEFAULT_CONF.items() if not submitted.contains(k)}
        extra.update(conf or {})
    else:
        check_java(required_java_major(pyspark.__version__))
        resolution = resolve_jdbc_jars(databases, jdbc_jars=jdbc_jars,
                                       configured_jars=(conf or {}).get("spark.jars"))
        builder = SparkSession.builder.appName(app_name).master(master or DEFAULT_MASTER)
        use_this_python_for_workers(os.environ)
        extra = {**DEFAULT_CONF, **(conf or {}), **resolution.spark_conf()}
        headers = headers_jar()
        if headers is not None:
            # The JVM read's headers parser (spark_jobs.headers_jar): in spark.jars, the driver's
            # class path and every executor's.
            extra["spark.jars"] = ",".join([*split_jar_list(extra.get("spark.jars", "")), str(headers)])
        if (conf or {}).get("spark.jars.repositories") and "spark.jars.repositories" in resolution.spark_conf():
            # The caller's repositories kept, the probed one after them.
            extra["spark.jars.repositories"] = ",".join((conf or {})["spark.jars.repositories"].split(",")
                                                        + resolution.repositories)
    for key, value in extra.items():
        builder = builder.config(key, value)
    for database, source in sorted(resolution.sources.items()):
        logger.info("JDBC driver for %s: %s", database, source)
    return builder.getOrCreate(), resolution


def check_submitted_jars(databases: Iterable[str], submitted_jars: str) -> JarResolution:
    """The drivers among spark-submit's jars (--jars, and --packages, which spark-submit
    resolves into spark.jars); JdbcDriverNotFound naming the flags to add if one is missing."""
    out = JarResolution(jars=split_jar_list(submitted_jars))
    for jar in out.jars:
        local = local_jar_path(jar)
        if local is not None and Path(local).is_file():
            for database in jar_drivers(local):
                out.sources.setdefault(database, f"spark-submit: {jar}")
    missing = sorted(d for d in set(databases) if d not in out.sources)
    if not missing:
        return out
    try:
        suggestion = resolve_jdbc_jars(missing)
    except JdbcDriverNotFound as e:
        fix = str(e)
    else:
        flags = []
        if suggestion.jars:
            flags.append("--jars " + ",".join(suggestion.jars))
        if suggestion.packages:
            flags.append("--packages " + ",".join(suggestion.packages))
            if suggestion.repositories:
                flags.append("--repositories " + ",".join(suggestion.repositories))
        fix = "add " + " ".join(flags) + " to the spark-submit command"
    raise JdbcDriverNotFound(
        f"spark-submit was started without a JDBC driver for {', '.join(missing)} "
        f"(spark.jars={submitted_jars or '(none)'}); a jar added after the driver JVM started "
        f"would not reach the driver. {fix}"
    )
