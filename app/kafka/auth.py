"""Who a Kafka connection is, and what each of its requests may do: SASL/PLAIN or SCRAM with an
API key, TLS, and the ACL checks of every served API.

Authentication. With OUTBOX_AUTHENTICATION naming `api_key`, a connection authenticates with
SASL (SaslHandshake v0-1, then SaslAuthenticate v0-2, or after a v0 handshake the bare tokens,
as Kafka's oldest clients send them), with one of MECHANISMS: the user name is the principal's
name (`alice` or `User:alice`), the password one of its API keys. PLAIN checks the key with the
same SecurityState as the HTTP door's Bearer and Basic credentials; SCRAM-SHA-256 and
SCRAM-SHA-512 (app.domain.scram) take two rounds, client-first then client-final, against the
SCRAM credentials stored with the key, which keys created before migration 0024 do not have.
Until then a connection may send ApiVersions and the handshake only; any other request closes
it, as Kafka's broker does. A refusal is answered SASL_AUTHENTICATION_FAILED and the connection
closed; counted in outbox_authentication_failures_total{method="api_key"} and written as an
audit line, never with the key. A principal authenticated by either mechanism is the same
principal, held to the same ACLs.

TLS. With OUTBOX_TLS_CERT_FILE set the listener speaks TLS with the HTTP door's certificate and
key (SASL_SSL); without it SASL_PLAINTEXT, and the API keys cross the network in clear text.

Authorization: one table, one check. RULES says, for every served API key, which (operation,
resource) pairs a request needs: the fixed ones (a transactional id, a group) and one per topic
it names. The handler makes the checks where Kafka makes them, through `access()` (a
per-request Access: SecurityState.is_allowed, the engine's one decision, which the HTTP door
uses too), and answers a refusal with Kafka's code for the resource: refusal_code, the one
definition of that answer. After the handler returns, the listener (app.kafka.server) holds it
to RULES (Access.hold_to_rules; a handler that writes, Produce and DeleteRecords, holds itself
to it before its first write): every pair was checked (or declared `not_acted_on`: a topic no entry of the request
acts on, named twice or, by DeleteTopics v6, both by name and by id, which Kafka answers
INVALID_REQUEST without asking an ACL), or a refusal ended the request first; otherwise
the request fails as the service's fault and its connection is closed. So a handler that
forgets a check fails every test that calls it, authentication on or off, and an API without an
entry in RULES is not served (tests/kafka/test_security_rules.py).

To add an API (a consumer-group API in app/kafka/groups.py, say): give it an entry in RULES,
a function of the request body that lists its needs; in its handler, call
`refusal_code(operation, resource)` for each need and answer the code it returns (None: go
on), and `access().allows(...)` where Kafka filters silently (Metadata's list of every topic).
"""

from __future__ import annotations

import contextvars
import enum
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from app.domain import acl, scram
from app.domain.acl import ANONYMOUS, CLUSTER, Operation, Principal, Resource, ResourceType
from app.domain.errors import AuthenticationFailed
from app.kafka.api_keys import ApiKey
from app.services.tls_accept import server_context

# The settings (app.settings.Settings) and the process's SecurityState
# (app.services.security), as handed to the listener: the Kafka door imports neither module
# (import-linter's kafka-door-through-services contract keeps it off storage and sqlalchemy).
Settings = Any
SecurityState = Any

NOBODY = Principal(ANONYMOUS, "none")
PLAIN = "PLAIN"
MECHANISMS = (PLAIN, *scram.HASHES)
# The largest frame a connection may send before it has authenticated: Kafka's default
# sasl.server.max.receive.size. A SASL exchange takes a few hundred bytes; without it, an
# unauthenticated connection could make the process hold OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES
# (100 MiB) per connection, each of OUTBOX_KAFKA_MAX_CONNECTIONS.
UNAUTHENTICATED_MAX_FRAME_BYTES = 524_288
# The most entries (list entries, tagged fields) a request may have before its connection has
# authenticated, in place of OUTBOX_KAFKA_MAX_REQUEST_ENTRIES: ApiVersions, SaslHandshake and
# SaslAuthenticate have a few. Without it, a frame under the bound above held ~260,000 empty
# tagged fields, each skipped in turn, and unauthenticated connections sending them one after
# another kept the listener's threads busy (a Kafka request answered after 14 s, median, with
# 200 such connections).
UNAUTHENTICATED_MAX_ENTRIES = 1_000


