"""Java and JDBC driver discovery for the Spark jobs.

Spark needs a Java runtime and, for JDBC, the database's driver jar on the driver and the
executors. Where the drivers come from, first match wins, per database:

1. an explicit setting: `jdbc_jars=[…]` or `OUTBOX_SPARK_JDBC_JARS` (comma-separated
   paths), plus whatever `spark.jars` the caller already configured
   (`spark-submit --jars`); a jar counts for a database if it holds that database's driver
   class, so naming one jar that is not a driver is an error, not a silent skip;
2. the Debian packages' jars in /usr/share/java (`libpostgresql-jdbc-java`,
   `libxerial-sqlite-jdbc-java`), or another directory named by `OUTBOX_SPARK_JDBC_DIR`;
3. Maven coordinates in `spark.jars.packages`, which Spark resolves at session start: only
   when Maven Central (or `OUTBOX_SPARK_MAVEN_REPOSITORY`, then also in
   `spark.jars.repositories`) answers, unless `OUTBOX_SPARK_JDBC_PACKAGES` is `always` (or
   `never`; default `auto`).

When none gives a driver, `JdbcDriverNotFound` says what to install or set.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import urllib.request
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from spark_jobs.errors import JavaNotFound, JdbcDriverNotFound, SparkJobError

DEBIAN_JAR_DIR = Path("/usr/share/java")
MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
MAVEN_PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class JdbcDriver:
    database: str  # "postgresql" or "sqlite"
    driver_class: str
    debian_package: str
    debian_jar_names: tuple[str, ...]  # tried in order in the jar directory
    maven_coordinate: str

    @property
    def class_entry(self) -> str:
        return self.driver_class.replace(".", "/") + ".class"


DRIVERS: dict[str, JdbcDriver] = {
    "postgresql": JdbcDriver(
        "postgresql", "org.postgresql.Driver", "libpostgresql-jdbc-java",
        ("postgresql.jar",), "org.postgresql:postgresql:42.7.4",
    ),
    "sqlite": JdbcDriver(
        "sqlite", "org.sqlite.JDBC", "libxerial-sqlite-jdbc-java",
        ("sqlite-jdbc.jar", "xerial-sqlite-jdbc.jar"), "org.xerial:sqlite-jdbc:3.46.1.3",
    ),
}


@dataclass(slots=True)
class JarResolution:
    """What to add to the Spark configuration, and where each driver came from."""

    jars: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # database → "explicit: /x.jar" …
    # Where Spark resolves the packages besides its own defaults (spark.jars.repositories):
    # OUTBOX_SPARK_MAVEN_REPOSITORY, the repository that was probed, when it is not Maven Central.
    repositories: list[str] = field(default_factory=list)

    def spark_conf(self) -> dict[str, str]:
        conf = {}
        if self.jars:
            conf["spark.jars"] = ",".join(self.jars)
        if self.packages:
            conf["spark.jars.packages"] = ",".join(self.packages)
        if self.packages and self.repositories:
            conf["spark.jars.repositories"] = ",".join(self.repositories)
        return conf


def jar_drivers(path: str | os.PathLike[str]) -> set[str]:
    """The databases whose driver class the jar holds."""
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
    except (OSError, zipfile.BadZipFile) as e:
        raise JdbcDriverNotFound(f"{path} is not a readable jar: {e}") from e
    return {d.database for d in DRIVERS.values() if d.class_entry in names}


def split_jar_list(value: str | None) -> list[str]:
    if not value:
        return []
    return [p.strip() for p in value.split(",") if p.strip()]


def local_jar_path(jar: str) -> str | None:
    """A local file path for a spark.jars entry, or None for remote URLs (not inspected)."""
    if jar.startswith("file:"):
        return jar.removeprefix("file:").removeprefix("//")
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", jar):
        return None
    return jar


def resolve_jdbc_jars(
    databases: Iterable[str],
    *,
    jdbc_jars: Iterable[str] | None = None,
    configured_jars: str | None = None,
    env: Mapping[str, str] | None = None,
    maven_reachable: bool | None = None,
) -> JarResolution:
    """Find a driver for each database ("postgresql", "sqlite"); raises JdbcDriverNotFound.

    `configured_jars` is the spark.jars already set (e.g. by spark-submit --jars): kept, and
    inspected like explicit jars. `maven_reachable` skips the network probe when given.
    """
    env = os.environ if env is None else env
    wanted = sorted(set(databases))
    unknown = [d for d in wanted if d not in DRIVERS]
    if unknown:
        raise SparkJobError(f"no JDBC driver known for {unknown}; known: {sorted(DRIVERS)}")
    # Checked whatever the drivers found: a misspelt mode would otherwise pass unnoticed until
    # the day a driver is missing and it is read.
    mode = (env.get("OUTBOX_SPARK_JDBC_PACKAGES") or "auto").lower()
    if mode not in ("auto", "always", "never"):
        raise SparkJobError(f"OUTBOX_SPARK_JDBC_PACKAGES must be auto, always or never, not {mode!r}")
    out = JarResolution()

    configured = split_jar_list(configured_jars)
    out.jars.extend(configured)
    explicit = list(jdbc_jars or []) + split_jar_list(env.get("OUTBOX_SPARK_JDBC_JARS"))
    for jar in configured + explicit:
        local = local_jar_path(jar)
        if local is None:
            continue  # a remote jar: Spark fetches it; cannot tell what it holds
        if not Path(local).is_file():
            raise JdbcDriverNotFound(
                f"JDBC jar {jar} does not exist (from jdbc_jars / OUTBOX_SPARK_JDBC_JARS / spark.jars)"
            )
        found = jar_drivers(local)
        if jar in explicit and not found:
            raise JdbcDriverNotFound(
                f"{jar} holds none of the JDBC drivers "
                f"{', '.join(d.driver_class for d in DRIVERS.values())}"
            )
        if jar in explicit and jar not in out.jars:
            out.jars.append(jar)
        for database in found:
            out.sources.setdefault(database, f"explicit: {jar}")

    jar_dir = Path(env.get("OUTBOX_SPARK_JDBC_DIR") or DEBIAN_JAR_DIR)
    for database in wanted:
        if database in out.sources:
            continue
        for name in DRIVERS[database].debian_jar_names:
            candidate = jar_dir / name
            if candidate.is_file() and database in jar_drivers(candidate):
                out.jars.append(str(candidate.resolve()))
                out.sources[database] = f"{jar_dir}: {candidate.resolve()}"
                break

    missing = [d for d in wanted if d not in out.sources]
    if missing:
        repository = env.get("OUTBOX_SPARK_MAVEN_REPOSITORY") or MAVEN_CENTRAL
        use_packages = mode == "always" or (
            mode == "auto" and (maven_reachable if maven_reachable is not None else _reachable(repository))
        )
        if not use_packages:
            raise JdbcDriverNotFound(_missing_message(missing, jar_dir, mode, repository))
        if repository != MAVEN_CENTRAL:
            # The repository that answered is where the packages are to come from: probed
            # alone, it would send Spark to Maven Central, perhaps the one out of reach.
            out.repositories.append(repository)
        for database in missing:
            out.packages.append(DRIVERS[database].maven_coordinate)
            out.sources[database] = f"spark.jars.packages: {DRIVERS[database].maven_coordinate}"
    return out


def _reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=MAVEN_PROBE_TIMEOUT_S):
            return True
    except Exception:  # noqa: BLE001 - any failure means "do not count on it"
        return False


def _missing_message(missing: list[str], jar_dir: Path, mode: str, repository: str) -> str:
    lines = [f"no JDBC driver found for {', '.join(missing)}. Fix one of:"]
    packages = " ".join(DRIVERS[d].debian_package for d in missing)
    lines.append(f"  - Debian/Ubuntu: apt-get install -y {packages}   (installs the jars in {DEBIAN_JAR_DIR})")
    jars = ",".join(f"/path/to/{DRIVERS[d].debian_jar_names[0]}" for d in missing)
    lines.append(f"  - name the jars: OUTBOX_SPARK_JDBC_JARS={jars}  (or build_session(jdbc_jars=…), or spark-submit --jars)")
    coords = ",".join(DRIVERS[d].maven_coordinate for d in missing)
    if mode == "never":
        lines.append(f"  - allow Maven: OUTBOX_SPARK_JDBC_PACKAGES=auto (would use {coords})")
    else:
        lines.append(f"  - reach Maven ({repository} did not answer) for spark.jars.packages={coords},"
                     " or set OUTBOX_SPARK_MAVEN_REPOSITORY to a mirror you can reach")
    if jar_dir != DEBIAN_JAR_DIR:
        lines.append(f"  (looked in OUTBOX_SPARK_JDBC_DIR={jar_dir})")
    return "\n".join(lines)


# --- Java ---------------------------------------------------------------------------------


def required_java_major(pyspark_version: str) -> int:
    """Spark 4 runs on Java 17 or newer; Spark 3.x on 8, 11 or 17."""
    major = int(pyspark_version.split(".")[0])
    return 17 if major >= 4 else 8


def java_executable(env: Mapping[str, str] | None = None) -> str | None:
    """The java Spark's launcher would use: $JAVA_HOME/bin/java, else java on PATH."""
    return java_tool("java", env)


