"""Settings from the environment (prefix OUTBOX_). Built in entry points and passed down."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator, model_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from app.database_url import DRIVERS, sqlite_in_memory, unencoded_at
from app.domain.topic_config import DEFAULT_MAX_MESSAGE_BYTES
from app.settings.addresses import host_name
from app.settings.http import HttpSettings

AUTHENTICATION_METHODS = ("api_key", "jwt", "mtls")
NO_AUTHENTICATION = "none"
# The most samples the console's rate history keeps (a sample is five numbers): a window of
# hours at a short interval would otherwise grow without bound.
CONSOLE_HISTORY_MAX_SAMPLES = 10_000
# The longest wait_ms an offset fetch may ask for (GET /v1/groups/{group}/offsets), and so the
# most OUTBOX_MAX_OFFSET_FETCH_WAIT_MS may be.
OFFSET_FETCH_WAIT_MAX_MS = 600_000


@dataclass(frozen=True, slots=True)
class Limit:
    """A range a request's number must be in, set by settings: checked by a service (with
    Kafka's error code) and stated in the OpenAPI document (app.api.app), from one place."""

    low: int
    high: int
    settings: str  # the variables that set it, for the error message

    def __contains__(self, value: int) -> bool:
        return self.low <= value <= self.high

    def __str__(self) -> str:
        return f"{self.low}..{self.high} ({self.settings})"


# OUTBOX_DB_LOCK_TIMEOUT_MS's default (see Settings.db_lock_timeout_ms), also the bound of an
# engine built without settings (app.storage.engine.build_engine).
DB_LOCK_TIMEOUT_MS = 5_000

# The settings that act on one kind of database only, by that kind; each is refused with a
# database of the other kind.
OTHER_BACKENDS_SETTINGS = {
    "sqlite": ("sqlite_busy_timeout_ms", "sqlite_synchronous"),
    # SQLite's connections are files of this process: nothing to test before handing one out.
    "postgresql": ("db_pool_pre_ping", "db_lock_timeout_ms"),
}

ACCEPTED_DATABASE_URLS = "sqlite:///path.db or postgresql+psycopg://user:password@host:5432/db"


