"""Fault injection (the load and fault-injection work): exactly-once copying while processes are killed with SIGKILL.

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
that meets a fatal error (fenced, say) exits and is restarted like a crashed one.

Two more kinds of client write to the same output partitions, and are killed and restarted
the same way (their kinds join the deck):

- *applications* (`tests/e2e/order_app.py`, --apps of them) that append in their own
  database transactions (app.in_database.append, the in-database appends work): each places orders one after
  another, an order being a row of the table `fi_orders` in the log's own database and its
  record, `{"order": n, "app": "app-k"}` keyed "n" with message_id "order-n", to output
  partition n % partitions, committed together; every seventh order is rolled back instead.
  Restarted, an application goes on from the order after the last one it printed, which may
  have committed unprinted (its message_id keeps its record from being published twice). On
  PostgreSQL each one dawdles up to 20 ms between the append and the commit, so that its
  records commit late, after other writers' appends;
- the *shop* of `examples/mariadb_orders.py` (a two-phase commit with a prepared transaction,
  KIP-939; unless --no-shop): its orders live in a MariaDB database of the run's own, its
  events `{"order": n, "total": …}` go to the output topic, and a restart recovers what the
  instance before it prepared. Each instance is also told to kill itself (--crash-at) at one
  step of an order a few orders on, the four steps taking turns, so that the recoveries of an
  order MariaDB committed and of one it did not both happen in a short run.

Meanwhile a read_committed verifier thread tails every output partition and records every
record it is given.

At the end (faults stopped, everything restarted; each application killed and run once more
for five orders, which must end cleanly, and the shop killed and run once more: it recovers
and places three orders; copiers left to finish until the group's committed offsets reach the
input's end offsets, with a deadline) the run is checked (`check_outcome`, `check_poll`):

- every input record is in the output exactly once and nothing else is (exact values);
- output partition p holds input partition p's values in input order;
- the verifier's records, concatenated, are exactly the final read_committed output: nothing
  it was shown is missing from it (a record of an aborted or open transaction: *aborted
  read*), nothing of it was never shown (a *skip*), and no poll went backwards
  (*nonmonotonic*: next_offset below the position, a commit point before the position, a
  high watermark lower than one seen before);
- every copier transaction in the output is whole (the record counts its copier declared
  just before Commit), and every transaction whose Commit was acknowledged is in it;
- applications: every row of `fi_orders` has exactly one record and every application record
  its row (a record of a rolled-back order is called so), every order an application printed
  has its row, each application's records in a partition are in the order it committed them,
  and the verifier was never given a record of a rolled-back order;
- the shop: every order in MariaDB has its event exactly once, with its total, no event exists
  without its order, every order the shop printed is in MariaDB, and no transaction is left
  Prepared once a last run of the shop has recovered;
- the copiers' input polls were gapless (the input is plain records: offsets P, P+1, …);
- the group's committed offsets equal the input's end offsets; every log is gapless from
  its first stored offset, with nothing missing at or past its log start; once the cleaner
  has caught up, nothing is stored below any log start, and every partition's record count
  and size are exactly what is stored.

Run it:

    .venv/bin/python -m tests.e2e.faults --backend postgresql --duration 300 --seed 7 \\
        --fault-rate 0.3 --copiers 3 --records 20000 --partitions 6 --apps 2 [--pg-restart]

(the shop needs MariaDB on 127.0.0.1:3306, root without a password, or --mariadb URL;
--no-shop runs without it, --apps 0 without applications)

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
APP_TABLE = "fi_orders"    # the applications' business rows, in the log's own database
APP_ORDERS = 1_000_000     # application k places orders (k + 1) * APP_ORDERS, +1, …
SHOP_ID = "fi-shop"        # the shop's transactional id
# examples/mariadb_orders.py's --crash-at steps, in the order the shop's instances take them.
SHOP_CRASH_STEPS = ("after-own-commit", "after-prepare", "before-prepare", "after-outbox-commit")

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


def kind_of(value: Any) -> str | None:
    """Who wrote an output record, by its value: a copier ({"src", "in", "tag"}), an
    application ({"order", "app"}), the shop ({"order", "total"}); None for anything else."""
    if isinstance(value, dict):
        if "src" in value:
            return "copier"
        if "app" in value and "order" in value:
            return "app"
        if "total" in value and "order" in value:
            return "shop"
    return None


@dataclass
class Apps:
    """What the in-database applications left: the order ids of `fi_orders`' rows, the orders
    they printed as committed, and their --rollback-every."""

    rows: set[int]
    printed: set[int]
    rollback_every: int


@dataclass
class ShopOrders:
    """What the shop left: MariaDB's orders (id -> total) and the orders it printed as placed."""

    orders: dict[int, int]
    placed: set[int]