def java_tool(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """A tool of the Java installation java_executable finds (java, javac): $JAVA_HOME/bin/NAME
    when JAVA_HOME is set, else NAME on PATH."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / name
        return str(candidate) if candidate.is_file() else None
    return shutil.which(name, path=env.get("PATH"))


def parse_java_major(version_output: str) -> int | None:
    """From `java -version` output: 'version "17.0.15"' → 17, 'version "1.8.0_392"' → 8."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if m is None:
        return None
    major = int(m.group(1))
    if major == 1 and m.group(2):
        return int(m.group(2))
    return major


def check_java(required_major: int, env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """(java path, major version); raises JavaNotFound naming the fix."""
    env = os.environ if env is None else env
    java = java_executable(env)
    fix = (f"install a Java {required_major}+ runtime (Debian/Ubuntu: apt-get install -y "
           f"openjdk-17-jre-headless) and put it on PATH or point JAVA_HOME at it")
    if java is None:
        where = f"JAVA_HOME={env['JAVA_HOME']} has no bin/java" if env.get("JAVA_HOME") else "no java on PATH"
        raise JavaNotFound(f"Java not found ({where}): {fix}")
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        raise JavaNotFound(f"cannot run {java}: {e}; {fix}") from e
    major = parse_java_major(done.stderr + done.stdout)
    if major is None:
        raise JavaNotFound(f"cannot tell the version of {java} from {done.stderr.strip()!r}; {fix}")
    if major < required_major:
        raise JavaNotFound(f"{java} is Java {major}, this PySpark needs Java {required_major} or newer: {fix}")
    return java, major