class Settings(HttpSettings):

    database_url: str = Field(
        default="sqlite:///./outbox.db",
        description="SQLAlchemy URL: sqlite:///path.db or postgresql+psycopg://user@host/db",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    # None: migrate on start-up for SQLite only (an embedded file has no operator to run
    # `outbox migrate`); PostgreSQL deployments migrate as a separate step.
    auto_migrate: bool | None = None
    run_coordinator: bool = Field(
        default=True, description="run the coordinator worker inside `outbox serve`"
    )
    # Complete commits and aborts inside the request that decides them (Commit, Abort, and the
    # InitProducerId that fences an open transaction); the coordinator worker still finishes
    # whatever a crash leaves behind. Off: those requests return once the decision
    # (PrepareCommit/PrepareAbort) is durable, as Kafka's EndTxn does, the worker writes the
    # markers, and until it has, InitProducerId and Begin answer CONCURRENT_TRANSACTIONS.
    complete_inline: bool = True
    # The pauses of the background chores (this, the cleaner's, the security refresher's) are a
    # thread's wait, which fails past a platform's bound and would end the chore: at most
    # 2^31-1 ms (24.8 days), a Kafka int.
    coordinator_interval_ms: int = Field(default=200, ge=10, le=2**31 - 1)
    # Pause between two passes of the log cleaner (retention, compaction, deleted topics), which
    # runs beside the coordinator worker. Kafka checks retention every 5 minutes
    # (log.retention.check.interval.ms) and compacts after 15 s backoff; a pass with nothing to
    # do costs a few indexed reads per partition.
    cleaner_interval_ms: int = Field(default=30_000, ge=10, le=2**31 - 1)
    # The most records a second the log cleaner deletes, on average (None: as fast as it can),
    # pausing between chunks: Kafka's log.cleaner.io.max.bytes.per.second, in records. On a
    # machine whose cores the service's own requests need, a cleaner at full speed takes one
    # of them (docs/benchmarks.md, the log cleaner).
    cleaner_max_records_per_second: int | None = Field(default=None, ge=1)
    # `outbox coordinator` serves no API; with a port here it serves its /metrics there (on
    # OUTBOX_HOST), for Prometheus to scrape its counters, under serve's rules for /metrics
    # (OUTBOX_PROTECT_METRICS, TLS, loopback only with authentication unset).
    coordinator_metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # The gauges /metrics reads from the database (lag, log bounds, transactions) are computed
    # at most once per this interval and the result served to every scrape in between, so that
    # many scrapers, or a burst of scrapes, cost one computation (0: computed on every scrape).
    metrics_gauge_interval_ms: int = Field(default=5_000, ge=0)
    # At most this many (group, topic, partition) series of outbox_group_lag and
    # outbox_group_lag_unknown a scrape exports: a label set Prometheus can hold whatever the
    # number of groups; what is left out is counted by outbox_group_lag_series_left_out.
    metrics_max_group_partitions: int = Field(default=10_000, ge=0)
    # At most this many (topic, partition) series of each per-partition gauge a scrape exports
    # (outbox_partition_log_end_offset and the others), the first by topic name and partition:
    # a label set Prometheus can hold whatever the number of partitions; what is left out is
    # counted by outbox_partition_series_left_out.
    metrics_max_partitions: int = Field(default=10_000, ge=0)
    # Kafka's transaction.timeout.ms default and transaction.max.timeout.ms.
    default_transaction_timeout_ms: int = Field(default=60_000, ge=1)
    max_transaction_timeout_ms: int = Field(default=900_000, ge=1)
    # Kafka's transactional.id.expiration.ms: an idle transactional_id is forgotten after this.
    # It must exceed the maximum transaction timeout, so that a zombie stays fenced.
    # At most 2^62 ms: the coordinator's cut-off, now minus this, is a 64-bit integer of the
    # database (SQLite refused a larger one, and every coordinator pass failed).
    transactional_id_expiration_ms: int = Field(default=7 * 24 * 3600 * 1000, ge=1, le=2**62)
    # Kafka's producer.id.expiration.ms, with its default (a day): the state of an idempotent
    # producer id (its row and its sequence state in each partition) that no Send has used for
    # this long is forgotten by the producer expiry chore (app.services.producer_expiry), so that
    # InitProducerIds without a transactional id do not keep rows without bound. Its next Send
    # takes the id back (LogService.send), as Kafka's brokers take a forgotten producer's next
    # produce: the producer goes on, and only a retry of a batch written before the expiry is
    # written again. The environment cannot unset it: a value longer than any producer stays
    # idle, up to 2^62 ms (the bound, for the reason above), forgets practically nothing. None,
    # which only code building Settings can give, forgets nothing and the chore does not run.
    producer_id_expiration_ms: int | None = Field(default=86_400_000, ge=1, le=2**62)
    # Kafka's group.min/max.session.timeout.ms, ints as there: a member's session timeout is a
    # 32-bit column of the database, which PostgreSQL refuses past 2^31-1.
    group_min_session_timeout_ms: int = Field(default=1_000, ge=1, le=2**31 - 1)
    group_max_session_timeout_ms: int = Field(default=1_800_000, ge=1, le=2**31 - 1)
    default_session_timeout_ms: int = Field(default=45_000, ge=1, le=2**31 - 1)
    # Kafka's offsets.retention.minutes, with its range (an int, 1 to 2^31-1): when set, a group
    # without members loses its committed offsets this long after they were committed or it was
    # left empty (app.storage.groups._offset_expired); group expiry looks once a minute. Unset
    # (None, the default; Kafka's is 7 days), committed offsets are never expired: a group
    # without members is what carries the exactly-once position of the Spark jobs and of every
    # sink that names a consumerGroup (docs/SPARK.md), and a run after a longer pause than the
    # retention would start again from the log's start and repeat its output.
    offsets_retention_minutes: int | None = Field(default=None, ge=1, le=2**31 - 1)
    # Kafka's group.max.size: the members one group may have, through either door (a join past
    # it is refused with GROUP_MAX_SIZE_REACHED), so that no caller makes the service hold
    # members without bound.
    group_max_size: int = Field(default=1_000, ge=1)
    # Kafka's group.initial.rebalance.delay.ms, with its default: a Kafka door's group that is
    # empty when a member joins forms its first generation no sooner than this, and later by as
    # much again for each period in which another member joined, up to the first member's
    # rebalance timeout, so that consumers started together are in the first generation together
    # (app.services.group_membership.prepare_rebalance). 0: the first member's join completes
    # at once. The HTTP door's groups have no join phase to delay (a join is answered at once).
    group_initial_rebalance_delay_ms: int = Field(default=3_000, ge=0)
    # Bound on how long an offset fetch may wait for a pending transaction (wait_ms), at most
    # what a request's wait_ms may ask for.
    max_offset_fetch_wait_ms: int = Field(default=30_000, ge=0, le=OFFSET_FETCH_WAIT_MAX_MS)
    max_records_per_request: int = Field(default=20_000, ge=1)
    max_partitions_per_topic: int = Field(default=1024, ge=1)
    # Kafka's broker message.max.bytes: the max_message_bytes of a topic created without one.
    message_max_bytes: int = Field(default=DEFAULT_MAX_MESSAGE_BYTES, ge=1, le=2**31 - 1)
    # Kafka's fetch.max.wait.ms, bounded: the longest a Fetch (max_wait_ms) or the wait between
    # two events of a stream may hold a request open waiting for records.
    fetch_max_wait_ms: int = Field(default=30_000, ge=0, le=600_000)
    fetch_max_records_default: int = Field(default=500, ge=1)
    # The most requests of one process that wait at once (a Fetch with max_wait_ms, a stream for
    # its whole life, an offset fetch with wait_ms), in all and per principal: past either, a
    # request that would wait is refused with THROTTLING_QUOTA_EXCEEDED (429, retriable).
    # Authentication off, each client address counts as a principal (app.api.waiting). Each
    # waiting HTTP request holds a connection: in all they stay below OUTBOX_HTTP_MAX_CONNECTIONS
    # (a quarter of it by default), so that requests that do not wait (a Send, a Commit, a
    # health check) always find one, and one principal's waits stay a tenth of that.
    max_waiting_requests: int = Field(default=750, ge=1)
    max_waiting_requests_per_principal: int = Field(default=75, ge=1)
    fetch_max_records_limit: int = Field(default=10_000, ge=1)
    # Kafka's fetch.max.bytes (a consumer's default, and the broker's fetch.max.bytes as the most
    # one may ask) and max.partition.fetch.bytes: the bytes of records (key, value and headers)
    # a Fetch returns in all and per partition, unless the first commit point alone is larger.
    fetch_max_bytes_default: int = Field(default=52_428_800, ge=1)
    fetch_max_bytes_limit: int = Field(default=57_671_680, ge=1)
    fetch_max_partition_bytes_default: int = Field(default=1_048_576, ge=1)
    fetch_max_partition_bytes_limit: int = Field(default=57_671_680, ge=1)
    # The bytes spooled, in memory and on disk, over the process (app.services.spool): large
    # Fetch answers and stream reads that their clients are behind by. Past it, a read waits for
    # its client holding its database connection; once half of db_pool_size do, a new large
    # answer is refused (429; app.services.spool.SpoolBytes.crowded).
    fetch_spool_max_bytes: int = Field(default=1 << 30, ge=1)
    # SQLite's busy_timeout pragma is a C int: past 2^31-1 SQLite reads it as 0, no wait at all.
    sqlite_busy_timeout_ms: int = Field(default=30_000, ge=0, le=2**31 - 1)
    # FULL: an acknowledged write survives a power loss too. NORMAL (WAL) survives a process
    # crash but may lose the last commits on power loss, for fewer fsyncs.
    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"
    db_pool_size: int = Field(default=10, ge=1)
    # PostgreSQL: test each pooled connection with a round trip before handing it out. Off by
    # default: that is a round trip more on every request (0.17 ms on the benchmark machine,
    # about 3 % of a Begin; docs/benchmarks.md). Without it a database restart fails the one
    # request that meets a dead connection first (503, retriable), and that failure discards
    # the whole pool.
    db_pool_pre_ping: bool = False
    # PostgreSQL: the longest any statement of the service waits for a lock (the session's
    # lock_timeout; app.storage.engine). A Send waits for the row lock of its partition, which
    # an application's own transaction holds from its outbox.append's publishing at COMMIT to
    # the end of that commit, and which any role granted appends could hold for as long as it
    # likes: unbounded, each such wait kept a pooled connection after its client had given up,
    # until the pool was gone and unrelated Sends and /readyz with it. Legitimate waits are
    # other Sends' commits to the same partition, milliseconds each, a queue of them at most
    # the pools' connections long: 5 s is well past that under load and well within a client's
    # own timeout (the Python client's 30 s, Kafka's request.timeout.ms 30 s), so the client
    # hears a retriable refusal rather than its own timeout. A bound of PostgreSQL's int.
    db_lock_timeout_ms: int = Field(default=DB_LOCK_TIMEOUT_MS, ge=1, le=2**31 - 1)
    # One line per request, HTTP (method, route template, status, duration, request id) and Kafka
    # (API and version, duration, error codes, principal, client).
    access_log: bool = True
    # Health probes and Prometheus scrapes arrive every few seconds from every prober and say
    # little; they are left out of the access log unless this is on.
    access_log_probes: bool = False

    # Who may call the API (README, "Authentication and ACLs"). Unset: nobody is asked, which
    # `outbox serve` allows on a loopback address only; `none` says so on purpose (anywhere,
    # with a warning); otherwise a comma-separated list of api_key, jwt, mtls, and then every
    # request but the health probes needs a principal and an ACL that allows what it does.
    authentication: str | None = None
    # Kafka's super.users: principals (User:<name>, separated by ;) that every ACL check allows.
    super_users: str = ""
    # How often each process looks for ACL and API key changes made elsewhere (another API
    # process, the CLI): a removed ACL or a revoked key stops working everywhere within this.
    security_refresh_interval_ms: int = Field(default=1_000, ge=10, le=2**31 - 1)
    # JWT bearer tokens (OAuth2 / OpenID Connect): the signature is checked against the keys at
    # the JWKS URL or the PEM public key, then the issuer, the audience and the expiry.
    jwt_jwks_url: str | None = None
    jwt_public_key_file: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_algorithms: str = "RS256,ES256"
    jwt_principal_claim: str = "sub"
    jwt_leeway_s: int = Field(default=30, ge=0, le=300)
    # HTTPS for `outbox serve` (and `outbox coordinator`'s metrics port), and with mtls the CA
    # whose client certificates it accepts.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None
    # With authentication on: /metrics (serve's and the coordinator's), and the API's pages
    # (/docs, /redoc, /openapi.json), need credentials too (and describe on the cluster for
    # /metrics). Unset, /metrics follows authentication (metrics_protected): its topic names,
    # group ids, lag and offsets are data the contract lets no anonymous caller read, so only
    # an explicit false opens it.
    protect_metrics: bool | None = None
    protect_docs: bool = False
    # The console's rate history (GET /v1/console/history, app.api.rate_history): every
    # interval this process samples its own counters, and keeps the rates of the last window.
    # At most CONSOLE_HISTORY_MAX_SAMPLES samples are kept, whatever the two say.
    console_history_interval_ms: int = Field(default=2_000, ge=100, le=3_600_000)
    console_history_window_ms: int = Field(default=900_000, ge=1_000, le=7 * 24 * 3600 * 1000)
    # The console's lag history (GET /v1/console/lag-history, app.services.lag_history): every
    # interval this process reads the groups' lag (the /metrics gauges' reading) and keeps, over
    # the same window, the total of the groups that lag most, at most this many per sample.
    # An interval of 0 keeps none (no database reads for it).
    console_lag_interval_ms: int = Field(default=10_000, ge=0, le=3_600_000)
    console_lag_max_groups: int = Field(default=20, ge=1, le=1_000)

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, url: str) -> str:
        # The message never repeats the URL: it may hold a password.
        try:
            parsed = make_url(url)
            backend = parsed.get_backend_name()
        except (ArgumentError, ValueError):
            raise ValueError(f"not a database URL; expected {ACCEPTED_DATABASE_URLS}") from None
        if backend not in ("sqlite", "postgresql", "postgres"):
            raise ValueError(f"{backend!r} databases are not supported; use sqlite or postgresql")
        # The service is written against these drivers only: another one fails on first use
        # (not installed, or async where the service is not), far from the setting.
        if parsed.drivername not in DRIVERS:
            raise ValueError(f"the driver {parsed.drivername!r} is not supported; use {ACCEPTED_DATABASE_URLS}")
        if backend == "sqlite":
            if parsed.username or parsed.password or parsed.host or parsed.port:
                raise ValueError("a SQLite URL names a file only, without user, password or host: "
                                 "sqlite:///path.db (relative) or sqlite:////abs/path.db")
            if sqlite_in_memory(parsed):
                # Every process, and every connection of one, would open a database of its own,
                # empty and gone when it closes.
                raise ValueError("SQLite needs a database file, not an in-memory database (each process "
                                 "would have its own, empty): sqlite:///path.db")
        else:
            if unencoded_at(url):
                # make_url ends a password at its first "@", and takes the rest for the host, the
                # database or a parameter: libpq's error about that would show it.
                raise ValueError("the user, password or database holds an '@' as it is: write it %40")
            for host in (parsed.host or "").split(","):
                # A name the resolver's codec refuses (an empty label, one over 63 characters)
                # would fail at the first connection as an unexpected UnicodeError.
                host_name(host)
        return url

    @field_validator("host")
    @classmethod
    def _check_host(cls, host: str) -> str:
        if not host.strip():
            # uvicorn would bind an empty host to every interface, which 0.0.0.0 says plainly.
            raise ValueError("empty; give an address, e.g. 127.0.0.1 (0.0.0.0 for every interface)")
        return host_name(host)

    @field_validator("authentication")
    @classmethod
    def _check_authentication(cls, value: str | None) -> str | None:
        if value is None or value.strip() == "":
            return None
        methods = [m.strip().lower() for m in value.split(",") if m.strip()]
        if methods == [NO_AUTHENTICATION]:
            return NO_AUTHENTICATION
        unknown = [m for m in methods if m not in AUTHENTICATION_METHODS]
        if unknown or not methods:
            raise ValueError(
                f"must be {NO_AUTHENTICATION!r} or a comma-separated list of {', '.join(AUTHENTICATION_METHODS)}"
                + (f" (not {', '.join(repr(m) for m in unknown)})" if unknown else "")
            )
        return ",".join(m for m in AUTHENTICATION_METHODS if m in methods)

    @field_validator("super_users")
    @classmethod
    def _check_super_users(cls, value: str) -> str:
        names = [n.strip() for n in value.split(";") if n.strip()]
        bad = [n for n in names if not n.startswith("User:") or n == "User:" or n == "User:*"]
        if bad:
            raise ValueError("must be principals User:<name> separated by ';' (User:* is not allowed)")
        return ";".join(names)

    @model_validator(mode="after")
    def _check_security(self) -> "Settings":
        methods = self.authentication_methods
        jwt_settings = {
            "OUTBOX_JWT_JWKS_URL": self.jwt_jwks_url, "OUTBOX_JWT_PUBLIC_KEY_FILE": self.jwt_public_key_file,
            "OUTBOX_JWT_ISSUER": self.jwt_issuer, "OUTBOX_JWT_AUDIENCE": self.jwt_audience,
        }
        if "jwt" in methods:
            if bool(self.jwt_jwks_url) == bool(self.jwt_public_key_file):
                raise ValueError("jwt authentication needs exactly one of OUTBOX_JWT_JWKS_URL and "
                                 "OUTBOX_JWT_PUBLIC_KEY_FILE (where the signing keys are)")
            if not self.jwt_issuer or not self.jwt_audience:
                raise ValueError("jwt authentication needs OUTBOX_JWT_ISSUER and OUTBOX_JWT_AUDIENCE: a token "
                                 "is accepted only from that issuer and for that audience")
            if not self.jwt_algorithm_list or any(a.startswith("HS") or a == "none" for a in self.jwt_algorithm_list):
                raise ValueError("OUTBOX_JWT_ALGORITHMS must list public-key algorithms (RS256, ES256, PS256, "
                                 "EdDSA, ...): HS* would take the public key as a shared secret")
        else:
            # The three with defaults count as set when given at all: they would do nothing.
            stray = [name for name, v in jwt_settings.items() if v] + [
                f"OUTBOX_{field.upper()}" for field in ("jwt_algorithms", "jwt_principal_claim", "jwt_leeway_s")
                if field in self.model_fields_set]
            if stray:
                raise ValueError(f"{', '.join(stray)} set, but jwt is not in OUTBOX_AUTHENTICATION")
        if self.tls_key_file and not self.tls_cert_file:
            raise ValueError("OUTBOX_TLS_KEY_FILE set without OUTBOX_TLS_CERT_FILE")
        if "mtls" in methods:
            if not self.tls_cert_file or not self.tls_client_ca_file:
                raise ValueError("mtls authentication needs OUTBOX_TLS_CERT_FILE (and OUTBOX_TLS_KEY_FILE unless "
                                 "the key is in it) and OUTBOX_TLS_CLIENT_CA_FILE (the CA of client certificates)")
        elif self.tls_client_ca_file:
            raise ValueError("OUTBOX_TLS_CLIENT_CA_FILE set, but mtls is not in OUTBOX_AUTHENTICATION")
        if not methods:
            stray = [name for name, v in (("OUTBOX_SUPER_USERS", self.super_users),
                                          # Only an explicit true: unset and false alike leave it open.
                                          ("OUTBOX_PROTECT_METRICS", self.protect_metrics),
                                          ("OUTBOX_PROTECT_DOCS", self.protect_docs)) if v]
            if stray:
                raise ValueError(f"{', '.join(stray)} set, but OUTBOX_AUTHENTICATION names no method: "
                                 "without authentication every caller may do everything")
            if "security_refresh_interval_ms" in self.model_fields_set:
                # No process runs the refresher without authentication: nothing is checked.
                raise ValueError("OUTBOX_SECURITY_REFRESH_INTERVAL_MS set, but OUTBOX_AUTHENTICATION names no "
                                 "method: no ACL or key is checked, so none is refreshed")
        return self

    @model_validator(mode="after")
    def _check_bounds(self) -> "Settings":
        if self.transactional_id_expiration_ms <= self.max_transaction_timeout_ms:
            raise ValueError(
                "OUTBOX_TRANSACTIONAL_ID_EXPIRATION_MS must exceed OUTBOX_MAX_TRANSACTION_TIMEOUT_MS, "
                "or an expired id could let a timed-out zombie's producer id back in"
            )
        if self.default_transaction_timeout_ms > self.max_transaction_timeout_ms:
            raise ValueError(
                "OUTBOX_DEFAULT_TRANSACTION_TIMEOUT_MS exceeds OUTBOX_MAX_TRANSACTION_TIMEOUT_MS"
            )
        if self.console_history_samples > CONSOLE_HISTORY_MAX_SAMPLES:
            raise ValueError(
                f"OUTBOX_CONSOLE_HISTORY_WINDOW_MS / OUTBOX_CONSOLE_HISTORY_INTERVAL_MS is "
                f"{self.console_history_samples} samples, more than the {CONSOLE_HISTORY_MAX_SAMPLES} kept at most"
            )
        if self.console_lag_samples > CONSOLE_HISTORY_MAX_SAMPLES:
            raise ValueError(
                f"OUTBOX_CONSOLE_HISTORY_WINDOW_MS / OUTBOX_CONSOLE_LAG_INTERVAL_MS is "
                f"{self.console_lag_samples} samples, more than the {CONSOLE_HISTORY_MAX_SAMPLES} kept at most"
            )
        for name in ("fetch_max_bytes", "fetch_max_partition_bytes"):
            if getattr(self, f"{name}_default") > getattr(self, f"{name}_limit"):
                raise ValueError(f"OUTBOX_{name.upper()}_DEFAULT exceeds OUTBOX_{name.upper()}_LIMIT")
        if self.fetch_max_records_default > self.fetch_max_records_limit:
            # A Fetch is answered with at most the limit, whatever the default says. Left at its
            # default under a lower limit, it is that limit: what a Fetch got before this check.
            if "fetch_max_records_default" in self.model_fields_set:
                raise ValueError("OUTBOX_FETCH_MAX_RECORDS_DEFAULT exceeds OUTBOX_FETCH_MAX_RECORDS_LIMIT")
            self.fetch_max_records_default = self.fetch_max_records_limit
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                "OUTBOX_GROUP_MIN_SESSION_TIMEOUT_MS exceeds OUTBOX_GROUP_MAX_SESSION_TIMEOUT_MS"
            )
        if self.default_session_timeout_ms not in self.session_timeout_limit:
            # The session timeout of an HTTP join that names none: outside the range every
            # such join would be refused with INVALID_SESSION_TIMEOUT, blaming the client. Left
            # at its default, it is held to the range, so that a deployment whose range leaves
            # out 45 s (its Kafka clients name their own) starts as it did.
            if "default_session_timeout_ms" in self.model_fields_set:
                raise ValueError(
                    f"OUTBOX_DEFAULT_SESSION_TIMEOUT_MS must be within {self.session_timeout_limit}"
                )
            self.default_session_timeout_ms = min(max(self.default_session_timeout_ms,
                                                      self.group_min_session_timeout_ms),
                                                  self.group_max_session_timeout_ms)
        if self.group_initial_rebalance_delay_ms > self.group_max_session_timeout_ms:
            # A JoinGroup waits out the delay: it is bounded as a rebalance timeout is. Left at
            # its default, it is that bound, so that a deployment whose bound is below 3 s
            # (which started before the delay existed) starts as it did.
            if "group_initial_rebalance_delay_ms" in self.model_fields_set:
                raise ValueError(
                    "OUTBOX_GROUP_INITIAL_REBALANCE_DELAY_MS exceeds OUTBOX_GROUP_MAX_SESSION_TIMEOUT_MS"
                )
            self.group_initial_rebalance_delay_ms = self.group_max_session_timeout_ms
        if self.kafka_num_partitions > self.max_partitions_per_topic:
            # Every topic auto-created through Metadata, and every CreateTopics that leaves the
            # count to the broker (-1), would be refused with INVALID_PARTITIONS.
            raise ValueError(
                "OUTBOX_KAFKA_NUM_PARTITIONS exceeds OUTBOX_MAX_PARTITIONS_PER_TOPIC"
            )
        if self.access_log_probes and not self.access_log:
            raise ValueError("OUTBOX_ACCESS_LOG_PROBES set, but OUTBOX_ACCESS_LOG is false: no request is logged")
        if self.console_lag_interval_ms and not self.metrics_max_group_partitions:
            # The lag history takes the groups' lag from the gauges' reading, which then holds
            # no group partition: every sample would be empty, read from the database anyway.
            raise ValueError("OUTBOX_METRICS_MAX_GROUP_PARTITIONS is 0, but OUTBOX_CONSOLE_LAG_INTERVAL_MS is not: "
                             "the console's lag history would read no group's lag; set "
                             "OUTBOX_CONSOLE_LAG_INTERVAL_MS=0 too")
        if not self.console_lag_interval_ms and "console_lag_max_groups" in self.model_fields_set:
            raise ValueError("OUTBOX_CONSOLE_LAG_MAX_GROUPS set, but OUTBOX_CONSOLE_LAG_INTERVAL_MS is 0: "
                             "no lag history is kept")
        if self.max_waiting_requests >= self.http_max_connections and "max_waiting_requests" not in self.model_fields_set:
            # Left at its default under a lower connection limit, it is three quarters of that
            # limit (as 750 is of 1,000), so that a deployment which lowered the connection limit
            # alone starts as it did before the bound had to be below it. Set in __dict__: an
            # attribute assigned would count as set.
            self.__dict__["max_waiting_requests"] = max(1, self.http_max_connections * 3 // 4)
        if (self.max_waiting_requests_per_principal > self.max_waiting_requests
                and "max_waiting_requests_per_principal" not in self.model_fields_set):
            self.__dict__["max_waiting_requests_per_principal"] = self.max_waiting_requests
        if self.max_waiting_requests_per_principal > self.max_waiting_requests:
            raise ValueError(
                "OUTBOX_MAX_WAITING_REQUESTS_PER_PRINCIPAL exceeds OUTBOX_MAX_WAITING_REQUESTS"
            )
        if self.max_waiting_requests >= self.http_max_connections:
            # Each waiting HTTP request holds a connection: waits alone could then take every
            # connection, and a Send, a Commit or a health check would find none (closed as it
            # is accepted). Below it, the per-principal bound is too.
            raise ValueError(
                f"OUTBOX_MAX_WAITING_REQUESTS ({self.max_waiting_requests}) is not below "
                f"OUTBOX_HTTP_MAX_CONNECTIONS ({self.http_max_connections}): waiting requests could take "
                "every HTTP connection and leave none for requests that do not wait"
            )
        other = OTHER_BACKENDS_SETTINGS["postgresql" if self.is_sqlite else "sqlite"]
        if given := [name for name in other if getattr(self, name) != type(self).model_fields[name].default]:
            # Taken and ignored, such a setting would let its operator believe, say, that a
            # PostgreSQL service flushes as OUTBOX_SQLITE_SYNCHRONOUS says. One left at its
            # default changes nothing on either kind (an env file both kinds share).
            raise ValueError(
                f"{', '.join(f'OUTBOX_{name.upper()}' for name in given)} set, but OUTBOX_DATABASE_URL is "
                f"{'an SQLite' if self.is_sqlite else 'a PostgreSQL'} database, where "
                f"{'it does' if len(given) == 1 else 'they do'} nothing"
            )
        return self

    @property
    def console_history_samples(self) -> int:
        """How many samples the console's rate history keeps: its window, in intervals."""
        return -(-self.console_history_window_ms // self.console_history_interval_ms)

    @property
    def console_lag_samples(self) -> int:
        """How many samples the console's lag history keeps: its window, in intervals (0 when
        it keeps none)."""
        if not self.console_lag_interval_ms:
            return 0
        return -(-self.console_history_window_ms // self.console_lag_interval_ms)

    @property
    def partition_count_limit(self) -> Limit:
        return Limit(1, self.max_partitions_per_topic, "OUTBOX_MAX_PARTITIONS_PER_TOPIC")

    @property
    def transaction_timeout_limit(self) -> Limit:
        return Limit(1, self.max_transaction_timeout_ms, "OUTBOX_MAX_TRANSACTION_TIMEOUT_MS")

    @property
    def session_timeout_limit(self) -> Limit:
        return Limit(self.group_min_session_timeout_ms, self.group_max_session_timeout_ms,
                     "OUTBOX_GROUP_MIN_SESSION_TIMEOUT_MS..OUTBOX_GROUP_MAX_SESSION_TIMEOUT_MS")

    @property
    def fetch_bytes_limit(self) -> Limit:
        return Limit(1, self.fetch_max_bytes_limit, "OUTBOX_FETCH_MAX_BYTES_LIMIT")

    @property
    def fetch_partition_bytes_limit(self) -> Limit:
        return Limit(1, self.fetch_max_partition_bytes_limit, "OUTBOX_FETCH_MAX_PARTITION_BYTES_LIMIT")

    @property
    def authentication_methods(self) -> tuple[str, ...]:
        """The methods on; empty when authentication is off (unset or `none`)."""
        if self.authentication in (None, NO_AUTHENTICATION):
            return ()
        return tuple(self.authentication.split(","))

    @property
    def metrics_protected(self) -> bool:
        """Whether /metrics (serve's and the coordinator's) needs credentials and describe on
        the cluster: with authentication on, unless OUTBOX_PROTECT_METRICS=false opens it."""
        return bool(self.authentication_methods) and self.protect_metrics is not False

    @property
    def super_user_list(self) -> frozenset[str]:
        return frozenset(n for n in self.super_users.split(";") if n)

    @property
    def jwt_algorithm_list(self) -> list[str]:
        return [a.strip() for a in self.jwt_algorithms.split(",") if a.strip()]

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def should_auto_migrate(self) -> bool:
        return self.is_sqlite if self.auto_migrate is None else self.auto_migrate
