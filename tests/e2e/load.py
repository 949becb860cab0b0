"""A bounded load run against real `serve` processes, reusable by tests and as a script.

Many concurrent clients (threads, each with its own httpx clients) mix, for a fixed time:

- transactional producers: Begin, 1-3 Sends of 1-2 batches, sometimes AddOffsets of their own
  consumer group, then Commit (70 %) or Abort; now and then a Send is repeated on purpose and
  must be answered `duplicate: true` with the first offsets;
- idempotent producers (per-partition sequences, sometimes a deliberate duplicate) and plain
  producers, 1-2 partitions per request;
- read_committed and read_uncommitted readers tailing every partition from offset 0;
- offset clients: plain group-offset commits and fetches of their own group, and stable
  fetches of the transactional producers' groups (which answer UNSTABLE_OFFSET_COMMIT while
  a transaction carries offsets for them).

Every record's value is `<client>#<n>`, unique in the run, so the final log can be compared
exactly with what the clients were told. Retriable answers (the documented ones: see
RETRIABLE) are retried with a short backoff; anything else is a problem. `run_load()` returns
the figures and the problems found, by name; `verify()` reads the final state back.

As a script (a longer run; exit status 1 when a problem was found):

    .venv/bin/python -m tests.e2e.load --backend postgresql --seconds 60 --clients 32
    .venv/bin/python -m tests.e2e.test_load --backend sqlite --seconds 30 --servers 3 --rotate
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import ssl
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

# The documented retriable refusals and their statuses (README "Errors", app/domain/errors.py
# `retriable = True`, app/api/errors.py STATUS_BY_ERROR). UNKNOWN_SERVER_ERROR is also sent
# with retriable: true, but it is a 500, a bug, and never acceptable here.
RETRIABLE = {
    "CONCURRENT_TRANSACTIONS": 409,
    "UNSTABLE_OFFSET_COMMIT": 409,
    "STORAGE_UNAVAILABLE": 503,
}
LOCKED = "database is locked"

DATA_TOPIC = "load"
DATA_PARTITIONS = 6
INPUT_TOPIC = "load-input"  # only a target for group offsets
INPUT_PARTITIONS = 4

# Roles in the proportions of a 32-client run (interleaved, so any count gets a mix).
ROLE_WEIGHTS = {"txn": 10, "idem": 5, "plain": 5, "rc": 5, "ru": 3, "offsets": 4}
RETRY_DEADLINE_S = 30.0
REQUEST_TIMEOUT_S = 60.0
# One TLS context for every client (plain HTTP needs none, but httpx builds one per Client
# otherwise, about 50 ms each: seconds of start-up for 32 clients on this machine).
_TLS = ssl.create_default_context()


def role_plan(clients: int) -> list[str]:
    """Smooth weighted round robin over ROLE_WEIGHTS: 32 clients give exactly the weights."""
    current = dict.fromkeys(ROLE_WEIGHTS, 0)
    total = sum(ROLE_WEIGHTS.values())
    out = []
    for _ in range(clients):
        for r, w in ROLE_WEIGHTS.items():
            current[r] += w
        best = max(current, key=lambda r: current[r])
        current[best] -= total
        out.append(best)
    return out


# --- measurements ---------------------------------------------------------------------------


@dataclass
class Stats:
    """One client's figures and problems; merged after the run (no locks while it runs)."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter = field(default_factory=Counter)  # (op, status, error_code) -> n
    retries: Counter = field(default_factory=Counter)  # op -> n
    records: Counter = field(default_factory=Counter)  # kind -> acknowledged records
    locked_503: int = 0  # 503 STORAGE_UNAVAILABLE answers that name "database is locked"
    problems: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def problem(self, kind: str, text: str) -> None:
        if len(self.problems[kind]) < 1000:
            self.problems[kind].append(text[:2000])

    def merge(self, other: Stats) -> None:
        for op, xs in other.latencies.items():
            self.latencies[op].extend(xs)
        self.errors.update(other.errors)
        self.retries.update(other.retries)
        self.records.update(other.records)
        self.locked_503 += other.locked_503
        for k, v in other.problems.items():
            self.problems[k].extend(v)


class Failed(Exception):
    """A request ended without a success answer. `certain`: it was refused, so it wrote
    nothing; otherwise (transport error, 500, retries exhausted) its outcome is unknown."""

    def __init__(self, op: str, what: str, *, certain: bool, code: str | None = None) -> None:
        super().__init__(f"{op}: {what}")
        self.certain = certain
        self.code = code


