"""Fault injection (issue 5): exactly-once copying while processes are killed with SIGKILL.

Modelled on Kafka's transaction system tests. An input topic of N records over P partitions
is produced beforehand (plain produce). K transactional *copier processes* (this module's
`copier` sub-command, built on `app.client`) consume it as one consumer group and copy each
record of input partition p to output partition p, with the group offsets inside each
transaction (send_offsets_to_transaction). The copiers are spread over two API servers
(`serve` with OUTBOX_RUN_COORDINATOR=false) and a stand-alone `coordinator` process completes
transactions and runs the log cleaner (every 200 ms). While they copy, a *trimmer* thread asks
a server, every half second, to delete what the copiers' group has consumed of the input
(DeleteRecords with `consumed_by`, the outbox's way to keep a log short), so the input's log
start moves up under the copiers and the cleaner, killed with the coordinator, deletes below
it. While they run, a fault loop kill -9s, then restarts, one of: a copier, a
server (restarted on the same port, so URLs stay stable; one server down at a time), the
coordinator, or, on PostgreSQL, the database: its connections terminated
(pg_terminate_backend), or with --pg-restart a real `pg_ctlcluster … restart` of the server
(off by default: other test sessions share that server). Kinds are dealt from a shuffled deck, so every kind is hit once
per round; gaps between faults are uniform in [0.5, 1.5] / fault-rate. Servers start with
OUTBOX_COMPLETE_INLINE true or false (the first starts alternate, restarts toss a coin), so
commits are completed both inside the Commit request and by the coordinator process. A copier
that meets a fatal error (fenced, say) exits and is restarted like a crashed one. Meanwhile a
read_committed verifier thread tails every output partition and records every record it is
given.

At the end (faults stopped, everything restarted, copiers left to finish until the group's
committed offsets reach the input's end offsets, with a deadline) the run is checked
(`check_outcome`, `check_poll`):

- every input record is in the output exactly once and nothing else is (exact values);
- output partition p holds input partition p's values in input order;
- the verifier's records, concatenated, are exactly the final read_committed output: nothing
  it was shown is missing from it (a record of an aborted or open transaction: *aborted
  read*), nothing of it was never shown (a *skip*), and no poll went backwards
  (*nonmonotonic*: next_offset below the position, a commit point before the position, a
  high watermark lower than one seen before);
- every copier transaction in the output is whole (the record counts its copier declared
  just before Commit), and every transaction whose Commit was acknowledged is in it;
- the copiers' input polls were gapless (the input is plain records: offsets P, P+1, …);
- the group's committed offsets equal the input's end offsets; every log is gapless from
  its first stored offset, with nothing missing at or past its log start; once the cleaner
  has caught up, nothing is stored below any log start, and every partition's record count
  and size are exactly what is stored.

Run it:

    .venv/bin/python -m tests.e2e.faults --backend postgresql --duration 300 --seed 7 \\
        --fault-rate 0.3 --copiers 3 --records 20000 --partitions 6 [--pg-restart]

It prints a summary table and exits 1 on any violation (2 if the harness itself failed),
printing the seed and the command that repeats the run (the fault schedule and the input
derive from the seed; process timing does not). `tests/e2e/test_fault_injection.py` runs a
short version on both databases as part of the normal suite.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable

INPUT, OUTPUT, GROUP = "fi-in", "fi-out", "fi-copiers"

# Copier exit codes.
EXIT_OK, EXIT_FATAL, EXIT_RETRIABLE, EXIT_CRASH = 0, 3, 4, 5


# =============================================================================================
# Checking: pure functions over what was seen, unit-tested with fabricated violations.
# =============================================================================================


@dataclass(frozen=True, slots=True)
class Seen:
    """One record a read_committed reader was given."""

    offset: int
    commit_position: int
    value: Any


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def check_poll(partition: int, position: int, page: dict) -> list[str]:
    """Violations in one read_committed fetch from `position` (guarantees 3 and 6)."""
    out: list[str] = []
    nxt = page.get("next_offset")
    where = f"{OUTPUT}/{partition} poll from {position}"
    if not isinstance(nxt, int) or nxt < position:
        out.append(f"nonmonotonic: {where} answered next_offset {nxt}")
    last_cp = None
    for r in page.get("records", []):
        cp, off = r.get("commit_position"), r.get("offset")
        if cp is None or cp < position:
            out.append(f"nonmonotonic: {where} returned offset {off} with commit_position {cp}")
        if cp is not None and off is not None and off > cp:
            out.append(f"bad record: {where} returned offset {off} after its commit_position {cp}")
        if last_cp is not None and cp is not None and cp < last_cp:
            out.append(f"nonmonotonic: {where} commit positions go back ({last_cp} then {cp})")
        last_cp = cp if cp is not None else last_cp
    if last_cp is not None and isinstance(nxt, int) and nxt <= last_cp:
        out.append(f"nonmonotonic: {where} answered next_offset {nxt} <= commit point {last_cp} it returned")
    return out


@dataclass
class Outcome:
    """What `check_outcome` found: counts for the summary and the violations, in words."""

    records_in: int = 0
    records_out: int = 0
    duplicates: int = 0
    lost: int = 0
    extra: int = 0
    order_violations: int = 0
    aborted_reads: int = 0
    skipped: int = 0
    poll_violations: int = 0
    txn_violations: int = 0
    input_poll_violations: int = 0
    offsets_ok: bool = False
    violations: list[str] = field(default_factory=list)

    def add(self, what: str, limit: int = 30) -> None:
        if len(self.violations) < limit:
            self.violations.append(what)
        elif len(self.violations) == limit:
            self.violations.append("… (more violations left out)")


def check_outcome(
    *,
    inputs: dict[int, list[Any]],
    final: dict[int, list[Seen]],
    seen: dict[int, list[Seen]],
    poll_violations: Iterable[str] = (),
    declared: dict[str, dict[int, int]] | None = None,
    acknowledged: Iterable[str] = (),
    input_poll_violations: Iterable[str] = (),
    group_offsets: dict[int, int] | None = None,
    input_ends: dict[int, int] | None = None,
) -> Outcome:
    """Check a finished run.

    inputs: input partition -> its values in offset order. final: output partition -> the
    read_committed output read from 0 after the run. seen: output partition -> what the
    verifier was given during the run, in order. Output values are {"src": input value,
    "in": input offset, "tag": transaction tag}. declared: tag -> {partition: records} as the
    copier announced before calling Commit; acknowledged: tags whose Commit answered success.
    """
    o = Outcome()
    declared = declared or {}
    o.records_in = sum(len(v) for v in inputs.values())
    o.records_out = sum(len(v) for v in final.values())

    # Exactly once, exact values: each input value's occurrences over the whole output.
    where_in: dict[str, tuple[int, int]] = {}
    for p, values in inputs.items():
        for i, v in enumerate(values):
            where_in[_key(v)] = (p, i)
    count: Counter[str] = Counter()
    for p, recs in sorted(final.items()):
        for r in recs:
            src = r.value.get("src") if isinstance(r.value, dict) else None
            k = _key(src)
            if k not in where_in:
                o.extra += 1
                o.add(f"extra: {OUTPUT}/{p} offset {r.offset} holds {r.value!r}, not an input record")
                continue
            if where_in[k][0] != p:
                o.extra += 1
                o.add(f"misrouted: input {where_in[k]} found in output partition {p} at offset {r.offset}")
            count[k] += 1
    for k, (p, i) in where_in.items():
        c = count[k]
        if c == 0:
            o.lost += 1
            o.add(f"lost: input {INPUT}/{p} offset {i} ({k}) is not in the output")
        elif c > 1:
            o.duplicates += c - 1
            o.add(f"duplicate: input {INPUT}/{p} offset {i} ({k}) is in the output {c} times")

    # Order: output partition p is input partition p, value for value.
    for p in sorted(set(inputs) | set(final)):
        got = [_key(r.value.get("src") if isinstance(r.value, dict) else None) for r in final.get(p, [])]
        want = [_key(v) for v in inputs.get(p, [])]
        if got != want:
            o.order_violations += 1
            n = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            o.add(f"order: {OUTPUT}/{p} differs from {INPUT}/{p} first at index {n} "
                  f"({len(got)} records out, {len(want)} in): "
                  f"got {got[n] if n < len(got) else 'nothing'}, want {want[n] if n < len(want) else 'nothing'}")

    # What the verifier saw against the final committed output.
    for p in sorted(set(final) | set(seen)):
        fin = final.get(p, [])
        saw = seen.get(p, [])
        fin_at = {r.offset: r for r in fin}
        saw_at: dict[int, Seen] = {}
        for r in saw:
            f = fin_at.get(r.offset)
            if f is None or _key(f.value) != _key(r.value):
                o.aborted_reads += 1
                o.add(f"aborted read: {OUTPUT}/{p} offset {r.offset} (commit_position {r.commit_position}) "
                      f"was returned with {r.value!r} but is "
                      f"{'not in the committed output' if f is None else f'committed as {f.value!r}'}")
            elif f.commit_position != r.commit_position:
                o.aborted_reads += 1
                o.add(f"moved: {OUTPUT}/{p} offset {r.offset} was returned at commit_position "
                      f"{r.commit_position}, committed at {f.commit_position}")
            if r.offset in saw_at:
                o.poll_violations += 1
                o.add(f"returned twice: {OUTPUT}/{p} offset {r.offset}")
            saw_at[r.offset] = r
        for r in fin:
            if r.offset not in saw_at:
                o.skipped += 1
                o.add(f"skipped: {OUTPUT}/{p} offset {r.offset} (commit_position {r.commit_position}) "
                      f"is committed but the tailing reader was never given it")
        if [(r.offset, _key(r.value)) for r in saw] != [(r.offset, _key(r.value)) for r in fin] \
                and not any(r.offset not in fin_at for r in saw) and not any(r.offset not in saw_at for r in fin):
            o.poll_violations += 1
            o.add(f"reordered: {OUTPUT}/{p}: the tailing reader got the committed records in another order")

    for v in poll_violations:
        o.poll_violations += 1
        o.add(v)
    for v in input_poll_violations:
        o.input_poll_violations += 1
        o.add(v)

    # Transactions: whole (the counts declared before Commit), acknowledged ones present.
    by_tag: dict[str, Counter[int]] = defaultdict(Counter)
    for p, recs in final.items():
        for r in recs:
            tag = r.value.get("tag") if isinstance(r.value, dict) else None
            by_tag[str(tag)][p] += 1
    for tag, got_counts in sorted(by_tag.items()):
        want_counts = declared.get(tag)
        if want_counts is None:
            o.txn_violations += 1
            o.add(f"atomicity: transaction {tag} is in the output but its copier never called Commit for it")
        elif dict(got_counts) != {int(k): v for k, v in want_counts.items() if v}:
            o.txn_violations += 1
            o.add(f"atomicity: transaction {tag} has {dict(sorted(got_counts.items()))} records per output "
                  f"partition, its copier sent {want_counts}")
    for tag in sorted(set(acknowledged)):
        if tag not in by_tag:
            o.txn_violations += 1
            o.add(f"durability: transaction {tag} was acknowledged as committed but is not in the output")

    if group_offsets is not None and input_ends is not None:
        o.offsets_ok = group_offsets == input_ends
        if not o.offsets_ok:
            o.add(f"group offsets {dict(sorted(group_offsets.items()))} != input end offsets "
                  f"{dict(sorted(input_ends.items()))}")
    return o


# =============================================================================================
# The copier process: `python -m tests.e2e.faults copier …`
# =============================================================================================


def _emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def copier_main(argv: list[str]) -> int:
    """Consume-transform-produce, one transaction per poll, until SIGTERM."""
    from app.client import AbortableError, Consumer, FatalError, Producer, RetriableError

    ap = argparse.ArgumentParser(prog="faults copier")
    ap.add_argument("--url", required=True)
    ap.add_argument("--slot", type=int, required=True)
    ap.add_argument("--session-timeout-ms", type=int, default=4000)
    ap.add_argument("--transaction-timeout-ms", type=int, default=10_000)
    ap.add_argument("--max-records", type=int, default=5)
    args = ap.parse_args(argv)

    class CheckedConsumer(Consumer):
        """Checks every input fetch: the input holds plain records only, so a read_committed
        fetch from position P must return offsets P, P+1, … and answer next_offset one past
        the last (or, with nothing returned, at least P).

        A position below the input's log start is reset to it by the consumer, and the fetch
        is then checked from there: the trimmer moves the log start only up to the group's
        committed offset, so what lies below was copied already (a copier meets one when it
        is a stale member whose partition a new owner committed past; the output's exactly-
        once checks would catch a record lost that way)."""

        def __init__(self, *a, **kw):  # type: ignore[no-untyped-def]
            super().__init__(*a, **kw)
            self._reset_to: dict = {}

        def _out_of_range(self, tp, error):  # type: ignore[no-untyped-def]
            before = self._positions[tp]
            super()._out_of_range(tp, error)
            self._reset_to[tp] = self._positions[tp]
            _emit(ev="reset", what=f"{tp[0]}/{tp[1]} from {before} to {self._positions[tp]}")

        def _fetch(self, tp, max_records):  # type: ignore[no-untyped-def]
            start = self._positions[tp]
            self._reset_to.pop(tp, None)
            got = super()._fetch(tp, max_records)
            start = self._reset_to.pop(tp, start)
            offsets = [r.offset for r in got]
            nxt = self._positions[tp]
            if offsets != list(range(start, start + len(offsets))) or nxt < start \
                    or (offsets and nxt != offsets[-1] + 1):
                _emit(ev="violation", what=f"input poll {tp[0]}/{tp[1]} from {start} returned offsets "
                                           f"{offsets[:3]}…{offsets[-3:]} and next_offset {nxt}")
            return got

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    prefix = f"{args.slot}.{os.getpid()}.{uuid.uuid4().hex[:4]}"
    producer = Producer(args.url, f"fi-copier-{args.slot}", transaction_timeout_ms=args.transaction_timeout_ms)
    consumer = None
    n = 0
    try:
        producer.init_transactions()
        consumer = CheckedConsumer(args.url, GROUP, session_timeout_ms=args.session_timeout_ms,
                                   max_records=args.max_records)
        consumer.subscribe([INPUT])
        _emit(ev="started", producer_id=producer.producer_id, epoch=producer.producer_epoch)
        while not stop.is_set():
            records = consumer.poll(timeout_s=0.5)
            if not records:
                continue
            n += 1
            tag = f"{prefix}.{n}"
            producer.begin_transaction()
            try:
                counts: Counter[int] = Counter()
                for r in records:
                    producer.send(OUTPUT, {"src": r.value, "in": r.offset, "tag": tag}, partition=r.partition)
                    counts[r.partition] += 1
                producer.flush()
                producer.send_offsets_to_transaction(consumer.position_offsets(), consumer.group_metadata())
                _emit(ev="commit", tag=tag, n={str(p): c for p, c in sorted(counts.items())})
                producer.commit_transaction()
                _emit(ev="committed", tag=tag)
            except AbortableError as e:
                _emit(ev="abort", tag=tag, error=e.error_code)
                producer.abort_transaction()
                consumer.seek_to_committed()
        return EXIT_OK
    except FatalError as e:
        _emit(ev="exit", kind="fatal", error=str(e))
        return EXIT_FATAL
    except RetriableError as e:
        _emit(ev="exit", kind="retriable", error=str(e))
        return EXIT_RETRIABLE
    except Exception as e:  # noqa: BLE001 - a crash: the harness restarts us
        _emit(ev="exit", kind="crash", error=f"{type(e).__name__}: {e}")
        traceback.print_exc()
        return EXIT_CRASH
    finally:
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001
                pass
        producer.close()


# =============================================================================================
# The verifier: a read_committed reader tailing every output partition.
# =============================================================================================


class Verifier(threading.Thread):
    def __init__(self, url: str, partitions: int, max_records: int = 37) -> None:
        super().__init__(name="fi-verifier", daemon=True)
        from app.client.http import Session

        self._session = Session(url, request_timeout_s=20.0)
        self.partitions = partitions
        self.max_records = max_records
        self.positions = {p: 0 for p in range(partitions)}
        self.high_watermarks = {p: 0 for p in range(partitions)}
        self.seen: dict[int, list[Seen]] = {p: [] for p in range(partitions)}
        self.violations: list[str] = []
        self.polls = 0
        self.errors = 0
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def poll(self, p: int) -> dict:
        from app.client import ClientError

        with self._lock:
            pos = self.positions[p]
            try:
                page = self._session.call(
                    "GET", f"/v1/topics/{OUTPUT}/partitions/{p}/records",
                    params={"offset": pos, "isolation": "read_committed", "max_records": self.max_records},
                    deadline_s=30.0,
                )
            except ClientError:
                self.errors += 1
                return {"records": [], "next_offset": pos, "high_watermark": None}
            self.polls += 1
            self.violations.extend(check_poll(p, pos, page))
            hw = page.get("high_watermark")
            if isinstance(hw, int):
                if hw < self.high_watermarks[p]:
                    self.violations.append(f"nonmonotonic: {OUTPUT}/{p} high watermark went back from "
                                           f"{self.high_watermarks[p]} to {hw}")
                self.high_watermarks[p] = max(hw, self.high_watermarks[p])
            self.seen[p].extend(Seen(r["offset"], r["commit_position"], r["value"]) for r in page["records"])
            # The position never moves back, whatever an answer says (that is reported above).
            self.positions[p] = max(pos, page["next_offset"]) if isinstance(page.get("next_offset"), int) else pos
            return page

    def run(self) -> None:
        while not self._stop_event.is_set():
            got = 0
            for p in range(self.partitions):
                got += len(self.poll(p)["records"])
            if not got:
                self._stop_event.wait(0.1)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(60)

    def catch_up(self, deadline_s: float = 120.0) -> None:
        """After the run: poll every partition until it has reached the high watermark."""
        end = time.monotonic() + deadline_s
        for p in range(self.partitions):
            while True:
                if time.monotonic() > end:
                    raise TimeoutError(f"the verifier did not catch up with {OUTPUT}/{p} in {deadline_s}s")
                page = self.poll(p)
                hw = page.get("high_watermark")
                if not page["records"] and hw is not None and self.positions[p] >= hw:
                    break

    def close(self) -> None:
        self._session.close()


def read_final(url: str, partitions: int) -> dict[int, list[Seen]]:
    """The committed output, read from 0 with a fresh reader."""
    from app.client.http import Session

    s = Session(url)
    out: dict[int, list[Seen]] = {}
    try:
        for p in range(partitions):
            recs: list[Seen] = []
            pos = 0
            while True:
                page = s.call("GET", f"/v1/topics/{OUTPUT}/partitions/{p}/records",
                              params={"offset": pos, "isolation": "read_committed", "max_records": 5000})
                recs.extend(Seen(r["offset"], r["commit_position"], r["value"]) for r in page["records"])
                if not page["records"] and page["next_offset"] >= page["high_watermark"]:
                    break
                pos = max(pos, page["next_offset"])
            out[p] = recs
    finally:
        s.close()
    return out


# =============================================================================================
# The harness: processes, faults, the run.
# =============================================================================================


@dataclass
class Config:
    backend: str = "sqlite"
    duration_s: float = 40.0
    seed: int = 0
    fault_rate: float = 0.3          # faults per second, on average (gaps uniform in [0.5, 1.5]/rate)
    copiers: int = 3
    records: int = 2000
    partitions: int = 4
    servers: int = 2
    max_records: int = 5             # records per copier poll, hence per transaction
    session_timeout_ms: int = 4000
    transaction_timeout_ms: int = 10_000
    complete_inline: str = "mixed"   # "true", "false", or "mixed": chosen at random per server start
    pg_restart: bool = False         # PostgreSQL faults include real server restarts
    pg_restart_max: int = 1          # at most this many real restarts per run
    drain_timeout_s: float = 180.0
    coordinator_interval_ms: int = 100
    cleaner_interval_ms: int = 200
    trim: bool = True                # DeleteRecords consumed_by the copiers' group, while they copy

    def command(self) -> str:
        args = ["python", "-m", "tests.e2e.faults", "--backend", self.backend,
                "--duration", f"{self.duration_s:g}", "--seed", str(self.seed),
                "--fault-rate", f"{self.fault_rate:g}", "--copiers", str(self.copiers),
                "--records", str(self.records), "--partitions", str(self.partitions),
                "--servers", str(self.servers), "--max-records", str(self.max_records),
                "--complete-inline", self.complete_inline]
        if not self.trim:
            args.append("--no-trim")
        if self.pg_restart:
            args += ["--pg-restart", "--pg-restart-max", str(self.pg_restart_max)]
        return " ".join(shlex.quote(a) for a in args)


@dataclass
class RunResult:
    config: Config
    outcome: Outcome
    stats: Counter
    wall_s: float
    fault_s: float
    drain_s: float
    log_dir: Path
    harness_error: str | None = None
    events: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.harness_error is None and not self.outcome.violations

    def summary(self) -> str:
        c, o, s = self.config, self.outcome, self.stats
        rows = [
            ("backend", c.backend),
            ("seed", c.seed),
            ("faults / s, duration", f"{c.fault_rate:g} / s for {c.duration_s:g} s"),
            ("copiers, servers, partitions", f"{c.copiers}, {c.servers}, {c.partitions}"),
            ("complete_inline", c.complete_inline),
            ("records in", o.records_in),
            ("records out", o.records_out),
            ("records copied when faults stopped", s["copied_at_fault_end"]),
            ("all copied after (s of faults)", s.get("copy_done_s", "-")),
            ("duplicates", o.duplicates),
            ("lost", o.lost),
            ("extra / misrouted", o.extra),
            ("partitions out of order", o.order_violations),
            ("aborted reads", o.aborted_reads),
            ("nonmonotonic / bad polls", o.poll_violations),
            ("skipped by the tailing reader", o.skipped),
            ("input polls with gaps", o.input_poll_violations),
            ("input positions reset to the log start", s["input_resets"]),
            ("transactions not whole / lost", o.txn_violations),
            ("group offsets == input ends", "yes" if o.offsets_ok else "NO"),
            ("verifier polls (errors)", f"{s['verifier_polls']} ({s['verifier_errors']})"),
            ("kills: copier", s["kill_copier"]),
            ("kills: server", s["kill_server"]),
            ("kills: coordinator", s["kill_coordinator"]),
            ("db faults: connections terminated", s["db_terminate"]),
            ("db faults: server restarts", s["db_restart"]),
            ("copier exits: fatal / retriable / crash", f"{s['exit_fatal']} / {s['exit_retriable']} / {s['exit_crash']}"),
            ("server starts (inline / worker-completed)", f"{s['server_inline']} / {s['server_not_inline']}"),
            ("transactions committed (COMMIT markers)", s["txn_committed"]),
            ("transactions aborted (ABORT markers)", s["txn_aborted"]),
            ("commits acknowledged to copiers", s["acked"]),
            ("aborts called by copiers", s["copier_aborts"]),
            ("wall time", f"{self.wall_s:.1f} s (faults {self.fault_s:.1f} s, drain {self.drain_s:.1f} s)"),
            ("logs", str(self.log_dir)),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"fault injection: {c.command()}"]
        lines += [f"  {k.ljust(width)}  {v}" for k, v in rows]
        if self.harness_error:
            lines.append(f"HARNESS ERROR (seed {c.seed}): {self.harness_error}")
        if o.violations:
            lines.append(f"VIOLATIONS (seed {c.seed}; repeat with: {c.command()}):")
            lines += [f"  - {v}" for v in o.violations]
        lines.append(f"RESULT: {'OK' if self.ok else 'FAIL'} (seed {c.seed})")
        return "\n".join(lines)


def failure_report(result: RunResult, tail_lines: int = 8) -> str:
    """The summary, the run's events and the last lines of each copier log."""
    parts = [result.summary(), "events:", *result.events[-200:]]
    for path in sorted(result.log_dir.glob("fi-*-copier-*.log")):
        lines = path.read_text(errors="replace").strip().splitlines()
        parts.append(f"--- {path.name}")
        parts += lines[-tail_lines:]
    return "\n".join(parts)


