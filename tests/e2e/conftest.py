"""Fixtures for the end-to-end suite: real `python -m app.cli …` processes on a real database.

`backend` is parametrized over SQLite (a file in the test's tmp dir; `serve` migrates it
itself) and PostgreSQL (a fresh database per test, a copy of one migrated with `python -m
app.cli migrate` once a process, dropped WITH (FORCE) afterwards). `launcher` starts service
processes against it and kills every one of them in teardown, whatever the test did; their
logs are printed when a test fails.

Nothing here imports the service in-process except to read the database afterwards: what is
tested is what the processes do.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from app.storage.tables import (
    group_offsets,
    partitions,
    record_batches,
    records,
    topics,
    transaction_offsets,
    transaction_partitions,
)
from tests.helpers import records_with_batches

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
ADMIN_URL = os.environ.get(
    "OUTBOX_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
BACKENDS = ["sqlite", "postgresql"]
# How long a test waits for an outbox process it started to be ready (/readyz, or the line it
# logs once started): wait_ready's and wait_for_log's, and the waits of the tests that import it
# (the README examples', the coordinator's metrics port, the remote CLI's, the Kafka example
# loop's). Other waits are their own: the README's Quick start's 480 s (tests/e2e/test_readme.py,
# which builds a venv first), the 120 s for a started benchmark to migrate its database
# (tests/spark/test_benchmark_cleanup.py), the benchmarks' own (benchmarks/run.py,
# benchmarks/committed_log.py), and the librdkafka run's serve start (compat/librdkafka/run,
# which imports nothing from the tests: 90 s as well, for the reason below). An `outbox serve`
# took 20 to 38 s to answer /readyz on two cores at a load of 5 to 12 (docs/benchmarks.md),
# past the 30 s this was; the wait ends as soon as the process is ready, so the margin costs an
# idle machine nothing.
START_TIMEOUT_S = 90.0
CLI_TIMEOUT_S = 60.0


# --- test outcome, for printing process logs on failure ---------------------------------------


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    report = yield
    if report.failed:
        item.stash.setdefault(_FAILED, set()).add(report.when)
    return report


_FAILED = pytest.StashKey[set]()


# --- the database -------------------------------------------------------------------------------


@dataclass
class Backend:
    """The database one test runs on, and SQL helpers that read it directly."""

    name: str
    url: str
    tmp: Path
    _engine: Engine | None = field(default=None, repr=False)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            # NullPool: no connection outlives a query, so nothing holds the SQLite file or
            # the PostgreSQL database when the processes and the teardown need them.
            self._engine = create_engine(self.url, poolclass=NullPool)
        return self._engine

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def query(self, stmt: Any) -> list[tuple]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(stmt)]

    def topic_id(self, name: str) -> int:
        (row,) = self.query(select(topics.c.topic_id).where(topics.c.name == name))
        return row[0]

    def markers(self) -> list[tuple[str, int, int, str, int]]:
        """Every control marker: (topic, partition, offset, control_type, txn_id), in order."""
        return self.query(
            select(topics.c.name, records.c.partition, records.c.offset, records.c.control_type,
                   record_batches.c.txn_id)
            .select_from(records_with_batches())
            .join(topics, topics.c.topic_id == records.c.topic_id)
            .where(records.c.control_type.is_not(None))
            .order_by(topics.c.name, records.c.partition, records.c.offset)
        )

    def log_bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(log_start_offset, next_offset) of every partition."""
        return {
            (t, p): (start, end)
            for t, p, start, end in self.query(
                select(topics.c.name, partitions.c.partition, partitions.c.log_start_offset, partitions.c.next_offset)
                .join(topics, topics.c.topic_id == partitions.c.topic_id)
            )
        }

    def log_ends(self) -> dict[tuple[str, int], int]:
        """partitions.next_offset of every partition."""
        return {key: end for key, (_, end) in self.log_bounds().items()}

    def log_shape(self) -> dict[tuple[str, int], tuple[int, int, int | None, int | None]]:
        """Per partition that has records: (count(*), distinct offsets, min(offset), max(offset))."""
        return {
            (t, p): (n, d, lo, hi)
            for t, p, n, d, lo, hi in self.query(
                select(
                    topics.c.name,
                    records.c.partition,
                    func.count(),
                    func.count(records.c.offset.distinct()),
                    func.min(records.c.offset),
                    func.max(records.c.offset),
                )
                .join(topics, topics.c.topic_id == records.c.topic_id)
                .group_by(topics.c.name, records.c.partition)
            )
        }

    def assert_logs_gapless(self) -> None:
        """Every partition's log holds every offset from its first stored one to next_offset-1,
        and nothing is missing at or past its log start: what is gone went below it (retention,
        DeleteRecords), from the bottom up."""
        shape = self.log_shape()
        for key, (start, end) in self.log_bounds().items():
            n, distinct, lo, hi = shape.get(key, (0, 0, None, None))
            first = end if lo is None else lo
            assert first <= start or first == end, f"{key}: first stored offset {first} past the log start {start}"
            assert (n, distinct, -1 if hi is None else hi) == (end - first, end - first, end - 1 if end > first else -1), (
                f"{key}: {n} rows, {distinct} distinct offsets, offsets {lo}..{hi}, log [{start}, {end})"
            )

    def assert_batch_rows_match(self) -> None:
        """record_batches describes the records exactly (tests/batch_rows.py): every writer,
        killed or not, wrote its batch rows with its records or neither."""
        from tests.batch_rows import assert_batch_rows_match

        with self.engine.connect() as conn:
            assert_batch_rows_match(conn)

    def below_log_starts(self) -> dict[tuple[str, int], int]:
        """Rows still stored below their partition's log start (the cleaner deletes them)."""
        shape = self.log_shape()
        return {key: start - shape[key][2] for key, (start, _) in self.log_bounds().items()
                if key in shape and shape[key][2] < start}

    def counter_drift(self) -> dict[tuple[str, int], tuple[tuple[int, int], tuple[int, int]]]:
        """Partitions whose (record_count, size_bytes) differ from the data records stored:
        {partition: (counters, stored)}."""
        from app.storage.dialect import utf8_bytes

        stored = {
            (t, p): (n, int(size))
            for t, p, n, size in self.query(
                select(topics.c.name, records.c.partition, func.count(),
                       func.coalesce(func.sum(utf8_bytes(records.c.key) + utf8_bytes(records.c.value)
                                              + utf8_bytes(records.c.headers)), 0))
                .join(topics, topics.c.topic_id == records.c.topic_id)
                .where(records.c.control_type.is_(None))
                .group_by(topics.c.name, records.c.partition)
            )
        }
        counted = {
            (t, p): (n, size)
            for t, p, n, size in self.query(
                select(topics.c.name, partitions.c.partition, partitions.c.record_count, partitions.c.size_bytes)
                .join(topics, topics.c.topic_id == partitions.c.topic_id)
            )
        }
        return {key: (c, stored.get(key, (0, 0))) for key, c in counted.items() if c != stored.get(key, (0, 0))}

    def open_transaction_partitions(self) -> list[tuple]:
        return self.query(
            select(
                transaction_partitions.c.transactional_id,
                transaction_partitions.c.topic_id,
                transaction_partitions.c.partition,
                transaction_partitions.c.txn_id,
            ).order_by(transaction_partitions.c.transactional_id, transaction_partitions.c.topic_id,
                       transaction_partitions.c.partition)
        )

    def staged_offsets(self) -> list[tuple]:
        return self.query(
            select(transaction_offsets.c.transactional_id, transaction_offsets.c.group_id,
                   transaction_offsets.c.partition, transaction_offsets.c.committed_offset)
        )

    def group_offset_rows(self) -> list[tuple]:
        """(group_id, topic, partition, committed_offset), sorted."""
        return self.query(
            select(group_offsets.c.group_id, topics.c.name, group_offsets.c.partition,
                   group_offsets.c.committed_offset)
            .join(topics, topics.c.topic_id == group_offsets.c.topic_id)
            .order_by(group_offsets.c.group_id, topics.c.name, group_offsets.c.partition)
        )