def check_poll(partition: int, position: int, page: dict) -> list[str]:
    """Violations in one read_committed fetch from `position` (docs/GUARANTEES.md#commit-order, docs/GUARANTEES.md#in-order-visibility)."""
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
    app_rows: int = 0
    app_records: int = 0
    app_lost: int = 0
    app_duplicates: int = 0
    app_orphans: int = 0             # records without their row, rolled-back orders' included
    app_order_violations: int = 0
    app_rolled_back_reads: int = 0
    shop_orders: int = 0
    shop_events: int = 0
    shop_lost: int = 0
    shop_duplicates: int = 0
    shop_orphans: int = 0            # events without their order, or with another total
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
    apps: Apps | None = None,
    shop: ShopOrders | None = None,
) -> Outcome:
    """Check a finished run.

    inputs: input partition -> its values in offset order. final: output partition -> the
    read_committed output read from 0 after the run. seen: output partition -> what the
    verifier was given during the run, in order. Copiers' output values are {"src": input
    value, "in": input offset, "tag": transaction tag}. declared: tag -> {partition: records}
    as the copier announced before calling Commit; acknowledged: tags whose Commit answered
    success. apps, shop: what the applications and the shop left in their own tables, when
    the run had them (their records are then checked against those, by `check_apps` and
    `check_shop`; without them such records are extra).
    """
    o = Outcome()
    declared = declared or {}
    o.records_in = sum(len(v) for v in inputs.values())
    o.records_out = sum(len(v) for v in final.values())
    others = {k for k, there in (("app", apps), ("shop", shop)) if there is not None}
    copied = {p: [r for r in recs if kind_of(r.value) not in others] for p, recs in final.items()}

    # Exactly once, exact values: each input value's occurrences over the whole output.
    where_in: dict[str, tuple[int, int]] = {}
    for p, values in inputs.items():
        for i, v in enumerate(values):
            where_in[_key(v)] = (p, i)
    count: Counter[str] = Counter()
    for p, recs in sorted(copied.items()):
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
    for p in sorted(set(inputs) | set(copied)):
        got = [_key(r.value.get("src") if isinstance(r.value, dict) else None) for r in copied.get(p, [])]
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
    for p, recs in copied.items():
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
    if apps is not None:
        check_apps(o, final, seen, apps)
    if shop is not None:
        check_shop(o, final, shop)
    return o


def check_apps(o: Outcome, final: dict[int, list[Seen]], seen: dict[int, list[Seen]], apps: Apps) -> None:
    """The applications' records against their rows (docs/GUARANTEES.md#appends-in-the-applications-transaction): one record per committed
    row and no record without one, printed orders durable, each application's records in a
    partition in the order it committed them, and none of a rolled-back order ever read."""
    from tests.e2e.order_app import rolls_back  # the application's rule (not imported by copiers)

    records = [(p, r) for p, recs in sorted(final.items()) for r in recs if kind_of(r.value) == "app"]
    o.app_rows, o.app_records = len(apps.rows), len(records)
    count = Counter(r.value["order"] for _, r in records)
    for order in sorted(apps.rows):
        if count[order] == 0:
            o.app_lost += 1
            o.add(f"lost: application order {order} committed its row but has no record")
        elif count[order] > 1:
            o.app_duplicates += count[order] - 1
            o.add(f"duplicate: application order {order} has {count[order]} records")
    for p, r in records:
        order = r.value["order"]
        if order in apps.rows:
            continue
        o.app_orphans += 1
        if rolls_back(order, apps.rollback_every):
            o.add(f"rolled back: application order {order}'s transaction was rolled back, but its record "
                  f"is at {OUTPUT}/{p} offset {r.offset}")
        else:
            o.add(f"orphan: {OUTPUT}/{p} offset {r.offset} holds application order {order}, which has no row")
    for order in sorted(apps.printed - apps.rows):
        o.app_lost += 1
        o.add(f"durability: an application printed order {order} as committed, but its row is not there")
    # One application commits its orders one after another, in increasing order: its records
    # come in that order in each partition (offsets follow commit order).
    for p, recs in sorted(final.items()):
        last: dict[str, tuple[int, int]] = {}
        for r in recs:
            if kind_of(r.value) != "app":
                continue
            app, order = r.value["app"], r.value["order"]
            if app in last and order <= last[app][0]:
                o.app_order_violations += 1
                o.add(f"commit order: {OUTPUT}/{p} has {app}'s order {order} at offset {r.offset}, after its "
                      f"order {last[app][0]} at offset {last[app][1]}")
            last[app] = (order, r.offset)
    for p, recs in sorted(seen.items()):
        for r in recs:
            if kind_of(r.value) == "app" and rolls_back(r.value["order"], apps.rollback_every):
                o.app_rolled_back_reads += 1
                o.add(f"rolled-back read: the tailing reader was given {OUTPUT}/{p} offset {r.offset}, "
                      f"application order {r.value['order']}, whose transaction was rolled back")