class Http:
    """One client's connections, one httpx.Client per server; every attempt is timed and
    every error answer is checked against the documented retriable ones."""

    def __init__(self, urls: list[str], stats: Stats, rng: random.Random, home: int, rotate: bool) -> None:
        # Idle connections closed before the servers' keep-alive timeout (5 s by default, 60 s
        # as start_servers starts them), as the product's
        # client closes them (app/client/http.py, KEEP_ALIVE_LIMITS): a connection to one server
        # sits idle while a rotating client uses the other, and one reused just as its server
        # closes it fails with "Server disconnected", a transport error that is not the service's.
        self.clients = [httpx.Client(base_url=u, timeout=REQUEST_TIMEOUT_S, verify=_TLS,
                                     limits=httpx.Limits(keepalive_expiry=4.0)) for u in urls]
        self.stats = stats
        self.rng = rng
        self.home = home % len(urls)
        self.rotate = rotate
        self.failed_attempts = 0  # of the current call, before it succeeded

    def close(self) -> None:
        for c in self.clients:
            c.close()

    def _client(self) -> httpx.Client:
        return self.rng.choice(self.clients) if self.rotate else self.clients[self.home]

    def call(self, op: str, method: str, path: str, *, json: Any = None, params: dict | None = None,
             expect: int = 200, retry: bool = True) -> Any:
        """The answer's body on `expect`; retriable refusals are retried (short backoff rather
        than Retry-After's second, to keep the pressure on) until RETRY_DEADLINE_S."""
        deadline = time.monotonic() + RETRY_DEADLINE_S
        self.failed_attempts = 0
        backoff = 0.01
        while True:
            t0 = time.perf_counter()
            try:
                r = self._client().request(method, path, json=json, params=params)
            except httpx.TransportError as e:
                self.stats.latencies[op].append(time.perf_counter() - t0)
                self.stats.errors[(op, "transport", type(e).__name__)] += 1
                self.stats.problem("transport error", f"{op} {method} {path}: {type(e).__name__}: {e}")
                raise Failed(op, f"transport error {e!r}", certain=False) from None
            self.stats.latencies[op].append(time.perf_counter() - t0)
            if r.status_code == expect:
                return r.json() if r.content else None
            code, retriable, text = self._check_error(op, method, path, r)
            if not retriable:
                raise Failed(op, f"{r.status_code} {text}", certain=r.status_code < 500, code=code)
            self.failed_attempts += 1
            if not retry:
                raise Failed(op, f"{r.status_code} {code} (not retried)", certain=True, code=code)
            if time.monotonic() + backoff > deadline:
                self.stats.problem("retriable error persisted", f"{op} {method} {path}: still {code} after "
                                   f"{RETRY_DEADLINE_S:.0f}s")
                raise Failed(op, f"{code} for {RETRY_DEADLINE_S}s", certain=code != "STORAGE_UNAVAILABLE",
                             code=code)
            self.stats.retries[op] += 1
            time.sleep(backoff * (0.5 + self.rng.random()))
            backoff = min(backoff * 2, 0.2)

    def _check_error(self, op: str, method: str, path: str, r: httpx.Response) -> tuple[str, bool, str]:
        """Counts the error answer; records a problem unless it is a documented retriable one.
        Returns (error_code, documented-retriable, short text)."""
        text = r.text[:300]
        try:
            body = r.json()
            code, flag = body["error_code"], body["retriable"]
        except Exception:  # noqa: BLE001 - not an ErrorResponse at all
            code, flag = f"HTTP_{r.status_code}", None
        self.stats.errors[(op, r.status_code, code)] += 1
        where = f"{op} {method} {path} -> {r.status_code}: {text}"
        documented = RETRIABLE.get(code) == r.status_code and flag is True
        if LOCKED in r.text.lower():
            if documented and code == "STORAGE_UNAVAILABLE":
                self.stats.locked_503 += 1
            else:
                self.stats.problem("'database is locked' reached a client other than as 503", where)
        if r.status_code >= 500 and not documented:
            self.stats.problem("5xx other than 503 STORAGE_UNAVAILABLE", where)
        elif not documented:
            self.stats.problem("error answer not documented as retriable", where)
        elif r.headers.get("retry-after") is None:
            self.stats.problem("retriable answer without Retry-After", where)
        return code, documented, text


# --- what the clients were told -------------------------------------------------------------


@dataclass
class Txn:
    client: str
    txn_id: int | None = None
    records: list[tuple[int, int, str]] = field(default_factory=list)  # acked (partition, offset, value)
    unacked: list[tuple[int, str]] = field(default_factory=list)  # (partition, value), outcome unknown
    offsets: dict[int, int] = field(default_factory=dict)  # staged: input partition -> offset
    outcome: str = "open"  # committed | aborted | uncertain


@dataclass
class ReaderLog:
    isolation: str
    # per partition: what was returned, in order, and the position after the last fetch
    seen: dict[int, list[tuple[int, int | None, str]]] = field(default_factory=lambda: defaultdict(list))
    position: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    fetches: int = 0


class Client(threading.Thread):
    role = "?"

    def __init__(self, idx: int, urls: list[str], stop: threading.Event, seed: int, rotate: bool) -> None:
        super().__init__(name=f"{self.role}{idx:02d}", daemon=True)
        self.idx = idx
        self.stop_event = stop
        self.rng = random.Random(seed * 1_000_003 + idx)
        self.stats = Stats()
        self.http = Http(urls, self.stats, self.rng, idx, rotate)
        self._n = 0

    def value(self) -> str:
        self._n += 1
        return f"{self.name}#{self._n}"

    def run(self) -> None:
        try:
            self.work()
        except Exception:  # noqa: BLE001 - reported as a problem of the run
            self.stats.problem("client crashed", f"{self.name}: {traceback.format_exc()}")
        finally:
            self.http.close()

    def work(self) -> None:
        raise NotImplementedError

    def running(self) -> bool:
        return not self.stop_event.is_set()

    def pick_partitions(self, most: int = 2) -> list[int]:
        return sorted(self.rng.sample(range(DATA_PARTITIONS), self.rng.randint(1, most)))

    def check_send_answer(self, op: str, body: dict, answer: dict, *, duplicate: bool) -> list[int]:
        """The base offset of every batch; a problem unless the answer matches the request."""
        bases = []
        for b, res in zip(body["batches"], answer["results"], strict=True):
            n = len(b["records"])
            got = (res["topic"], res["partition"], res["record_count"], res["duplicate"],
                   res["last_offset"] - res["base_offset"] + 1)
            want = (b["topic"], b["partition"], n, duplicate, n)
            if got != want:
                self.stats.problem("wrong Send answer", f"{self.name} {op}: {res} for {b['topic']}/"
                                   f"{b['partition']} x{n}, duplicate expected {duplicate}")
            bases.append(res["base_offset"])
        return bases


