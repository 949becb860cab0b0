"""Where an idempotent Send spends the time a plain Send does not: statements, commit, Python.

    .venv/bin/python benchmarks/idempotent_send.py account --rounds 400 --seed 12
    .venv/bin/python benchmarks/idempotent_send.py http --before /tmp/outbox-before --rounds 24 --turn-seconds 0.5

`account`: in the service layer (no HTTP), plain and idempotent Sends of run.py's batch (1,000
records) alternate on one scratch database, a topic of each kind every 8 rounds (an idempotent
producer's sequences from 0 in each, as run.py's producers write them). Every SQL statement is
timed from SQLAlchemy's before_cursor_execute to its after_cursor_execute, the commit from the
`commit` event to the end of the call; the rest of the call is Python (a statement run on the
driver's cursor by app.storage.dialect.first_row_on_driver dispatches those events itself, and
is timed as a statement). Each piece on the wall clock and in the thread's CPU time, which
other work on the machine stretches far less. Prints each piece's median per kind, the median over the rounds of
idempotent - plain (the gap's account), and on SQLite the pages each commit wrote to the WAL.

`http`: a real `outbox serve` per tree (this one, and `--before` if given, sharing one scratch
database) driven over HTTP by one client per path, as run.py's producers (run.py's Service,
Client, records): each round gives every (tree, plain / idempotent) path a turn, in an order
shuffled afresh each round from a printed seed; a turn writes a topic of its own, one Send
(`--turn-seconds 0`) or Sends for that long. Prints per tree each kind's median request time,
idempotent ÷ plain by the medians and by the throughput (total time), each with its spread over
the quarters of the rounds, and the service's CPU per Send (from /proc).

Figures are from the run that prints them; the machine's load (printed) moves them.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import orjson
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratch import scratch_database  # noqa: E402
from run import BATCH, ROOT, VALUE, Client, Service, _post, _records, create_topic  # noqa: E402

from app.composition import Services  # noqa: E402
from app.domain.records import RecordToAppend, SendBatch  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage.engine import Database, build_engine  # noqa: E402

KINDS = ("plain", "idempotent")


def _label(sql: str) -> str:
    """A statement's kind: its verb and table, its bind values and columns left out."""
    s = " ".join(sql.split())
    m = re.match(r"(BEGIN IMMEDIATE|BEGIN|COMMIT|PRAGMA \w+)", s)
    if m:
        return m.group(1)
    m = re.match(r"(WITH \w+|INSERT INTO \S+|UPDATE \S+|DELETE FROM \S+|SELECT)", s)
    head = m.group(1) if m else s[:30]
    if head == "SELECT":
        tables = re.findall(r"FROM (\w+)", s)
        head += " " + ",".join(dict.fromkeys(tables))
    if "RETURNING" in s:
        head += " … RETURNING"
    if "ON CONFLICT" in s:
        head += " … ON CONFLICT"
    return head


class StatementClock:
    """Each statement's time and the commit's, per operation (SQLAlchemy events), on the wall
    clock and in this thread's CPU time: a machine shared with other work stretches the first
    (waits for a core, for the disk) far more than the second."""

    def __init__(self, db: Database) -> None:
        self.pieces: dict[str, tuple[float, float]] = {}
        self._started = (0.0, 0.0)
        self._commit_started: tuple[float, float] | None = None
        event.listen(db.engine, "before_cursor_execute", self._before)
        event.listen(db.engine, "after_cursor_execute", self._after)
        event.listen(db.engine, "commit", self._commit)

    @staticmethod
    def _now() -> tuple[float, float]:
        return time.perf_counter(), time.thread_time()

    def _before(self, _conn, _cursor, statement, *_args) -> None:  # type: ignore[no-untyped-def]
        self._statement = statement
        self._started = self._now()

    def _after(self, *_args) -> None:  # type: ignore[no-untyped-def]
        wall, cpu = self._now()
        label = _label(self._statement)
        while label in self.pieces:  # a second statement of a kind in one operation
            label += " (again)"
        self.pieces[label] = (wall - self._started[0], cpu - self._started[1])

    def _commit(self, *_args) -> None:  # type: ignore[no-untyped-def]
        self._commit_started = self._now()

    def measure(self, op) -> dict[str, tuple[float, float]]:  # type: ignore[no-untyped-def]
        """Run op once: its pieces, (wall µs, CPU µs) each, with "COMMIT" (from the commit event
        to op's end), "Python" (the rest of op) and "whole"."""
        self.pieces, self._commit_started = {}, None
        t0 = self._now()
        op()
        t1 = self._now()
        pieces = {k: (w * 1e6, c * 1e6) for k, (w, c) in self.pieces.items()}
        if self._commit_started is not None:
            pieces["COMMIT"] = ((t1[0] - self._commit_started[0]) * 1e6, (t1[1] - self._commit_started[1]) * 1e6)
        whole = ((t1[0] - t0[0]) * 1e6, (t1[1] - t0[1]) * 1e6)
        pieces["Python"] = (whole[0] - sum(w for w, _ in pieces.values()), whole[1] - sum(c for _, c in pieces.values()))
        pieces["whole"] = whole
        return pieces