class CopierProcess:
    """One copier subprocess, its output (JSON events, one a line) in a log file."""

    def __init__(self, slot: int, url: str, cfg: Config, log_path: Path) -> None:
        self.slot = slot
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in reap()
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "tests.e2e.faults", "copier", "--url", url, "--slot", str(slot),
             "--session-timeout-ms", str(cfg.session_timeout_ms),
             "--transaction-timeout-ms", str(cfg.transaction_timeout_ms),
             "--max-records", str(cfg.max_records)],
            cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def reap(self) -> None:
        if self.alive():
            self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        finally:
            self._log.close()


@dataclass
class Slot:
    kind: str                        # "server", "coordinator", "copier"
    index: int
    port: int | None = None
    proc: Any = None                 # ServiceProcess or CopierProcess
    down_until: float = 0.0          # restart not before this (monotonic)
    starts: int = 0
    killed: bool = False             # the current proc was killed by the fault loop


def parse_copier_logs(paths: Iterable[Path]) -> tuple[dict[str, dict[int, int]], set[str], list[str], Counter]:
    """(declared counts per tag, acknowledged tags, input-poll violations, event counts)."""
    declared: dict[str, dict[int, int]] = {}
    acked: set[str] = set()
    violations: list[str] = []
    counts: Counter = Counter()
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a line cut by SIGKILL
            kind = ev.get("ev")
            counts[kind] += 1
            if kind == "commit":
                declared[ev["tag"]] = {int(p): n for p, n in ev["n"].items()}
            elif kind == "committed":
                acked.add(ev["tag"])
            elif kind == "violation":
                violations.append(f"{path.name}: {ev['what']}")
    return declared, acked, violations, counts