class TransactionalProducer(Client):
    role = "txn"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tid = f"load-{self.name}"
        self.group = f"{self.tid}-group"
        self.txns: list[Txn] = []
        self.duplicates_checked = 0
        self._offset_counter = 0
        self._ident: dict[str, int] = {}
        self._seq: dict[int, int] = {}

    def init(self) -> None:
        p = self.http.call("init_producer", "POST", "/v1/producers", json={"transactional_id": self.tid})
        self._ident = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}
        self._seq = {}

    def work(self) -> None:
        self.init()
        while self.running():
            txn = Txn(self.name)
            self.txns.append(txn)
            try:
                self.transaction(txn)
            except Failed as e:
                self.recover(txn, e)

    def begin(self) -> int:
        path = f"/v1/transactions/{self.tid}/begin"
        try:
            return self.http.call("begin", "POST", path, json=self._ident)["txn_id"]
        except Failed as e:
            if not (e.code == "INVALID_TXN_STATE" and self.http.failed_attempts):
                raise
        # A retry of a Begin that did begin (its answer was a retriable error) finds its own
        # empty transaction open: adopt it, as app.client's Producer does.
        desc = self.http.call("describe", "GET", f"/v1/transactions/{self.tid}")
        if desc["state"] == "Ongoing" and not desc["partitions"] and desc["producer_epoch"] == self._ident["producer_epoch"]:
            self.stats.records["begin retries adopted"] += 1
            return desc["txn_id"]
        raise Failed("begin", f"INVALID_TXN_STATE after a retry: {desc}", certain=True)

    def transaction(self, txn: Txn) -> None:
        txn.txn_id = self.begin()
        for _ in range(self.rng.randint(1, 3)):
            parts = self.pick_partitions()
            body = {**self._ident, "transactional_id": self.tid, "batches": []}
            for p in parts:
                vals = [self.value() for _ in range(self.rng.randint(1, 5))]
                body["batches"].append({"topic": DATA_TOPIC, "partition": p, "base_sequence": self._seq.get(p, 0),
                                        "records": [{"key": v, "value": v} for v in vals]})
            try:
                answer = self.http.call("send.txn", "POST", "/v1/records", json=body)
            except Failed:
                txn.unacked.extend((b["partition"], r["value"]) for b in body["batches"] for r in b["records"])
                raise
            bases = self.check_send_answer("send.txn", body, answer, duplicate=False)
            for b, base in zip(body["batches"], bases):
                self._seq[b["partition"]] = b["base_sequence"] + len(b["records"])
                txn.records.extend((b["partition"], base + i, r["value"]) for i, r in enumerate(b["records"]))
            if self.rng.random() < 0.05:
                again = self.http.call("send.txn", "POST", "/v1/records", json=body)
                if self.check_send_answer("send.txn(retry)", body, again, duplicate=True) != bases:
                    self.stats.problem("duplicate answered other offsets", f"{self.name}: {again} vs {bases}")
                self.duplicates_checked += 1
        if self.rng.random() < 0.5:
            self._offset_counter += 1
            staged = {p: 1000 * self._offset_counter + p
                      for p in self.rng.sample(range(INPUT_PARTITIONS), self.rng.randint(1, INPUT_PARTITIONS))}
            self.http.call("add_offsets", "POST", f"/v1/transactions/{self.tid}/offsets", json={
                **self._ident, "group_id": self.group,
                "offsets": [{"topic": INPUT_TOPIC, "partition": p, "offset": o} for p, o in staged.items()]})
            txn.offsets.update(staged)
        commit = self.rng.random() < 0.7
        op = "commit" if commit else "abort"
        txn.outcome = "uncertain"
        end = self.http.call(op, "POST", f"/v1/transactions/{self.tid}/{op}", json={**self._ident, "txn_id": txn.txn_id})
        # CompleteCommit (markers written before the answer, OUTBOX_COMPLETE_INLINE, the
        # default) or, with the markers left to the coordinator worker, PrepareCommit.
        want = ("CompleteCommit", "PrepareCommit") if commit else ("CompleteAbort", "PrepareAbort")
        if end["state"] not in want or end["txn_id"] != txn.txn_id:
            self.stats.problem("wrong Commit/Abort answer", f"{self.name} {op} of txn {txn.txn_id}: {end}")
        txn.outcome = "committed" if commit else "aborted"
        kind = "transactional committed" if commit else "transactional aborted"
        self.stats.records[kind] += len(txn.records)
        self.stats.records["transactions committed" if commit else "transactions aborted"] += 1

    def recover(self, txn: Txn, e: Failed) -> None:
        """After a failed step: abort if the transaction may still be open, then a new epoch
        (which also aborts whatever is left open and resets the sequences)."""
        if txn.outcome == "open" and txn.txn_id is not None:
            with contextlib.suppress(Failed):
                self.http.call("abort", "POST", f"/v1/transactions/{self.tid}/abort",
                               json={**self._ident, "txn_id": txn.txn_id})
                txn.outcome = "aborted"
        if txn.outcome == "open":
            txn.outcome = "uncertain" if txn.txn_id is not None else "aborted"
        for _ in range(20):
            try:
                self.init()
                return
            except Failed:
                time.sleep(0.1)
        raise RuntimeError(f"{self.name}: cannot re-initialise after {e}")