def check_shop(o: Outcome, final: dict[int, list[Seen]], shop: ShopOrders) -> None:
    """The shop's events against its orders in MariaDB: each order's event exactly once, with
    its total; no event without its order; every order the shop printed as placed in MariaDB."""
    events = [(p, r) for p, recs in sorted(final.items()) for r in recs if kind_of(r.value) == "shop"]
    o.shop_orders, o.shop_events = len(shop.orders), len(events)
    count = Counter(r.value["order"] for _, r in events)
    for order in sorted(shop.orders):
        if count[order] == 0:
            o.shop_lost += 1
            o.add(f"lost: MariaDB holds shop order {order}, but its event is not in the output")
        elif count[order] > 1:
            o.shop_duplicates += count[order] - 1
            o.add(f"duplicate: shop order {order} has {count[order]} events")
    for p, r in events:
        order, total = r.value["order"], r.value["total"]
        if order not in shop.orders:
            o.shop_orphans += 1
            o.add(f"orphan: {OUTPUT}/{p} offset {r.offset} holds the event of shop order {order}, which "
                  f"MariaDB does not hold")
        elif total != shop.orders[order]:
            o.shop_orphans += 1
            o.add(f"wrong event: {OUTPUT}/{p} offset {r.offset} says shop order {order} totals {total}, "
                  f"MariaDB says {shop.orders[order]}")
    for order in sorted(shop.placed - set(shop.orders)):
        o.shop_lost += 1
        o.add(f"durability: the shop printed order {order} as placed, but MariaDB does not hold it")


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

        def _out_of_range(self, tp, error):  # type: ignore[no-untyped-def]
            before = self._positions[tp]
            super()._out_of_range(tp, error)
            _emit(ev="reset", what=f"{tp[0]}/{tp[1]} from {before} to {self._positions[tp]}")

        def _records_of(self, tp, page):  # type: ignore[no-untyped-def]
            start = self._positions[tp]  # the position this page was fetched from (a reset's, after one)
            got = super()._records_of(tp, page)
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
            return self._took(p, pos, page)

    def poll_all(self) -> int:
        """Every partition in one multi-partition Fetch that waits for records (max_wait_ms):
        the verifier long-polls, woken by the commits it checks, in whichever process they are
        made. Returns the records read."""
        from app.client import ClientError

        with self._lock:
            positions = dict(self.positions)
        try:
            answer = self._session.call("POST", "/v1/fetch", json={
                "partitions": [{"topic": OUTPUT, "partition": p, "offset": pos} for p, pos in positions.items()],
                "isolation": "read_committed", "max_records": self.max_records * self.partitions,
                "max_wait_ms": 1000,
            }, deadline_s=30.0)
        except ClientError:
            self.errors += 1
            return 0
        got = 0
        with self._lock:
            for page in answer["partitions"]:
                p = page["partition"]
                if page.get("error_code") is not None or self.positions[p] != positions[p]:
                    self.errors += page.get("error_code") is not None
                    continue
                got += len(self._took(p, positions[p], page)["records"])
        return got

    def _took(self, p: int, pos: int, page: dict) -> dict:
        """One partition's answer, checked and recorded (the caller holds the lock)."""
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
            if not self.poll_all():
                self._stop_event.wait(0.05)  # a server was down, or the wait ended empty

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
    apps: int = 2                    # applications appending in their own transactions
    app_rollback_every: int = 7      # each application rolls back every seventh order
    app_pause_s: float = 0.1         # an application sleeps up to this between orders
    app_dawdle_s: float = 0.02       # and, on PostgreSQL, up to this between append and commit
    shop_mariadb: str | None = None  # MariaDB server of the shop (mysql://root@127.0.0.1:3306); None: no shop

    def command(self) -> str:
        args = ["python", "-m", "tests.e2e.faults", "--backend", self.backend,
                "--duration", f"{self.duration_s:g}", "--seed", str(self.seed),
                "--fault-rate", f"{self.fault_rate:g}", "--copiers", str(self.copiers),
                "--records", str(self.records), "--partitions", str(self.partitions),
                "--servers", str(self.servers), "--max-records", str(self.max_records),
                "--complete-inline", self.complete_inline]
        if not self.trim:
            args.append("--no-trim")
        args += ["--apps", str(self.apps), "--app-pause", f"{self.app_pause_s:g}"]
        args += ["--mariadb", self.shop_mariadb] if self.shop_mariadb else ["--no-shop"]
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
    shop_db_kept: str | None = None  # the shop's MariaDB database, when the run kept it

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
            ("applications, shop", f"{c.apps}, {'yes' if c.shop_mariadb else 'no'}"),
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
            ("applications: rows / records / rolled back", f"{o.app_rows} / {o.app_records} / {s['app_rolled_back']}"),
            ("applications: lost / duplicates / without a row", f"{o.app_lost} / {o.app_duplicates} / {o.app_orphans}"),
            ("applications: out of commit order / rolled back read",
             f"{o.app_order_violations} / {o.app_rolled_back_reads}"),
            ("shop: orders in MariaDB / events", f"{o.shop_orders} / {o.shop_events}"),
            ("shop: lost / duplicates / without an order", f"{o.shop_lost} / {o.shop_duplicates} / {o.shop_orphans}"),
            ("shop: recoveries (committed / aborted)", f"{s['shop_recovered_commit']} / {s['shop_recovered_abort']}"),
            ("verifier polls (errors)", f"{s['verifier_polls']} ({s['verifier_errors']})"),
            ("kills: copier", s["kill_copier"]),
            ("kills: server", s["kill_server"]),
            ("kills: coordinator", s["kill_coordinator"]),
            ("kills: application / shop", f"{s['kill_app']} / {s['kill_shop']}"),
            ("db faults: connections terminated", s["db_terminate"]),
            ("db faults: server restarts", s["db_restart"]),
            ("copier exits: fatal / retriable / crash", f"{s['exit_fatal']} / {s['exit_retriable']} / {s['exit_crash']}"),
            ("application / shop exits by themselves (--crash-at)", f"{s['app_exited']} / {s['shop_exited']}"),
            ("server starts (inline / worker-completed)", f"{s['server_inline']} / {s['server_not_inline']}"),
            ("transactions committed (COMMIT markers)", s["txn_committed"]),
            ("transactions aborted (ABORT markers)", s["txn_aborted"]),
            ("commits acknowledged to copiers", s["acked"]),
            ("aborts called by copiers", s["copier_aborts"]),
            ("wall time", f"{self.wall_s:.1f} s (faults {self.fault_s:.1f} s, drain {self.drain_s:.1f} s)"),
            ("logs", str(self.log_dir)),
            *([("shop's MariaDB database (kept)", self.shop_db_kept)] if self.shop_db_kept else []),
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
    """The summary, the run's events and the last lines of each client's log."""
    parts = [result.summary(), "events:", *result.events[-200:]]
    logs = [p for kind in ("copier", "app", "shop") for p in result.log_dir.glob(f"fi-*-{kind}-*.log")]
    for path in sorted(logs):
        lines = path.read_text(errors="replace").strip().splitlines()
        parts.append(f"--- {path.name}")
        parts += lines[-tail_lines:]
    return "\n".join(parts)


