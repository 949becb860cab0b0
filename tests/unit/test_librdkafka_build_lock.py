"""compat/librdkafka/run builds librdkafka once per cache directory: a second builder that
comes while the first holds the build lock waits for it and then uses its build (the suite's
two tests, on two pytest-xdist workers, both start with the build). The build itself is
replaced by a fake that records its start and end and waits for the test's word to finish."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.librdkafka_run import RUN, load

# One builder: compat/librdkafka/run loaded as a module, its build replaced by the fake, and
# `built_source` called as `run --build-only` calls it. argv: the builder's name, the work dir.
BUILDER = """
import sys, time
from pathlib import Path

sys.path.insert(0, {root!r})
from tests.librdkafka_run import load

name, work = sys.argv[1], Path(sys.argv[2])
run = load()

def fake_build(cache, source):
    with open(work / "builds.log", "a") as log:
        log.write(f"start {{name}}\\n")
    deadline = time.monotonic() + 60
    while not (work / "finish").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    (source / "tests").mkdir(parents=True, exist_ok=True)
    (source / "tests" / "test-runner").write_text("")
    with open(work / "builds.log", "a") as log:
        log.write(f"end {{name}}\\n")

run._build = fake_build
print("source", run.built_source(), flush=True)
""".format(root=str(RUN.parents[2]))


def version() -> str:
    return load().VERSION


def builder(name: str, work: Path) -> tuple[subprocess.Popen[str], Path]:
    out = work / f"{name}.out"
    env = {**os.environ, "OUTBOX_LIBRDKAFKA_DIR": str(work / "cache")}
    process = subprocess.Popen([sys.executable, "-c", BUILDER, name, str(work)], env=env, text=True,
                               stdout=open(out, "w"), stderr=subprocess.STDOUT)
    return process, out


def wait_for(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"waited 60 s for {what}"
        time.sleep(0.05)


def test_a_second_builder_waits_for_the_first_and_uses_its_build(tmp_path: Path) -> None:
    log = tmp_path / "builds.log"
    first, _ = builder("first", tmp_path)
    wait_for(lambda: log.exists() and log.read_text() == "start first\n", "the first build to start")
    second, second_out = builder("second", tmp_path)
    # The second is either waiting for the lock or (without one) building beside the first.
    wait_for(lambda: "waiting for it" in second_out.read_text() or "start second" in log.read_text(),
             "the second builder to wait or to build")
    (tmp_path / "finish").touch()
    assert first.wait(timeout=60) == 0
    assert second.wait(timeout=60) == 0

    source = tmp_path / "cache" / f"librdkafka-{version()}"
    assert log.read_text() == "start first\nend first\n"
    assert second_out.read_text() == (
        f"another process is building librdkafka in {tmp_path / 'cache'}: waiting for it\nsource {source}\n"
    )


def test_a_builder_after_a_finished_build_builds_nothing(tmp_path: Path) -> None:
    (tmp_path / "finish").touch()
    first, _ = builder("first", tmp_path)
    assert first.wait(timeout=60) == 0
    second, second_out = builder("second", tmp_path)
    assert second.wait(timeout=60) == 0

    assert (tmp_path / "builds.log").read_text() == "start first\nend first\n"
    assert second_out.read_text() == f"source {tmp_path / 'cache' / f'librdkafka-{version()}'}\n"