def unsupported_configuration(settings: Settings) -> str | None:
    """Why the Kafka listener cannot serve these settings (one line), or None."""
    methods = settings.authentication_methods
    if methods and "api_key" not in methods:
        return (f"the Kafka listener authenticates with SASL (PLAIN or SCRAM) and an API key only, not with "
                f"OUTBOX_AUTHENTICATION={settings.authentication}: add api_key to it, or unset OUTBOX_KAFKA_LISTENER")
    return None


def sasl_enabled(settings: Settings) -> bool:
    return "api_key" in settings.authentication_methods


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The listener's TLS context (the HTTP door's certificate and key), or None for none.
    Client certificates are not asked for: a Kafka client is who its SASL credentials say."""
    if not settings.tls_cert_file:
        return None
    context = server_context(settings.tls_cert_file, settings.tls_key_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


# --- authentication ----------------------------------------------------------------------


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"  # nothing but ApiVersions and SaslHandshake yet
    AUTHENTICATE = "authenticate"  # SaslHandshake v1 taken: SaslAuthenticate next
    RAW_TOKEN = "raw_token"  # SaslHandshake v0 taken: the next frame is the bare token
    AUTHENTICATED = "authenticated"


@dataclass(slots=True)
class Session:
    """One connection's authentication."""

    state: SaslState
    principal: Principal | None = None
    # The id (never the secret) of the API key it authenticated with: a revoked key closes
    # the connection at its next request (SecurityState.api_key_id_is_live).
    key_id: str | None = None
    mechanism: str | None = None  # the one SaslHandshake took
    # A SCRAM exchange between its two rounds: one at a time per connection, dropped when it
    # ends, so a connection holds no more than one server-first message's state.
    scram: scram.ServerExchange | None = None

    @classmethod
    def start(cls, settings: Settings) -> "Session":
        if sasl_enabled(settings):
            return cls(SaslState.HANDSHAKE)
        return cls(SaslState.AUTHENTICATED, NOBODY)


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one request of a connection may be: its frame's bytes and its lists' entries, with
    the names the log gives each bound when a request passes it."""

    max_frame_bytes: int
    max_entries: int
    frame_bytes_name: str
    entries_name: str


def request_bounds(settings: Settings, session: Session) -> Bounds:
    """The bounds on `session`'s next request: the settings' once it has authenticated (or on a
    listener without authentication), else the lower of them and the pre-authentication bounds,
    so that a connection that has proved nothing cannot make the process read or hold more
    than a SASL exchange needs."""
    if session.state is SaslState.AUTHENTICATED:
        return Bounds(settings.kafka_socket_request_max_bytes, settings.kafka_max_request_entries,
                      "OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES", "OUTBOX_KAFKA_MAX_REQUEST_ENTRIES")
    return Bounds(min(settings.kafka_socket_request_max_bytes, UNAUTHENTICATED_MAX_FRAME_BYTES),
                  min(settings.kafka_max_request_entries, UNAUTHENTICATED_MAX_ENTRIES),
                  "before authentication", "before authentication")


def plain_principal(state: SecurityState, auth_bytes: bytes, client: str | None) -> tuple[Principal, str]:
    """The principal of a SASL/PLAIN token (RFC 4616: authzid NUL user NUL password), whose
    password is an API key of the principal the user names, and the key's id;
    AuthenticationFailed otherwise. May take one scrypt: call it off the event loop."""
    parts = bytes(auth_bytes).split(b"\0")
    try:
        authzid, user, key = (p.decode("utf-8") for p in parts) if len(parts) == 3 else ("", "", "")
    except UnicodeDecodeError:
        authzid, user, key = "", "", ""
    if not user or not key:
        raise AuthenticationFailed("SASL/PLAIN needs a user name (the principal's) and a password (its API key)")
    if authzid and authzid != user:
        # Kafka's PLAIN server takes no authorization identity other than the user itself.
        raise AuthenticationFailed("the SASL/PLAIN authorization identity differs from the user name")
    principal = state.api_key_principal(key, client)
    if acl.principal_name(user) != principal:
        raise AuthenticationFailed("the API key belongs to another principal than the user name given")
    return Principal(principal, "api_key"), state.api_key_id(key)


def sasl_step(state: SecurityState, session: Session, token: bytes, client: str | None) -> tuple[bytes, bool]:
    """The server's answer to the client's SASL token of `session`'s mechanism, and whether
    the connection is authenticated with it (then session.principal and key_id are set);
    AuthenticationFailed otherwise. May take one scrypt or read the database: call it off the
    event loop."""
    if session.mechanism == PLAIN:
        session.principal, session.key_id = plain_principal(state, token, client)
        return b"", True
    assert session.mechanism in scram.HASHES
    if session.scram is None:
        session.scram = state.scram_exchange(session.mechanism, token, client)
        return session.scram.first(), False
    exchange, session.scram = session.scram, None
    try:
        key_id, server_final = exchange.final(token)
    except AuthenticationFailed:
        state.scram_failed(exchange.client_first.user, client)
        raise
    session.principal = Principal(acl.principal_name(exchange.client_first.user), "api_key")
    session.key_id = key_id
    return server_final, True


def authentication_failed(state: SecurityState, e: AuthenticationFailed, client: str | None) -> None:
    """Count and audit a refused SaslAuthenticate; the message names no secret."""
    state.authentication_failed("api_key", "kafka SaslAuthenticate", e.message, client)


# --- authorization -----------------------------------------------------------------------

Need = tuple[Operation, Resource]

# Kafka's answer to a refused operation, by the type of the resource it was refused on.
_CODES: dict[ResourceType, ErrorCode] = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
}


@dataclass(slots=True)
class Access:
    """What one request's principal may do, and the checks its handler made. `state` None:
    authentication is off and everything is allowed (the checks are still recorded)."""

    principal: Principal
    state: SecurityState | None
    checked: set[Need] = field(default_factory=set)
    refused: set[Need] = field(default_factory=set)

    def allows(self, operation: Operation, resource: Resource) -> bool:
        """The decision, without counting a refusal: for what Kafka filters silently (a
        refusal the handler answers goes through refusal_code)."""
        self.checked.add((operation, resource))
        return self.state is None or self.state.is_allowed(self.principal, operation, resource)

    def may_write_some_topic(self) -> bool:
        """WRITE on some topic: what grants an idempotent producer id without IDEMPOTENT_WRITE
        on the cluster (KIP-679), as the HTTP door's InitProducerId."""
        return self.state is None or self.state.may_write_some_topic(self.principal)

    def refusal(self, operation: Operation, resource: Resource) -> None:
        if (operation, resource) in self.refused:
            return  # a Fetch that waits asks again: one refusal per request, counted once
        self.refused.add((operation, resource))
        if self.state is not None:  # without authentication nothing is refused
            self.state.refused(self.principal, operation, resource, door="kafka")

    def not_acted_on(self, operation: Operation, resource: Resource) -> None:
        """The request does nothing on `resource` that `operation` would allow (a topic a
        CreateTopics, DeleteTopics or CreatePartitions names twice, or a DeleteTopics v6 names
        both by name and by id, answered INVALID_REQUEST): the need is met without asking an
        ACL, so no refusal is counted or audited. It meets the need for the whole request (one
        set with the checks): declare it only when no entry of the request acts on `resource`."""
        self.checked.add((operation, resource))

    def unchecked(self, needs: list[Need]) -> list[Need]:
        """The needs no check was made for, unless a refusal ended the request first."""
        if self.refused:
            return []
        return [n for n in needs if n not in self.checked]

    def hold_to_rules(self, api_key: int, body: Any) -> None:
        """UncheckedAccess unless every need RULES lists for the request `body` of `api_key` was
        checked (or a refusal ended the request first). The listener holds every answer to it;
        a handler that writes holds itself to it before its first write, so that a check it
        missed writes nothing (found after the writes, it closed the connection unanswered and
        the client's retry wrote them again)."""
        unchecked = self.unchecked(RULES[api_key](body))
        if unchecked:
            raise UncheckedAccess(f"API key {api_key} answered without checking {unchecked}")


