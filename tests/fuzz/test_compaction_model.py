"""Compaction against a model (hypothesis), through the HTTP API, the Kafka door's read and the
log cleaner, on SQLite and PostgreSQL.

Random runs of keyed plain records, tombstones (value null) and records of two transactions
that interleave with them and with each other, each committed or aborted, with cleaner passes
and the clock's advances (tombstones age past delete_retention_ms) in between. The model keeps
the committed records with their commit positions (a committed transaction's records at its
COMMIT marker) and which of them compaction deleted. A pass below its cleaning point (the last
stable offset when it began) keeps each key's latest record there in commit order and in offset
order, deletes the rest of what is committed there, and then the key's kept records too if
they are all tombstones older than delete_retention_ms and nothing else of the key lies below
the point (a record of a transaction committed past it). After each pass: read_committed from
the log start (HTTP) must be exactly the records left in commit order, and the committed_records
view (what Spark reads) the same; the Kafka door's read in offset order exactly the records left
below the last stable offset, aborted ones dropped; and in each door every key's last value
(absent where it is a tombstone) the one it had with nothing compacted. Small cleaner chunks (3
rows) put chunk edges everywhere, and the cleaner compacts whatever is dirty (no dirty-ratio
threshold).

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
from tests.helpers import begin, create_topic, fetch, ident, init_producer, read_in_offset_order, send

EXAMPLES = int(os.environ.get("OUTBOX_COMPACTION_EXAMPLES", "40"))
KEYS = ["a", "b", "c", "d"]
TIDS = [0, 1]
HOUR = 3_600_000
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
        st.tuples(st.just("age")),  # half of delete_retention_ms
    ),
    max_size=30,
)


@dataclass
class Txn:
    records: list[tuple[int, int, str, Any]] = field(default_factory=list)  # (offset, timestamp, key, value)
    sequence: int = 0
    producer: dict | None = None


@dataclass(frozen=True)
class Committed:
    position: int  # its commit position
    offset: int
    timestamp_ms: int
    key: str
    value: Any


@dataclass
class Model:
    next_offset: int = 0
    committed: list[Committed] = field(default_factory=list)
    deleted: set[int] = field(default_factory=set)  # offsets of committed records compaction deleted
    open: dict[int, Txn] = field(default_factory=dict)
    checkpoint: int = 0

    def last_stable(self) -> int:
        firsts = [t.records[0][0] for t in self.open.values() if t.records]
        return min(firsts, default=self.next_offset)

    def left(self) -> list[Committed]:
        return [r for r in self.committed if r.offset not in self.deleted]

    def compact(self, point: int, tombstones_before_ms: int) -> None:
        """A pass below `point`, as the module's docstring states its rules."""
        for key in KEYS:
            below = [r for r in self.left() if r.key == key and r.offset < point]
            judged = [r for r in below if r.position < point]
            if not judged:
                continue
            kept = {max(judged, key=lambda r: (r.position, r.offset)), max(judged, key=lambda r: r.offset)}
            self.deleted |= {r.offset for r in judged if r not in kept}
            if len(below) == len(judged) and all(r.value is None and r.timestamp_ms < tombstones_before_ms
                                                 for r in kept):
                self.deleted |= {r.offset for r in kept}
        self.checkpoint = point

    def http(self, committed: list[Committed]) -> list[tuple[str, Any]]:
        """What read_committed shows over HTTP from the log start: commit order."""
        return [(r.key, r.value) for r in sorted(committed, key=lambda r: (r.position, r.offset))]

    def kafka(self, committed: list[Committed]) -> list[tuple[int, str, Any]]:
        """What a Kafka read_committed consumer reads: offset order, below the last stable offset."""
        below = self.last_stable()
        return [(r.offset, r.key, r.value) for r in sorted(committed, key=lambda r: r.offset) if r.offset < below]


def last_values(read: list) -> dict[str, Any]:
    """Each key's last value in a read; absent where it is a tombstone."""
    last = {r[-2]: r[-1] for r in read}
    return {key: value for key, value in last.items() if value is not None}


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
    create_topic(client, name, cleanup_policy="compact", delete_retention_ms=HOUR)
    cleaner = LogCleaner(services.db, services.settings, clock, chunk_rows=3, min_cleanable_dirty_ratio=0)
    model = Model()
    tids = {t: f"{name}-tx{t}" for t in TIDS}
    for op in run + [("commit", 0), ("commit", 1), ("clean",)]:
        kind = op[0]
        if kind == "plain":
            _, key, value = op
            r = client.post("/v1/records", json={"batches": [
                {"topic": name, "partition": 0, "records": [{"key": key, "value": value}]}]})
            assert r.status_code == 200, r.text
            model.committed.append(Committed(model.next_offset, model.next_offset, clock.now_ms, key, value))
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
                txn.records.append((model.next_offset, clock.now_ms, k, v))
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
                model.committed += [Committed(marker, offset, ts, k, v) for offset, ts, k, v in txn.records]
        elif kind == "age":
            clock.advance(HOUR // 2)
        else:
            point = model.last_stable()
            cleaner.run_once()
            if point > model.checkpoint:  # else nothing is dirty: no pass
                model.compact(point, clock.now_ms - HOUR)
            shown = read_committed(client, name)
            assert shown == model.http(model.left()), f"after cleaning below {point}"
            # One definition of what read_committed shows: the view Spark reads agrees.
            assert view_rows(services, name) == shown
            assert last_values(shown) == last_values(model.http(model.committed))
            in_offset_order = read_in_offset_order(services, name)
            assert in_offset_order == model.kafka(model.left()), f"after cleaning below {point}"
            assert last_values(in_offset_order) == last_values(model.kafka(model.committed))
    described = client.get(f"/v1/topics/{name}").json()["partitions"][0]
    assert described["record_count"] == len(model.left())  # everything ended: aborted records gone


def test_compaction_keeps_each_keys_latest_committed_record_in_both_orders_as_the_model_says(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    _compaction_matches_the_model(client, services, clock)
