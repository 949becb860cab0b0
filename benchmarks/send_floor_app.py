"""The floor of a Send served by Python: a bare ASGI app (uvicorn, httptools, uvloop, as `outbox
serve`) that takes benchmarks/run.py's Send body, decodes it with msgspec (each value kept as
its JSON text), builds the COPY's lines column by column and COPYs them into a table shaped as
`records`, one database transaction a request, on a thread as the service's Sends run.

What it leaves out is everything the service does besides: no authentication, ACLs, body
limits, metrics or access log; no checks of keys, values, sizes or depth; no producer ids,
sequences, batches, transactions, topics or log end; no NOTIFY. benchmarks/send_floor.py sets
the service against it. Not part of the product: it stores nothing a reader could use. Its
offsets are counted in the process: one uvicorn worker only, as send_floor.py starts it.

    python -m uvicorn send_floor_app:app --app-dir benchmarks  (SEND_FLOOR_DSN: a psycopg URL)
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import msgspec
import psycopg

TABLE = "send_floor_records"
CREATE = (f'CREATE TABLE IF NOT EXISTS {TABLE} (topic_id integer NOT NULL, "partition" integer NOT NULL, '
          '"offset" bigint NOT NULL, timestamp_ms bigint NOT NULL, key text, value text, headers text, '
          'PRIMARY KEY (topic_id, "partition", "offset"))')
COPY = f'COPY {TABLE} (topic_id, "partition", "offset", timestamp_ms, key, value) FROM STDIN'
# COPY's text format: a backslash, tab, newline or carriage return inside a field is escaped.
ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


class Record(msgspec.Struct):
    value: msgspec.Raw
    key: str | None = None


class Batch(msgspec.Struct):
    topic: str
    partition: int
    records: list[Record]


class Body(msgspec.Struct):
    batches: list[Batch]


DECODER = msgspec.json.Decoder(Body)
_connections = threading.local()
_next_offset: dict[tuple[str, int], int] = {}
_offsets_lock = threading.Lock()


def _connection() -> psycopg.Connection:
    conn = getattr(_connections, "conn", None)
    if conn is None:
        conn = _connections.conn = psycopg.connect(os.environ["SEND_FLOOR_DSN"], application_name="send-floor")
        conn.execute(CREATE)
        conn.commit()
    return conn


def _write(body: Body) -> bytes:
    conn = _connection()
    bases = []
    try:
        with conn.cursor() as cur:
            for batch in body.batches:
                records, n = batch.records, len(batch.records)
                with _offsets_lock:
                    base = _next_offset.get((batch.topic, batch.partition), 0)
                    _next_offset[(batch.topic, batch.partition)] = base + n
                # NUL joins the values' texts: JSON text holds none outside a string's escapes.
                texts = b"\x00".join([r.value for r in records]).decode().translate(ESCAPES).split("\x00")
                keys = ["\\N" if r.key is None else r.key.translate(ESCAPES) for r in records]
                head = f"{abs(hash(batch.topic)) % 1_000_000}\t{batch.partition}\t"
                lines = "".join(map("".join, zip([head] * n, map(str, range(base, base + n)), ["\t0\t"] * n,
                                                 keys, ["\t"] * n, texts, ["\n"] * n)))
                with cur.copy(COPY) as copy:
                    copy.write(lines)
                bases.append(base)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return msgspec.json.encode({"results": [{"base_offset": b} for b in bases]})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    if scope["path"] != "/v1/records":  # the benchmark's topic creation: nothing to create
        answer, status = b"{}", 200
    else:
        answer, status = await asyncio.get_running_loop().run_in_executor(None, _write, DECODER.decode(b"".join(chunks))), 200
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": answer})
