"""GET /metrics: Prometheus text exposition of app.metrics, and of what the database holds."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from app.api.deps import ServicesDep
from app.api.errors import documented
from app.composition import Services
from app.domain.transaction import STORED_STATES
from app.services.gauges import GaugeReading
from app.services.schema_gate import SchemaGate

logger = logging.getLogger(__name__)

router = APIRouter(tags=["metrics"])


class DatabaseGauges:
    """Read from the database (app.services.gauges, computed at most once per
    OUTBOX_METRICS_GAUGE_INTERVAL_MS), so every API process reports the same values."""

    def __init__(self, services: Services, schema: SchemaGate) -> None:
        self.services = services
        self.schema = schema

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("outbox_database_up", "1 if the database answered this scrape's queries, else 0.")
        if not self.schema.open:
            # Not migrated yet: the tables are not there, and start-up has warned once already,
            # where a warning per scrape would fill the log.
            up.add_metric([], 0)
            yield up
            return
        try:
            reading = self.services.gauges.read()
        except Exception as exc:  # noqa: BLE001 - a scrape must answer while the database is down
            logger.warning("metrics: database gauges unavailable: %s", exc.__class__.__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from transaction_gauges(reading, self.services.clock())
        yield from partition_gauges(reading)
        yield from group_gauges(reading)


def transaction_gauges(reading: GaugeReading, now_ms: int) -> Iterator[Metric]:
    states = GaugeMetricFamily(
        "outbox_transactions", "transactional_ids in each transaction state.", labels=["state"]
    )
    for state in STORED_STATES:
        states.add_metric([state.value], reading.transactions_by_state.get(state, 0))
    yield states
    yield GaugeMetricFamily(
        "outbox_transactions_hanging",
        "Transactions open, or decided but not completed, for longer than the maximum "
        "transaction timeout: no coordinator worker is ending them (see `outbox transactions hanging`).",
        value=reading.transactions_hanging,
    )
    started = reading.oldest_open_transaction_started_ms
    yield GaugeMetricFamily(
        "outbox_oldest_open_transaction_age_seconds",
        "Seconds since the oldest open transaction (Ongoing or Prepared, or decided and still "
        "completing) began, at the gauges' computation; 0 when none is open. It holds back its "
        "partitions' last stable offset.",
        # Not below 0: a transaction begun by a process whose clock is ahead of this one's.
        value=0 if started is None else max(0, reading.computed_ms - started) / 1000,
    )
    yield GaugeMetricFamily(
        "outbox_gauges_computed_timestamp_seconds",
        "When the database gauges of this scrape were computed (they are kept "
        "OUTBOX_METRICS_GAUGE_INTERVAL_MS).",
        value=reading.computed_ms / 1000,
    )


# Partition gauges: (name, help, the PartitionInfo field).
_PARTITION_GAUGES = (
    ("outbox_partition_log_start_offset", "The partition's log start offset: the first offset a reader may ask for.",
     "log_start_offset"),
    ("outbox_partition_log_end_offset", "The partition's log end offset: the next offset to be written.",
     "log_end_offset"),
    # Below the log end while a transaction with durability "commit" has Sends not yet durable;
    # the lag table's LOG-END-OFFSET column (Kafka's tool's name) shows this one.
    ("outbox_partition_high_watermark", "The partition's high watermark: how far a reader may read or be "
     "placed (the log end, but for a transaction whose Sends are not durable yet).", "high_watermark"),
    ("outbox_partition_last_stable_offset", "The partition's last stable offset: the first offset of its oldest "
     "open transaction, else the log end. read_committed readers see nothing at or past it.", "last_stable_offset"),
    ("outbox_partition_records", "Data records stored in the partition (control markers not counted).",
     "record_count"),
    ("outbox_partition_bytes", "UTF-8 bytes of the keys, values and headers of the partition's data records.",
     "size_bytes"),
)


def partition_gauges(reading: GaugeReading) -> Iterator[Metric]:
    for name, help_text, field in _PARTITION_GAUGES:
        family = GaugeMetricFamily(name, help_text, labels=["topic", "partition"])
        for p in reading.partitions:
            family.add_metric([p.topic, str(p.info.partition)], getattr(p.info, field))
        yield family
    yield GaugeMetricFamily(
        "outbox_partition_series_left_out",
        "(topic, partition) series of each per-partition gauge (outbox_partition_log_start_offset and the "
        "others with those labels) not exported this scrape, past OUTBOX_METRICS_MAX_PARTITIONS: the first "
        "partitions by topic name and partition are.",
        value=reading.partitions_left_out,
    )


def group_gauges(reading: GaugeReading) -> Iterator[Metric]:
    lag = GaugeMetricFamily(
        "outbox_group_lag",
        "Committed records the consumer group has left to read in the partition, from its committed "
        "offset to the log end, counted as GET /v1/groups/{group_id}/lag counts them (control markers and "
        "open or aborted transactions' records not counted); at least this when "
        "outbox_group_lag_exact is 0. Absent where the group committed no offset: see outbox_group_lag_unknown.",
        labels=["group", "topic", "partition"],
    )
    exact = GaugeMetricFamily(
        "outbox_group_lag_exact",
        "0 where outbox_group_lag reached the count cap and is a lower bound, else 1.",
        labels=["group", "topic", "partition"],
    )
    unknown = GaugeMetricFamily(
        "outbox_group_lag_unknown",
        "1 for a partition the consumer group consumes but has committed no offset in: its lag is unknown "
        "(where it starts is the client's auto_offset_reset), not 0.",
        labels=["group", "topic", "partition"],
    )
    for g in reading.group_partitions:
        labels = [g.group_id, g.topic, str(g.partition)]
        if g.lag is None:
            unknown.add_metric(labels, 1)
        else:
            lag.add_metric(labels, g.lag)
            exact.add_metric(labels, 1 if g.exact else 0)
    yield lag
    yield exact
    yield unknown
    yield GaugeMetricFamily(
        "outbox_group_lag_series_left_out",
        "(group, topic, partition) series of outbox_group_lag and outbox_group_lag_unknown not exported "
        "this scrape, past OUTBOX_METRICS_MAX_GROUP_PARTITIONS.",
        value=reading.group_partitions_left_out,
    )


@router.get(
    "/metrics",
    operation_id="metrics",
    response_class=Response,
    # No 422 or 503: it takes no parameters, and a database that does not answer only sets
    # outbox_database_up to 0. Any route may meet the body size limit (app.api.body_limit).
    # 401 and 403 where OUTBOX_PROTECT_METRICS is on (the default with authentication): no
    # credentials, or a principal without describe on the cluster.
    responses={200: {"description": "Prometheus text exposition format", "content": {"text/plain": {}}},
               401: documented(401)[401], 403: documented(403)[403], 413: documented(413)[413]},
)
def metrics(request: Request, services: ServicesDep) -> Response:
    """Prometheus metrics: this process's counters (HTTP requests, errors by error_code,
    records appended, transactions completed and fenced, coordinator passes) and gauges read
    from the database (transactions by state, hanging transactions, the oldest open
    transaction's age, partitions' offsets and sizes, consumer group lag), computed at most
    once per OUTBOX_METRICS_GAUGE_INTERVAL_MS. Counters are per process: sum them across
    instances; the database gauges are the same in every process."""
    gauges = CollectorRegistry(auto_describe=False)
    gauges.register(DatabaseGauges(services, request.app.state.schema_gate))
    return exposition(gauges)


def exposition(*registries: CollectorRegistry) -> Response:
    """This process's counters (app.metrics, in prometheus_client's REGISTRY) and then those of
    `registries`, in Prometheus' text format: what every /metrics answers, `outbox serve`'s and
    `outbox coordinator`'s (app.api.coordinator_metrics)."""
    return Response(b"".join(generate_latest(r) for r in (REGISTRY, *registries)), media_type=CONTENT_TYPE_LATEST)
