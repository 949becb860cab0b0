"""Where the service is put together: the services a request needs (Services) and the
background chores a process runs, built from the settings. `outbox serve` (through
create_app), `outbox coordinator` and the CLI's commands all ask here, so a new service or a
new chore is wired in one place."""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.clock import Clock
from app.services.classic_group_protocol import ClassicGroupProtocol
from app.services.gauges import DatabaseGauges
from app.services.group_expiry import GroupExpiry
from app.services.group_offsets import GroupOffsetService
from app.services.group_service import GroupService
from app.services.lag_history import LagHistory
from app.services.log_cleaner import LogCleaner
from app.services.log_service import LogService
from app.services.producer_expiry import ProducerExpiry
from app.services.long_poll import LongPoll
from app.services.spool import SpoolBytes, spool_max_waiting
from app.services.security import SecurityService, SecurityState
from app.services.topic_service import TopicService
from app.services.transaction_coordinator import TransactionCoordinator
from app.services.waiting import WaitingRequests
from app.settings import Settings
from app.storage.changes import LogChanges
from app.storage.engine import Database
from app.worker.chore import Chore, ChoreConfig
from app.worker.cleaner import CleanerWorker
from app.worker.coordinator import CoordinatorWorker
from app.worker.group_expiry import GroupExpiryWorker
from app.worker.lag_history import LagHistorySampler
from app.worker.producer_expiry import ProducerExpiryWorker
from app.worker.security import SecurityRefresher


@dataclass
class Services:
    settings: Settings
    db: Database
    clock: Clock
    topics: TopicService
    log: LogService
    coordinator: TransactionCoordinator
    groups: GroupService
    group_offsets: GroupOffsetService
    # What the group-expiry and producer-expiry workers run; here for the tests, which run
    # their passes themselves.
    group_expiry: GroupExpiry
    producer_expiry: ProducerExpiry
    classic_group_protocol: ClassicGroupProtocol
    security: SecurityService
    waiting: WaitingRequests
    long_poll: LongPoll
    gauges: DatabaseGauges
    lag_history: LagHistory

    @classmethod
    def build(cls, settings: Settings, db: Database, clock: Clock,
              security_state: SecurityState | None = None, log_changes: LogChanges | None = None) -> "Services":
        log = LogService(db, settings, clock)
        waiting = WaitingRequests(settings.max_waiting_requests, settings.max_waiting_requests_per_principal)
        gauges = DatabaseGauges(db, settings, clock)
        return cls(
            settings=settings,
            db=db,
            clock=clock,
            topics=TopicService(db, settings, clock),
            log=log,
            coordinator=TransactionCoordinator(db, settings, clock, seen_topics=log.seen_topics,
                                               transaction_copies=log.transaction_copies),
            groups=GroupService(db, settings, clock),
            group_offsets=GroupOffsetService(db, settings, clock),
            group_expiry=GroupExpiry(db, settings),
            producer_expiry=ProducerExpiry(db, settings),
            classic_group_protocol=ClassicGroupProtocol(db, settings, clock),
            security=SecurityService(db, clock, on_change=None if security_state is None else security_state.reload),
            # Without the lifespan's LogChanges (a test's services), waits end on time only.
            waiting=waiting,
            long_poll=LongPoll(log, log_changes or LogChanges(settings.database_url), settings.fetch_max_wait_ms,
                               waiting, SpoolBytes(settings.fetch_spool_max_bytes,
                                                   spool_max_waiting(settings.db_pool_size))),
            gauges=gauges,
            lag_history=LagHistory(gauges, interval_ms=settings.console_lag_interval_ms,
                                   window_ms=settings.console_history_window_ms,
                                   max_samples=settings.console_lag_samples,
                                   max_groups=settings.console_lag_max_groups),
        )


def maintenance_chores(db: Database, settings: Settings, clock: Clock) -> list[Chore]:
    """What `outbox coordinator` runs, and `outbox serve` unless --no-coordinator: the
    coordinator worker, group expiry, producer expiry (where OUTBOX_PRODUCER_ID_EXPIRATION_MS is
    set) and the log cleaner."""
    return [
        CoordinatorWorker(TransactionCoordinator(db, settings, clock), clock,
                          ChoreConfig(settings.coordinator_interval_ms)),
        GroupExpiryWorker(GroupExpiry(db, settings), clock, ChoreConfig(settings.coordinator_interval_ms)),
        *([ProducerExpiryWorker(ProducerExpiry(db, settings), clock, ChoreConfig(settings.coordinator_interval_ms))]
          if settings.producer_id_expiration_ms is not None else []),
        CleanerWorker(LogCleaner(db, settings, clock), clock, ChoreConfig(settings.cleaner_interval_ms)),
    ]


def coordinator_chores(db: Database, settings: Settings, clock: Clock, security: SecurityState | None) -> list[Chore]:
    """What a long-running `outbox coordinator` runs: the maintenance chores and, when its
    metrics port checks credentials (security given), the security refresher, so that a
    revoked key or a removed ACL stops working there within the refresh interval too."""
    chores = maintenance_chores(db, settings, clock)
    if security is not None:
        chores.append(_security_refresher(security, settings, clock))
    return chores


def _security_refresher(security: SecurityState, settings: Settings, clock: Clock) -> Chore:
    return SecurityRefresher(security, clock, ChoreConfig(settings.security_refresh_interval_ms))


def serve_chores(db: Database, settings: Settings, clock: Clock, security: SecurityState | None,
                 lag_history: LagHistory) -> list[Chore]:
    """What an API process runs beside its requests: the maintenance chores where
    OUTBOX_RUN_COORDINATOR says, with authentication on the security refresher, and, unless
    OUTBOX_CONSOLE_LAG_INTERVAL_MS is 0, the sampler of the console's lag history."""
    chores = maintenance_chores(db, settings, clock) if settings.run_coordinator else []
    if security is not None:
        chores.append(_security_refresher(security, settings, clock))
    if settings.console_lag_interval_ms:
        chores.append(LagHistorySampler(lag_history, clock, ChoreConfig(settings.console_lag_interval_ms)))
    return chores
