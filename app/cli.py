"""The `outbox` command: serve, coordinator, migrate, openapi."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

import yaml

from app.settings import Settings


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from app.api.app import create_app

    from app.gc_tuning import tune_for_service

    if args.no_coordinator:
        settings = settings.model_copy(update={"run_coordinator": False})
    app = create_app(settings)
    tune_for_service()
    uvicorn.run(
        app,
        host=args.host or settings.host,
        port=args.port or settings.port,
        log_level=settings.log_level,
        access_log=False,
        timeout_keep_alive=settings.http_keep_alive_timeout_s,
    )
    return 0


def _coordinator(settings: Settings, args: argparse.Namespace) -> int:
    from app.domain.clock import system_clock
    from app.services.group_service import GroupService
    from app.services.transaction_coordinator import TransactionCoordinator
    from app.storage import migrate
    from app.storage.engine import open_database
    from app.worker.coordinator import CoordinatorWorker

    if settings.should_auto_migrate:
        migrate.upgrade(settings.database_url)
    db = open_database(settings, pool_size=2)
    worker = CoordinatorWorker(
        TransactionCoordinator(db, settings, system_clock),
        system_clock,
        settings.coordinator_interval_ms,
        groups=GroupService(db, settings, system_clock),
    )
    if args.once:
        print(worker.run_once())
        return 0
    from app.gc_tuning import tune_for_service

    tune_for_service()
    if settings.coordinator_metrics_port is not None:
        # Its counters (passes, completions, timeouts) on their own port: this process serves
        # no API. The database gauges are in every `serve`'s /metrics.
        from prometheus_client import start_http_server

        start_http_server(settings.coordinator_metrics_port, addr=settings.host)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    worker.start()
    logging.getLogger(__name__).info("coordinator running against %s", db.dialect)
    stop.wait()
    worker.stop()
    db.dispose()
    return 0


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    from app.storage import migrate

    migrate.upgrade(settings.database_url, args.revision)
    print(f"database at {migrate.head_revision(settings.database_url) if args.revision == 'head' else args.revision}")
    return 0


def openapi_yaml() -> str:
    from app.api.app import create_app

    return yaml.safe_dump(create_app(Settings()).openapi(), sort_keys=False, allow_unicode=True)


def _openapi(settings: Settings, args: argparse.Namespace) -> int:
    text = openapi_yaml()
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    return 0


def _transactions(settings: Settings, args: argparse.Namespace) -> int:
    """Operator tools against the configured database (like kafka-transactions.sh)."""
    import json

    from app.domain.clock import system_clock
    from app.domain.types import TransactionState
    from app.services.transaction_coordinator import TransactionCoordinator
    from app.storage.engine import Database, build_engine

    db = Database(build_engine(settings.database_url, pool_size=1))
    coordinator = TransactionCoordinator(db, settings, system_clock)
    now = system_clock()

    def row(m) -> dict:  # type: ignore[no-untyped-def]
        age = now - m.txn_started_ms if m.state is TransactionState.ONGOING and m.txn_started_ms else None
        return {"transactional_id": m.transactional_id, "state": m.state.value,
                "producer_id": m.producer_id, "producer_epoch": m.producer_epoch,
                "txn_id": m.txn_id, "age_ms": age}

    try:
        if args.action == "list":
            states = [TransactionState(s) for s in args.state] if args.state else None
            out = [row(m) for m in coordinator.list(states, args.limit, args.min_age_ms)]
        elif args.action == "hanging":
            out = [row(m) for m in coordinator.hanging(now)]
        elif args.action == "describe":
            view = coordinator.describe(args.transactional_id)
            meta, parts, pending = view.meta, view.partitions, view.pending_offsets
            out = {**row(meta),
                   "partitions": [{"topic": p.topic, "partition": p.partition, "first_offset": p.first_offset} for p in parts],
                   "pending_offsets": [{"group_id": o.group_id, "topic": o.topic, "partition": o.partition,
                                        "offset": o.committed_offset} for o in pending]}
        else:
            out = row(coordinator.admin_abort(args.transactional_id).meta)
    finally:
        db.dispose()
    print(json.dumps(out, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="outbox",
        description="Kafka-style transactions over HTTP. Settings come from OUTBOX_* variables "
        "(OUTBOX_DATABASE_URL, default sqlite:///./outbox.db).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP API (with the coordinator worker in-process)")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--no-coordinator", action="store_true",
                       help="do not run the coordinator worker in this process")
    serve.set_defaults(func=_serve)
    coord = sub.add_parser("coordinator", help="run the coordinator worker alone")
    coord.add_argument("--once", action="store_true", help="one pass, then exit")
    coord.set_defaults(func=_coordinator)
    mig = sub.add_parser("migrate", help="alembic upgrade on the configured database")
    mig.add_argument("revision", nargs="?", default="head")
    mig.set_defaults(func=_migrate)
    tx = sub.add_parser("transactions", help="operator tools: list, describe, hanging, abort")
    txs = tx.add_subparsers(dest="action", required=True)
    tl = txs.add_parser("list", help="transactions, by state and age")
    tl.add_argument("--state", action="append", help="e.g. Ongoing (repeatable)")
    tl.add_argument("--min-age-ms", type=int, default=None)
    tl.add_argument("--limit", type=int, default=1000)
    txs.add_parser("hanging", help="open (or completing) longer than the maximum transaction timeout")
    td = txs.add_parser("describe")
    td.add_argument("transactional_id")
    ta = txs.add_parser("abort", help="abort an open transaction and fence its producer")
    ta.add_argument("transactional_id")
    tx.set_defaults(func=_transactions)
    oa = sub.add_parser("openapi", help="write the OpenAPI document as YAML")
    oa.add_argument("--output", "-o", default="openapi.yaml")
    oa.set_defaults(func=_openapi)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings()
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return args.func(settings, args)


if __name__ == "__main__":
    sys.exit(main())
