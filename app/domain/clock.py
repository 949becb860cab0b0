"""Time, injectable: every timeout and expiry decision takes `now_ms` from a Clock."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]


def system_clock() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000