_CURRENT: contextvars.ContextVar[Access] = contextvars.ContextVar("kafka_access")


def access() -> Access:
    """The Access of the request being handled (set by the listener; asyncio.to_thread carries
    it into the handler's worker thread)."""
    return _CURRENT.get()


def refusal_code(operation: Operation, resource: Resource, *, granted: Callable[[], bool] | None = None,
                 audited: bool = True) -> ErrorCode | None:
    """What the Kafka door answers when the request's principal asks to do `operation` on
    `resource`: None if its ACLs allow it, else Kafka's code for the resource's type
    (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED). The check is
    recorded for RULES either way.

    `granted`: another grant that allows it as well, asked only when the ACLs on `resource` do
    not (CREATE on the cluster for a topic's CreateTopics; WRITE on some topic for an
    idempotent producer, KIP-679). `audited` False: where Kafka hides rather than refuses,
    without counting or auditing a refusal (a topic that exists, to a principal that may not
    describe it); a refusal otherwise is counted and audited once per request."""
    a = access()
    if a.allows(operation, resource) or (granted is not None and granted()):
        return None
    if audited:
        a.refusal(operation, resource)
    return _CODES[resource.type]


# Kafka's AclOperation code of each operation: a KIP-430 authorized-operations field sets bit
# `code` for every operation allowed. ALL is never one of them (authorized_operations leaves
# it out) but is Kafka's too.
ACL_OPERATION_CODES: dict[Operation, int] = {
    Operation.ALL: 2, Operation.READ: 3, Operation.WRITE: 4, Operation.CREATE: 5, Operation.DELETE: 6,
    Operation.ALTER: 7, Operation.DESCRIBE: 8, Operation.CLUSTER_ACTION: 9, Operation.DESCRIBE_CONFIGS: 10,
    Operation.ALTER_CONFIGS: 11, Operation.IDEMPOTENT_WRITE: 12,
}
# What an authorized-operations field holds when the request did not ask for it (INT32_MIN,
# the field's default in Kafka's schema).
NOT_REQUESTED = -2147483648