class IdempotentProducer(Client):
    role = "idem"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acked: list[tuple[int, int, str]] = []
        self.uncertain: list[tuple[int, str]] = []
        self.duplicates_checked = 0

    def work(self) -> None:
        p = self.http.call("init_producer", "POST", "/v1/producers", json={})
        ident = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}
        seq: dict[int, int] = {}
        while self.running():
            body = {**ident, "batches": [
                {"topic": DATA_TOPIC, "partition": part, "base_sequence": seq.get(part, 0),
                 "records": [{"value": self.value()} for _ in range(self.rng.randint(1, 10))]}
                for part in self.pick_partitions()]}
            try:
                answer = self.http.call("send.idem", "POST", "/v1/records", json=body)
            except Failed as e:
                if not e.certain:
                    self.uncertain.extend((b["partition"], r["value"]) for b in body["batches"] for r in b["records"])
                p = self.http.call("init_producer", "POST", "/v1/producers", json={})
                ident = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}
                seq = {}
                continue
            # Not duplicate even after retried 503s: "a refused step wrote nothing" (README).
            # (Only a connection lost during a commit leaves the outcome open; none is here.)
            bases = self.check_send_answer("send.idem", body, answer, duplicate=False)
            if self.rng.random() < 0.1:
                again = self.http.call("send.idem", "POST", "/v1/records", json=body)
                if self.check_send_answer("send.idem(retry)", body, again, duplicate=True) != bases:
                    self.stats.problem("duplicate answered other offsets", f"{self.name}: {again} vs {bases}")
                self.duplicates_checked += 1
            for b, base in zip(body["batches"], bases):
                seq[b["partition"]] = b["base_sequence"] + len(b["records"])
                self.acked.extend((b["partition"], base + i, r["value"]) for i, r in enumerate(b["records"]))
                self.stats.records["idempotent"] += len(b["records"])


class PlainProducer(Client):
    role = "plain"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acked: list[tuple[int, int, str]] = []
        self.uncertain: list[tuple[int, str]] = []

    def work(self) -> None:
        while self.running():
            body = {"batches": [
                {"topic": DATA_TOPIC, "partition": part,
                 "records": [{"value": self.value()} for _ in range(self.rng.randint(1, 10))]}
                for part in self.pick_partitions()]}
            try:
                answer = self.http.call("send.plain", "POST", "/v1/records", json=body)
            except Failed as e:
                if not e.certain:
                    self.uncertain.extend((b["partition"], r["value"]) for b in body["batches"] for r in b["records"])
                continue
            bases = self.check_send_answer("send.plain", body, answer, duplicate=False)
            for b, base in zip(body["batches"], bases):
                self.acked.extend((b["partition"], base + i, r["value"]) for i, r in enumerate(b["records"]))
                self.stats.records["plain"] += len(b["records"])


class Reader(Client):
    """Tails every partition from offset 0, following next_offset, and checks each page
    against the pages before it: positions and offsets never go backwards, nothing twice."""

    def __init__(self, *args: Any, isolation: str, **kwargs: Any) -> None:
        self.role = "rc" if isolation == "read_committed" else "ru"
        super().__init__(*args, **kwargs)
        self.log = ReaderLog(isolation)
        self.op = "fetch.rc" if isolation == "read_committed" else "fetch.ru"

    def work(self) -> None:
        seen_offsets: dict[int, set[int]] = defaultdict(set)
        while self.running():
            empty = 0
            for part in self.rng.sample(range(DATA_PARTITIONS), DATA_PARTITIONS):
                pos = self.log.position[part]
                try:
                    page = self.http.call(self.op, "GET", f"/v1/topics/{DATA_TOPIC}/partitions/{part}/records",
                                          params={"offset": pos, "isolation": self.log.isolation,
                                                  "max_records": self.rng.randint(1, 100)})
                except Failed:
                    continue
                self.log.fetches += 1
                self.stats.records[f"fetched {self.log.isolation}"] += len(page["records"])
                self.check_page(part, pos, page, seen_offsets[part])
                self.log.position[part] = max(pos, page["next_offset"])
                empty += not page["records"]
            if empty == DATA_PARTITIONS:
                time.sleep(0.01)

    def check_page(self, part: int, pos: int, page: dict, seen: set[int]) -> None:
        rc = self.log.isolation == "read_committed"
        where = f"{self.name} {DATA_TOPIC}/{part} from {pos}"
        if not pos <= page["next_offset"] <= page["high_watermark"]:
            self.stats.problem("reader position went backwards",
                               f"{where}: next_offset {page['next_offset']}, high_watermark {page['high_watermark']}")
        if page["last_stable_offset"] > page["high_watermark"]:  # one snapshot per answer
            self.stats.problem("reader position went backwards",
                               f"{where}: last_stable_offset {page['last_stable_offset']} > "
                               f"high_watermark {page['high_watermark']}")
        history = self.log.seen[part]
        for r in page["records"]:
            order = r["commit_position"] if rc else r["offset"]
            last = (history[-1][1] if rc else history[-1][0]) if history else -1
            if order is None or order < pos or order >= page["next_offset"] or order < last \
                    or (not rc and order == last):
                self.stats.problem("reader saw offsets go backwards",
                                   f"{where}: offset {r['offset']} commit_position {r['commit_position']} "
                                   f"after {history[-1] if history else None}, next_offset {page['next_offset']}")
            if r["offset"] in seen:
                self.stats.problem("reader saw a record twice", f"{where}: offset {r['offset']}")
            if rc and r["commit_position"] is not None and r["commit_position"] < r["offset"]:
                self.stats.problem("commit position before the record", f"{where}: {r}")
            seen.add(r["offset"])
            history.append((r["offset"], r["commit_position"], r["value"]))


