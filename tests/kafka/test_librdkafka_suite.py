"""librdkafka's own integration test suite against the Kafka listener: every test of
compat/librdkafka/allowlist marked `quick` passes, on SQLite and on PostgreSQL, through
compat/librdkafka/run (which builds librdkafka once into its cache directory and starts a
migrated `outbox serve --kafka-listener`). The whole allowlist: `compat/librdkafka/run`, or
this test with OUTBOX_LIBRDKAFKA_ALL=1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, unavailable

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "compat" / "librdkafka" / "run"
# The build (about two minutes on two cores, once) and the quick subset on one database.
TIMEOUT_S = 1800
# Runs of the runner at a time: the quick subset's seven tests are nearly all waiting (on their
# own timers: 0094's message timeouts, 0103's fencing and 0018's rebalances), 11 s of CPU in a
# 192 s run one at a time; four at a time end with the longest, 0103
# (docs/benchmarks.md, branch kafkatime).
JOBS = 4


@pytest.fixture(scope="module")
def built() -> None:
    """librdkafka and its test-runner, built into the cache directory (once). .ci/run starts the
    build in the background before pytest: this waits for it on its build lock, or, if it
    failed, builds again and fails with the build's output."""
    missing = [tool for tool in ("gcc", "make") if shutil.which(tool) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not installed (Debian: apt-get install build-essential libssl-dev "
                    "zlib1g-dev; .ci/run installs them)")
    done = subprocess.run([sys.executable, str(RUN), "--build-only"], capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize("database", BACKENDS)
def test_every_allowlisted_librdkafka_test_passes(built: None, database: str) -> None:
    which = [] if os.environ.get("OUTBOX_LIBRDKAFKA_ALL") == "1" else ["--quick", "--jobs", str(JOBS)]
    done = subprocess.run([sys.executable, str(RUN), "--database", database, *which], capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-4000:]
    assert " FAIL" not in done.stdout and "TIMEOUT" not in done.stdout