def _base_env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env["OUTBOX_DATABASE_URL"] = database_url
    env["PYTHONUNBUFFERED"] = "1"
    # A Kafka client's group forms its first generation at once rather than after Kafka's 3 s
    # (tests/integration/test_initial_rebalance_delay.py is the delay's own test).
    env["OUTBOX_GROUP_INITIAL_REBALANCE_DELAY_MS"] = "0"
    return env


def _settings_env(settings: dict[str, Any]) -> dict[str, str]:
    out = {}
    for name, value in settings.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[f"OUTBOX_{name.upper()}"] = str(value)
    return out


_migrated: list[str] = []  # this process's PostgreSQL database migrated by `outbox migrate`, once


def _migrated_template(admin: Engine) -> str:
    """The name of a PostgreSQL database migrated with `python -m app.cli migrate`, made once a
    process and dropped at its exit: each fresh database is a copy of it (CREATE DATABASE …
    TEMPLATE), the same tables and rows a migration of its own would leave. A migration of
    every revision in a new process took 1.4 s a test on a quiet machine and 9 to 16 s on a
    busy one, a copy 0.2 to 0.7 s with its drop (docs/benchmarks.md, the test suite's time).
    Nothing connects to it after its migration: a copy waits for, then refuses, a template in
    use."""
    if not _migrated:
        name = f"outbox_template_{uuid.uuid4().hex[:12]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        atexit.register(_drop_database, name)
        url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        done = subprocess.run(
            [PYTHON, "-m", "app.cli", "migrate"], cwd=ROOT, env=_base_env(url),
            capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
        )
        assert done.returncode == 0, f"migrate failed:\n{done.stdout}\n{done.stderr}"
        _migrated.append(name)
    return _migrated[0]