class OffsetClient(Client):
    """Commits and fetches its own group's offsets outside transactions, and fetches the
    transactional producers' groups (stable fetch; UNSTABLE_OFFSET_COMMIT is retried)."""

    role = "offsets"

    def __init__(self, *args: Any, txn_groups: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group = f"load-{self.name}-group"
        self.txn_groups = txn_groups
        self.acked: dict[int, int] = {}  # last acknowledged commit per input partition
        self.uncertain: dict[int, set[int]] = defaultdict(set)
        self.observed: dict[str, list[dict[int, int]]] = defaultdict(list)  # txn group -> fetches
        self._counter = 0

    def work(self) -> None:
        while self.running():
            choice = self.rng.random()
            if choice < 0.4:
                self.commit_own()
            elif choice < 0.55:
                self.fetch_own()
            elif self.txn_groups:
                self.fetch_txn_group()
            time.sleep(0.002)

    def commit_own(self) -> None:
        self._counter += 1
        offsets = {p: 1000 * self._counter + p
                   for p in self.rng.sample(range(INPUT_PARTITIONS), self.rng.randint(1, INPUT_PARTITIONS))}
        try:
            answer = self.http.call("offsets.commit", "POST", f"/v1/groups/{self.group}/offsets", json={
                "offsets": [{"topic": INPUT_TOPIC, "partition": p, "offset": o} for p, o in offsets.items()]})
        except Failed as e:
            if not e.certain:
                for p, o in offsets.items():
                    self.uncertain[p].add(o)
            return
        self.acked.update(offsets)
        for p in offsets:
            self.uncertain.pop(p, None)
        got = {o["partition"]: o["offset"] for o in answer["offsets"]}
        if not self.matches(got):
            self.stats.problem("group offsets differ from the last commit",
                               f"{self.name} {self.group}: committed {self.acked}, answer {got}")

    def matches(self, got: dict[int, int]) -> bool:
        """Whether `got` can be this group's offsets: the last acknowledged commit of each
        partition, or one whose answer was lost after it."""
        return all(got.get(p) == self.acked.get(p) or got.get(p) in self.uncertain.get(p, ())
                   for p in range(INPUT_PARTITIONS)) and set(got) <= set(range(INPUT_PARTITIONS))

    def fetch_own(self) -> None:
        try:
            answer = self.http.call("offsets.fetch", "GET", f"/v1/groups/{self.group}/offsets")
        except Failed:
            return
        got = {o["partition"]: o["offset"] for o in answer["offsets"]}
        if not self.matches(got):
            self.stats.problem("group offsets differ from the last commit",
                               f"{self.name} {self.group}: committed {self.acked}, fetched {got}")

    def fetch_txn_group(self) -> None:
        group = self.rng.choice(self.txn_groups)
        params = {"wait_ms": 200} if self.rng.random() < 0.3 else None
        try:
            answer = self.http.call("offsets.fetch.txn", "GET", f"/v1/groups/{group}/offsets", params=params)
        except Failed:
            return
        got = {o["partition"]: o["offset"] for o in answer["offsets"]}
        history = self.observed[group]
        if history:
            back = {p: (history[-1][p], o) for p, o in got.items() if p in history[-1] and o < history[-1][p]}
            gone = set(history[-1]) - set(got)
            if back or gone:
                self.stats.problem("group offsets went backwards",
                                   f"{self.name} {group}: {history[-1]} then {got}")
        history.append(got)


ROLE_CLASSES = {"txn": TransactionalProducer, "idem": IdempotentProducer, "plain": PlainProducer,
                "offsets": OffsetClient}


# --- the run --------------------------------------------------------------------------------


@dataclass
class LoadResult:
    seconds: float
    clients: list[Client]
    stats: Stats
    problems: dict[str, list[str]]
    servers: int
    seed: int

    def of(self, cls: type) -> list:
        return [c for c in self.clients if isinstance(c, cls)]


def start_servers(launcher: Any, n: int, **settings: Any) -> list[Any]:
    """n `serve` processes on the launcher's database, ready. The first one alone (on SQLite
    it migrates the new file; see test_sqlite_multiprocess for why not all at once), then
    the others together.

    Each keeps an idle connection 60 s (the default is 5) where the clients close theirs at 4 s:
    a client thread frozen by the machine between taking a pooled connection and writing on it
    would otherwise write on a connection its server has just closed, a transport error that
    is HTTP/1.1's keep-alive race and not the service's. CI met it twice, with the 4-s expiry
    in place the second time: one server's access log then showed no request for 5.4 s of the
    10-s run, and the failed Send came just after."""
    settings.setdefault("http_keep_alive_timeout_s", 60)
    first = launcher.server(**settings)
    others = [launcher.start_server(**settings) for _ in range(n - 1)]
    for s in others:
        s.wait_ready()
    return [first, *others]


def setup_topics(url: str) -> None:
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as c:
        for name, n in ((DATA_TOPIC, DATA_PARTITIONS), (INPUT_TOPIC, INPUT_PARTITIONS)):
            r = c.post("/v1/topics", json={"name": name, "partitions": n})
            assert r.status_code == 201, r.text


def run_load(urls: list[str], *, seconds: float = 12.0, clients: int = 32, seed: int | None = None,
             rotate: bool = False, backend: Any = None) -> LoadResult:
    """Create the topics, run `clients` clients against `urls` for `seconds`, let every
    client finish what it was doing (transactions end committed or aborted), then read the
    final state back and check it. `rotate`: each request goes to a server chosen at random,
    rather than each client keeping to one. `backend` (tests.e2e.conftest.Backend): also
    check the log tables directly (gapless offsets). Never raises on a problem: see
    LoadResult.problems."""
    seed = random.randrange(1_000_000) if seed is None else seed
    setup_topics(urls[0])
    stop = threading.Event()
    roles = role_plan(clients)
    txn_groups = [f"load-txn{i:02d}-group" for i, r in enumerate(roles) if r == "txn"]
    threads: list[Client] = []
    for i, role in enumerate(roles):
        if role in ("rc", "ru"):
            iso = "read_committed" if role == "rc" else "read_uncommitted"
            threads.append(Reader(i, urls, stop, seed, rotate, isolation=iso))
        elif role == "offsets":
            threads.append(OffsetClient(i, urls, stop, seed, rotate, txn_groups=txn_groups))
        else:
            threads.append(ROLE_CLASSES[role](i, urls, stop, seed, rotate))
    assert sorted(t.group for t in threads if isinstance(t, TransactionalProducer)) == sorted(txn_groups)
    t0 = time.monotonic()
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join(RETRY_DEADLINE_S * 3)
    elapsed = time.monotonic() - t0
    stats = Stats()
    for t in threads:
        stats.merge(t.stats)
        if t.is_alive():
            stats.problem("client stuck", f"{t.name} still running {RETRY_DEADLINE_S * 3:.0f}s after the stop")
    result = LoadResult(elapsed, threads, stats, {}, len(urls), seed)
    verify(result, urls[0], backend)
    result.problems = {k: v for k, v in stats.problems.items() if v}
    return result


# --- checking the final state ---------------------------------------------------------------


def _read_all(c: httpx.Client, part: int, isolation: str) -> list[dict]:
    out, pos = [], 0
    while True:
        r = c.get(f"/v1/topics/{DATA_TOPIC}/partitions/{part}/records",
                  params={"offset": pos, "isolation": isolation, "max_records": 10_000})
        assert r.status_code == 200, r.text
        page = r.json()
        out.extend(page["records"])
        if page["next_offset"] >= page["high_watermark"]:
            return out
        pos = page["next_offset"]


def verify(result: LoadResult, url: str, backend: Any = None) -> None:
    """Reads the final state and adds what is wrong to result.stats.problems."""
    problem = result.stats.problem
    txns = [t for c in result.of(TransactionalProducer) for t in c.txns]
    expected: dict[tuple[int, int], str] = {}  # read_committed must hold exactly these
    written: dict[tuple[int, int], str] = {}  # read_uncommitted too: every acked record
    for c in (*result.of(PlainProducer), *result.of(IdempotentProducer)):
        for p, o, v in c.acked:
            expected[(p, o)] = v
    for t in txns:
        for p, o, v in t.records:
            written[(p, o)] = v
            if t.outcome == "committed":
                expected[(p, o)] = v
    written.update(expected)
    maybe = {v for c in (*result.of(PlainProducer), *result.of(IdempotentProducer)) for _, v in c.uncertain}
    uncertain_txns = [t for t in txns if t.outcome == "uncertain"]
    maybe |= {v for t in uncertain_txns for _, _, v in t.records} | {v for t in uncertain_txns for _, v in t.unacked}
    aborted = {v for t in txns if t.outcome == "aborted" for v in [*(x[2] for x in t.records), *(x[1] for x in t.unacked)]}
    if open_ := [t for t in txns if t.outcome == "open"]:
        problem("client left a transaction open", f"{len(open_)}: {open_[:3]}")

    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as c:
        # Transactions whose markers are left to a coordinator worker (complete_inline off):
        # give the workers time to finish them before the final reads.
        deadline = time.monotonic() + RETRY_DEADLINE_S
        while time.monotonic() < deadline and c.get("/v1/transactions", params={
                "state": ["PrepareCommit", "PrepareAbort"]}).json()["transactions"]:
            time.sleep(0.1)
        rc = {p: _read_all(c, p, "read_committed") for p in range(DATA_PARTITIONS)}
        ru = {p: _read_all(c, p, "read_uncommitted") for p in range(DATA_PARTITIONS)}
        desc = c.get(f"/v1/topics/{DATA_TOPIC}").json()
        unfinished = c.get("/v1/transactions", params={"state": ["Ongoing", "PrepareCommit", "PrepareAbort"]}).json()
        group_answers = {}
        for g in [t.group for t in result.of(TransactionalProducer)] + [o.group for o in result.of(OffsetClient)]:
            r = c.get(f"/v1/groups/{g}/offsets")
            group_answers[g] = r.json() if r.status_code == 200 else r.text

    # --- read_committed: exactly the acknowledged records and committed transactions ------
    got = {(p, r["offset"]): r["value"] for p, recs in rc.items() for r in recs}
    values = Counter(got.values())
    for v, n in values.items():
        if n > 1:
            problem("duplicate record in read_committed", f"{v} {n} times")
    missing = [(k, v) for k, v in expected.items() if got.get(k) != v]
    for k, v in missing[:20]:
        problem("acknowledged record missing from read_committed", f"{DATA_TOPIC}/{k[0]}@{k[1]}: want {v!r}, "
                f"read {got.get(k)!r}")
    if len(missing) > 20:
        problem("acknowledged record missing from read_committed", f"... {len(missing)} in all")
    for k, v in got.items():
        if k in expected:
            continue
        if v in aborted:
            problem("aborted record in read_committed", f"{DATA_TOPIC}/{k[0]}@{k[1]}: {v}")
        elif v not in maybe:
            problem("unacknowledged record in read_committed", f"{DATA_TOPIC}/{k[0]}@{k[1]}: {v}")
    for t in uncertain_txns:  # outcome unknown to the client: all or nothing still
        vals = [v for _, _, v in t.records]
        shown = [v for v in vals if v in values]
        if shown and len(shown) != len(vals):
            problem("transaction partly visible", f"{t.client} txn {t.txn_id}: {len(shown)} of {len(vals)}")
    for p, recs in rc.items():
        cps = [r["commit_position"] for r in recs]
        if cps != sorted(cps) or any(r["commit_position"] < r["offset"] for r in recs):
            problem("final read_committed out of commit order", f"{DATA_TOPIC}/{p}")

    # --- read_uncommitted: every acknowledged record at its offset, aborted ones included ---
    got_ru = {(p, r["offset"]): r["value"] for p, recs in ru.items() for r in recs}
    bad = [(k, v, got_ru.get(k)) for k, v in written.items() if got_ru.get(k) != v]
    for k, v, g in bad[:20]:
        problem("acknowledged record missing from read_uncommitted", f"{DATA_TOPIC}/{k[0]}@{k[1]}: want {v!r}, read {g!r}")
    # --- nothing left open --------------------------------------------------------------
    for p in desc["partitions"]:
        if p["last_stable_offset"] != p["log_end_offset"]:
            problem("transaction left open", f"{DATA_TOPIC}/{p['partition']}: {p}")
    if unfinished.get("transactions"):
        problem("transaction left open", str(unfinished["transactions"][:5]))

    # --- the readers saw what the final log says, without skipping ---------------------
    data_offsets = {p: [r["offset"] for r in recs] for p, recs in ru.items()}
    committed_stream = {p: [(r["offset"], r["commit_position"], r["value"]) for r in recs] for p, recs in rc.items()}
    for reader in result.of(Reader):
        for p in range(DATA_PARTITIONS):
            seen, end = reader.log.seen[p], reader.log.position[p]
            if reader.log.isolation == "read_uncommitted":
                # A record's state and commit position may change after it was read (its
                # transaction commits later): offsets and values are what must agree.
                seen = [(o, None, v) for o, _, v in seen]
                want = [(o, None, got_ru[(p, o)]) for o in data_offsets[p] if o < end]
            else:
                want = [x for x in committed_stream[p] if x[1] < end]
            if seen != want:
                first = next((i for i, (a, b) in enumerate(zip(seen, want)) if a != b), min(len(seen), len(want)))
                problem("reader skipped or misread records",
                        f"{reader.name} {DATA_TOPIC}/{p} up to {end}: {len(seen)} read, {len(want)} in the log; "
                        f"first difference at #{first}: read {seen[first:first + 2]}, log {want[first:first + 2]}")
    seen_rc = {v for r in result.of(Reader) if r.log.isolation == "read_committed"
               for recs in r.log.seen.values() for _, _, v in recs}
    if leaked := seen_rc & aborted:
        problem("read_committed reader saw an aborted record", f"{len(leaked)}: {sorted(leaked)[:5]}")

    # --- group offsets: the last committed ones, never an aborted transaction's -------------
    for prod in result.of(TransactionalProducer):
        possible: dict[int, set[int | None]] = defaultdict(lambda: {None})
        staged_ok: dict[int, set[int]] = defaultdict(set)
        for t in prod.txns:
            for p, o in t.offsets.items():
                if t.outcome == "committed":
                    possible[p] = {o}
                    staged_ok[p].add(o)
                elif t.outcome == "uncertain":
                    possible[p] = possible[p] | {o}
                    staged_ok[p].add(o)
        answer = group_answers[prod.group]
        if not isinstance(answer, dict):
            problem("group offsets unreadable after the run", f"{prod.group}: {answer}")
            continue
        final = {o["partition"]: o["offset"] for o in answer["offsets"]}
        for p in range(INPUT_PARTITIONS):
            if final.get(p) not in possible[p]:
                problem("group offsets are not the last committed transaction's",
                        f"{prod.group} {INPUT_TOPIC}/{p}: {final.get(p)}, expected one of {possible[p]}")
        for oc in result.of(OffsetClient):
            for fetched in oc.observed.get(prod.group, []):
                for p, o in fetched.items():
                    if o not in staged_ok[p]:
                        problem("group offsets of an aborted transaction were visible",
                                f"{oc.name} fetched {prod.group} {INPUT_TOPIC}/{p} = {o}")
    for oc in result.of(OffsetClient):
        answer = group_answers[oc.group]
        final = {o["partition"]: o["offset"] for o in answer["offsets"]} if isinstance(answer, dict) else None
        if final is None or not oc.matches(final):
            problem("group offsets differ from the last commit", f"{oc.group}: {answer}, committed {oc.acked}")

    # --- the tables themselves ---------------------------------------------------------
    if backend is not None:
        try:
            backend.assert_logs_gapless()
        except AssertionError as e:
            problem("log offsets not gapless", str(e))


# --- problems by behaviour ------------------------------------------------------------------

# What each behaviour's test asserts: the problem kinds recorded above (Stats.problem).
BEHAVIOURS: dict[str, tuple[str, ...]] = {
    "only documented retriable errors": (
        "error answer not documented as retriable", "5xx other than 503 STORAGE_UNAVAILABLE",
        "'database is locked' reached a client other than as 503", "retriable answer without Retry-After",
        "retriable error persisted", "transport error"),
    "answers match the requests": (
        "wrong Send answer", "duplicate answered other offsets", "wrong Commit/Abort answer"),
    "nothing lost or duplicated": (
        "acknowledged record missing from read_committed", "duplicate record in read_committed",
        "unacknowledged record in read_committed", "transaction partly visible",
        "final read_committed out of commit order", "acknowledged record missing from read_uncommitted"),
    "aborted records never visible": (
        "aborted record in read_committed", "read_committed reader saw an aborted record"),
    "readers never go backwards or skip": (
        "reader position went backwards", "reader saw offsets go backwards", "reader saw a record twice",
        "commit position before the record", "reader skipped or misread records"),
    "group offsets are the last committed": (
        "group offsets differ from the last commit", "group offsets went backwards",
        "group offsets of an aborted transaction were visible",
        "group offsets are not the last committed transaction's", "group offsets unreadable after the run"),
    "logs gapless": ("log offsets not gapless",),
    "no transaction left open": ("transaction left open", "client left a transaction open"),
}


@dataclass
class Run:
    """A finished load run, for the tests that check it one behaviour at a time."""

    result: LoadResult
    backend: Any  # tests.e2e.conftest.Backend
    launcher: Any  # tests.e2e.conftest.Launcher

    def check(self, behaviour: str | None) -> None:
        found = problems_of(self.result, behaviour)
        assert not found, (
            f"[{self.backend.name}, seed {self.result.seed}] {behaviour or 'other problems'}:\n"
            f"{format_problems(found)}\n\nprocess logs:\n{self.launcher.report()[-12000:]}"
        )


def problems_of(result: LoadResult, behaviour: str | None) -> dict[str, list[str]]:
    """The problems a behaviour's test asserts; None: every kind no behaviour names (client
    crashes, a server process that died …)."""
    if behaviour is None:
        named = {k for kinds in BEHAVIOURS.values() for k in kinds}
        return {k: v for k, v in result.problems.items() if k not in named}
    return {k: v for k, v in result.problems.items() if k in BEHAVIOURS[behaviour]}


# --- figures --------------------------------------------------------------------------------


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * len(xs)) - 1))] if xs else float("nan")


