"""The console's lag history: the total lag of the groups that lag most, over time, kept by the
process so that the overview's chart starts with the last window instead of an empty one.

Every OUTBOX_CONSOLE_LAG_INTERVAL_MS a chore (app.worker.lag_history) takes the groups' lag
from the reading the /metrics gauges share (app.services.gauges: one snapshot, a fixed number
of queries whatever the number of groups, at most OUTBOX_METRICS_MAX_GROUP_PARTITIONS group
partitions) and keeps the OUTBOX_CONSOLE_LAG_MAX_GROUPS groups with the most lag; samples
older than OUTBOX_CONSOLE_HISTORY_WINDOW_MS are dropped, and the deque holds at most
Settings.console_lag_samples of them, so memory is bounded whatever the number of groups.
Per process and since its start, like the rate history (app.api.rate_history).

Each group's point names the topics its lag counts, so that a reader is shown only the groups
whose every such topic it may describe: a total is as revealing as its parts.

Past OUTBOX_METRICS_MAX_GROUP_PARTITIONS the reading leaves group partitions out (by group id,
not by lag): a group with some of its partitions left out has no total (its sum would be a
part of its lag, told as the whole), and a group with all of them left out is not in the
sample however much it lags. Each sample says how many were left out, so that neither is
taken for the groups that lag most.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from app.services.gauges import DatabaseGauges, GaugeReading


@dataclass(frozen=True, slots=True)
class GroupLagPoint:
    group_id: str
    # None: unknown, a partition without a committed offset (GroupOffsetService.lag), or some
    # of the group's partitions left out of the reading (`complete` False)
    total_lag: int | None
    known_lag: int  # the partitions' lag where it is known and read: what ranks the groups
    topics: frozenset[str]  # the topics the total counts (of the partitions read)
    complete: bool = True  # False: some of the group's partitions were left out of the reading


@dataclass(frozen=True, slots=True)
class LagSample:
    time_ms: int
    groups: tuple[GroupLagPoint, ...]  # most lag first
    # Group partitions the reading left out (OUTBOX_METRICS_MAX_GROUP_PARTITIONS): when not 0, a
    # group that lags more than those shown may be missing.
    group_partitions_left_out: int = 0


def group_points(reading: GaugeReading) -> list[GroupLagPoint]:
    """Each group's total lag in a gauge reading, most lag first (then by group id)."""
    known: dict[str, int] = {}
    unknown: set[str] = set()
    topics: dict[str, set[str]] = {}
    for p in reading.group_partitions:
        known.setdefault(p.group_id, 0)
        topics.setdefault(p.group_id, set()).add(p.topic)
        if p.lag is None:
            unknown.add(p.group_id)
        else:
            known[p.group_id] += p.lag
    points = [GroupLagPoint(g, None if g in unknown or g in reading.groups_cut else lag, lag, frozenset(topics[g]),
                            g not in reading.groups_cut) for g, lag in known.items()]
    return sorted(points, key=lambda p: (-p.known_lag, p.group_id))


class LagHistory:
    def __init__(self, gauges: DatabaseGauges, *, interval_ms: int, window_ms: int, max_samples: int,
                 max_groups: int) -> None:
        self.gauges = gauges
        self.interval_ms = interval_ms
        self.window_ms = window_ms
        self.max_groups = max_groups
        self._samples: deque[LagSample] = deque(maxlen=max_samples)
        self._lock = threading.Lock()  # the chore's thread appends while requests read

    def sample(self, now_ms: int) -> int:
        """Read the groups' lag and keep the max_groups that lag most at `now_ms`; answers how
        many groups the sample holds. Raises what the database raised (the chore logs it)."""
        if not self._samples.maxlen:
            return 0
        # A reading no older than the interval: one the gauges keep longer
        # (OUTBOX_METRICS_GAUGE_INTERVAL_MS above OUTBOX_CONSOLE_LAG_INTERVAL_MS) would repeat
        # in every sample until it is renewed, each stamped with a time it was not read at.
        reading = self.gauges.read(max_age_ms=self.interval_ms)
        points = group_points(reading)[:self.max_groups]
        with self._lock:
            last = {p.group_id: p.topics for p in self._samples[-1].groups} if self._samples else {}
            # The same topics as the last sample: one set held for both, not one per sample.
            points = [p if last.get(p.group_id) != p.topics else
                      GroupLagPoint(p.group_id, p.total_lag, p.known_lag, last[p.group_id], p.complete)
                      for p in points]
            self._samples.append(LagSample(now_ms, tuple(points), reading.group_partitions_left_out))
            while self._samples[0].time_ms <= now_ms - self.window_ms:
                self._samples.popleft()
        return len(points)

    def since(self, after_ms: int | None = None) -> list[LagSample]:
        """The samples of the window, oldest first; only those after `after_ms` if given."""
        with self._lock:
            return [s for s in self._samples if after_ms is None or s.time_ms > after_ms]