def topics_not_acted_on(operation: Operation, named: Iterable[str], acted_on: Iterable[str]) -> None:
    """Declares not_acted_on(operation, topic) for each topic `named` by the request that no
    entry acts on (`acted_on`: those named with a partition): a Fetch's or a DeleteRecords'
    topic named with an empty partition list only. Kafka's broker takes their partitions into
    a map and checks and answers each partition's topic, so such a topic is neither checked
    nor answered (protocol.partitions_once leaves it out too)."""
    acting = set(acted_on)
    for name in dict.fromkeys(named):
        if name not in acting:
            access().not_acted_on(operation, acl.topic(name))


def authorized_operations(resource: Resource, requested: bool) -> int:
    """The KIP-430 field of `resource` for the request's principal: the bits of the operations
    acl.authorized_operations grants (the HTTP door's answer too), or NOT_REQUESTED."""
    if not requested:
        return NOT_REQUESTED
    return sum(1 << ACL_OPERATION_CODES[op] for op in acl.authorized_operations(resource, access().allows))


def bind(a: Access) -> contextvars.Token[Access]:
    return _CURRENT.set(a)


def unbind(token: contextvars.Token[Access]) -> None:
    _CURRENT.reset(token)


def _topics(op: Operation, names: Callable[[Any], Any]) -> Callable[[Any], list[Need]]:
    return lambda body: [(op, acl.topic(n)) for n in names(body)]


