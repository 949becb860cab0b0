"""A bounded load test on both databases (the load and fault-injection work): 32 concurrent clients for a fixed time
against two real `serve` processes sharing a fresh database, mixing transactional producers
(with group offsets in some transactions, committed or aborted), idempotent and plain
producers, read_committed and read_uncommitted readers and group-offset clients.

The run happens once per database (a module-scoped fixture: a load run per test would blow
the time budget); each test then asserts one behaviour of that run. The figures (requests/s,
records/s per kind, error answers by code, p50/p99 latency per operation) appear in pytest's
terminal summary, and inline with -s; nothing asserts on them. The machinery is in
tests/e2e/load.py; a longer run is a script:

    .venv/bin/python -m tests.e2e.test_load --backend postgresql --seconds 60 --clients 32
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import BACKENDS, Launcher
from tests.e2e.load import (
    IdempotentProducer,
    OffsetClient,
    PlainProducer,
    Reader,
    Run,
    TransactionalProducer,
    add_terminal_summary,
    main,
    provisioned,
    run_load,
    start_servers,
    summary,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SECONDS = float(os.environ.get("OUTBOX_LOAD_SECONDS", "10"))
CLIENTS = 32
SERVERS = 2


@pytest.fixture(scope="module", params=BACKENDS)
def load_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One load run on a fresh database (made as the `backend` fixture makes it), two
    `serve` processes (each with its coordinator worker), the clients split between them."""
    tmp = tmp_path_factory.mktemp(f"load-{request.param}")
    with provisioned(request.param, tmp) as backend:
        launcher = Launcher(backend)
        try:
            servers = start_servers(launcher, SERVERS)
            result = run_load([s.url for s in servers], seconds=SECONDS, clients=CLIENTS, backend=backend)
            if dead := [s.label for s in servers if not s.alive()]:
                result.problems["server process died"] = dead
            text = summary(result, f"load test on {backend.name}")
            add_terminal_summary(request.config, text)
            yield Run(result, backend, launcher)
        finally:
            launcher.close()


def test_every_client_kind_ran(load_run: Run) -> None:
    """The mix really happened: without it every other test here would pass vacuously."""
    r = load_run.result
    assert len(r.clients) == CLIENTS
    txns = [t for c in r.of(TransactionalProducer) for t in c.txns]
    assert any(t.outcome == "committed" and t.records for t in txns)
    assert any(t.outcome == "aborted" and t.records for t in txns)
    assert any(t.offsets and t.outcome == "committed" for t in txns)
    assert all(c.acked for c in r.of(PlainProducer)) and all(c.acked for c in r.of(IdempotentProducer))
    assert all(c.acked for c in r.of(OffsetClient))
    for iso in ("read_committed", "read_uncommitted"):
        readers = [x for x in r.of(Reader) if x.log.isolation == iso]
        assert readers and all(any(x.log.seen.values()) for x in readers), iso
    load_run.check(None)


def test_only_documented_retriable_errors_reach_clients(load_run: Run) -> None:
    """Every error answer is CONCURRENT_TRANSACTIONS or UNSTABLE_OFFSET_COMMIT (409) or
    STORAGE_UNAVAILABLE (503), with retriable: true and Retry-After; never a 500, never a
    transport error, and a retried request succeeds within 30 s."""
    load_run.check("only documented retriable errors")


def test_answers_match_requests(load_run: Run) -> None:
    """Send answers one result per batch with its record count; a deliberate repeat of a
    Send is answered duplicate with the first offsets; Commit/Abort answer Complete*."""
    load_run.check("answers match the requests")


def test_read_committed_holds_exactly_the_acknowledged_records(load_run: Run) -> None:
    """After the run, read_committed of every partition holds exactly the acknowledged plain
    and idempotent records and the records of acknowledged commits, each once, at the offsets
    the Sends answered; read_uncommitted holds every acknowledged record, aborted ones too."""
    load_run.check("nothing lost or duplicated")


def test_aborted_records_are_never_visible(load_run: Run) -> None:
    """Neither the final read_committed nor any read_committed reader during the run shows
    a record of an aborted transaction."""
    load_run.check("aborted records never visible")


def test_readers_never_go_backwards_or_skip(load_run: Run) -> None:
    """Tailing readers' positions and offsets (commit positions for read_committed) only
    move forward, no record comes twice, and what a reader read up to its last position is
    exactly that prefix of the final log (docs/GUARANTEES.md#in-order-visibility)."""
    load_run.check("readers never go backwards or skip")


def test_group_offsets_are_the_last_committed(load_run: Run) -> None:
    """Offsets staged in transactions become the group's at commit only (never an aborted
    transaction's, never going backwards while the run reads them); plain commits read back."""
    load_run.check("group offsets are the last committed")


def test_logs_are_gapless(load_run: Run) -> None:
    load_run.check("logs gapless")


def test_no_transaction_is_left_open(load_run: Run) -> None:
    load_run.check("no transaction left open")


if __name__ == "__main__":
    raise SystemExit(main())
