"""Garbage-collector settings for the long-running processes (`outbox serve`, `outbox coordinator`).

A 1,000-record Send allocates a few thousand dicts and tuples (the parsed body, the
validated records, the rows for COPY), nearly all freed by reference counting when the
request ends. With CPython's default thresholds (a young collection every 700 allocations)
that is several collections per request, and every few requests a full collection walks the
whole heap: FastAPI, pydantic and SQLAlchemy keep hundreds of thousands of long-lived objects.
Profiles of the produce path (docs/benchmarks.md) put this at about a fifth of the service's
CPU per Send.

So: freeze what exists once start-up is done (frozen objects are never scanned again), and
collect the young generation less often. Cycles are still collected, just in larger steps.
Tests that build apps in the pytest process leave the defaults alone.
"""

from __future__ import annotations

import gc

# A young collection every 20,000 allocations (a few Sends' worth) instead of 700; the
# older generations keep CPython's ratios, scaled down a little so a full collection still
# happens every few hundred Sends.
THRESHOLDS = (20_000, 50, 100)


def tune_for_service() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