_migrated_sqlite: list[Path] = []  # this process's SQLite file migrated by `outbox migrate`, once


def migrated_sqlite_template() -> Path:
    """A SQLite file migrated with `python -m app.cli migrate`, made once a process and removed at
    its exit: `_migrated_template`'s counterpart for a test that needs a migrated file of its own,
    copied. The command's process has ended, so its last connection checkpointed the write-ahead
    log into the file and removed it: the file alone is the whole database."""
    if not _migrated_sqlite:
        directory = Path(tempfile.mkdtemp(prefix="outbox_template_"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        path = directory / "outbox.db"
        done = subprocess.run(
            [PYTHON, "-m", "app.cli", "migrate"], cwd=ROOT, env=_base_env(f"sqlite:///{path}"),
            capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
        )
        assert done.returncode == 0, f"migrate failed:\n{done.stdout}\n{done.stderr}"
        assert [p.name for p in directory.iterdir()] == [path.name], "a copy of the file alone would lose writes"
        _migrated_sqlite.append(path)
    return _migrated_sqlite[0]


def migrated_copy(url: str) -> None:
    """The database at `url`, which exists, replaced by a copy of the one `outbox migrate`
    migrated once a process (`migrated_sqlite_template`, `_migrated_template`): the same tables
    and rows a migration of its own would leave, at a fraction of its time."""
    if url.startswith("sqlite"):
        shutil.copy(migrated_sqlite_template(), make_url(url).database)
        return
    name = make_url(url).database
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        template = _migrated_template(admin)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    finally:
        admin.dispose()


def _drop_database(name: str) -> None:
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@contextmanager
def provisioned(kind: str, tmp: Path, prefix: str = "outbox_e2e") -> Iterator[Backend]:
    """A fresh database of `kind`: a SQLite file in `tmp` (`serve` migrates it itself), or a
    new PostgreSQL database, migrated (a copy of `_migrated_template`), dropped afterwards."""
    if kind == "sqlite":
        b = Backend("sqlite", f"sqlite:///{tmp / 'outbox.db'}", tmp)
        try:
            yield b
        finally:
            b.dispose()
        return

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    template = _migrated_template(admin)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    b = Backend("postgresql", url, tmp)
    try:
        yield b
    finally:
        b.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with provisioned(request.param, tmp_path) as b:
        yield b


# --- processes ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_was_taken(output: str) -> bool:
    """Whether a `serve` failed because its port was taken: the CLI's one line for EADDRINUSE
    ("cannot listen on HOST:PORT: the address is already in use …"). A port picked free can be
    taken by another test's process before the service binds it."""
    return "the address is already in use" in output


class ServiceProcess:
    """One `python -m app.cli …` process, its output in a log file."""

    def __init__(self, label: str, args: list[str], env: dict[str, str], log_path: Path,
                 port: int | None = None) -> None:
        self.label = label
        self.args = args
        self.port = port
        self.log_path = log_path
        self.state_at_teardown: str | None = None
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in reap()
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "app.cli", *args], cwd=ROOT, env=env,
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        assert self.port is not None
        return f"http://127.0.0.1:{self.port}"

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kwargs.pop("timeout", 30.0), **kwargs)

    def state(self) -> str:
        if self.state_at_teardown is not None:
            return self.state_at_teardown
        return "running" if self.alive() else f"exited with {self.proc.returncode}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until GET /readyz answers 200; raises if the process exits first."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(base_url=self.url, timeout=2.0) as c:
            while time.monotonic() < deadline:
                if not self.alive():
                    raise ProcessExited(self)
                try:
                    if c.get("/readyz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
        raise TimeoutError(f"{self.label} not ready after {timeout_s}s:\n{self.log_text()[-4000:]}")

    def wait_for_log(self, pattern: str, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if re.search(pattern, self.log_text()):
                return
            if not self.alive():
                raise ProcessExited(self)
            time.sleep(0.05)
        raise TimeoutError(f"{self.label}: no {pattern!r} after {timeout_s}s:\n{self.log_text()[-4000:]}")

    def kill9(self) -> None:
        """SIGKILL: a crash, no shutdown hooks."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def reap(self) -> None:
        # What the process was doing when its test ended, for the failure report: a process
        # that had died (killed by the kernel, say) leaves an empty log and the exit code of
        # the teardown's kill otherwise.
        self.state_at_teardown = ("running until the teardown killed it" if self.alive()
                                  else f"had exited with {self.proc.returncode} before the teardown")
        if self.alive():
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        finally:
            self._log.close()


class ProcessExited(RuntimeError):
    def __init__(self, p: ServiceProcess) -> None:
        super().__init__(f"{p.label} exited with {p.proc.returncode}:\n{p.log_text()[-4000:]}")
        self.process = p


class Launcher:
    """Starts service processes for one test; `close()` kills all of them."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.processes: list[ServiceProcess] = []
        self.cli_runs: list[tuple[str, str]] = []
        self._n = 0

    def env(self, **settings: Any) -> dict[str, str]:
        return {**_base_env(self.backend.url), **_settings_env(settings)}

    def _log_path(self, label: str) -> Path:
        self._n += 1
        return self.backend.tmp / f"{self._n:02d}-{label}.log"

    def start_server(self, **settings: Any) -> ServiceProcess:
        """Start `serve` (not waiting for it); settings are OUTBOX_* names in lower case."""
        port = free_port()
        p = ServiceProcess(f"serve:{port}", ["serve", "--port", str(port)], self.env(**settings),
                           self._log_path(f"serve-{port}"), port=port)
        self.processes.append(p)
        return p

    def server(self, **settings: Any) -> ServiceProcess:
        """A `serve` process that answers /readyz. Retries with another port if the one picked
        was taken meanwhile."""
        for attempt in range(3):
            p = self.start_server(**settings)
            try:
                p.wait_ready()
                return p
            except ProcessExited:
                if attempt == 2 or not port_was_taken(p.log_text()):
                    raise
        raise AssertionError("unreachable")

    def coordinator(self, **settings: Any) -> ServiceProcess:
        """A long-running `coordinator` process (not waited for: see wait_for_log)."""
        label = f"coordinator-{len(self.processes)}"
        p = ServiceProcess(label, ["coordinator"], self.env(**settings), self._log_path(label))
        self.processes.append(p)
        return p

    def cli(self, *args: str, **settings: Any) -> str:
        """Run `python -m app.cli ARGS` to completion; returns its stdout; fails on exit != 0."""
        done = subprocess.run(
            [PYTHON, "-m", "app.cli", *args], cwd=ROOT, env=self.env(**settings),
            capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
        )
        self.cli_runs.append((" ".join(args), f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"))
        assert done.returncode == 0, f"`{' '.join(args)}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def coordinator_once(self, **settings: Any) -> dict[str, int]:
        """`coordinator --once`: its pass counts, e.g. {'timed_out': 0, 'completed_commits': 1, …}."""
        out = self.cli("coordinator", "--once", **settings)
        counts = dict(re.findall(r"(timed_out|completed_commits|completed_aborts)=(\d+)", out))
        assert set(counts) == {"timed_out", "completed_commits", "completed_aborts"}, out
        return {k: int(v) for k, v in counts.items()}

    def close(self) -> None:
        for p in self.processes:
            p.reap()

    def report(self) -> str:
        parts = []
        for p in self.processes:
            parts.append(f"===== {p.label} (pid {p.pid}, {p.state()}) =====\n"
                         f"{p.log_text()[-6000:]}")
        for args, out in self.cli_runs:
            parts.append(f"===== cli {args} =====\n{out[-3000:]}")
        return "\n".join(parts)


@pytest.fixture
def launcher(request: pytest.FixtureRequest, backend: Backend) -> Iterator[Launcher]:
    la = Launcher(backend)
    try:
        yield la
    finally:
        la.close()
        if request.node.stash.get(_FAILED, set()) & {"setup", "call"}:
            print(f"\n[{backend.name}] process logs:\n{la.report()}")