def _transactional(body: Any, tid: str | None) -> list[Need]:
    return [] if tid is None else [(Operation.WRITE, acl.transactional_id(tid))]


def _produce(body: Any) -> list[Need]:
    return _transactional(body, body.transactional_id) + [(Operation.WRITE, acl.topic(t.name))
                                                          for t in body.topic_data]


def _init_producer_id(body: Any) -> list[Need]:
    if body.transactional_id is None:
        return [(Operation.IDEMPOTENT_WRITE, CLUSTER)]
    return _transactional(body, body.transactional_id)


# FindCoordinator's key_types, and the resource each key of one names: 0 a group, 1 a
# transactional id. Kafka's others (2, a share group's) are not served.
_COORDINATOR_RESOURCES: dict[int, Callable[[str], Resource]] = {0: acl.group, 1: acl.transactional_id}


def coordinator_resource(body: Any) -> Callable[[str], Resource] | None:
    """The resource of each key a FindCoordinator asks for by its key_type; None for a key_type
    that is none of them, which Kafka answers INVALID_REQUEST, checking nothing. Version 0 has
    no key_type: it finds a group's coordinator."""
    return _COORDINATOR_RESOURCES.get(getattr(body, "key_type", 0))


def _find_coordinator(body: Any) -> list[Need]:
    keys = body.coordinator_keys if hasattr(body, "coordinator_keys") else (body.key,)
    resource = coordinator_resource(body)
    return [] if resource is None else [(Operation.DESCRIBE, resource(k)) for k in keys]


def _add_partitions(body: Any) -> list[Need]:
    return _transactional(body, body.v3_and_below_transactional_id) + [
        (Operation.WRITE, acl.topic(t.name)) for t in body.v3_and_below_topics]


def _txn_and_group(body: Any) -> list[Need]:
    return _transactional(body, body.transactional_id) + [(Operation.READ, acl.group(body.group_id))]


def _txn_offset_commit(body: Any) -> list[Need]:
    return _txn_and_group(body) + [(Operation.READ, acl.topic(t.name)) for t in body.topics]


def _metadata(body: Any) -> list[Need]:
    # Every topic (topics null, or none at version 0) is filtered, not refused: nothing to hold.
    # A topic named by its id alone names no topic here (none has an id): UNKNOWN_TOPIC_ID.
    return [] if not body.topics else [(Operation.DESCRIBE, acl.topic(t.name)) for t in body.topics
                                       if t.name is not None]


def _nothing(body: Any) -> list[Need]:
    return []


def _group(op: Operation) -> Callable[[Any], list[Need]]:
    return lambda body: [(op, acl.group(body.group_id))]


def _offset_commit(body: Any) -> list[Need]:
    return [(Operation.READ, acl.group(body.group_id))] + [(Operation.READ, acl.topic(t.name)) for t in body.topics]


def _offset_fetch(body: Any) -> list[Need]:
    # Every partition (topics null) is filtered, not refused.
    return [(Operation.DESCRIBE, acl.group(body.group_id))] + [
        (Operation.DESCRIBE, acl.topic(t.name)) for t in body.topics or ()]


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource types this door knows: a topic's configs are guarded by the
    topic's ACLs, the broker's and the broker loggers' by the cluster's."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


CLUSTER_CONFIG_TYPES = frozenset({ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER})


def config_resource(resource_type: int, resource_name: str) -> Resource | None:
    """The resource whose ACLs guard a DescribeConfigs, AlterConfigs or IncrementalAlterConfigs
    resource: the topic's, or the cluster for the broker's and the broker loggers'. None for a
    type with no configs here (GROUP, CLIENT_METRICS, ...), answered INVALID_REQUEST with no
    check (app.kafka.topic_admin), so RULES needs nothing for it."""
    if resource_type == ConfigResourceType.TOPIC:
        return acl.topic(resource_name)
    return CLUSTER if resource_type in CLUSTER_CONFIG_TYPES else None