class ClientProcess:
    """One client subprocess (`python -m MODULE ARGS`), its output in a log file."""

    def __init__(self, module: str, args: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in reap()
        self.proc = subprocess.Popen(
            [PYTHON, "-m", module, *args],
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
    kind: str                        # "server", "coordinator", "copier", "app", "shop"
    index: int
    port: int | None = None
    proc: Any = None                 # ServiceProcess or ClientProcess
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


def _whole_lines(path: Path) -> list[str]:
    """The lines of a client's log that were written whole (SIGKILL may cut the last)."""
    return [line for line in path.read_text(errors="replace").splitlines(keepends=True) if line.endswith("\n")]


def parse_app_logs(paths: Iterable[Path]) -> tuple[list[int], list[int]]:
    """(orders printed as committed, orders printed as rolled back) by an application's runs
    (tests/e2e/order_app.py prints "n" and "rolled back n")."""
    committed: list[int] = []
    rolled_back: list[int] = []
    for path in paths:
        for line in _whole_lines(path):
            words = line.split()
            if len(words) == 1 and words[0].isdigit():
                committed.append(int(words[0]))
            elif len(words) == 3 and words[:2] == ["rolled", "back"] and words[2].isdigit():
                rolled_back.append(int(words[2]))
    return committed, rolled_back


def parse_shop_logs(paths: Iterable[Path]) -> tuple[set[int], Counter]:
    """(orders printed as placed, recoveries by outcome: "commit", "abort") by the shop's runs."""
    placed: set[int] = set()
    recoveries: Counter = Counter()
    for path in paths:
        for line in _whole_lines(path):
            words = line.split()
            if len(words) == 3 and words[0] == "order" and words[2] == "placed" and words[1].isdigit():
                placed.add(int(words[1]))
            elif "committed: MariaDB had its order" in line:
                recoveries["commit"] += 1
            elif "aborted: MariaDB had no order of it" in line:
                recoveries["abort"] += 1
    return placed, recoveries


class Harness:
    """One run against a database given as a conftest `Backend`, processes started through a
    conftest `Launcher` (which reaps them)."""

    def __init__(self, cfg: Config, backend: Any, launcher: Any, *, admin_url: str | None = None,
                 log: Callable[[str], None] | None = None, keep: bool = False) -> None:
        self.cfg = cfg
        self.keep = keep  # the shop's MariaDB database, even after a run that passed
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
        self.copier_procs: list[ClientProcess] = []
        self.apps: list[Slot] = []
        self.shops: list[Slot] = []      # the shop, when the run has one
        self.client_logs: dict[tuple[str, int], list[Path]] = defaultdict(list)
        self.shop_db: str | None = None  # the shop's MariaDB database (a URL), made for the run
        self.late_violations: list[str] = []
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
            # No coordinator_interval_ms: a serve that runs no coordinator refuses it.
            env = self.launcher.env(complete_inline=inline, run_coordinator=False)
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
        elif slot.kind == "copier":
            label = f"copier-{slot.index}"
            slot.proc = ClientProcess("tests.e2e.faults", self._copier_args(slot.index), self._log_path(label))
            self.copier_procs.append(slot.proc)
            self.note(f"start copier {slot.index} (pid {slot.proc.proc.pid}) -> {self.url(slot.index)}")
        elif slot.kind == "app":
            first = self._app_next(slot.index)
            slot.proc = self._client(slot, "tests.e2e.order_app", self._app_args(slot.index, first))
            self.note(f"start application {slot.index} (pid {slot.proc.proc.pid}) from order {first}")
        else:
            # Besides the fault loop's kills, each instance kills itself at one step of an
            # order a few orders on, the four steps taking turns: the recovery of an order
            # MariaDB committed (after-own-commit) is otherwise a window of one request that
            # a random kill seldom meets. The turn moves on only once an instance died at its
            # step: one the fault loop killed first leaves its step to the next instance (on
            # a slow machine it may not have reached its order).
            step = SHOP_CRASH_STEPS[self.stats["shop_exited"] % len(SHOP_CRASH_STEPS)]
            at = max(self._shop_orders(), default=0) + self.settings_rng.randint(3, 10)
            slot.proc = self._client(slot, "examples.mariadb_orders",
                                     self._shop_args(slot.index, 10**9) + ["--crash-at", f"{step}:{at}"])
            self.note(f"start shop (pid {slot.proc.proc.pid}) -> {self.url(slot.index)}, to die at {step} of order {at}")

    def _copier_args(self, index: int) -> list[str]:
        return ["copier", "--url", self.url(index), "--slot", str(index),
                "--session-timeout-ms", str(self.cfg.session_timeout_ms),
                "--transaction-timeout-ms", str(self.cfg.transaction_timeout_ms),
                "--max-records", str(self.cfg.max_records)]

    def _client(self, slot: Slot, module: str, args: list[str]) -> ClientProcess:
        path = self._log_path(f"{slot.kind}-{slot.index}")
        self.client_logs[(slot.kind, slot.index)].append(path)
        return ClientProcess(module, args, path)

    def _app_args(self, index: int, first: int, last: int | None = None) -> list[str]:
        # On SQLite an application's transaction holds the file's write lock: no dawdling in it.
        dawdle = self.cfg.app_dawdle_s if self.cfg.backend == "postgresql" else 0.0
        return [self.backend.url, str(first), *([] if last is None else [str(last)]),
                "--topic", OUTPUT, "--partitions", str(self.cfg.partitions), "--table", APP_TABLE,
                "--app", f"app-{index}", "--rollback-every", str(self.cfg.app_rollback_every),
                "--pause", str(self.cfg.app_pause_s), "--dawdle", str(dawdle)]

    def _app_next(self, index: int) -> int:
        """The order application `index` goes on from: the one after the last it printed
        (committed or rolled back), or its first."""
        committed, rolled_back = parse_app_logs(self.client_logs[("app", index)])
        done = committed + rolled_back
        return max(done) + 1 if done else (index + 1) * APP_ORDERS

    def _shop_args(self, index: int, orders: int) -> list[str]:
        return ["--url", self.url(index), "--mariadb", self.shop_db or "", "--transactional-id", SHOP_ID,
                "--topic", OUTPUT, "--orders", str(orders)]

    def _kill(self, slot: Slot, down_s: float) -> None:
        slot.proc.kill9()
        slot.killed = True
        slot.down_until = time.monotonic() + down_s
        self.stats[f"kill_{slot.kind}"] += 1
        self.note(f"kill -9 {slot.kind} {slot.index} (down {down_s:.1f}s)")

    def _slots(self) -> list[Slot]:
        return self.servers + self.coordinators + self.copiers + self.apps + self.shops

    def supervise(self) -> None:
        """Restart whatever is down and due; count client exits."""
        now = time.monotonic()
        for slot in self._slots():
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
                elif slot.kind in ("app", "shop"):
                    # Its database connection was terminated, or it gave up on a server: it
                    # dies like a killed one, and is restarted like one.
                    self.stats[f"{slot.kind}_exited"] += 1
                    tail = slot.proc.log_path.read_text(errors="replace").strip().splitlines()[-1:]
                    self.note(f"{slot.kind} {slot.index} exited with {code}; restarting ({tail})")
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
        slots = {"copier": self.copiers, "server": self.servers, "coordinator": self.coordinators,
                 "app": self.apps, "shop": self.shops}[kind]
        up = [s for s in slots if s.proc is not None and s.proc.alive()]
        if kind == "server" and len(up) < len(slots):
            return False  # one server down at a time
        if not up:
            return False
        slot = self.rng.choice(up)
        down = {"copier": (0.0, 1.0), "server": (0.0, 1.5), "coordinator": (0.2, 3.0),
                "app": (0.0, 1.0), "shop": (0.0, 1.0)}[kind]
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
            self.apps = [Slot("app", i) for i in range(cfg.apps)]
            self.shops = [Slot("shop", 0)] if cfg.shop_mariadb else []
            # The first server migrates SQLite; the rest start once it is ready.
            self._start(self.servers[0])
            self.servers[0].proc.wait_ready()
            for s in self.servers[1:] + self.coordinators:
                self._start(s)
            for s in self.servers[1:]:
                s.proc.wait_ready()
            inputs = self._produce_input()
            verifier = Verifier(self.url(0), cfg.partitions)
            verifier.start()
            trimmer = Trimmer(self, cfg.partitions) if cfg.trim else None
            if trimmer is not None:
                trimmer.start()
            if self.apps:
                self._create_app_table()
            if self.shops:
                self._create_shop_db()
            for s in self.copiers + self.apps + self.shops:
                self._start(s)

            # Faults.
            kinds = ["copier", "copier", "server", "coordinator"] + (["app"] if self.apps else []) \
                + (["shop"] if self.shops else []) + (["db"] if cfg.backend == "postgresql" else [])
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
            # The applications and the shop first: the copiers then drain without their load.
            self._finish_apps()
            self._finish_shop()
            input_ends = self._input_ends()
            group = self._wait_for_group(input_ends, t_drain + cfg.drain_timeout_s)
            if trimmer is not None:
                trimmer.stop()
                self.stats["trims"] = trimmer.trims
                self.stats["input_log_starts"] = trimmer.log_starts
            self._stop_copiers()
            self._wait_settled(time.monotonic() + cfg.transaction_timeout_ms / 1000 + 60)
            if self.shops:
                self._check_nothing_prepared()
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
                apps=self._apps_left() if self.apps else None,
                shop=self._shop_left() if self.shops else None,
            )
            for v in self.late_violations:
                outcome.add(v)
            self._database_checks(outcome)
        except Exception as e:  # noqa: BLE001 - reported with the seed
            error = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
            self.note(f"harness error: {error}")
        finally:
            for s in self.copiers + self.apps + self.shops:
                if s.proc is not None:
                    s.proc.reap()
        result = RunResult(cfg, outcome, self.stats, time.monotonic() - t_start, fault_s, drain_s,
                           self.log_dir, error, self.events)
        if self.shop_db is not None:  # kept for a look when the run failed
            if result.ok and not self.keep:
                drop_shop_db(self.shop_db)
            else:
                result.shop_db_kept = self.shop_db
        try:  # kept beside the process logs, whatever happens to the caller's output
            (self.log_dir / "fi-report.txt").write_text(failure_report(result, tail_lines=30))
        except OSError:
            pass
        return result

    # --- the applications and the shop ----------------------------------------------------

    def _create_app_table(self) -> None:
        from sqlalchemy import text

        with self.backend.engine.begin() as conn:
            conn.execute(text(f"CREATE TABLE {APP_TABLE} (id BIGINT PRIMARY KEY, total BIGINT NOT NULL)"))

    def _create_shop_db(self) -> None:
        name = f"outbox_fi_shop_{uuid.uuid4().hex[:8]}"
        admin = mariadb_connect(self.cfg.shop_mariadb or "")
        try:
            with admin.cursor() as c:
                c.execute(f"CREATE DATABASE {name}")
        finally:
            admin.close()
        self.shop_db = f"{(self.cfg.shop_mariadb or '').rstrip('/')}/{name}"
        self.note(f"the shop's database: {self.shop_db}")

    def _run_to_the_end(self, slot: Slot, module: str, args: list[str], what: str) -> bool:
        """Run one more instance of a client in `slot` to its end; a violation if it fails."""
        slot.proc = self._client(slot, module, args)
        try:
            code = slot.proc.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            slot.proc.kill9()
            code = "no exit in 120 s"
        if code == 0:
            return True
        tail = slot.proc.log_path.read_text(errors="replace").strip().splitlines()[-3:]
        self.late_violations.append(f"{what} ended with {code}: {tail}")
        return False

    def _stop(self, slot: Slot) -> None:
        if slot.proc is not None and not slot.proc.alive() and not slot.killed:
            self.stats[f"{slot.kind}_exited"] += 1  # by itself, since the last look
        if slot.proc is not None and slot.proc.alive():
            slot.proc.kill9()
        slot.killed = True
        slot.down_until = float("inf")

    def _finish_apps(self) -> None:
        """Each application killed, and run once more for five orders from where it was: they
        must all be placed (committed or rolled back) and the run end cleanly. The first may
        have committed unprinted before the kill: it is then retried and published once."""
        for slot in self.apps:
            self._stop(slot)
            first = self._app_next(slot.index)
            what = f"application {slot.index}'s last run (orders {first}..{first + 4})"
            if self._run_to_the_end(slot, "tests.e2e.order_app", self._app_args(slot.index, first, first + 4), what):
                committed, rolled_back = parse_app_logs(self.client_logs[("app", slot.index)])
                missing = set(range(first, first + 5)) - set(committed) - set(rolled_back)
                if missing:
                    self.late_violations.append(f"{what} did not place orders {sorted(missing)}")
        self.stats["app_rolled_back"] = sum(len(parse_app_logs(self.client_logs[("app", s.index)])[1]) for s in self.apps)

    def _finish_shop(self) -> None:
        """The shop killed, and run once more for three more orders: it recovers what the
        instance before it prepared, places them and ends cleanly."""
        for slot in self.shops:
            self._stop(slot)
            last = max(self._shop_orders(), default=0)
            what = f"the shop's last run (orders {last + 1}..{last + 3})"
            if self._run_to_the_end(slot, "examples.mariadb_orders", self._shop_args(slot.index, last + 3), what):
                missing = {last + 1, last + 2, last + 3} - parse_shop_logs(self.client_logs[("shop", 0)])[0]
                if missing:
                    self.late_violations.append(f"{what} did not place orders {sorted(missing)}")
            recoveries = parse_shop_logs(self.client_logs[("shop", 0)])[1]
            self.stats["shop_recovered_commit"] = recoveries["commit"]
            self.stats["shop_recovered_abort"] = recoveries["abort"]

    def _check_nothing_prepared(self) -> None:
        s = self._session()
        try:
            body = s.call("GET", "/v1/transactions", params={"state": ["Prepared"]}, deadline_s=60)
        finally:
            s.close()
        for t in body["transactions"]:
            self.late_violations.append(f"transaction {t['transactional_id']} (txn_id {t['txn_id']}) is still "
                                        "Prepared after the shop's last run recovered")

    def _shop_orders(self) -> dict[int, int]:
        """MariaDB's shop_orders, id -> total (nothing before the shop first created it)."""
        import pymysql

        conn = mariadb_connect(self.shop_db or "")
        try:
            with conn.cursor() as c:
                c.execute("SELECT id, total FROM shop_orders")
                return {int(i): int(t) for i, t in c.fetchall()}
        except pymysql.err.ProgrammingError:
            return {}
        finally:
            conn.close()

    def _apps_left(self) -> Apps:
        from sqlalchemy import text

        rows = {int(r[0]) for r in self.backend.query(text(f"SELECT id FROM {APP_TABLE}"))}
        printed = {n for s in self.apps for n in parse_app_logs(self.client_logs[("app", s.index)])[0]}
        self.stats["app_orders"] = len(rows)
        return Apps(rows=rows, printed=printed, rollback_every=self.cfg.app_rollback_every)

    def _shop_left(self) -> ShopOrders:
        return ShopOrders(orders=self._shop_orders(), placed=parse_shop_logs(self.client_logs[("shop", 0)])[0])

    def _restore_all(self, deadline: float) -> None:
        """Restart whatever the faults left down, now, and wait for the servers to be ready."""
        for slot in self._slots():
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


def mariadb_connect(url: str) -> Any:
    """A PyMySQL connection (autocommit) to mysql://user:password@host:port[/database]."""
    from urllib.parse import urlparse

    import pymysql

    u = urlparse(url)
    return pymysql.connect(host=u.hostname or "127.0.0.1", port=u.port or 3306, user=u.username or "root",
                           password=u.password or "", database=u.path.lstrip("/") or None, autocommit=True,
                           connect_timeout=10)


def mariadb_problem(url: str) -> str | None:
    """Why the shop cannot run against the MariaDB server at `url`, with the fix; None if it can."""
    try:
        import pymysql
    except ImportError:
        return "PyMySQL is not installed (the shop's MariaDB driver): .venv/bin/pip install -e '.[test]'"
    try:
        mariadb_connect(url).close()
    except pymysql.err.OperationalError as e:
        return (f"MariaDB is not reachable at {url} ({e.args[-1]}): install and start it "
                "(Debian: apt-get install mariadb-server)")
    return None


def drop_shop_db(url: str) -> None:
    from urllib.parse import urlparse

    server, name = url.rsplit("/", 1)
    assert urlparse(url).path.lstrip("/") == name and name.startswith("outbox_fi_shop_"), url
    admin = mariadb_connect(server)
    try:
        with admin.cursor() as c:
            c.execute(f"DROP DATABASE IF EXISTS {name}")
    finally:
        admin.close()


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
             log: Callable[[str], None] | None = None, keep: bool = False) -> RunResult:
    return Harness(cfg, backend, launcher, admin_url=admin_url, log=log, keep=keep).run()


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
    ap.add_argument("--apps", type=int, default=2,
                    help="applications appending in their own database transactions (app.in_database)")
    ap.add_argument("--app-pause", type=float, default=0.1,
                    help="seconds an application sleeps between orders, at most")
    ap.add_argument("--mariadb", default="mysql://root@127.0.0.1:3306",
                    help="the MariaDB server of the shop (examples/mariadb_orders.py), which gets a database of its own")
    ap.add_argument("--no-shop", action="store_true", help="no shop (and no MariaDB needed)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the databases (the shop's too) and logs even on success")
    ap.add_argument("--quiet", action="store_true", help="no event lines while running")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    cfg = Config(backend=args.backend, duration_s=args.duration, seed=seed, fault_rate=args.fault_rate,
                 copiers=args.copiers, records=args.records, partitions=args.partitions,
                 servers=args.servers, max_records=args.max_records, complete_inline=args.complete_inline,
                 pg_restart=args.pg_restart, pg_restart_max=args.pg_restart_max,
                 drain_timeout_s=args.drain_timeout, trim=not args.no_trim, apps=args.apps,
                 app_pause_s=args.app_pause,
                 shop_mariadb=None if args.no_shop else args.mariadb)
    if cfg.shop_mariadb and (problem := mariadb_problem(cfg.shop_mariadb)):
        print(f"{problem}; or run without the shop: --no-shop", file=sys.stderr)
        return 2

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
        result = run_with(cfg, backend, launcher, admin_url=ADMIN_URL, log=log, keep=args.keep)
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
