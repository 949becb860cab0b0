"""README's data source snippet in a user's own script, run as `.venv/bin/python script.py`
from outside the repository, with a `python3` on PATH that has no pyarrow (Spark's Python
workers run `python3` unless told otherwise)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.logbuilder import LogBuilder

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

SCRIPT = '''
import sys
from pyspark.sql import SparkSession
from spark_jobs.datasource import register

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
register(spark)
df = (spark.read.format("outbox").option("url", sys.argv[1])
      .option("databaseUrl", sys.argv[2]).option("topics", sys.argv[3]).load())
print("OFFSETS", sorted(r["offset"] for r in df.collect()))
'''


def _run(tmp_path: Path, args: list[str], **env_extra: str) -> subprocess.CompletedProcess[str]:
    """The script under this venv's Python, from a directory of the user's, with `python3` on
    PATH an interpreter without pyarrow."""
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").symlink_to("/usr/bin/python3")
    script = tmp_path / "my_job.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PATH"] = f"{bare}{os.pathsep}{env['PATH']}"
    env.update(env_extra)
    return subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(autouse=True)
def _bare_python3() -> None:
    if not Path("/usr/bin/python3").exists() or subprocess.run(
            ["/usr/bin/python3", "-c", "import pyarrow"], capture_output=True).returncode == 0:
        pytest.skip("needs /usr/bin/python3 without pyarrow: the interpreter a user's PATH would give workers")


def test_the_readme_snippet_reads_from_a_users_script(backend, url, client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = LogBuilder(client, "orders-of-a-user")
    log.create(1)
    log.plain(0, 3)

    done = _run(tmp_path, [url, backend.url, "orders-of-a-user"])

    assert done.returncode == 0, done.stderr[-3000:]
    assert "OFFSETS [0, 1, 2]" in done.stdout


def test_a_pyspark_python_without_pyarrow_is_one_line_naming_what_to_set(backend, url, client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    LogBuilder(client, "orders-of-a-user").create(1)

    done = _run(tmp_path, [url, backend.url, "orders-of-a-user"], PYSPARK_PYTHON="/usr/bin/python3")

    assert done.returncode != 0
    assert (f"OutboxSourceError: Spark's Python workers run PYSPARK_PYTHON=/usr/bin/python3, which cannot import "
            f"pyarrow and spark_jobs: set PYSPARK_PYTHON={sys.executable}") in done.stderr