_LAST = ("COMMIT", "Python", "whole")


def account(kind: str, rounds: int, seed: int, synchronous: str, scratch_name: str = "idemsend") -> None:
    rng = random.Random(seed)
    wal_pages: dict[str, list[float]] = {k: [] for k in KINDS}
    with scratch_database(kind, scratch_name) as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
        db = Database(build_engine(url, pool_size=2, sqlite_synchronous=synchronous), sqlite_synchronous=synchronous)
        services = Services.build(settings, db, lambda: int(time.time() * 1000))
        clock = StatementClock(db)
        value = orjson.dumps(VALUE).decode()
        records = [RecordToAppend(f"k{i}", value, None, 1) for i in range(BATCH)]
        idem = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)
        wal = Path(url.removeprefix("sqlite:///") + "-wal") if kind == "sqlite" else None
        # As run.py's producers: a topic per turn, of a few Sends each; here a topic every 8 rounds.
        per_topic = 8
        samples: dict[str, list[dict[str, tuple[float, float]]]] = {k: [] for k in KINDS}
        seq = 0
        for r in range(rounds):
            if r % per_topic == 0:
                for k in KINDS:
                    services.topics.create(f"{k}-{r}", 1)
                seq = 0
            topic_round = r - r % per_topic
            order = list(KINDS)
            rng.shuffle(order)
            for k in order:
                if k == "plain":
                    def op(t: str = f"plain-{topic_round}") -> None:
                        services.log.send([SendBatch(t, 0, records, None)], producer_id=None, producer_epoch=None,
                                          transactional_id=None)
                else:
                    def op(t: str = f"idempotent-{topic_round}", s: int = seq) -> None:
                        services.log.send([SendBatch(t, 0, records, s)], producer_id=idem.producer_id,
                                          producer_epoch=idem.producer_epoch, transactional_id=None)
                size = wal.stat().st_size if wal is not None and wal.exists() else 0
                samples[k].append(clock.measure(op))
                if wal is not None and wal.stat().st_size > size:
                    # What the commit appended to the WAL, in pages (a frame is a page and a 24-byte
                    # header); a commit that restarted the WAL after a checkpoint tells nothing.
                    wal_pages[k].append((wal.stat().st_size - size) / (4096 + 24))
            seq += BATCH
        db.dispose()

    sync = f", synchronous={synchronous}" if kind == "sqlite" else ""
    print(f"## {kind}{sync}: {rounds} Sends of each kind, {BATCH} records each, service layer; seed {seed}\n")
    print("Medians per Send; the gap is the median over the rounds of idempotent - plain (the two Sends of a "
          "round ran back to back).\n")
    labels = list(dict.fromkeys(label for k in KINDS for x in samples[k] for label in x))
    labels.sort(key=lambda x: _LAST.index(x) + 1 if x in _LAST else 0)
    print("| piece | plain wall µs | idempotent wall µs | gap wall µs | plain CPU µs | idempotent CPU µs | gap CPU µs "
          "| share of the CPU gap |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")

    def med(k: str, label: str, i: int) -> float:
        return statistics.median(x.get(label, (0.0, 0.0))[i] for x in samples[k])

    def gap(label: str, i: int) -> float:
        return statistics.median(b.get(label, (0.0, 0.0))[i] - a.get(label, (0.0, 0.0))[i]
                                 for a, b in zip(samples["plain"], samples["idempotent"], strict=True))

    cpu_gap = gap("whole", 1)
    for label in labels:
        share = f"{gap(label, 1) / cpu_gap:.0%}" if cpu_gap > 0 and label != "whole" else ""
        print(f"| {label} | {med('plain', label, 0):,.0f} | {med('idempotent', label, 0):,.0f} | {gap(label, 0):+,.0f} "
              f"| {med('plain', label, 1):,.0f} | {med('idempotent', label, 1):,.0f} | {gap(label, 1):+,.0f} | {share} |")
    if wal_pages["plain"]:
        print(f"\nWAL pages a Send's commit wrote (median): plain {statistics.median(wal_pages['plain']):.0f}, "
              f"idempotent {statistics.median(wal_pages['idempotent']):.0f}")
    pairs = [a["whole"][0] / b["whole"][0] for a, b in zip(samples["plain"], samples["idempotent"], strict=True)]
    cpu_pairs = [a["whole"][1] / b["whole"][1] for a, b in zip(samples["plain"], samples["idempotent"], strict=True)]
    print(f"\nidempotent ÷ plain as throughput (plain's time ÷ idempotent's), median of the rounds: wall "
          f"{statistics.median(pairs):.3f}, CPU {statistics.median(cpu_pairs):.3f}\n")