def _config_resources(op: Operation) -> Callable[[Any], list[Need]]:
    """DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: `op` on each resource's
    guard (config_resource)."""
    return lambda body: [(op, guard) for r in body.resources
                         if (guard := config_resource(r.resource_type, r.resource_name)) is not None]


def _delete_topics(body: Any) -> list[Need]:
    names = [t.name for t in body.topics] if hasattr(body, "topics") else list(body.topic_names)
    return [(Operation.DELETE, acl.topic(n)) for n in names if n is not None]


# api_key -> the (operation, resource) pairs a request of it needs (the module docstring).
RULES: dict[ApiKey, Callable[[Any], list[Need]]] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _topics(Operation.READ, lambda body: [t.topic for t in body.topics]),
    ApiKey.LIST_OFFSETS: _topics(Operation.DESCRIBE, lambda body: [t.name for t in body.topics]),
    ApiKey.METADATA: _metadata,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.SASL_HANDSHAKE: _nothing,
    ApiKey.API_VERSIONS: _nothing,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions,
    ApiKey.ADD_OFFSETS_TO_TXN: _txn_and_group,
    ApiKey.END_TXN: lambda body: _transactional(body, body.transactional_id),
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.SASL_AUTHENTICATE: _nothing,
    # The classic group protocol (app.kafka.groups; OffsetCommit and OffsetFetch app.kafka.group_offsets).
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.JOIN_GROUP: _group(Operation.READ),
    ApiKey.HEARTBEAT: _group(Operation.READ),
    ApiKey.LEAVE_GROUP: _group(Operation.READ),
    ApiKey.SYNC_GROUP: _group(Operation.READ),
    ApiKey.DESCRIBE_GROUPS: lambda body: [(Operation.DESCRIBE, acl.group(g)) for g in body.groups],
    ApiKey.LIST_GROUPS: _nothing,  # DESCRIBE on the cluster lists every group, else each is filtered
    # Administration (app.kafka.topic_admin, app.kafka.transaction_descriptions), as the HTTP
    # door's /v1/topics and /v1/transactions.
    # CreateTopics: CREATE on the cluster or on the topic (both asked, either allows).
    ApiKey.CREATE_TOPICS: _topics(Operation.CREATE, lambda body: [t.name for t in body.topics]),
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.DELETE_RECORDS: _topics(Operation.DELETE, lambda body: [t.name for t in body.topics]),
    ApiKey.DESCRIBE_CONFIGS: _config_resources(Operation.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CONFIGS: _config_resources(Operation.ALTER_CONFIGS),
    ApiKey.CREATE_PARTITIONS: _topics(Operation.ALTER, lambda body: [t.name for t in body.topics]),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _config_resources(Operation.ALTER_CONFIGS),
    ApiKey.DESCRIBE_PRODUCERS: _topics(Operation.READ, lambda body: [t.name for t in body.topics]),
    ApiKey.DESCRIBE_TRANSACTIONS: lambda body: [(Operation.DESCRIBE, acl.transactional_id(t))
                                                for t in body.transactional_ids],
    ApiKey.LIST_TRANSACTIONS: _nothing,  # each transactional id filtered by DESCRIBE
    # ACLs (app.kafka.acls), as /v1/acls: reading them DESCRIBE on the cluster, changing them ALTER.
    ApiKey.DESCRIBE_ACLS: lambda body: [(Operation.DESCRIBE, CLUSTER)],
    ApiKey.CREATE_ACLS: lambda body: [(Operation.ALTER, CLUSTER)],
    ApiKey.DELETE_ACLS: lambda body: [(Operation.ALTER, CLUSTER)],
    # The administration of groups (app.kafka.groups; OffsetDelete app.kafka.group_offsets).
    ApiKey.DELETE_GROUPS: lambda body: [(Operation.DELETE, acl.group(g)) for g in body.groups_names],
    ApiKey.OFFSET_DELETE: lambda body: [(Operation.DELETE, acl.group(body.group_id))] + [
        (Operation.READ, acl.topic(t.name)) for t in body.topics],
}


class UncheckedAccess(Exception):
    """A handler answered without making a check RULES requires: the service's fault."""
