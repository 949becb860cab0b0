"""JoinGroups waiting at the barrier whose clients stay connected against the same ones once
their clients have gone: what they cost the service and the database.

    .venv/bin/python benchmarks/gone_joins.py [--db sqlite|postgresql|both] [--joins 200] [--before TREE]

On a fresh database per run, a real `outbox serve` with its Kafka listener (uvloop): one
member leads group "g" (joined and synced, a session of 10 minutes); `--joins` new members then
join, each on a connection of its own, with a rebalance timeout of 10 minutes, and wait at the
barrier (the leader does not join again). Measured over 10 s each: while their clients stay
connected (the reference), then once every one of them has closed its connection. The
service's CPU (from /proc, in % of one core) and, on PostgreSQL, the database's transactions
per second (pg_stat_database: each ask of a waiting JoinGroup is one read transaction).
`--before TREE`: the same against another checkout's service (`git archive` of an older
commit into TREE), in the same run.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from run import ROOT, Service, _free_port  # noqa: E402 - the benchmark's own modules, not a package
from scratch import scratch_database  # noqa: E402
from waiting import database_transactions  # noqa: E402

from tests.kafka.conftest import frame  # noqa: E402 - the tests' raw Kafka client
from tests.kafka.test_groups import JOIN_V, join, join_request, sync  # noqa: E402

MINUTES_10 = 600
WINDOW_S = 10.0


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.settimeout(30)
    return s


def _cost(service: Service, db_url: str) -> tuple[float, float | None]:
    """(service CPU in % of one core, database transactions per second) over WINDOW_S."""
    cpu0, tx0, t0 = service.cpu_seconds(), database_transactions(db_url), time.perf_counter()
    time.sleep(WINDOW_S)
    cpu1, tx1, t1 = service.cpu_seconds(), database_transactions(db_url), time.perf_counter()
    elapsed = t1 - t0
    return (cpu1 - cpu0) / elapsed * 100, None if tx0 is None or tx1 is None else (tx1 - tx0) / elapsed


def measure(db_url: str, tree: Path, joins: int) -> tuple[tuple[float, float | None], tuple[float, float | None]]:
    """(the cost while the clients wait connected, the cost once they have gone)."""
    port = _free_port()
    service = Service(db_url, tree, OUTBOX_KAFKA_LISTENER=f"127.0.0.1:{port}", OUTBOX_ACCESS_LOG="false",
                      OUTBOX_GROUP_INITIAL_REBALANCE_DELAY_MS="0")
    try:
        with _connect(port) as leader:
            led = join(leader, "g", session_s=MINUTES_10)
            sync(leader, "g", 1, led.member_id, {led.member_id: b""})
            waiting = []
            for _ in range(joins):
                s = _connect(port)
                member_id = join(s, "g", rebalance_s=MINUTES_10, ask_member_id=False).member_id
                s.sendall(frame(11, JOIN_V, join_request("g", member_id, rebalance_s=MINUTES_10)))
                waiting.append(s)
            time.sleep(2.0)  # every one of them at the barrier
            connected = _cost(service, db_url)
            for s in waiting:
                s.close()
            time.sleep(2.0)
            gone = _cost(service, db_url)
        return connected, gone
    finally:
        service.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--joins", type=int, default=200)
    parser.add_argument("--before", type=Path, help="another checkout's tree, measured first")
    args = parser.parse_args(argv)
    trees = ([("before", args.before)] if args.before else []) + [("this tree", ROOT)]
    print(f"\n{args.joins} JoinGroups waiting at the barrier, {WINDOW_S:.0f} s each\n")
    print("| database | service | connected: CPU % | tx/s | gone: CPU % | tx/s | gone ÷ connected: CPU | tx/s |\n"
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in (["sqlite", "postgresql"] if args.db == "both" else [args.db]):
        for label, tree in trees:
            with scratch_database(kind, "gonejoins") as db_url:
                (cpu, tx), (gone_cpu, gone_tx) = measure(db_url, tree, args.joins)

            def show(v: float | None) -> str:
                return "–" if v is None else f"{v:.0f}"

            ratio_tx = "–" if tx is None or gone_tx is None or not tx else f"{gone_tx / tx:.2f}"
            print(f"| {kind} | {label} | {cpu:.1f} | {show(tx)} | {gone_cpu:.1f} | {show(gone_tx)} | "
                  f"{gone_cpu / cpu:.2f} | {ratio_tx} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