def http(kind: str, rounds: int, seed: int, trees: dict[str, Path], turn_seconds: float,
         scratch_name: str = "idemhttp") -> None:
    rng = random.Random(seed)
    body_records = _records(BATCH)
    with scratch_database(kind, scratch_name, migrate_with=tuple(trees.values())) as url:
        services = {side: Service(url, root) for side, root in trees.items()}
        try:
            clients = {}
            idents = {}
            for side, service in services.items():
                for k in KINDS:
                    c = Client(service.url)
                    clients[(side, k)] = c
                    if k == "idempotent":
                        p = _post(c, "/v1/producers", {})
                        idents[(side, k)] = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}
            # Each path's request times, turn by turn.
            times: dict[tuple[str, str], list[list[float]]] = defaultdict(list)
            cpu: dict[tuple[str, str], float] = defaultdict(float)  # the service's, seconds
            paths = list(clients)
            for r in range(rounds):
                rng.shuffle(paths)
                for side, k in paths:
                    # A topic of its own each turn, sequences from 0, as run.py's producers.
                    topic = f"{side}-{k}-{r}"
                    create_topic(services[side].url, topic, 1)
                    turn: list[float] = []
                    seq = 0
                    cpu_before = services[side].cpu_seconds()
                    deadline = time.perf_counter() + turn_seconds
                    while not turn or time.perf_counter() < deadline:
                        body: dict = {"batches": [{"topic": topic, "partition": 0, "records": body_records}]}
                        if k == "idempotent":
                            body.update(idents[(side, k)])
                            body["batches"][0]["base_sequence"] = seq
                            seq += BATCH
                        t0 = time.perf_counter()
                        _post(clients[(side, k)], "/v1/records", body)
                        turn.append((time.perf_counter() - t0) * 1e3)
                    times[(side, k)].append(turn)
                    cpu[(side, k)] += services[side].cpu_seconds() - cpu_before
            for c in clients.values():
                c.close()
        finally:
            for service in services.values():
                service.stop()

    what = "one Send" if turn_seconds == 0 else f"Sends for {turn_seconds:g} s"
    print(f"## {kind}, over HTTP: {rounds} rounds, a turn of {what} of each path a round, shuffled; seed {seed}\n")
    print("| tree | Sends plain / idempotent | plain ms (median) | idempotent ms (median) | "
          "idempotent ÷ plain, medians | in each quarter | idempotent ÷ plain, throughput | in each quarter | "
          "service CPU ms a Send, plain / idempotent |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    q = rounds // 4

    def flat(turns: list[list[float]]) -> list[float]:
        return [t for turn in turns for t in turn]

    for side in trees:
        p, i = times[(side, "plain")], times[(side, "idempotent")]
        by_median = sorted(statistics.median(flat(p[j:j + q])) / statistics.median(flat(i[j:j + q]))
                           for j in range(0, 4 * q, q))
        by_mean = sorted(statistics.mean(flat(p[j:j + q])) / statistics.mean(flat(i[j:j + q]))
                         for j in range(0, 4 * q, q))
        fp, fi = flat(p), flat(i)
        print(f"| {side} | {len(fp)} / {len(fi)} | {statistics.median(fp):.2f} | {statistics.median(fi):.2f} | "
              f"{statistics.median(fp) / statistics.median(fi):.3f} | {by_median[0]:.2f}–{by_median[-1]:.2f} | "
              f"{statistics.mean(fp) / statistics.mean(fi):.3f} | {by_mean[0]:.2f}–{by_mean[-1]:.2f} | "
              f"{cpu[(side, 'plain')] / len(fp) * 1e3:.2f} / {cpu[(side, 'idempotent')] / len(fi) * 1e3:.2f} |")
    if len(trees) == 2:
        print()
        for k in KINDS:
            a, b = flat(times[("after", k)]), flat(times[("before", k)])
            print(f"- {k}: after ÷ before, median request time {statistics.median(a) / statistics.median(b):.3f}, "
                  f"mean {statistics.mean(a) / statistics.mean(b):.3f}")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["account", "http"])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--seed", type=int, default=None, help="of the shuffles (printed; random if not given)")
    parser.add_argument("--before", type=Path, default=None, help="http: the 'before' tree, beside this one")
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL",
                        help="SQLite's synchronous (the service's default FULL: an fsync at every commit)")
    parser.add_argument("--scratch-name", default=None,
                        help="the scratch database's name within outbox_<name>_<random> (PostgreSQL; "
                             "default idemsend, idemhttp)")
    parser.add_argument("--turn-seconds", type=float, default=0.0,
                        help="http: each turn's length, as run.py's (0: one Send a turn)")
    args = parser.parse_args(argv)
    seed = random.randrange(1 << 16) if args.seed is None else args.seed
    print(f"# {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the start\n")
    if args.what == "account":
        account(args.db, args.rounds, seed, args.synchronous, args.scratch_name or "idemsend")
    else:
        trees = {"after": ROOT} if args.before is None else {"before": args.before, "after": ROOT}
        http(args.db, args.rounds, seed, trees, args.turn_seconds, args.scratch_name or "idemhttp")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
