"""What the Spark jobs' --help says they are: a pipeline a newcomer can look up in the
repository (README, "Spark"), not a name from outside it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("module", "kind"), [
    ("spark_jobs.pizza_income", "an exactly-once Spark batch job"),
    ("spark_jobs.pizza_income_stream", "a Spark Structured Streaming job, exactly once"),
])
def test_a_job_s_help_names_the_readme_section_its_pipeline_is_in(module: str, kind: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)

    description = " ".join(done.stdout.split("\n\n")[1].split())
    assert description == f'The pizza-income pipeline (README, "Spark") as {kind}.'
    assert re.search(r"^## Spark$", (ROOT / "README.md").read_text(), re.MULTILINE)
