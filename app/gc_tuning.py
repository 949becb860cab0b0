"""Garbage-collector settings for the long-running processes (`outbox serve`, `outbox coordinator`).

A 1,000-record Send holds a few thousand dicts and tuples alive at once (the parsed body, the
validated records, the rows for COPY), all freed by reference counting when the request ends.
CPython starts a young collection when allocations net of deallocations pass 700, so a Send
crosses that line several times: each collection traverses the request's live objects and
promotes them, and as they pile up in the older generations, full collections follow, which
walk the whole heap (FastAPI, pydantic and SQLAlchemy keep hundreds of thousands of
long-lived objects). Profiles of the produce path (docs/benchmarks.md) put this at about a
fifth of the service's CPU per Send.

So: freeze what exists once start-up is done (frozen objects are never scanned again), and
collect the young generation less often. Cycles are still collected, just in larger steps.
Tests that build apps in the pytest process leave the defaults alone.
"""

from __future__ import annotations

import gc

# A young collection once 20,000 objects are net allocated (more than a Send keeps alive)
# instead of 700; an older generation is collected after 50 (then 100) collections of the one
# below it, against CPython's 10 and 10.
THRESHOLDS = (20_000, 50, 100)


def tune_for_service() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
