"""Where a version 2 producer committing every 100 ms loses against a plain one: the account.

    .venv/bin/python benchmarks/txn_window.py --db postgresql --rounds 200 --seed 1
    .venv/bin/python benchmarks/txn_window.py --db sqlite --before /work/wt-before   # two trees

Starts a real `outbox serve` (one per tree with --before, both on one database) and drives
five producers over HTTP, as benchmarks/run.py's Producer does (batches of 1,000 records, the
same body, one keep-alive connection each): plain, version 2 with a separate Commit
("p-txn2-100ms") and version 2 with the last Send in the Commit ("p-txn2f-100ms"), each of
those two also as a producer of durability "commit" (its Sends commit without waiting for the
disk on PostgreSQL, and its Commit says how many records it was acknowledged). A turn is
one window: Sends until 100 ms have passed since the window's start, then (transactional) the
Commit, so a window is a whole transaction. Every path takes one window per round, in an order
shuffled afresh each round from the printed seed, so every path meets the same drift.

Each request is timed on the wall clock and in this process's CPU (building and parsing the
bodies); each window also in the service's CPU (/proc) and, on PostgreSQL, the scratch
database's backends'. Printed: the windows' records/s and their ratio to plain, the requests'
medians, and the account: what a transactional window spends beyond a plain window of the same
Sends, piece by piece, against the ratio measured in the same run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from run import (  # noqa: E402 - the benchmark's own modules, not a package
    BATCH,
    ROOT,
    Client,
    CpuMeter,
    Service,
    _ident_after,
    _init_producer,
    _records,
    create_topic,
)

PATHS = ("plain", "v2, separate Commit", "v2, last Send in the Commit",
         "v2, separate Commit, durability commit", "v2, last Send in the Commit, durability commit")


@dataclass
class Window:
    records: int
    seconds: float
    requests: list[tuple[str, float, float]]  # (kind, wall ms, client CPU ms)
    service_cpu_ms: float = 0.0
    database_cpu_ms: float | None = None


@dataclass
class WindowProducer:
    """One producer of run.py's kind, one window per turn."""

    url: str
    path: str
    tid: str
    topic: str
    window_ms: float
    client: Client = field(init=False)
    ident: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.client = Client(self.url)
        self.records = _records(BATCH)
        self.durable_at_commit = self.path.endswith(", durability commit")
        # The same window as its durable twin's: the paths differ only in the durability.
        self.kind = self.path.removesuffix(", durability commit")
        if self.path != "plain":
            self.ident = _init_producer(self.client, self.tid, 2, "commit" if self.durable_at_commit else None)

    def _post(self, kind: str, path: str, body: dict, log: list) -> dict:
        t0, c0 = time.perf_counter(), time.process_time()
        status, content = self.client.request("POST", path, orjson.dumps(body))
        if status != 200:
            raise RuntimeError(f"{path}: {status} {content[:300]!r}")
        answer = orjson.loads(content)
        log.append((kind, (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000))
        return answer

    def window(self) -> Window:
        """Run.py's Producer.turn for one transaction (commit_every_ms = window_ms)."""
        log: list[tuple[str, float, float]] = []
        written, seq, first = 0, 0, True
        t0 = time.perf_counter()
        carries = self.kind == "v2, last Send in the Commit"
        while True:
            body: dict = {"batches": [{"topic": self.topic, "partition": 0, "records": self.records}]}
            if self.path != "plain":
                body.update(self.ident)
                body["batches"][0]["base_sequence"] = seq
                seq += BATCH
            due = (time.perf_counter() - t0) * 1000 >= self.window_ms
            if carries and due:
                if self.durable_at_commit:
                    body["acknowledged_records"] = written + BATCH
                answer = self._post("Commit carrying a Send", f"/v1/transactions/{self.tid}/commit", body, log)
                self.ident = _ident_after(answer)
                written += BATCH
                break
            if self.path != "plain":
                body["transactional_id"] = self.tid
            # Plain's first Send of a window apart too: the first request after this producer
            # waited for the other paths' windows, which a beginning Send always is.
            kind = ("Send, plain, first of its window" if first else "Send, plain") if self.path == "plain" else (
                "Send, v2, beginning its transaction" if first else "Send, v2, later")
            self._post(kind, "/v1/records", body, log)
            written, first = written + BATCH, False
            if not carries and (time.perf_counter() - t0) * 1000 >= self.window_ms:
                break
        if self.kind == "v2, separate Commit":
            body = {**self.ident, "acknowledged_records": written} if self.durable_at_commit else self.ident
            self.ident = _ident_after(self._post("Commit", f"/v1/transactions/{self.tid}/commit", body, log))
        return Window(written, time.perf_counter() - t0, log)


def rate(windows: list[Window]) -> float:
    return sum(w.records for w in windows) / sum(w.seconds for w in windows)


def quarters(a: list[Window], b: list[Window]) -> str:
    n = min(len(a), len(b))
    parts = []
    for q in range(4):
        lo, hi = q * n // 4, (q + 1) * n // 4
        parts.append(rate(a[lo:hi]) / rate(b[lo:hi]))
    return f"{min(parts):.2f}–{max(parts):.2f}"


def medians(windows: list[Window]) -> dict[str, tuple[int, float, float]]:
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for w in windows:
        for kind, ms, cpu in w.requests:
            by_kind.setdefault(kind, []).append((ms, cpu))
    return {k: (len(v), statistics.median(ms for ms, _ in v), statistics.median(c for _, c in v))
            for k, v in by_kind.items()}


def _pieces(path: str, ws: list[Window], plain: list[Window], stat) -> dict[str, float]:
    """What a window of `path` spends beyond plain Sends of the same records, by `stat` of each
    request kind's samples, each Send against plain's Send in the same place of its window (the
    first after the other paths' windows, or a later one). With the mean, the pieces and the
    last one (what the two windows' different numbers of Sends leave) add up to the measured
    gap exactly."""
    def of(windows: list[Window], kind: str) -> float:
        return stat([ms for w in windows for k, ms, _ in w.requests if k == kind])

    first, send = of(plain, "Send, plain, first of its window"), of(plain, "Send, plain")
    sends = statistics.mean(w.records for w in ws) / BATCH
    # Per window: 1 beginning Send, and the Commit carrying a Send is one of the later ones.
    carries = path.removesuffix(", durability commit") == "v2, last Send in the Commit"
    later_n = sends - 1 - (1 if carries else 0)
    commit = of(ws, "Commit carrying a Send") - send if carries else of(ws, "Commit")
    plain_gap = statistics.mean(w.seconds * 1000 - sum(ms for _, ms, _ in w.requests) for w in plain)
    plain_sends = statistics.mean(w.records for w in plain) / BATCH
    gap = statistics.mean(w.seconds * 1000 - sum(ms for _, ms, _ in w.requests) for w in ws)
    pieces = {
        "the Send that begins the transaction, beyond plain's first Send of a window":
            of(ws, "Send, v2, beginning its transaction") - first,
        "the later Sends, beyond plain's later Sends": later_n * (of(ws, "Send, v2, later") - send),
        "the Commit (separate) / the Commit carrying the last Send beyond a plain later Send": commit,
        "this client between requests, beyond plain's": gap - sends * plain_gap / plain_sends,
    }
    # Plain's per-Send pace spreads its first Send's premium over its own number of Sends.
    plain_pace = (first + (plain_sends - 1) * send) / plain_sends
    pieces["plain's first-Send premium, spread over a different number of Sends"] = (
        first + (sends - 1) * send - sends * plain_pace)
    return pieces


def account(side: str, windows: dict[str, list[Window]]) -> None:
    """One window of each transactional path against plain Sends of the same records."""
    plain = windows["plain"]
    txn = PATHS[1:]
    print(f"\n### {side}: the account of one window\n")
    print("| piece, ms a window | " + " | ".join(f"{p}: mean | share of the gap | median" for p in txn) + " |")
    print("| --- |" + " ---: | ---: | ---: |" * len(txn))
    means = {p: _pieces(p, windows[p], plain, statistics.mean) for p in txn}
    meds = {p: _pieces(p, windows[p], plain, statistics.median) for p in txn}
    for piece in means[txn[0]]:
        cells = []
        for p in txn:
            total = sum(means[p].values())
            cells.append(f"{means[p][piece]:.2f} | {means[p][piece] / total:.0%} | {meds[p][piece]:.2f}")
        print(f"| {piece} | " + " | ".join(cells) + " |")
    cells, rest = [], {}
    for p in txn:
        ws = windows[p]
        window_ms = statistics.mean(w.seconds for w in ws) * 1000
        total, total_med = sum(means[p].values()), sum(meds[p].values())
        cells.append(f"{total:.2f} | | {total_med:.2f}")
        rest.setdefault("window, ms (Sends a window)", []).append(
            f"{window_ms:.1f} ({statistics.mean(w.records for w in ws) / BATCH:.1f}) | |")
        rest.setdefault("1 − sum ÷ window (means: the measured ratio; medians: a typical window's)", []).append(
            f"{1 - total / window_ms:.3f} | | {1 - total_med / window_ms:.3f}")
        rest.setdefault("ratio measured: records/s ÷ plain's", []).append(f"{rate(ws) / rate(plain):.3f} | |")
        svc = statistics.mean(w.service_cpu_ms for w in ws) / statistics.mean(w.records for w in ws) * BATCH
        svc_plain = statistics.mean(w.service_cpu_ms for w in plain) / statistics.mean(w.records for w in plain) * BATCH
        rest.setdefault("service CPU per 1,000 records beyond plain's, ms", []).append(f"{svc - svc_plain:.2f} | |")
    print("| sum of the pieces | " + " | ".join(cells) + " |")
    for name, cs in rest.items():
        print(f"| {name} | " + " | ".join(cs) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--rounds", type=int, default=200, help="windows per path (and tree)")
    parser.add_argument("--window-ms", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--before", type=Path, default=None, help="source tree of a 'before' service")
    parser.add_argument("--after", type=Path, default=ROOT, help="source tree of the 'after' service")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    rng = random.Random(seed)
    trees = {"after": args.after} if args.before is None else {"before": args.before, "after": args.after}
    import os
    print(f"# {args.db}: {args.rounds} windows of {args.window_ms:g} ms a path, seed {seed}, "
          f"load average {os.getloadavg()[0]:.2f} at the start\n")

    with scratch_database(args.db, "txnwin", migrate_with=tuple(trees.values())) as db_url:
        services = {side: Service(db_url, root) for side, root in trees.items()}
        meters = {side: CpuMeter(s, db_url) for side, s in services.items()}
        try:
            producers = {}
            for side, s in services.items():
                for i, path in enumerate(PATHS):
                    topic = f"w-{side}-{i}"
                    create_topic(s.url, topic, 1)
                    producers[(side, path)] = WindowProducer(s.url, path, f"tw-{side}-{i}", topic, args.window_ms)
            windows: dict[tuple[str, str], list[Window]] = {key: [] for key in producers}
            for key, p in producers.items():  # one untimed window each: connections, caches
                p.window()
            order = list(producers)
            for _ in range(args.rounds):
                rng.shuffle(order)
                for key in order:
                    s = services[key[0]]
                    w, cpu = meters[key[0]].measure(producers[key].window)
                    w.service_cpu_ms, w.database_cpu_ms = cpu.service * 1000, (
                        None if cpu.database is None else cpu.database * 1000)
                    windows[key].append(w)
                    del s
            for p in producers.values():
                p.client.close()
        finally:
            for m in meters.values():
                m.close()
            for s in services.values():
                s.stop()
    print(f"load average {os.getloadavg()[0]:.2f} at the end\n")

    print("| path | side | records/s | ÷ plain (quarters) | Sends / window | service CPU ms / 1,000 records "
          "| database CPU ms / 1,000 records |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for side in trees:
        plain = windows[(side, "plain")]
        for path in PATHS:
            ws = windows[(side, path)]
            n = sum(w.records for w in ws) / BATCH
            db = "" if ws[0].database_cpu_ms is None else f"{sum(w.database_cpu_ms or 0 for w in ws) / n:.2f}"
            print(f"| {path} | {side} | {rate(ws):,.0f} | {rate(ws) / rate(plain):.3f} ({quarters(ws, plain)}) | "
                  f"{n / len(ws):.1f} | {sum(w.service_cpu_ms for w in ws) / n:.2f} | {db} |")
    if len(trees) == 2:
        print()
        for path in PATHS:
            a, b = windows[("after", path)], windows[("before", path)]
            print(f"- {path}: after ÷ before {rate(a) / rate(b):.3f} ({quarters(a, b)})")

    print("\n| request | side | samples | wall ms p50 | client CPU ms p50 |\n| --- | --- | ---: | ---: | ---: |")
    for side in trees:
        for path in PATHS:
            for kind, (n, ms, cpu) in medians(windows[(side, path)]).items():
                print(f"| {kind} | {side} | {n} | {ms:.2f} | {cpu:.2f} |")
    for side in trees:
        account(side, {path: windows[(side, path)] for path in PATHS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
