"""The log cleaner as the service runs it: beside the coordinator worker in `outbox serve`,
every OUTBOX_CLEANER_INTERVAL_MS, and in `outbox coordinator --once`; on both databases."""

from __future__ import annotations

import time

import pytest

from tests.e2e.api import ok

pytestmark = pytest.mark.e2e

HOUR_MS = 3_600_000


def _old_records(client, n: int) -> None:  # type: ignore[no-untyped-def]
    ok(client.post("/v1/topics", json={"name": "t", "config": {"retention_ms": HOUR_MS}}), 201)
    old = int(time.time() * 1000) - 2 * HOUR_MS
    ok(client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [
        {"value": i, "timestamp_ms": old} for i in range(n)]}]}))


def _log_start(client) -> int:  # type: ignore[no-untyped-def]
    return ok(client.get("/v1/topics/t"))["partitions"][0]["log_start_offset"]


def test_serve_cleans_every_cleaner_interval(launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server(cleaner_interval_ms=100)
    with server.client() as client:
        _old_records(client, 5)
        deadline = time.monotonic() + 30
        while _log_start(client) != 5:
            assert time.monotonic() < deadline, "the cleaner never ran"
            time.sleep(0.05)
        partition = ok(client.get("/v1/topics/t"))["partitions"][0]
        assert (partition["record_count"], partition["size_bytes"]) == (0, 0)


def test_serve_waits_its_cleaner_interval_between_passes(launcher) -> None:  # type: ignore[no-untyped-def]
    # The first pass runs at start-up, before the records exist; the next one an hour later.
    server = launcher.server(cleaner_interval_ms=HOUR_MS)
    with server.client() as client:
        _old_records(client, 5)
        time.sleep(2)  # twenty intervals of the test above
        assert _log_start(client) == 0


def test_serve_without_a_coordinator_does_not_clean(launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server(cleaner_interval_ms=100, run_coordinator=False)
    with server.client() as client:
        _old_records(client, 5)
        time.sleep(2)
        assert _log_start(client) == 0


def test_coordinator_once_runs_one_cleaner_pass_and_says_what_it_deleted(launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server(run_coordinator=False)
    with server.client() as client:
        _old_records(client, 5)
        out = launcher.cli("coordinator", "--once")
        assert "CleanerPass(below_log_start=0, retention=5, compaction=0, topics_purged=0, bytes_deleted=5, " \
               "partitions_compacted=0, vacuums=0)" in out, out
        assert _log_start(client) == 5