def summary(result: LoadResult, title: str) -> str:
    s = result.stats
    secs = result.seconds
    requests = sum(len(v) for v in s.latencies.values())
    lines = [f"== {title}: {len(result.clients)} clients "
             f"({', '.join(f'{n} {r}' for r, n in Counter(c.role for c in result.clients).items())}), "
             f"{result.servers} server process(es), {secs:.1f} s, seed {result.seed}",
             f"requests: {requests} ({requests / secs:.0f}/s); retries {sum(s.retries.values())}; "
             f"503s naming '{LOCKED}': {s.locked_503}"]
    lines.append("records/s: " + ", ".join(f"{k} {n / secs:.0f}" for k, n in sorted(s.records.items())
                                           if not k.startswith(("transactions", "begin"))))
    lines.append("counts: " + ", ".join(f"{k} {n}" for k, n in sorted(s.records.items())))
    dup = sum(getattr(c, "duplicates_checked", 0) for c in result.clients)
    lines.append(f"deliberate duplicate Sends answered: {dup}")
    if s.errors:
        lines.append("error answers (operation, status, code: count): " + ", ".join(
            f"{op} {st} {code}: {n}" for (op, st, code), n in sorted(s.errors.items(), key=str)))
    else:
        lines.append("error answers: none")
    lines.append(f"{'operation':<18}{'count':>8}{'per s':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for op, xs in sorted(s.latencies.items()):
        lines.append(f"{op:<18}{len(xs):>8}{len(xs) / secs:>8.0f}{_pct(xs, .5) * 1e3:>9.1f}"
                     f"{_pct(xs, .99) * 1e3:>9.1f}{max(xs) * 1e3:>9.1f}")
    if result.problems:
        lines.append("PROBLEMS:")
        for k, v in result.problems.items():
            lines.append(f"  {k} ({len(v)}):")
            lines.extend(f"    {x[:1500]}" for x in v[:10])
    else:
        lines.append("problems: none")
    return "\n".join(lines)


def format_problems(problems: dict[str, list[str]]) -> str:
    return "\n".join(f"{k} ({len(v)}):\n  " + "\n  ".join(x[:1500] for x in v[:10]) for k, v in problems.items())


def add_terminal_summary(config: Any, text: str) -> None:
    """Show `text` in pytest's terminal summary (visible without -s), and print it now
    (captured: shown with a failing test's output, or at once with -s)."""
    print("\n" + text)
    name = "outbox-load-figures"
    plugin = config.pluginmanager.get_plugin(name)
    if plugin is None:
        class _Figures:
            texts: list[str] = []

            def pytest_terminal_summary(self, terminalreporter: Any) -> None:
                terminalreporter.section("load figures")
                for t in self.texts:
                    terminalreporter.write_line(t)

        plugin = _Figures()
        plugin.texts = []
        config.pluginmanager.register(plugin, name)
    plugin.texts.append(text)


# --- the script -----------------------------------------------------------------------------


def provisioned(backend_name: str, tmp: Path) -> Any:
    """A fresh database, as the `backend` fixture makes it (tests/e2e/conftest.py)."""
    from tests.e2e.conftest import provisioned as provision

    return provision(backend_name, tmp, prefix="outbox_load")


def main(argv: list[str] | None = None) -> int:
    from app.settings import OTHER_BACKENDS_SETTINGS
    from tests.e2e.conftest import Launcher

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--servers", type=int, default=2, help="`serve` processes on the database")
    ap.add_argument("--rotate", action="store_true", help="each request to a random server")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                    help="an OUTBOX_ setting for the servers, e.g. sqlite_busy_timeout_ms=1000 (one of a "
                    "kind of database goes to that kind's servers only)")
    args = ap.parse_args(argv)
    given = dict(s.split("=", 1) for s in args.setting)
    failed = False
    for name in (["sqlite", "postgresql"] if args.backend == "both" else [args.backend]):
        # The servers refuse the other kind's settings, which would do nothing there.
        other = OTHER_BACKENDS_SETTINGS["postgresql" if name == "sqlite" else "sqlite"]
        settings = {k: v for k, v in given.items() if k.lower() not in other}
        with tempfile.TemporaryDirectory(prefix="outbox-load-") as tmp, provisioned(name, Path(tmp)) as backend:
            launcher = Launcher(backend)
            try:
                servers = start_servers(launcher, args.servers, **settings)
                result = run_load([s.url for s in servers], seconds=args.seconds, clients=args.clients,
                                  seed=args.seed, rotate=args.rotate, backend=backend)
                dead = [s.label for s in servers if not s.alive()]
                if dead:
                    result.problems["server process died"] = dead
                print(summary(result, name), flush=True)
                logs = "".join(s.log_text() for s in servers)
                print(f"server logs: {logs.count('Traceback')} tracebacks, "
                      f"{logs.lower().count(LOCKED)} lines naming '{LOCKED}'", flush=True)
                if result.problems:
                    failed = True
                    print(launcher.report()[-20000:], file=sys.stderr)
            finally:
                launcher.close()
    return 1 if failed else 0


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parents[2])
    raise SystemExit(main())
