"""`outbox backup` of a live SQLite database, and restoring it.

PostgreSQL is refused (pg_dump's job): tests/e2e/test_cli_errors.py.
"""

from __future__ import annotations

import shutil
import signal
import threading
from pathlib import Path

import httpx
import pytest

from app.storage import migrate

from tests.e2e.api import ok
from tests.e2e.conftest import Backend, Launcher

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("backend", ["sqlite"], indirect=True)]

BEFORE_BACKUP = 50  # records acknowledged before the backup starts


class Appender(threading.Thread):
    """Appends records 0, 1, 2, … to orders/0, one per Send, until stopped; keeps the
    acknowledged (offset, value) pairs in order."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.acked: list[tuple[int, str]] = []
        self.stop = threading.Event()
        self.enough = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=30) as c:
                i = 0
                while not self.stop.is_set():
                    body = {"batches": [{"topic": "orders", "partition": 0, "records": [{"value": f"v{i}"}]}]}
                    (result,) = ok(c.post("/v1/records", json=body))["results"]
                    self.acked.append((result["base_offset"], f"v{i}"))
                    i += 1
                    if i >= BEFORE_BACKUP:
                        self.enough.set()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
            self.enough.set()


def log_of(server) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    with server.client() as c:
        got = ok(c.get("/v1/topics/orders/partitions/0/records",
                       params={"offset": 0, "isolation": "read_uncommitted", "max_records": 10000}))
    return [(r["offset"], r["value"]) for r in got["records"]]


def test_a_backup_taken_while_a_writer_appends_is_a_prefix_of_the_log_and_restores(
    launcher: Launcher, backend: Backend, tmp_path: Path
) -> None:
    server = launcher.server()
    with server.client() as c:
        ok(c.post("/v1/topics", json={"name": "orders", "partitions": 1}), 201)
    writer = Appender(server.url)
    writer.start()
    try:
        assert writer.enough.wait(60) and writer.error is None, writer.error
        acked_before = len(writer.acked)
        copy = tmp_path / "backups" / "outbox-backup.db"
        copy.parent.mkdir()
        out = launcher.cli("backup", str(copy))
        acked_after = len(writer.acked)
    finally:
        writer.stop.set()
        writer.join(30)
    assert writer.error is None, writer.error
    assert out == f"backed up {backend.url.removeprefix('sqlite:///')} to {copy} (schema {migrate.head_revision()})\n"
    assert sorted(p.name for p in copy.parent.iterdir()) == ["outbox-backup.db"]  # one file, no -wal

    # The copy is consistent and `serve` serves it: a prefix of the acknowledged log, at the
    # offsets the writer was given, holding at least what was acknowledged before it began.
    copied = Backend("sqlite", f"sqlite:///{copy}", tmp_path / "backups")
    on_copy = Launcher(copied)
    try:
        served = log_of(on_copy.server())
        copied.assert_logs_gapless()
    finally:
        on_copy.close()
        copied.dispose()
    # One more than acknowledged after: a Send may have committed before the snapshot and had
    # its answer read only after acked_after was.
    assert acked_before <= len(served) <= acked_after + 1, (acked_before, len(served), acked_after)
    assert served == writer.acked[: len(served)]

    # Restore: with the service stopped, the copy replaces the database file, and the old
    # file's -wal and -shm go with it (SQLite would otherwise replay the old WAL into the copy).
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(15)
    live = Path(backend.url.removeprefix("sqlite:///"))
    for leftover in (live, live.with_name(live.name + "-wal"), live.with_name(live.name + "-shm")):
        leftover.unlink(missing_ok=True)
    shutil.copyfile(copy, live)
    restored = launcher.server()
    assert log_of(restored) == served
    with restored.client() as c:
        body = {"batches": [{"topic": "orders", "partition": 0, "records": [{"value": "after restore"}]}]}
        (result,) = ok(c.post("/v1/records", json=body))["results"]
    # The next offset is the restored log's end: offsets written after the backup are handed out again.
    assert result["base_offset"] == len(served)
    backend.assert_logs_gapless()