class Harness:
    """One run against a database given as a conftest `Backend`, processes started through a
    conftest `Launcher` (which reaps them)."""

    def __init__(self, cfg: Config, backend: Any, launcher: Any, *, admin_url: str | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg
        self.backend = backend
        self.launcher = launcher
        self.admin_url = admin_url
        # Separate streams, so that restarts (timing-dependent) do not shift the fault schedule.
        self.rng = random.Random(cfg.seed)                    # the fault schedule
        self.input_rng = random.Random(f"{cfg.seed}-input")
        self.settings_rng = random.Random(f"{cfg.seed}-settings")
        self.stats: Counter = Counter()
        self.events: list[str] = []
        self.log_dir = Path(backend.tmp)
        self._log = log or (lambda s: None)
        self._n = 0
        self._t0 = time.monotonic()
        self.copiers: list[Slot] = []
        self.servers: list[Slot] = []
        self.coordinators: list[Slot] = []
        self.copier_procs: list[CopierProcess] = []
        self._db_restarts = 0

    # --- processes ------------------------------------------------------------------------

    def note(self, what: str) -> None:
        line = f"[{time.monotonic() - self._t0:7.2f}s] {what}"
        self.events.append(line)
        self._log(line)

    def _log_path(self, label: str) -> Path:
        self._n += 1
        return self.log_dir / f"fi-{self._n:03d}-{label}.log"

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.servers[i % len(self.servers)].port}"

    def _start(self, slot: Slot) -> None:
        from tests.e2e.conftest import ServiceProcess

        slot.starts += 1
        slot.killed = False
        if slot.kind == "server":
            inline = {"true": True, "false": False}.get(self.cfg.complete_inline)
            if inline is None:  # mixed: the first starts alternate, restarts toss a coin
                inline = slot.index % 2 == 0 if slot.starts == 1 else self.settings_rng.random() < 0.5
            self.stats["server_inline" if inline else "server_not_inline"] += 1
            env = self.launcher.env(complete_inline=inline, run_coordinator=False,
                                    coordinator_interval_ms=self.cfg.coordinator_interval_ms)
            label = f"serve-{slot.port}"
            slot.proc = ServiceProcess(label, ["serve", "--port", str(slot.port)], env,
                                       self._log_path(label), port=slot.port)
            self.launcher.processes.append(slot.proc)
            self.note(f"start server {slot.index} on port {slot.port} (complete_inline={inline})")
        elif slot.kind == "coordinator":
            env = self.launcher.env(coordinator_interval_ms=self.cfg.coordinator_interval_ms,
                                    cleaner_interval_ms=self.cfg.cleaner_interval_ms)
            label = f"coordinator-{slot.index}"
            slot.proc = ServiceProcess(label, ["coordinator"], env, self._log_path(label))
            self.launcher.processes.append(slot.proc)
            self.note(f"start coordinator {slot.index}")
        else:
            label = f"copier-{slot.index}"
            slot.proc = CopierProcess(slot.index, self.url(slot.index), self.cfg, self._log_path(label))
            self.copier_procs.append(slot.proc)
            self.note(f"start copier {slot.index} (pid {slot.proc.proc.pid}) -> {self.url(slot.index)}")

    def _kill(self, slot: Slot, down_s: float) -> None:
        slot.proc.kill9()
        slot.killed = True
        slot.down_until = time.monotonic() + down_s
        self.stats[f"kill_{slot.kind}"] += 1
        self.note(f"kill -9 {slot.kind} {slot.index} (down {down_s:.1f}s)")

    def supervise(self) -> None:
        """Restart whatever is down and due; count copier exits."""
        now = time.monotonic()
        for slot in self.servers + self.coordinators + self.copiers:
            if slot.proc is not None and slot.proc.alive():
                continue
            if slot.proc is not None and not slot.killed:
                code = slot.proc.proc.returncode
                slot.killed = True  # counted once
                if slot.kind == "copier":
                    kind = {EXIT_FATAL: "fatal", EXIT_RETRIABLE: "retriable"}.get(code, "crash")
                    self.stats[f"exit_{kind}"] += 1
                    self.note(f"copier {slot.index} exited with {code} ({kind}); restarting")
                    slot.down_until = now + 0.2
                else:
                    self.stats[f"{slot.kind}_exited"] += 1
                    tail = slot.proc.log_text().strip().splitlines()[-1:] if hasattr(slot.proc, "log_text") else []
                    self.note(f"{slot.kind} {slot.index} exited by itself with {code}; restarting ({tail})")
                    slot.down_until = now + 0.5
            if now >= slot.down_until:
                self._start(slot)

    def db_fault(self) -> None:
        if self.cfg.pg_restart and self._db_restarts < self.cfg.pg_restart_max and self.rng.random() < 0.5:
            version = sorted(os.listdir("/etc/postgresql"))[-1]
            self.note(f"restart PostgreSQL {version}")
            done = subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
                                  capture_output=True, text=True, timeout=120)
            self._db_restarts += 1
            self.stats["db_restart"] += 1
            self.note(f"PostgreSQL restarted (exit {done.returncode}) {done.stderr.strip()[:200]}")
            return
        from sqlalchemy import create_engine, text
        from sqlalchemy.engine import make_url
        from sqlalchemy.pool import NullPool

        name = make_url(self.backend.url).database
        engine = create_engine(self.admin_url, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                n = conn.execute(text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = :db AND pid <> pg_backend_pid()"), {"db": name}).scalar()
                conn.commit()
        except Exception as e:  # noqa: BLE001 - the fault itself is best effort
            self.note(f"pg_terminate_backend failed: {e}")
            return
        finally:
            engine.dispose()
        self.stats["db_terminate"] += 1
        self.note(f"terminated {n} connections to {name}")

    def fault(self, kind: str) -> bool:
        """Inject one fault of `kind`; False if there is nothing to hit right now."""
        if kind == "db":
            self.db_fault()
            return True
        slots = {"copier": self.copiers, "server": self.servers, "coordinator": self.coordinators}[kind]
        up = [s for s in slots if s.proc is not None and s.proc.alive()]
        if kind == "server" and len(up) < len(slots):
            return False  # one server down at a time
        if not up:
            return False
        slot = self.rng.choice(up)
        down = {"copier": (0.0, 1.0), "server": (0.0, 1.5), "coordinator": (0.2, 3.0)}[kind]
        self._kill(slot, self.rng.uniform(*down))
        return True

    def _gap(self) -> float:
        """Seconds to the next fault: 1/rate on average, never more than 1.5/rate, so a short
        run still hits every kind."""
        return self.rng.uniform(0.5, 1.5) / self.cfg.fault_rate

    # --- the run --------------------------------------------------------------------------

    def run(self) -> RunResult:
        from tests.e2e.conftest import free_port

        cfg = self.cfg
        t_start = time.monotonic()
        fault_s = drain_s = 0.0
        outcome = Outcome()
        error = None
        try:
            self.servers = [Slot("server", i, port=free_port()) for i in range(cfg.servers)]
            self.coordinators = [Slot("coordinator", 0)]
            self.copiers = [Slot("copier", i) for i in range(cfg.copiers)]
            # The first server migrates SQLite; the rest start once it is ready.
            self._start(self.servers[0])
            self.servers[0].proc.wait_ready(60)
            for s in self.servers[1:] + self.coordinators:
                self._start(s)
            for s in self.servers[1:]:
                s.proc.wait_ready(60)
            inputs = self._produce_input()
            verifier = Verifier(self.url(0), cfg.partitions)
            verifier.start()
            trimmer = Trimmer(self, cfg.partitions) if cfg.trim else None
            if trimmer is not None:
                trimmer.start()
            for s in self.copiers:
                self._start(s)

            # Faults.
            kinds = ["copier", "copier", "server", "coordinator"] + (["db"] if cfg.backend == "postgresql" else [])
            deck: list[str] = []
            t_faults = time.monotonic()
            end = t_faults + cfg.duration_s
            next_fault = t_faults + self._gap() if cfg.fault_rate > 0 else float("inf")
            next_progress = t_faults + 5
            while time.monotonic() < end:
                self.supervise()
                if time.monotonic() >= next_progress:
                    next_progress += 5
                    copied = self._copied()
                    self.note(f"progress: {copied} of {cfg.records} records copied")
                    if copied == cfg.records and "copy_done_s" not in self.stats:
                        self.stats["copy_done_s"] = round(time.monotonic() - t_faults)
                if time.monotonic() >= next_fault:
                    # Kinds are dealt from a shuffled deck: every kind once per len(kinds) faults.
                    if not deck:
                        deck = kinds[:]
                        self.rng.shuffle(deck)
                    if self.fault(deck[-1]):
                        deck.pop()
                        next_fault = time.monotonic() + self._gap()
                    # else: retried on the next tick
                time.sleep(0.1)
            fault_s = time.monotonic() - t_faults
            self.stats["copied_at_fault_end"] = self._copied()
            if self.stats["copied_at_fault_end"] == cfg.records and "copy_done_s" not in self.stats:
                self.stats["copy_done_s"] = round(fault_s)
            self.note(f"faults stop; {self.stats['copied_at_fault_end']} of {cfg.records} records copied")

            # Drain: everything up, copiers finish.
            t_drain = time.monotonic()
            self._restore_all(t_drain + 120)
            input_ends = self._input_ends()
            group = self._wait_for_group(input_ends, t_drain + cfg.drain_timeout_s)
            if trimmer is not None:
                trimmer.stop()
                self.stats["trims"] = trimmer.trims
                self.stats["input_log_starts"] = trimmer.log_starts
            self._stop_copiers()
            self._wait_settled(time.monotonic() + cfg.transaction_timeout_ms / 1000 + 60)
            verifier.stop()
            verifier.catch_up()
            final = read_final(self.url(0), cfg.partitions)
            drain_s = time.monotonic() - t_drain
            verifier.close()
            self.stats["verifier_polls"] = verifier.polls
            self.stats["verifier_errors"] = verifier.errors

            declared, acked, input_violations, ev_counts = parse_copier_logs(p.log_path for p in self.copier_procs)
            self.stats["acked"] = len(acked)
            self.stats["copier_aborts"] = ev_counts["abort"]
            self.stats["input_resets"] = ev_counts["reset"]
            outcome = check_outcome(
                inputs=inputs, final=final, seen=verifier.seen, poll_violations=verifier.violations,
                declared=declared, acknowledged=acked, input_poll_violations=input_violations,
                group_offsets=group, input_ends=input_ends,
            )
            self._database_checks(outcome)
        except Exception as e:  # noqa: BLE001 - reported with the seed
            error = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
            self.note(f"harness error: {error}")
        finally:
            for s in self.copiers:
                if s.proc is not None:
                    s.proc.reap()
        result = RunResult(cfg, outcome, self.stats, time.monotonic() - t_start, fault_s, drain_s,
                           self.log_dir, error, self.events)
        try:  # kept beside the process logs, whatever happens to the caller's output
            (self.log_dir / "fi-report.txt").write_text(failure_report(result, tail_lines=30))
        except OSError:
            pass
        return result

    def _restore_all(self, deadline: float) -> None:
        """Restart whatever the faults left down, now, and wait for the servers to be ready."""
        for slot in self.servers + self.coordinators + self.copiers:
            slot.down_until = min(slot.down_until, time.monotonic())
        while True:
            self.supervise()
            if all(s.proc is not None and s.proc.alive() for s in self.servers + self.coordinators):
                break
            if time.monotonic() > deadline:
                raise TimeoutError("could not restart every process after the faults")
            time.sleep(0.1)
        from tests.e2e.conftest import ProcessExited

        for s in self.servers:
            while True:
                try:
                    s.proc.wait_ready(max(1.0, deadline - time.monotonic()))
                    break
                except ProcessExited:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
                    self.supervise()

    def _produce_input(self) -> dict[int, list[Any]]:
        import httpx

        from app.client import Producer

        url = self.url(0)
        for name in (INPUT, OUTPUT):
            r = httpx.post(f"{url}/v1/topics", json={"name": name, "partitions": self.cfg.partitions}, timeout=60)
            assert r.status_code == 201, r.text
        inputs: dict[int, list[Any]] = {p: [] for p in range(self.cfg.partitions)}
        producer = Producer(url, batch_records=1000)
        for i in range(self.cfg.records):
            p = self.input_rng.randrange(self.cfg.partitions)
            value = {"p": p, "i": len(inputs[p]), "n": i, "x": self.input_rng.randrange(1 << 30)}
            inputs[p].append(value)
            producer.send(INPUT, value, partition=p)
        producer.flush()
        producer.close()
        self.note(f"produced {self.cfg.records} input records: {[len(v) for v in inputs.values()]}")
        return inputs

    def _session(self):  # type: ignore[no-untyped-def]
        from app.client.http import Session

        return Session(self.url(0), request_timeout_s=60.0)

    def _input_ends(self) -> dict[int, int]:
        s = self._session()
        try:
            desc = s.call("GET", f"/v1/topics/{INPUT}", deadline_s=120)
        finally:
            s.close()
        return {p["partition"]: p["log_end_offset"] for p in desc["partitions"]}

    def _group_offsets(self, s: Any, wait_ms: int = 0, stable: bool = True) -> dict[int, int] | None:
        from app.client import ClientError

        try:
            body = s.call("GET", f"/v1/groups/{GROUP}/offsets",
                          params={"require_stable": "true" if stable else "false", "wait_ms": wait_ms},
                          deadline_s=5)
        except ClientError:
            return None  # unstable (a transaction is completing) or unreachable
        return {o["partition"]: o["offset"] for o in body["offsets"] if o["topic"] == INPUT}

    def _copied(self) -> int | str:
        """Records copied so far (the group's committed offsets), "?" if the server is down."""
        s = self._session()
        try:
            got = self._group_offsets(s, 0, stable=False)
        finally:
            s.close()
        return "?" if got is None else sum(got.values())

    def _wait_for_group(self, ends: dict[int, int], deadline: float) -> dict[int, int]:
        s = self._session()
        last: dict[int, int] | None = None
        try:
            while True:
                self.supervise()
                got = self._group_offsets(s, 1000)
                if got is not None:
                    last = got
                if last == ends:
                    self.note("group offsets reached the input's end offsets")
                    return last
                if time.monotonic() > deadline:
                    self.note(f"drain deadline passed; group offsets {last}, input ends {ends}")
                    return last or {}
                time.sleep(0.2)
        finally:
            s.close()

    def _stop_copiers(self) -> None:
        """SIGTERM (a copier finishes its transaction and leaves the group), then SIGKILL."""
        for s in self.copiers:
            if s.proc is not None and s.proc.alive():
                s.proc.proc.terminate()
        deadline = time.monotonic() + 30
        for s in self.copiers:
            if s.proc is None:
                continue
            try:
                s.proc.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.note(f"copier {s.index} ignored SIGTERM; kill -9")
                s.proc.kill9()
            s.killed = True
            s.down_until = float("inf")

    def _wait_settled(self, deadline: float) -> None:
        """No transaction left open or deciding: no commit point can appear after the final read,
        and no marker is written while the tables are checked. (An open one of a copier that
        had to be killed ends by its timeout.)"""
        from app.client import ClientError

        s = self._session()
        try:
            while time.monotonic() < deadline:
                self.supervise()
                try:
                    body = s.call("GET", "/v1/transactions",
                                  params={"state": ["Ongoing", "PrepareCommit", "PrepareAbort"]}, deadline_s=10)
                except ClientError:
                    time.sleep(0.2)
                    continue
                if not body["transactions"]:
                    return
                time.sleep(0.2)
            self.note("transactions still completing at the settle deadline")
        finally:
            s.close()

    def _database_checks(self, outcome: Outcome) -> None:
        """Straight from the tables: the cleaner caught up below every log start (it runs in the
        coordinator process), every log gapless at and past its log start, the partitions'
        counters exact; transactions per marker type."""
        deadline = time.monotonic() + 60
        while (below := self.backend.below_log_starts()) and time.monotonic() < deadline:
            time.sleep(0.5)
        if below:
            outcome.add(f"rows still stored below the log start after 60 s: {below}")
        self.stats["input_trimmed"] = sum(start for (t, _), (start, _) in self.backend.log_bounds().items()
                                          if t == INPUT)
        for attempt in range(3):  # a few queries, no common snapshot: only a lasting gap counts
            try:
                self.backend.assert_logs_gapless()
                drift = self.backend.counter_drift()
                assert not drift, f"record_count/size_bytes differ from what is stored: {drift}"
                break
            except AssertionError as e:
                if attempt == 2:
                    outcome.add(f"log not gapless, or counters wrong: {e}")
                time.sleep(1)
        markers = self.backend.markers()
        out_markers = [m for m in markers if m[0] == OUTPUT]
        self.stats["txn_committed"] = len({m[4] for m in out_markers if m[3] == "COMMIT"})
        self.stats["txn_aborted"] = len({m[4] for m in out_markers if m[3] == "ABORT"})
        per_partition = Counter((m[1], m[4]) for m in out_markers)
        twice = [k for k, n in per_partition.items() if n > 1]
        if twice:
            outcome.add(f"markers written twice for (partition, txn_id): {twice[:5]}")
        self.backend.dispose()


class Trimmer(threading.Thread):
    """Every half second, DeleteRecords consumed_by the copiers' group on each input partition,
    through whichever server answers: the input's log start follows the group."""

    def __init__(self, harness: Harness, partitions: int) -> None:
        super().__init__(name="fi-trimmer", daemon=True)
        self.harness = harness
        self.partitions = partitions
        self.trims = 0
        self.log_starts = {p: 0 for p in range(partitions)}
        self._stop_event = threading.Event()

    def run(self) -> None:
        import httpx

        while not self._stop_event.wait(0.5):
            for p in range(self.partitions):
                for i in range(len(self.harness.servers)):
                    try:
                        r = httpx.post(f"{self.harness.url(i)}/v1/topics/{INPUT}/partitions/{p}/delete-records",
                                       json={"consumed_by": [GROUP]}, timeout=10)
                    except httpx.TransportError:
                        continue  # that server is down: try another
                    if r.status_code == 200:
                        self.trims += 1
                        self.log_starts[p] = max(self.log_starts[p], r.json()["log_start_offset"])
                    break

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)


def run_with(cfg: Config, backend: Any, launcher: Any, *, admin_url: str | None = None,
             log: Callable[[str], None] | None = None) -> RunResult:
    return Harness(cfg, backend, launcher, admin_url=admin_url, log=log).run()


# =============================================================================================
# The script: creates its own database, runs, prints the summary.
# =============================================================================================


def _script(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.e2e.faults", description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of faults")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--fault-rate", type=float, default=0.3, help="faults per second, on average")
    ap.add_argument("--copiers", type=int, default=3)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--max-records", type=int, default=5, help="records per copier transaction, at most")
    ap.add_argument("--complete-inline", choices=["true", "false", "mixed"], default="mixed")
    ap.add_argument("--pg-restart", action="store_true",
                    help="PostgreSQL faults include real restarts of the (shared!) server")
    ap.add_argument("--pg-restart-max", type=int, default=1)
    ap.add_argument("--drain-timeout", type=float, default=300.0)
    ap.add_argument("--no-trim", action="store_true",
                    help="no DeleteRecords of what the copiers consumed (the input keeps everything)")
    ap.add_argument("--keep", action="store_true", help="keep the database and logs even on success")
    ap.add_argument("--quiet", action="store_true", help="no event lines while running")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    cfg = Config(backend=args.backend, duration_s=args.duration, seed=seed, fault_rate=args.fault_rate,
                 copiers=args.copiers, records=args.records, partitions=args.partitions,
                 servers=args.servers, max_records=args.max_records, complete_inline=args.complete_inline,
                 pg_restart=args.pg_restart, pg_restart_max=args.pg_restart_max,
                 drain_timeout_s=args.drain_timeout, trim=not args.no_trim)

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    from tests.e2e.conftest import ADMIN_URL, CLI_TIMEOUT_S, Backend, Launcher, _base_env

    tmp = Path(tempfile.mkdtemp(prefix=f"faults-{args.backend}-{seed}-"))
    dbname = None
    if args.backend == "sqlite":
        backend = Backend("sqlite", f"sqlite:///{tmp / 'outbox.db'}", tmp)
    else:
        dbname = f"outbox_faults_{uuid.uuid4().hex[:10]}"
        admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{dbname}"'))
        url = make_url(ADMIN_URL).set(database=dbname).render_as_string(hide_password=False)
        backend = Backend("postgresql", url, tmp)
        done = subprocess.run([PYTHON, "-m", "app.cli", "migrate"], cwd=ROOT, env=_base_env(url),
                              capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        if done.returncode != 0:
            print(f"migrate failed:\n{done.stdout}\n{done.stderr}", file=sys.stderr)
            return 2
    launcher = Launcher(backend)
    log = None if args.quiet else (lambda s: print(s, flush=True))
    try:
        result = run_with(cfg, backend, launcher, admin_url=ADMIN_URL, log=log)
    finally:
        launcher.close()
        backend.dispose()
    print(result.summary(), flush=True)
    if dbname is not None and result.ok and not args.keep:
        admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)'))
        admin.dispose()
    elif dbname is not None:
        print(f"database kept: {backend.url}")
    if result.ok and not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        print(f"(run OK: {tmp} removed; --keep keeps the logs and the database)")
    return 0 if result.ok else (2 if result.harness_error else 1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "copier":
        return copier_main(argv[1:])
    return _script(argv)


if __name__ == "__main__":
    sys.exit(main())
