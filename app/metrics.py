"""Prometheus metrics, exposed by `GET /metrics` (app.api.routers.metrics).

Counters live in this process: every `outbox serve` (and `outbox coordinator`) process counts
what it did itself, and Prometheus sums the instances it scrapes. What is stored in the
database (transactions by state, hanging ones) is read at scrape time instead, so every API
process reports the same figure for it: take max() across instances, not sum().

Counters are incremented after the database transaction that did the work has committed:
a rolled-back Send or completion counts nothing.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

# No `*_created` series beside every counter: a start timestamp per label set doubles the
# series and no dashboard of ours reads it.
disable_created_metrics()

HTTP_REQUESTS = Counter(
    "outbox_http_requests",
    "HTTP requests answered, by method, route template and status code.",
    ["method", "route", "status"],
)
HTTP_REQUEST_DURATION = Histogram(
    "outbox_http_request_duration_seconds",
    "Time from a request's arrival to the end of its response, by method and route template.",
    ["method", "route"],
    # A Send of 1,000 records takes a few milliseconds; a waiting offset fetch up to 30 s.
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
# The HTTP door's counterpart of KAFKA_CONNECTIONS_CLOSED, for the connections it closes on
# its own (app.api.http_protocol), by the same reason names where the cause is the same; those
# a client closes, or uvicorn's keep-alive timer, are not counted.
HTTP_CONNECTIONS_CLOSED = Counter(
    "outbox_http_connections_closed",
    "HTTP connections the service closed on its own, by reason: over OUTBOX_HTTP_MAX_CONNECTIONS "
    "or OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP, closed as accepted (too_many), a request head over "
    "OUTBOX_HTTP_MAX_HEAD_BYTES, answered 431 (too_large), bytes that are not an HTTP request, "
    "answered 400 (unreadable), more requests pipelined behind the one being answered than it "
    "queues (PIPELINE_MAX_QUEUED, app.api.http_limits), ended once those queued are answered "
    "(pipelined), a request (or its TLS handshake, at most 10 s) not whole within "
    "OUTBOX_HTTP_REQUEST_TIMEOUT_S or an answer its client took nothing of for "
    "OUTBOX_HTTP_SEND_TIMEOUT_S (idle).",
    ["reason"],
)
ERRORS = Counter(
    "outbox_errors",
    "Requests refused, by the error_code of their ErrorResponse.",
    ["error_code"],
)
RECORDS_APPENDED = Counter(
    "outbox_records_appended",
    "Records written by Sends, by kind of producer (plain, idempotent, transactional).",
    ["producer"],
)
RECORDS_FETCHED = Counter(
    "outbox_records_fetched",
    "Records returned by Fetches and streams, by isolation level (read_committed, read_uncommitted); a "
    "read shared by several waiting requests counts for each.",
    ["isolation"],
)
WAITING_REQUESTS = Gauge(
    "outbox_waiting_requests",
    "Requests of this process waiting now, by kind: a Fetch with max_wait_ms (fetch), a stream "
    "(stream, for its whole life), an offset fetch with wait_ms (offset_fetch).",
    ["kind"],
)
SPOOLED_BYTES = Gauge(
    "outbox_spooled_bytes",
    "Bytes of large answers (Fetches, streams' reads) spooled in memory and on disk for clients "
    "behind in reading them; at most OUTBOX_FETCH_SPOOL_MAX_BYTES, but for answers admitted together "
    "(each takes past it rather than hold a connection beyond half the pool).",
)
SPOOL_WAITING_READS = Gauge(
    "outbox_spool_waiting_reads",
    "Reads of large answers waiting for room in the spool, each holding its database connection "
    "for its client's pace; at most half of OUTBOX_DB_POOL_SIZE: with that many, a new large "
    "answer is refused (429 THROTTLING_QUOTA_EXCEEDED).",
)
FETCH_READS = Counter(
    "outbox_fetch_reads",
    "Reads of a Fetch, a multi-partition Fetch or a stream: done (shared=false: a database read) "
    "or taken from another request's identical read running at the same time (shared=true).",
    ["shared"],
)
DUPLICATE_BATCHES = Counter(
    "outbox_duplicate_batches",
    "Batches answered as a retry of one of the producer's last 5 batches in their partition: nothing written.",
)
TRANSACTIONS_COMPLETED = Counter(
    "outbox_transactions_completed",
    "Transactions whose control markers were written, by result (commit, abort).",
    ["result"],
)
TRANSACTIONS_FENCED = Counter(
    "outbox_transactions_fenced",
    "Open transactions aborted with a producer epoch bump, by reason: a new instance's "
    "InitProducerId (init_producer_id), the transaction timeout (timeout), an operator (admin).",
    ["reason"],
)
TRANSACTIONAL_IDS_EXPIRED = Counter(
    "outbox_transactional_ids_expired",
    "Idle transactional_ids forgotten after OUTBOX_TRANSACTIONAL_ID_EXPIRATION_MS.",
)
PRODUCER_IDS_EXPIRED = Counter(
    "outbox_producer_ids_expired",
    "Producer ids no Send used for OUTBOX_PRODUCER_ID_EXPIRATION_MS forgotten, with their sequence state.",
)
GROUP_MEMBERS_EXPIRED = Counter(
    "outbox_group_members_expired",
    "Consumer group members removed after their session timeout.",
)
GROUPS_DELETED_EMPTY = Counter(
    "outbox_groups_deleted_empty",
    "Consumer groups deleted by group expiry after EMPTY_GROUP_RETENTION_MS without members and offsets.",
)
GROUP_OFFSETS_EXPIRED = Counter(
    "outbox_group_offsets_expired",
    "Committed offsets of groups without members deleted by group expiry after OUTBOX_OFFSETS_RETENTION_MINUTES.",
)
COORDINATOR_PASSES = Counter(
    "outbox_coordinator_passes",
    "Passes of the coordinator worker, by outcome (ok, failed: the error is in the log).",
    ["outcome"],
)
GROUP_EXPIRY_PASSES = Counter(
    "outbox_group_expiry_passes",
    "Passes of group expiry (members whose session timed out, expired committed offsets, "
    "empty groups), by outcome (ok, failed: the "
    "error is in the log).",
    ["outcome"],
)
PRODUCER_EXPIRY_PASSES = Counter(
    "outbox_producer_expiry_passes",
    "Passes of producer expiry (producer ids idle for OUTBOX_PRODUCER_ID_EXPIRATION_MS), by "
    "outcome (ok, failed: the error is in the log).",
    ["outcome"],
)
CONSOLE_LAG_PASSES = Counter(
    "outbox_console_lag_passes",
    "Samples of the groups' lag kept for the console's lag history, by outcome (ok, failed: the "
    "error is in the log).",
    ["outcome"],
)
CLEANER_PASSES = Counter(
    "outbox_cleaner_passes",
    "Passes of the log cleaner, by outcome (ok, failed: the error is in the log).",
    ["outcome"],
)
CLEANER_RECORDS_DELETED = Counter(
    "outbox_cleaner_records_deleted",
    "Data records the log cleaner deleted, by reason: below a log start that DeleteRecords "
    "moved (below_log_start), retention_ms or retention_bytes (retention), compaction, or "
    "their topic deleted (topics_purged).",
    ["reason"],
)
CLEANER_BYTES_DELETED = Counter(
    "outbox_cleaner_bytes_deleted",
    "UTF-8 bytes of the keys, values and headers of the data records the log cleaner deleted "
    "(deleted topics' records not counted).",
)
# Set by the chore itself when a pass succeeds, in the process that runs it (`outbox serve`
# unless OUTBOX_RUN_COORDINATOR is off, or `outbox coordinator`); 0 in a process that has run
# none, so take max() across the processes scraped.
COORDINATOR_LAST_SUCCESS = Gauge(
    "outbox_coordinator_last_success_timestamp_seconds",
    "When this process's coordinator worker last finished a pass without error (Unix time); 0: never.",
)
GROUP_EXPIRY_LAST_SUCCESS = Gauge(
    "outbox_group_expiry_last_success_timestamp_seconds",
    "When this process's group expiry last finished a pass without error (Unix time); 0: never.",
)
PRODUCER_EXPIRY_LAST_SUCCESS = Gauge(
    "outbox_producer_expiry_last_success_timestamp_seconds",
    "When this process's producer expiry last finished a pass without error (Unix time); 0: never.",
)
CLEANER_LAST_SUCCESS = Gauge(
    "outbox_cleaner_last_success_timestamp_seconds",
    "When this process's log cleaner last finished a pass without error (Unix time); 0: never.",
)
# The Kafka-protocol door (app.kafka.server): what HTTP_REQUESTS, HTTP_REQUEST_DURATION and
# ERRORS say of the HTTP door, by API name (Produce, Fetch, JoinGroup, ...). The APIs served are
# a fixed list, so the label's values are bounded whatever clients send.
KAFKA_REQUESTS = Counter(
    "outbox_kafka_requests",
    "Kafka-protocol requests answered, by API (Produce, Fetch, ...; unsupported: a version or API "
    "not served: an ApiVersions answered UNSUPPORTED_VERSION, any other closing its connection).",
    ["api"],
)
KAFKA_REQUEST_DURATION = Histogram(
    "outbox_kafka_request_duration_seconds",
    "Time from a Kafka request's frame read to its answer encoded, by API; a Fetch's includes "
    "its wait (max_wait_ms).",
    ["api"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
KAFKA_ERRORS = Counter(
    "outbox_kafka_errors",
    "Error codes in Kafka answers, by API and Kafka's error name (one per partition, topic or "
    "group answered with it).",
    ["api", "error"],
)
KAFKA_CONNECTIONS = Gauge(
    "outbox_kafka_connections",
    "Kafka-protocol connections open now in this process.",
)
KAFKA_CONNECTIONS_CLOSED = Counter(
    "outbox_kafka_connections_closed",
    "Kafka-protocol connections closed, by reason: the client closed it (client), idle past "
    "OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS, its answer unread that long, or its TLS handshake not "
    "done that long (at most 10 s) (idle), over "
    "OUTBOX_KAFKA_MAX_CONNECTIONS or OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP (too_many), a frame over OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES "
    "(512 KiB before authentication) or a request over OUTBOX_KAFKA_MAX_REQUEST_ENTRIES "
    "(too_large), a frame that is not a request "
    "(unreadable), failed or forbidden authentication (authentication), an API key revoked "
    "(revoked), closed as Kafka tells an outcome (answered), the database unavailable "
    "(unavailable), a fault of the service (error: its traceback is in the log), the server "
    "stopping (shutdown).",
    ["reason"],
)
AUTHENTICATION_FAILURES = Counter(
    "outbox_authentication_failures",
    "Requests refused with 401, by method tried (api_key, jwt, mtls, none: no credentials).",
    ["method"],
)
AUTHORIZATION_REFUSALS = Counter(
    "outbox_authorization_refusals",
    "Operations refused with 403 because no ACL allowed them (or one denied them), by resource "
    "type and ACL operation.",
    ["resource_type", "operation"],
)
SECURITY_CHANGES = Counter(
    "outbox_security_changes",
    "ACL bindings added or removed and API keys created or revoked through this process.",
    ["change"],
)
SECURITY_REFRESH_PASSES = Counter(
    "outbox_security_refresh_passes",
    "Looks for ACL and API key changes made elsewhere, by outcome (ok, failed).",
    ["outcome"],
)
