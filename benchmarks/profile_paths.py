"""Where the time of the produce and commit paths goes.

    .venv/bin/python benchmarks/profile_paths.py                     # SQLite and PostgreSQL
    .venv/bin/python benchmarks/profile_paths.py --db postgresql --cprofile commit

For each operation on the hot paths (BeginTransaction, Send of 1,000 records plain /
idempotent / transactional (the first of its transaction and a later one), Commit, a
read_committed Fetch, and a version 2 transaction's Sends and Commit) it prints:

- the SQL statements it runs and the database transactions it commits (counted with
  SQLAlchemy events: deterministic, whatever the machine is doing). COPY is issued on the
  driver's cursor and is not counted as a statement; the statements run there by
  app.storage.dialect.first_row_on_driver (a Send's offsets on PostgreSQL, a batch's sequence
  state on SQLite) dispatch the events themselves and are;
- its median time in the service layer (no HTTP), and through the whole HTTP stack in process
  (the ASGI app under httpx, no network), so the difference is what parsing, validation and
  serialisation cost;
- with --cprofile OP, the functions where that operation spends its time.

Figures are from the run that prints them; the machine's load moves the times, not the counts.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import orjson
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # noqa: E402

from scratch import scratch_database  # noqa: E402

from app.api.app import create_app  # noqa: E402
from app.composition import Services  # noqa: E402
from app.domain.records import RecordToAppend  # noqa: E402
from app.domain.types import IsolationLevel, TransactionVersion  # noqa: E402
from app.services.log_service import SendBatch  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage.engine import Database, build_engine  # noqa: E402

BATCH = 1_000
VALUE = {"order_id": 123456, "meal": "Pizza", "value": 12.5, "customer": "c-000042", "note": "extra cheese"}


class Counter:
    """SQL statements and commits on an engine, per operation."""

    def __init__(self, db: Database) -> None:
        self.statements = 0
        self.commits = 0
        event.listen(db.engine, "before_cursor_execute", self._statement)
        event.listen(db.engine, "commit", self._commit)

    def _statement(self, *_args: object) -> None:
        self.statements += 1

    def _commit(self, *_args: object) -> None:
        self.commits += 1

    def measure(self, op: Callable[[], object]) -> tuple[int, int, float]:
        """Run op once: (statements, commits, milliseconds)."""
        self.statements = self.commits = 0
        t0 = time.perf_counter()
        op()
        ms = (time.perf_counter() - t0) * 1000
        return self.statements, self.commits, ms


class Paths:
    """The operations, each runnable in the service layer and over the in-process HTTP stack."""

    def __init__(self, services: Services, http: TestClient) -> None:
        self.s = services
        self.http = http
        services.topics.create("profile", 1)
        services.topics.create("profile-http", 1)
        value = orjson.dumps(VALUE).decode()
        self.records = [RecordToAppend(f"k{i}", value, None, 1) for i in range(BATCH)]
        self.body_records = [{"key": f"k{i}", "value": VALUE} for i in range(BATCH)]
        self.idem = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)
        self.txn = services.coordinator.init_producer_id(transactional_id="profile", transaction_timeout_ms=None)
        # Version 2 (KIP-890): no Begin, the first Send begins the transaction, every Commit bumps
        # the epoch, and sequences start at 0 in each.
        self.txn2 = services.coordinator.init_producer_id(transactional_id="profile-v2", transaction_timeout_ms=None,
                                                          transaction_version=TransactionVersion.V2)
        self.seq2 = 0
        r = http.post("/v1/producers", json={"transactional_id": "profile-http"}).json()
        self.http_ident = {"producer_id": r["producer_id"], "producer_epoch": r["producer_epoch"]}
        r = http.post("/v1/producers", json={"transactional_id": "profile-http-v2", "transaction_version": 2}).json()
        self.http_ident2 = {"producer_id": r["producer_id"], "producer_epoch": r["producer_epoch"]}
        self.http_seq2 = 0
        r = http.post("/v1/producers", json={}).json()
        self.http_idem = {"producer_id": r["producer_id"], "producer_epoch": r["producer_epoch"]}
        self.seq = {"idem": 0, "txn": 0, "http-idem": 0, "http-txn": 0}

    # --- service layer ---------------------------------------------------------------------

    def send(self, mode: str) -> None:
        ident = {"plain": (None, None, None), "idempotent": (self.idem.producer_id, self.idem.producer_epoch, None),
                 "transactional": (self.txn.producer_id, self.txn.producer_epoch, "profile")}[mode]
        seq = None
        if mode != "plain":
            key = "idem" if mode == "idempotent" else "txn"
            seq, self.seq[key] = self.seq[key], self.seq[key] + BATCH
        self.s.log.send([SendBatch("profile", 0, self.records, seq)], producer_id=ident[0],
                        producer_epoch=ident[1], transactional_id=ident[2])

    def send_v2(self) -> None:
        self.s.log.send([SendBatch("profile", 0, self.records, self.seq2)], producer_id=self.txn2.producer_id,
                        producer_epoch=self.txn2.producer_epoch, transactional_id="profile-v2")
        self.seq2 += BATCH

    def commit_v2(self, carrying: bool = False) -> None:
        """The Commit; with `carrying`, the transaction's last Send rides in it."""
        batches = [SendBatch("profile", 0, self.records, self.seq2)] if carrying else []
        ended = self.s.coordinator.end_transaction("profile-v2", self.txn2.producer_id, self.txn2.producer_epoch,
                                                   commit=True, batches=batches)
        self.txn2 = replace(self.txn2, producer_id=ended.meta.producer_id, producer_epoch=ended.meta.producer_epoch)
        self.seq2 = 0

    def begin(self) -> None:
        self.s.coordinator.begin("profile", self.txn.producer_id, self.txn.producer_epoch)

    def commit(self) -> None:
        self.s.coordinator.end_transaction("profile", self.txn.producer_id, self.txn.producer_epoch, commit=True)

    def fetch(self) -> None:
        self.s.log.fetch("profile", 0, offset=0, max_records=BATCH, isolation=IsolationLevel.READ_COMMITTED)

    # --- the whole HTTP stack in process ------------------------------------------------------

    def _post(self, path: str, body: dict) -> None:
        r = self.http.post(path, content=orjson.dumps(body), headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text

    def http_send(self, mode: str) -> None:
        body: dict = {"batches": [{"topic": "profile-http", "partition": 0, "records": self.body_records}]}
        if mode != "plain":
            key = "http-idem" if mode == "idempotent" else "http-txn"
            body.update(self.http_idem if mode == "idempotent" else self.http_ident)
            body["batches"][0]["base_sequence"] = self.seq[key]
            self.seq[key] += BATCH
        if mode == "transactional":
            body["transactional_id"] = "profile-http"
        self._post("/v1/records", body)

    def http_begin(self) -> None:
        self._post("/v1/transactions/profile-http/begin", self.http_ident)

    def http_commit(self) -> None:
        self._post("/v1/transactions/profile-http/commit", self.http_ident)

    def http_send_v2(self) -> None:
        self._post("/v1/records", {**self.http_ident2, "transactional_id": "profile-http-v2", "batches": [
            {"topic": "profile-http", "partition": 0, "base_sequence": self.http_seq2, "records": self.body_records}]})
        self.http_seq2 += BATCH

    def http_commit_v2(self, carrying: bool = False) -> None:
        body = dict(self.http_ident2)
        if carrying:
            body["batches"] = [{"topic": "profile-http", "partition": 0, "base_sequence": self.http_seq2,
                                "records": self.body_records}]
        r = self.http.post("/v1/transactions/profile-http-v2/commit", content=orjson.dumps(body),
                           headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        answer = r.json()
        self.http_ident2 = {"producer_id": answer["producer_id"], "producer_epoch": answer["producer_epoch"]}
        self.http_seq2 = 0

    def http_fetch(self) -> None:
        r = self.http.get("/v1/topics/profile-http/partitions/0/records",
                          params={"offset": 0, "max_records": BATCH})
        assert r.status_code == 200, r.text


def profile_database(kind: str, rounds: int, cprofile_op: str | None) -> None:
    with scratch_database(kind, "profile") as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
        db = Database(build_engine(url, pool_size=2))
        counter = Counter(db)
        services = Services.build(settings, db, lambda: int(time.time() * 1000))
        with TestClient(create_app(settings.model_copy(update={"run_coordinator": False}))) as http:
            p = Paths(services, http)

            # One transaction cycle in the order a producer runs it, repeated.
            def cycle_ops() -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
                return [
                    ("BeginTransaction", p.begin, p.http_begin),
                    ("Send 1,000, transactional", lambda: p.send("transactional"), lambda: p.http_send("transactional")),
                    ("Send 1,000, transactional, later", lambda: p.send("transactional"),
                     lambda: p.http_send("transactional")),
                    ("Commit (1 partition)", p.commit, p.http_commit),
                ]

            # Version 2: a transaction of two Sends and a Commit, then one whose last Send rides
            # in its Commit.
            v2_ops = [
                ("v2: Send 1,000, first of its transaction", p.send_v2, p.http_send_v2),
                ("v2: Send 1,000, later", p.send_v2, p.http_send_v2),
                ("v2: Commit (1 partition)", p.commit_v2, p.http_commit_v2),
                ("v2: Send 1,000, first of its transaction ", p.send_v2, p.http_send_v2),
                ("v2: Commit carrying the last Send of 1,000", lambda: p.commit_v2(carrying=True),
                 lambda: p.http_commit_v2(carrying=True)),
            ]

            other_ops = [
                ("Send 1,000, plain", lambda: p.send("plain"), lambda: p.http_send("plain")),
                ("Send 1,000, idempotent", lambda: p.send("idempotent"), lambda: p.http_send("idempotent")),
                ("Fetch 1,000, read_committed", p.fetch, p.http_fetch),
            ]
            counts: dict[str, tuple[int, int]] = {}
            times: dict[str, list[float]] = {}
            http_times: dict[str, list[float]] = {}
            for _ in range(rounds):
                for name, op, http_op in cycle_ops() + other_ops + v2_ops:
                    stmts, commits, ms = counter.measure(op)
                    counts[name] = (stmts, commits)
                    times.setdefault(name, []).append(ms)
                    http_times.setdefault(name, []).append(_timed(http_op))
            print(f"## {kind}\n")
            print("| operation | SQL statements | commits | service layer ms | through HTTP ms | HTTP layer share |")
            print("| --- | ---: | ---: | ---: | ---: | ---: |")
            for name, (stmts, commits) in counts.items():
                svc = statistics.median(times[name])
                if name not in http_times:
                    print(f"| {name} | {stmts} | {commits} | {svc:.2f} | | |")
                    continue
                full = statistics.median(http_times[name])
                print(f"| {name} | {stmts} | {commits} | {svc:.2f} | {full:.2f} | {max(0.0, 1 - svc / full):.0%} |")
            print()
            if cprofile_op:
                # A whole transaction cycle each round, profiling only the chosen operation.
                prof = cProfile.Profile()
                for _ in range(rounds):
                    for name, op in (("begin", p.http_begin), ("send", lambda: p.http_send("transactional")),
                                     ("commit", p.http_commit), ("v2-send-first", p.http_send_v2),
                                     ("v2-send-later", p.http_send_v2), ("v2-commit", p.http_commit_v2),
                                     ("v2-send-first", p.http_send_v2),
                                     ("v2-commit-carrying", lambda: p.http_commit_v2(carrying=True))):
                        if name == cprofile_op:
                            prof.enable()
                        op()
                        prof.disable()
                print(f"### cProfile: {cprofile_op}, {rounds} rounds, through the HTTP stack\n")
                pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
        db.dispose()


def _timed(op: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    op()
    return (time.perf_counter() - t0) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--cprofile", choices=["begin", "send", "commit", "v2-send-first", "v2-send-later", "v2-commit",
                                                 "v2-commit-carrying"], default=None,
                        help="also print a cProfile of this step of a transaction through the HTTP stack")
    args = parser.parse_args(argv)
    kinds = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    print(f"# {os.cpu_count()} cores; {args.rounds} rounds; batches of {BATCH} records\n")
    for kind in kinds:
        profile_database(kind, args.rounds, args.cprofile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
