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
from app.domain.types import TransactionState
from app.services.schema_gate import SchemaGate

logger = logging.getLogger(__name__)

router = APIRouter(tags=["metrics"])


class DatabaseGauges:
    """Read at scrape time from the database, so every API process reports the same values."""

    def __init__(self, services: Services, schema: SchemaGate) -> None:
        self.services = services
        self.schema = schema

    def collect(self) -> Iterator[Metric]:
        coordinator = self.services.coordinator
        up = GaugeMetricFamily("outbox_database_up", "1 if the database answered this scrape's queries, else 0.")
        if not self.schema.open:
            # Not migrated yet: the tables are not there, and start-up has warned once already,
            # where a warning per scrape would fill the log.
            up.add_metric([], 0)
            yield up
            return
        try:
            by_state, hanging = coordinator.gauges(self.services.clock())
        except Exception as exc:  # noqa: BLE001 - a scrape must answer while the database is down
            logger.warning("metrics: database gauges unavailable: %s", exc.__class__.__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        states = GaugeMetricFamily(
            "outbox_transactions", "transactional_ids in each transaction state.", labels=["state"]
        )
        for state in TransactionState:
            states.add_metric([state.value], by_state.get(state, 0))
        yield states
        yield GaugeMetricFamily(
            "outbox_transactions_hanging",
            "Transactions open, or decided but not completed, for longer than the maximum "
            "transaction timeout: no coordinator worker is ending them (see `outbox transactions hanging`).",
            value=hanging,
        )


@router.get(
    "/metrics",
    operation_id="metrics",
    response_class=Response,
    # No 422 or 503: it takes no parameters, and a database that does not answer only sets
    # outbox_database_up to 0. Any route may meet the body size limit (app.api.body_limit).
    responses={200: {"description": "Prometheus text exposition format", "content": {"text/plain": {}}},
               413: documented(413)[413]},
)
def metrics(request: Request, services: ServicesDep) -> Response:
    """Prometheus metrics: this process's counters (HTTP requests, errors by error_code,
    records appended, transactions completed and fenced, coordinator passes) and gauges read
    from the database (transactions by state, hanging transactions). Counters are per
    process: sum them across instances; the database gauges are the same in every process."""
    gauges = CollectorRegistry(auto_describe=False)
    gauges.register(DatabaseGauges(services, request.app.state.schema_gate))
    return Response(generate_latest(REGISTRY) + generate_latest(gauges), media_type=CONTENT_TYPE_LATEST)
