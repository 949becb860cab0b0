"""SQLite with several API processes on one database file (the load and fault-injection work).

Three `serve` processes (each with its coordinator worker) share one SQLite file; 16
concurrent clients send every request to one of them at random: transactional, idempotent
and plain writes, read_committed and read_uncommitted tails, group offsets (the mix of
tests/e2e/load.py). SQLite has one write lock per file, taken by every write transaction
with BEGIN IMMEDIATE and waited for up to OUTBOX_SQLITE_BUSY_TIMEOUT_MS
(app/storage/engine.py); a lock still busy after that is a driver OperationalError that
app/storage/errors.py turns into 503 STORAGE_UNAVAILABLE (retriable). So no `database is
locked` may reach a client except inside such a 503, which the clients retry (the figures
count them), and nothing is lost.

The run is made twice: with the default busy timeout (30 s: lock waits, no 503 expected)
and the control markers left to the three processes' coordinator workers
(OUTBOX_COMPLETE_INLINE=false: they race each other for every transaction); and with a
100 ms busy timeout (the lock is often not free in time: many 503s, all of which must be
the documented retriable answer, and retrying them must lose and duplicate nothing).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Launcher, ProcessExited
from tests.e2e.load import (
    BEHAVIOURS,
    LOCKED,
    Run,
    add_terminal_summary,
    provisioned,
    run_load,
    start_servers,
    summary,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SERVERS = 3
CLIENTS = 16
SECONDS = float(os.environ.get("OUTBOX_SQLITE_MP_SECONDS", "8"))
CONFIGS = {
    # The coordinator workers of the three processes write the markers (Commit answers
    # PrepareCommit, Begin answers CONCURRENT_TRANSACTIONS until they are written): they race
    # for the same transactions on the one write lock.
    "busy-timeout-default-markers-by-workers": {"complete_inline": False},
    "busy-timeout-100ms": {"sqlite_busy_timeout_ms": 100},
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def sqlite_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp(f"sqlite-mp-{request.param}")
    with provisioned("sqlite", tmp) as backend:
        launcher = Launcher(backend)
        try:
            # The first one migrates the new file, then the others start on a file at head
            # (starting them all on a new file: test_server_starting_while_… below).
            servers = start_servers(launcher, SERVERS, **CONFIGS[request.param])
            result = run_load([s.url for s in servers], seconds=SECONDS, clients=CLIENTS, rotate=True,
                              backend=backend)
            if dead := [s.label for s in servers if not s.alive()]:
                result.problems["server process died"] = dead
            logs = "".join(s.log_text() for s in servers)
            text = (f"{summary(result, f'SQLite, {SERVERS} serve processes on one file, {request.param}')}\n"
                    f"server logs: {logs.count('Traceback')} tracebacks, "
                    f"{logs.lower().count(LOCKED)} lines naming '{LOCKED}'")
            add_terminal_summary(request.config, text)
            yield Run(result, backend, launcher)
        finally:
            launcher.close()


def test_every_client_kind_ran(sqlite_run: Run) -> None:
    """The mix really happened on all three processes (and nothing else went wrong)."""
    r = sqlite_run.result
    assert len(r.clients) == CLIENTS
    assert r.stats.records["transactions committed"] and r.stats.records["transactions aborted"]
    assert r.stats.records["plain"] and r.stats.records["idempotent"]
    assert r.stats.records["fetched read_committed"] and r.stats.records["fetched read_uncommitted"]
    sqlite_run.check(None)


def test_no_500_and_no_database_is_locked_reaches_a_client(sqlite_run: Run) -> None:
    """Every error answer is a documented retriable one (503 STORAGE_UNAVAILABLE for a busy
    lock, with Retry-After); `database is locked` appears in no other answer; no 500."""
    sqlite_run.check("only documented retriable errors")


def test_nothing_is_lost_or_duplicated(sqlite_run: Run) -> None:
    """read_committed holds exactly the acknowledged records and the records of acknowledged
    commits, once each, whichever process wrote them and however often a 503 was retried."""
    sqlite_run.check("nothing lost or duplicated")


@pytest.mark.parametrize("behaviour", [b for b in BEHAVIOURS if b not in (
    "only documented retriable errors", "nothing lost or duplicated")], ids=lambda b: b.replace(" ", "-"))
def test_the_other_guarantees_hold(sqlite_run: Run, behaviour: str) -> None:
    """Aborted records never visible, readers never go backwards, group offsets, gapless
    logs, nothing left open: as in test_load, here across three processes."""
    sqlite_run.check(behaviour)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.timeout(120)
def test_server_starting_while_another_process_writes_the_new_file_becomes_ready(backend, launcher) -> None:  # type: ignore[no-untyped-def]
    """`serve` migrates a SQLite file itself on start-up. A process that starts while another
    one writes the file (the usual case: several `serve` processes started together on a new
    file, each migrating it) must wait for the write lock like any writer (busy_timeout) and
    then find the schema as the other left it, rather than die with `database is locked`.

    Started together, 3 processes on a new file lost one of them in about a third of the
    tries here and 6 processes in most; this makes the interleaving certain: this test holds
    the write lock while the server starts migrating, then commits a write of its own."""
    path = backend.url.removeprefix("sqlite:///")
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("PRAGMA journal_mode=WAL")
        other.execute("BEGIN IMMEDIATE")
        server = launcher.start_server()
        # `serve` reads the schema revision (a read: it does not wait for the lock), says it
        # migrates, then waits for the write lock to do it.
        server.wait_for_log("migrating .* from empty")
        time.sleep(0.2)
        other.execute("PRAGMA user_version = 7")  # a committed write by another process
        other.execute("COMMIT")
    finally:
        other.close()
    try:
        server.wait_ready()
    except ProcessExited as e:
        lines = [line for line in server.log_text().splitlines() if "Error" in line]
        raise AssertionError(f"serve died on start-up: {lines[-2:]}") from e
