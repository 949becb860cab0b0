"""The headers' parser for the JVM read: spark_jobs/java/outbox/spark/HeadersMap.java, a Java UDF
that makes the data source's `headers` map from the stored JSON text in one pass, where Spark's
from_json builds a general parser per row (docs/SPARK.md, "The headers' parser").

It is built on the machine that starts the session, by the JDK's `javac` against the installed
PySpark's own jar, into a jar kept in a cache directory under the source's and PySpark's
digest; build_session puts that jar in `spark.jars`, which brings it to the driver and every
executor. Where it cannot be had (no JDK, a failed build, a session started by spark-submit
without it in `--jars`), the JVM read parses with from_json alone: the same map, more slowly.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spark_jobs.jars import java_tool

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("java") / "outbox" / "spark" / "HeadersMap.java"
CLASS = "outbox.spark.HeadersMap"
# The name the session knows the UDF by (register_headers_udf).
FUNCTION = "outbox_headers_map"
JAR_PREFIX = "outbox-headers-map-"
COMPILE_TIMEOUT_S = 180


def cache_directory(env: Mapping[str, str] | None = None) -> Path:
    """Where built jars are kept: $XDG_CACHE_HOME/outbox-spark, else ~/.cache/outbox-spark."""
    env = os.environ if env is None else env
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "outbox-spark"


def javac_executable(env: Mapping[str, str] | None = None) -> str | None:
    """The javac of the Java installation Spark's java is found in (spark_jobs.jars)."""
    return java_tool("javac", env)


def _compile_classpath() -> list[Path]:
    """The jar holding Spark's UDF1 interface, which is all the source needs."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return sorted(jars.glob("spark-sql-api_*.jar"))


def headers_jar(env: Mapping[str, str] | None = None, *, source: Path = SOURCE) -> Path | None:
    """The UDF's jar, built once per source and PySpark version; None, with the reason logged,
    when it cannot be built here."""
    import pyspark

    code = source.read_bytes()
    digest = hashlib.sha256(code + b"\0" + pyspark.__version__.encode()).hexdigest()[:16]
    try:
        directory = cache_directory(env)
    except RuntimeError as e:  # no home directory to keep it in
        logger.info("the JVM read parses headers with from_json: %s; set XDG_CACHE_HOME", e)
        return None
    jar = directory / f"{JAR_PREFIX}{digest}.jar"
    if jar.is_file():
        return jar
    javac = javac_executable(env)
    classpath = _compile_classpath()
    if javac is None or not classpath:
        logger.info("the JVM read parses headers with from_json: %s", "no javac (a JDK: apt-get install -y "
                    "openjdk-17-jdk-headless)" if javac is None else "no spark-sql-api jar in PySpark")
        return None
    try:
        # Readable by this user only, as everything the service and its jobs write.
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=directory) as work:
            classes = Path(work) / "classes"
            done = subprocess.run(
                [javac, "-nowarn", "--release", "17", "-encoding", "UTF-8",
                 "-cp", os.pathsep.join(map(str, classpath)), "-d", str(classes), str(source)],
                capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
            if done.returncode != 0:
                logger.warning("the JVM read parses headers with from_json: building %s failed: %s",
                               source.name, (done.stderr or done.stdout).strip().splitlines()[:1])
                return None
            built = Path(work) / jar.name
            with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as z:
                for path in sorted(classes.rglob("*.class")):
                    z.write(path, path.relative_to(classes).as_posix())
            built.chmod(0o600)
            # Atomic: a session started at the same time finds the whole jar or none.
            os.replace(built, jar)
    except (OSError, subprocess.SubprocessError) as e:
        logger.warning("the JVM read parses headers with from_json: building %s failed: %s", source.name, e)
        return None
    return jar


def register_headers_udf(spark: Any, *, class_name: str = CLASS) -> bool:
    """Whether the session has the UDF (its jar on the class path): registered as FUNCTION."""
    try:
        spark.udf.registerJavaFunction(FUNCTION, class_name, "map<string,string>")
    except Exception as e:  # a Py4J or analysis error naming the missing class
        logger.debug("the JVM read parses headers with from_json: %s", str(e).splitlines()[0] if str(e) else e)
        return False
    return True


def main() -> int:
    """`python -m spark_jobs.headers_jar`: build the jar and print its path, for a spark-submit
    (`--jars "$(python -m spark_jobs.headers_jar)"`), whose JVM is up before a job could add it;
    exit 1, saying why, where it cannot be built."""
    import sys

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    jar = headers_jar()
    if jar is None:
        return 1
    print(jar)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
