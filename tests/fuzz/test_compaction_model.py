"""Compaction against a model (hypothesis), through the HTTP API and the log cleaner, on SQLite
and PostgreSQL.

Random runs of keyed plain records, tombstones (value null) and records of two transactions
that interleave with them and with each other, each committed or aborted, with cleaner passes
in between. The model keeps the log as offsets (records and markers) and the committed
records in commit order (a committed transaction's records at its COMMIT marker). After each
pass, read_committed from the log start must be exactly: below the pass's cleaning point (the
last stable offset when it began) each key's last committed record, above it every committed
record, in commit order; no aborted record anywhere; and the committed_records view (what
Spark reads) must show the same records in the same order as the fetch. Small cleaner chunks (3 rows) put chunk edges everywhere, and
the cleaner compacts whatever is dirty (no dirty-ratio threshold).

OUTBOX_COMPACTION_EXAMPLES (default 40) sets the examples per database.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from app.services.log_cleaner import LogCleaner
from tests.helpers import begin, create_topic, fetch, ident, init_producer, send

EXAMPLES = int(os.environ.get("OUTBOX_COMPACTION_EXAMPLES", "40"))
KEYS = ["a", "b", "c", "d"]
TIDS = [0, 1]
_names = itertools.count()

values = st.one_of(st.none(), st.integers(0, 99))  # None: a tombstone
ops = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.sampled_from(KEYS), values),
        st.tuples(st.just("send"), st.sampled_from(TIDS), st.lists(st.tuples(st.sampled_from(KEYS), values),
                                                                   min_size=1, max_size=3)),
        st.tuples(st.just("commit"), st.sampled_from(TIDS)),
        st.tuples(st.just("abort"), st.sampled_from(TIDS)),
        st.tuples(st.just("clean")),
    ),
    max_size=30,
)


@dataclass
class Txn:
    records: list[tuple[int, str, Any]] = field(default_factory=list)  # (offset, key, value)
    sequence: int = 0
    producer: dict | None = None


@dataclass
class Model:
    next_offset: int = 0
    committed: list[tuple[int, int, str, Any]] = field(default_factory=list)  # (commit position, offset, key, value)
    open: dict[int, Txn] = field(default_factory=dict)

    def last_stable(self) -> int:
        firsts = [t.records[0][0] for t in self.open.values() if t.records]
        return min(firsts, default=self.next_offset)

    def expected(self, cleaning_point: int) -> list[tuple[str, Any]]:
        """What read_committed shows after a compaction below `cleaning_point`."""
        in_order = sorted(self.committed)
        below = [r for r in in_order if r[0] < cleaning_point]
        latest = {key: (position, offset) for position, offset, key, _ in below}
        return [(key, value) for position, offset, key, value in in_order
                if position >= cleaning_point or latest[key] == (position, offset)]


def view_rows(services: Any, topic: str) -> list[tuple[str, Any]]:
    """The committed_records view of the topic, in commit order: what Spark reads."""
    with services.db.read() as conn:
        rows = conn.execute(text(
            "SELECT key, value FROM committed_records WHERE topic = :t ORDER BY commit_position, \"offset\""
        ), {"t": topic}).all()
    return [(k, json.loads(v)) for k, v in rows]


def read_committed(client: Any, topic: str) -> list[tuple[str, Any]]:
    offset = client.get(f"/v1/topics/{topic}").json()["partitions"][0]["log_start_offset"]
    out: list[tuple[str, Any]] = []
    while True:
        page = fetch(client, topic, 0, offset)
        out += [(r["key"], r["value"]) for r in page["records"]]
        if not page["records"] or page["next_offset"] >= page["high_watermark"]:
            return out
        offset = page["next_offset"]


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(run=ops)
def _compaction_matches_the_model(client: Any, services: Any, clock: Any, run: list[tuple]) -> None:
    name = f"m{next(_names)}"
    create_topic(client, name, cleanup_policy="compact")
    cleaner = LogCleaner(services.db, services.settings, clock, chunk_rows=3, min_cleanable_dirty_ratio=0)
    model = Model()
    shown = None
    tids = {t: f"{name}-tx{t}" for t in TIDS}
    for op in run + [("commit", 0), ("commit", 1), ("clean",)]:
        kind = op[0]
        if kind == "plain":
            _, key, value = op
            r = client.post("/v1/records", json={"batches": [
                {"topic": name, "partition": 0, "records": [{"key": key, "value": value}]}]})
            assert r.status_code == 200, r.text
            model.committed.append((model.next_offset, model.next_offset, key, value))
            model.next_offset += 1
        elif kind == "send":
            _, t, pairs = op
            txn = model.open.get(t)
            if txn is None:
                txn = model.open[t] = Txn()
                txn.producer = init_producer(client, tids[t])
                begin(client, tids[t], txn.producer)
            b = {"topic": name, "partition": 0, "base_sequence": txn.sequence,
                 "records": [{"key": k, "value": v} for k, v in pairs]}
            assert send(client, [b], txn.producer, tids[t]).status_code == 200
            txn.sequence += len(pairs)
            for k, v in pairs:
                txn.records.append((model.next_offset, k, v))
                model.next_offset += 1
        elif kind in ("commit", "abort"):
            txn = model.open.pop(op[1], None)
            if txn is None:
                continue
            r = client.post(f"/v1/transactions/{tids[op[1]]}/{kind}", json=ident(txn.producer))
            assert r.status_code == 200, r.text
            marker = model.next_offset
            model.next_offset += 1
            if kind == "commit":
                model.committed += [(marker, offset, k, v) for offset, k, v in txn.records]
        else:
            point = model.last_stable()
            cleaner.run_once()
            shown = read_committed(client, name)
            assert shown == model.expected(point), f"after cleaning below {point}"
            # One definition of what read_committed shows: the view Spark reads agrees.
            assert view_rows(services, name) == shown
    latest = {}
    for _, _, key, value in sorted(model.committed):
        latest.pop(key, None)
        latest[key] = value
    assert shown == list(latest.items())  # everything ended: each key once, in commit order
    described = client.get(f"/v1/topics/{name}").json()["partitions"][0]
    assert described["record_count"] == len(latest)


def test_compaction_keeps_each_keys_latest_committed_record_as_the_model_says(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    _compaction_matches_the_model(client, services, clock)
