"""The gauges `GET /metrics` reads from the database: consumer group lag, partition bounds and
sizes, and transactions by state and age, for an operator to alert on.

One computation reads them all in one snapshot with a constant number of queries, whatever
the number of groups and partitions (the lag of every committed offset is one query:
app.storage.read_committed.committed_between_for_groups). A computation is kept for
OUTBOX_METRICS_GAUGE_INTERVAL_MS and served to every scrape in between, and scrapes that
arrive while one runs wait for it rather than start their own: N scrapers, or a burst of
scrapes, cost one computation per interval.

What a reading holds is bounded by settings, not by the number of topics, partitions and
groups (which callers with the ACLs to create them, or to join groups, set): at most
OUTBOX_METRICS_MAX_PARTITIONS partitions and OUTBOX_METRICS_MAX_GROUP_PARTITIONS group
partitions, the rest counted. The partitions without a committed offset are walked in order
and counted past the cap, never listed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

from app.domain.clock import Clock
from app.domain.types import TransactionState
from app.services.group_offsets import LAG_COUNT_CAP
from app.settings import Settings
from app.storage import groups, offsets, read_committed, topics
from app.storage import transaction_listing
from app.storage.engine import Database


@dataclass(frozen=True, slots=True)
class GroupPartitionLag:
    group_id: str
    topic: str
    partition: int
    lag: int | None  # as GroupOffsetService.lag counts it; None: unknown, the group committed no offset here
    exact: bool  # False: at least `lag` (LAG_COUNT_CAP reached)


@dataclass(frozen=True, slots=True)
class GaugeReading:
    computed_ms: int
    # The first OUTBOX_METRICS_MAX_PARTITIONS partitions by (topic, partition).
    partitions: list[topics.NamedPartitionInfo]
    partitions_left_out: int
    # Committed offsets first, by (group_id, topic_id, partition), then the partitions without
    # one by (group_id, topic, partition), at most OUTBOX_METRICS_MAX_GROUP_PARTITIONS in all.
    group_partitions: list[GroupPartitionLag]
    group_partitions_left_out: int
    # The groups of group_partitions that have group partitions among those left out: a sum of
    # such a group's lag over group_partitions is not its lag. At most as many groups as
    # group_partitions holds; a group with every group partition left out is in neither.
    groups_cut: frozenset[str]
    transactions_by_state: dict[TransactionState, int]
    transactions_hanging: int
    oldest_open_transaction_started_ms: int | None


class DatabaseGauges:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self._lock = threading.Lock()
        self._last: GaugeReading | None = None

    def read(self, max_age_ms: int | None = None) -> GaugeReading:
        """The last computation if it is younger than OUTBOX_METRICS_GAUGE_INTERVAL_MS (and than
        `max_age_ms`, when given), else a new one. Raises what the database raised (the scrape
        then reports it down)."""
        keep_ms = self.settings.metrics_gauge_interval_ms
        if max_age_ms is not None:
            keep_ms = min(keep_ms, max_age_ms)
        with self._lock:  # a scrape arriving during a computation waits for it, and takes it
            last = self._last
            if last is not None and self.clock() - last.computed_ms < keep_ms:
                return last
            self._last = self._compute()
            return self._last

    def _compute(self) -> GaugeReading:
        now_ms = self.clock()
        cap = self.settings.metrics_max_group_partitions
        with self.db.read() as conn:
            partitions = topics.describe_all_partitions(conn, self.settings.metrics_max_partitions)
            every_topic = topics.list_topics(conn)
            counted = read_committed.committed_between_for_groups(conn, LAG_COUNT_CAP, cap)
            committed = offsets.all_committed_partitions(conn)
            consumed = groups.consumed_topics(conn)
            by_state = transaction_listing.count_by_state(conn)
            hanging = transaction_listing.count_hanging(conn, now_ms - self.settings.max_transaction_timeout_ms)
            oldest = transaction_listing.oldest_open_started_ms(conn)
        names = {t.topic_id: t.name for t in every_topic}
        partition_counts = {t.name: t.partition_count for t in every_topic}
        out = [GroupPartitionLag(c.group_id, names[c.topic_id], c.partition, c.count, c.exact) for c in counted]
        unknown = _unknown(consumed, partition_counts, set(committed))
        out += [GroupPartitionLag(g, t, p, None, True) for g, t, p in islice(unknown, max(0, cap - len(out)))]
        listed_groups = {g.group_id for g in out}
        cut: set[str] = set()
        if len(committed) > len(counted):
            listed = {(g.group_id, g.topic, g.partition) for g in out}
            cut.update(g for g, t, p in committed if g in listed_groups and (g, t, p) not in listed)
        unknown_left_out = 0
        for g, _, _ in unknown:
            unknown_left_out += 1
            if g in listed_groups:
                cut.add(g)
        return GaugeReading(
            computed_ms=now_ms,
            partitions=partitions,
            partitions_left_out=sum(partition_counts.values()) - len(partitions),
            group_partitions=out,
            group_partitions_left_out=len(committed) - len(counted) + unknown_left_out,
            groups_cut=frozenset(cut),
            transactions_by_state=by_state,
            transactions_hanging=hanging,
            oldest_open_transaction_started_ms=oldest,
        )


def _unknown(consumed: dict[str, set[str]], partition_counts: dict[str, int],
             has_offset: set[tuple[str, str, int]]) -> Iterator[tuple[str, str, int]]:
    """The partitions GroupOffsetService.lag shows as unknown, by (group_id, topic, partition): every
    partition, without a committed offset, of a topic the group subscribes to, has committed in
    or has staged offsets in. Lazily: the caller keeps what it exports and only counts the rest."""
    for group_id in sorted(consumed):
        for topic in sorted(consumed[group_id]):
            for partition in range(partition_counts.get(topic, 0)):  # a topic deleted since has none
                if (group_id, topic, partition) not in has_offset:
                    yield group_id, topic, partition
