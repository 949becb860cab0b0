"""compat/librdkafka/run --access-log: the service's access log is on (a line per Kafka request
in its serve.log) and the log directory is kept, pass or fail; without it the access log is off.
And --jobs: that many runs of the runner at a time.

The script runs as a program, as a developer runs it, against a cache directory holding a
stand-in for librdkafka's build (its test.c declaring one test, and a `test-runner` that makes
one Kafka request of the service, ApiVersions, and reports the test passed or failed): nothing
is downloaded or built, and the service (`outbox serve --kafka-listener`) is the script's own."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ADMIN_URL, BACKENDS
from tests.librdkafka_run import RUN, load

CLIENT_ID = "librdkafka-run-stand-in"

# The stand-in test-runner: ApiVersions v0 (api key 18) to the bootstrap server of the
# configuration the script wrote (RDKAFKA_TEST_CONF), then the summary row the script reads a
# pass from, PASSED or FAILED as the stand-in was made.
RUNNER = """#!{python}
import os, socket, struct, sys

conf = dict(line.split("=", 1) for line in open(os.environ["RDKAFKA_TEST_CONF"]).read().splitlines())
host, port = conf["bootstrap.servers"].rsplit(":", 1)
client_id = {client_id!r}.encode()
header = struct.pack(">hhih", 18, 0, 41, len(client_id)) + client_id
with socket.create_connection((host, int(port)), timeout=30) as s:
    s.sendall(struct.pack(">i", len(header)) + header)
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    s.recv(size, socket.MSG_WAITALL)
print("|  0001_stand_in  |     {outcome}     |   0.010s |")
sys.exit({status})
"""


# A stand-in test-runner for two runs at once: each marks that it started (a file in its working
# directory, the stand-in build's tests/) and passes only if the other run starts before it gives
# up waiting; run one after the other, the first gives up and fails.
TOGETHER = """#!{python}
import os, pathlib, sys, time

mine = os.environ["TESTS"]
pathlib.Path(f"started-{{mine}}").touch()
deadline = time.monotonic() + 30
while not all(pathlib.Path(f"started-{{n}}").exists() for n in ("0001", "0002")):
    if time.monotonic() > deadline:
        print(f"|  {{mine}}_stand_in  |     FAILED     |   30.000s |")
        sys.exit(1)
    time.sleep(0.05)
print(f"|  {{mine}}_stand_in  |     PASSED     |   0.010s |")
"""


def _stand_in_build(cache: Path, *, passes: bool = True, runner_text: str = RUNNER,
                    numbers: tuple[str, ...] = ("0001",)) -> None:
    """What compat/librdkafka/run takes for a built librdkafka in `cache` (its _is_built), its
    test.c declaring the tests `numbers`."""
    tests = cache / f"librdkafka-{load().VERSION}" / "tests"
    tests.mkdir(parents=True)
    (tests / "test.c").write_text("".join(f"_TEST({n}_stand_in, 0, TEST_BRKVER(0, 9, 0, 0));\n" for n in numbers))
    runner = tests / "test-runner"
    runner.write_text(runner_text.format(python=sys.executable, client_id=CLIENT_ID,
                                         outcome="PASSED" if passes else "FAILED", status=0 if passes else 1))
    runner.chmod(runner.stat().st_mode | stat.S_IXUSR)


def _run(tmp_path: Path, database: str, *flags: str) -> tuple[subprocess.CompletedProcess[str], list[Path]]:
    """The script's run of test 0001 and the log directories it left in its temporary directory."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "OUTBOX_LIBRDKAFKA_DIR": str(tmp_path / "cache"), "TMPDIR": str(temp)}
    done = subprocess.run([sys.executable, str(RUN), "--database", database, "--postgres-url", ADMIN_URL,
                           "--timeout", "60", *flags, "0001"], env=env, capture_output=True, text=True, timeout=300)
    return done, sorted(temp.glob("outbox-librdkafka-*"))


def _named_logs(stdout: str) -> Path:
    """The log directory the script's last line names."""
    found = re.search(r"\(logs: (.+)\)$", stdout.rstrip("\n"))
    assert found is not None, stdout
    return Path(found.group(1))


def _access_lines(serve_log: Path) -> list[str]:
    """serve.log's access log lines, their duration and the client's port (which vary) as <ms>
    and <port>."""
    lines = [line.split(" outbox.access: ", 1)[1] for line in serve_log.read_text().splitlines()
             if " outbox.access: " in line]
    return [re.sub(r" peer=127\.0\.0\.1:\d+ ", " peer=127.0.0.1:<port> ", re.sub(r" [\d.]+ms ", " <ms> ", line))
            for line in lines]


@pytest.mark.parametrize("database", BACKENDS)
def test_with_access_log_a_passing_run_keeps_serve_log_with_a_line_per_kafka_request(
        tmp_path: Path, database: str) -> None:
    _stand_in_build(tmp_path / "cache", passes=True)

    done, kept = _run(tmp_path, database, "--access-log")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 of 1 run(s) passed" in done.stdout
    assert kept == [_named_logs(done.stdout)]
    assert _access_lines(kept[0] / "serve.log") == [
        "kafka ApiVersions v0 <ms> errors=none principal=User:ANONYMOUS peer=127.0.0.1:<port> "
        f"client_id={CLIENT_ID} correlation_id=41"]


@pytest.mark.parametrize("database", BACKENDS)
def test_without_access_log_a_failing_run_keeps_serve_log_without_access_lines(
        tmp_path: Path, database: str) -> None:
    _stand_in_build(tmp_path / "cache", passes=False)

    done, kept = _run(tmp_path, database)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "0 of 1 run(s) passed" in done.stdout
    assert kept == [_named_logs(done.stdout)]
    assert "Kafka listener at" in (kept[0] / "serve.log").read_text()
    assert _access_lines(kept[0] / "serve.log") == []


@pytest.mark.parametrize("database", BACKENDS)
def test_without_access_log_a_passing_run_leaves_no_log_directory(tmp_path: Path, database: str) -> None:
    _stand_in_build(tmp_path / "cache", passes=True)

    done, kept = _run(tmp_path, database)

    assert done.returncode == 0, done.stdout + done.stderr
    assert kept == []


# The script's scheduling, not the service's behaviour: on SQLite only.
def test_with_jobs_two_runs_are_at_the_runner_at_once(tmp_path: Path) -> None:
    _stand_in_build(tmp_path / "cache", runner_text=TOGETHER, numbers=("0001", "0002"))

    done, _ = _run(tmp_path, "sqlite", "--jobs", "2", "0002")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 of 2 run(s) passed" in done.stdout
