"""Small HTTP helpers that keep tests about behaviour, not request plumbing."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sqlalchemy import and_, event
from sqlalchemy.engine import Engine

from app.api.direct_route import DirectRoute
from app.domain.types import ControlType, IsolationLevel
from app.storage.tables import record_batches, records


def create_topic(client, name: str, partitions: int = 1, **config: Any) -> dict:  # type: ignore[no-untyped-def]
    r = client.post("/v1/topics", json={"name": name, "partitions": partitions, "config": config})
    assert r.status_code == 201, r.text
    return r.json()


def init_producer(client, transactional_id: str | None = None, **extra: Any) -> dict:  # type: ignore[no-untyped-def]
    body: dict[str, Any] = {**extra}
    if transactional_id is not None:
        body["transactional_id"] = transactional_id
    r = client.post("/v1/producers", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def ident(producer: dict) -> dict:
    return {"producer_id": producer["producer_id"], "producer_epoch": producer["producer_epoch"]}


def begin(client, tid: str, producer: dict) -> dict:  # type: ignore[no-untyped-def]
    r = client.post(f"/v1/transactions/{tid}/begin", json=ident(producer))
    assert r.status_code == 200, r.text
    return r.json()


def send(client, batches: list[dict], producer: dict | None = None, tid: str | None = None):  # type: ignore[no-untyped-def]
    body: dict[str, Any] = {"batches": batches}
    if producer is not None:
        body.update(ident(producer))
    if tid is not None:
        body["transactional_id"] = tid
    return client.post("/v1/records", json=body)


def batch(topic: str, partition: int, values: list[Any], base_sequence: int | None = None, **extra: Any) -> dict:
    b: dict[str, Any] = {"topic": topic, "partition": partition, "records": [{"value": v} for v in values], **extra}
    if base_sequence is not None:
        b["base_sequence"] = base_sequence
    return b


def fetch(client, topic: str, partition: int, offset: int = 0, isolation: str = "read_committed", max_records: int | None = None) -> dict:  # type: ignore[no-untyped-def]
    params: dict[str, Any] = {"offset": offset, "isolation": isolation}
    if max_records is not None:
        params["max_records"] = max_records
    r = client.get(f"/v1/topics/{topic}/partitions/{partition}/records", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def values(fetched: dict) -> list[Any]:
    return [r["value"] for r in fetched["records"]]


def read_all(client, topic: str, partition: int, isolation: str = "read_committed") -> list[dict]:  # type: ignore[no-untyped-def]
    out, offset = [], 0
    while True:
        page = fetch(client, topic, partition, offset, isolation)
        out.extend(page["records"])
        if page["next_offset"] == offset or page["next_offset"] >= page["high_watermark"] and not page["records"]:
            return out
        offset = page["next_offset"]
        if offset >= page["high_watermark"]:
            return out


def read_in_offset_order(services: Any, topic: str, partition: int = 0) -> list[tuple[int, Any, Any]]:
    """What a Kafka read_committed consumer reads of a partition from its log start, through
    the Kafka door's read (LogService.read_in_offset_order): (offset, key, value) of each
    record in offset order up to the last stable offset, dropping the records of the aborted
    transactions the reads name, from their first offset to their producer's ABORT marker, as
    a Kafka client does. Values as JSON decodes them (a tombstone's is None)."""
    out: list[tuple[int, Any, Any]] = []
    offset = services.log.partition_offsets(topic, partition, isolation=IsolationLevel.READ_COMMITTED).log_start_offset
    aborted: dict[int, set[int]] = {}  # producer id -> first offsets of its aborted transactions
    aborting: set[int] = set()  # producers inside an aborted transaction
    while True:
        read = services.log.read_in_offset_order(topic, partition, offset=offset,
                                                 isolation=IsolationLevel.READ_COMMITTED,
                                                 max_bytes=1 << 20, max_records=100)
        for a in read.aborted_transactions:
            aborted.setdefault(a.producer_id, set()).add(a.first_offset)
        for b in read.batches:
            last = b.records[-1].offset if b.records else b.base_offset
            if any(first <= last for first in aborted.get(b.producer_id, ())):
                aborting.add(b.producer_id)
            if b.control_type is ControlType.ABORT:
                aborting.discard(b.producer_id)
                aborted[b.producer_id] = {first for first in aborted.get(b.producer_id, ()) if first > last}
            elif b.control_type is None and not (b.txn_id is not None and b.producer_id in aborting):
                out += [(r.offset, r.key, None if r.value is None else json.loads(r.value)) for r in b.records]
            offset = max(offset, last + 1)
        if not read.batches or offset >= read.upper_bound:
            return out


# A stored record joined to the batch row that holds it: who wrote the record (producer id,
# epoch, sequence, transaction) is its batch row's since migration 0023, not the record's.
def records_with_batches() -> Any:
    """Each record beside the batch row holding it: an outer join, so that a record without a
    batch row (a writer's bug) stays, its batch columns NULL, and fails the test that reads it
    instead of dropping out of what it compares."""
    return records.outerjoin(record_batches, and_(
        record_batches.c.topic_id == records.c.topic_id, record_batches.c.partition == records.c.partition,
        records.c.offset >= record_batches.c.base_offset,
        records.c.offset < record_batches.c.base_offset + record_batches.c.record_count))


def record_sequence() -> Any:
    """A record's sequence, from its batch row (in a select from records_with_batches())."""
    return (record_batches.c.base_sequence + (records.c.offset - record_batches.c.base_offset)).label("sequence")


class RouterCalls:
    """FastAPI's router, behind the Send's direct route (app.api.direct_route), counting the
    requests it is given."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.paths.append(f"{scope['method']} {scope['path']}")
        await self.router(scope, receive, send)


def spy_on_router(app: Any) -> RouterCalls:
    """The requests `app`'s direct route passes to FastAPI's router, from now on."""
    direct = app.router.middleware_stack
    assert isinstance(direct, DirectRoute)
    direct.app = calls = RouterCalls(direct.app)
    return calls


def serve_by_router(app: Any) -> None:
    """From now on FastAPI's router serves the Send too: any dependency override sends it there."""
    app.dependency_overrides[_never_called] = _never_called


def _never_called() -> None:
    """An override of nothing any route depends on."""


def comparable_answer(r: Any) -> tuple[int, dict[str, str], bytes]:
    """An answer, whole but for the headers that differ from one request to the next."""
    headers = {k: v for k, v in r.headers.items() if k not in ("x-request-id", "date")}
    return r.status_code, headers, r.content


LEAF_LOCK = 'LOCK TABLE "records_'


@contextmanager
def statements_run(target: Any = Engine) -> Iterator[list[str]]:
    """The SQL statements run inside the block on `target`'s connections (an engine; by
    default every engine of the process), as their cursors are given them. Not the lock a
    connection takes of a leaf of `records` before its first write to it (on PostgreSQL,
    app.storage.record_rows._lock_new_leaves): once a connection and leaf, it is in these
    counts or not by which of the pool's connections served the request;
    tests/integration/test_leaf_locks.py holds it to that."""
    seen: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not statement.startswith(LEAF_LOCK):
            seen.append(statement)

    event.listen(target, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(target, "before_cursor_execute", note)


@contextmanager
def stand_in_http_server(answer: Callable[[str], tuple[int, str, bytes]]) -> Iterator[str]:
    """A local web server that is not the service, for as long as the block runs: every GET is
    answered with `answer(path)`'s status, content type and body. Yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            status, content_type, body = answer(self.path)
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
