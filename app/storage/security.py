"""ACL bindings, API keys, and the version counter that tells API processes to reload them.

Every change of `acls` or `api_keys` moves the counter `security_version` in the same
transaction (changed()), so a process that reads the counter and then the tables in one
snapshot (snapshot()) holds a cache that is exactly some committed state, never half of a
change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Connection, and_, delete, insert, select, update

from app.domain.acl import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from app.domain.errors import InvalidRequest
from app.domain.scram import ScramCredential
from app.storage import dialect
from app.storage.producers import next_id
from app.storage.tables import acls, api_keys, counters

logger = logging.getLogger(__name__)

SECURITY_VERSION = "security_version"
# Not a counter but a secret of the deployment, kept in `counters` to need no migration: a
# random 63-bit value, written once by the first process that needs it, from which every
# process derives the key of the decoy SCRAM salts (app.services.security).
SCRAM_DECOY = "scram_decoy"


@dataclass(frozen=True, slots=True)
class ApiKeyRow:
    key_id: str
    principal: str
    secret_hash: str
    created_ms: int
    revoked_ms: int | None
    # The key's SCRAM credential by mechanism (SCRAM-SHA-256, SCRAM-SHA-512); empty for a key
    # created before migration 0024.
    scram: dict[str, ScramCredential] = field(default_factory=dict)


# The columns of each mechanism's StoredKey and ServerKey.
_SCRAM_COLUMNS = {"SCRAM-SHA-256": ("scram_sha_256_stored_key", "scram_sha_256_server_key"),
                  "SCRAM-SHA-512": ("scram_sha_512_stored_key", "scram_sha_512_server_key")}


def _api_key(r) -> ApiKeyRow:  # type: ignore[no-untyped-def]
    scram = {} if r.scram_salt is None else {
        mechanism: ScramCredential(bytes(r.scram_salt), r.scram_iterations, bytes(getattr(r, stored)),
                                   bytes(getattr(r, server)))
        for mechanism, (stored, server) in _SCRAM_COLUMNS.items()}
    return ApiKeyRow(r.key_id, r.principal, r.secret_hash, r.created_ms, r.revoked_ms, scram)


@dataclass(frozen=True, slots=True)
class SecuritySnapshot:
    version: int
    bindings: tuple[AclBinding, ...]
    keys: dict[str, ApiKeyRow]  # live keys (not revoked) by key_id


def _matching(match: AclFilter) -> list:  # type: ignore[type-arg]
    """The filter as conditions on `acls`: one per field it names. A MATCH filter's name is
    not one of them: _matched applies it, with the domain's rule of a binding's pattern."""
    named = (((acls.c.resource_name, match.resource_name), (acls.c.pattern_type, match.pattern_type))
             if match.by_name else ())
    return [column == getattr(value, "value", value)
            for column, value in ((acls.c.principal, match.principal), (acls.c.resource_type, match.resource_type),
                                  *named, (acls.c.operation, match.operation), (acls.c.permission, match.permission))
            if value is not None]


def _matched(conn: Connection, match: AclFilter, *, removing: bool) -> list[tuple[int, AclBinding]]:
    """(acl_id, binding) of every binding the filter takes, in the order they were added. A
    row whose operation this process does not know (_row_binding) is left out of a listing;
    `removing`, it refuses the whole removal (InvalidRequest): deleting a binding this process
    cannot show would remove a grant or a deny nobody was told of."""
    matched = []
    for r in conn.execute(select(acls).where(*_matching(match)).order_by(acls.c.acl_id)):
        b = _row_binding(r)
        if b is None:
            # The operation does not decide whether the name matches: any stands in for it.
            if removing and match.matches_name(_binding(r, Operation.ALL)):
                raise InvalidRequest(
                    f"ACL {r.acl_id} matches: a binding with an operation this process does not know "
                    f"({r.operation!r}); upgrade this process to remove it")
            continue
        if match.matches_name(b):
            matched.append((r.acl_id, b))
    return matched


def version(conn: Connection) -> int:
    return conn.execute(select(counters.c.value).where(counters.c.name == SECURITY_VERSION)).scalar_one()


_DECOY_SEED = select(counters.c.value).where(counters.c.name == SCRAM_DECOY)


def scram_decoy_seed(conn: Connection) -> int | None:
    """The stored secret of the decoy SCRAM salts, None before its first use."""
    return conn.execute(_DECOY_SEED).scalar_one_or_none()


def add_scram_decoy_seed(conn: Connection, fresh: int) -> int:
    """Store `fresh` as the secret of the decoy SCRAM salts unless one is stored; the stored one.
    Insert-if-absent, so processes racing to write it all answer the one that was committed
    first (on PostgreSQL the loser's INSERT waits for the winner's commit, then does nothing)."""
    conn.execute(dialect.insert_ignore(conn, counters).values(name=SCRAM_DECOY, value=fresh))
    return conn.execute(_DECOY_SEED).scalar_one()


def changed(conn: Connection) -> int:
    """Move the counter: every process reloads at its next look (and this one at once)."""
    return next_id(conn, SECURITY_VERSION)


def _binding(r, operation: Operation | None = None) -> AclBinding:  # type: ignore[no-untyped-def]
    return AclBinding(r.principal, ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type),
                      Operation(r.operation) if operation is None else operation, Permission(r.permission))


_KNOWN_OPERATIONS = frozenset(op.value for op in Operation)
# The rows of an unknown operation this process has warned of: the ACLs are loaded again every
# OUTBOX_SECURITY_REFRESH_INTERVAL_MS, and a warning each time would repeat until the process
# is upgraded. Each row by its whole identity (_identity), not its acl_id alone: SQLite gives a
# deleted top acl_id to the next row added, another binding that must be warned of in turn.
# A load keeps only the rows it still sees (snapshot), so the set is bounded by the rows held
# now, not by every such binding ever granted and revoked in the process's life.
_WARNED_UNKNOWN: set[tuple[int, str, str, str, str, str, str]] = set()


def _identity(r) -> tuple[int, str, str, str, str, str, str]:  # type: ignore[no-untyped-def]
    return r.acl_id, r.principal, r.resource_type, r.resource_name, r.pattern_type, r.operation, r.permission


def _row_binding(r) -> AclBinding | None:  # type: ignore[no-untyped-def]
    """The row's binding; None for a row naming an operation this code does not know, which a
    newer process (a later migration's CHECK) may grant, with a warning naming it, once a
    process. So a process not yet upgraded keeps deciding every request by the bindings it
    understands (the binding could only ever allow what it names, or deny it) rather than
    failing them all."""
    if r.operation not in _KNOWN_OPERATIONS:
        identity = _identity(r)
        if identity in _WARNED_UNKNOWN:
            return None
        _WARNED_UNKNOWN.add(identity)
        logger.warning("ACL %s skipped: operation %r is unknown to this process (upgrade it to apply the "
                       "binding: %s %s %r on %s:%s, %s)", r.acl_id, r.operation, r.permission, r.principal,
                       r.operation, r.resource_type, r.resource_name, r.pattern_type)
        return None
    return _binding(r)


def snapshot(conn: Connection) -> SecuritySnapshot:
    """The version and everything it covers; `conn` must read one snapshot (Database.read)."""
    at = version(conn)
    rows = conn.execute(select(acls).order_by(acls.c.acl_id)).all()
    bindings = tuple(b for r in rows if (b := _row_binding(r)) is not None)
    # Every row held now is in `rows`: a warned-of row not among them is gone (a listing's
    # filter sees only some, so only a load forgets).
    _WARNED_UNKNOWN.intersection_update(_identity(r) for r in rows if r.operation not in _KNOWN_OPERATIONS)
    keys = {r.key_id: _api_key(r) for r in conn.execute(select(api_keys).where(api_keys.c.revoked_ms.is_(None)))}
    return SecuritySnapshot(at, bindings, keys)


def list_acls(conn: Connection, match: AclFilter) -> list[AclBinding]:
    return [b for _, b in _matched(conn, match, removing=False)]


def add_acls(conn: Connection, bindings: list[AclBinding], now_ms: int) -> list[bool]:
    """Store each binding unless it is stored already; whether each was new."""
    added = []
    for b in bindings:
        # RETURNING, not rowcount: PostgreSQL's driver reports -1 for an INSERT that returns
        # its key (SQLAlchemy adds RETURNING acl_id by itself), inserted or not.
        inserted = conn.execute(
            dialect.insert_ignore(conn, acls).values(
                principal=b.principal, resource_type=b.resource_type.value, resource_name=b.resource_name,
                pattern_type=b.pattern_type.value, operation=b.operation.value, permission=b.permission.value,
                created_ms=now_ms,
            ).returning(acls.c.acl_id)
        ).first()
        added.append(inserted is not None)
    if any(added):
        changed(conn)
    return added


def remove_acls(conn: Connection, match: AclFilter) -> list[AclBinding]:
    """Delete the bindings the filter matches; the ones deleted."""
    gone = _matched(conn, match, removing=True)
    if gone:
        conn.execute(delete(acls).where(acls.c.acl_id.in_([acl_id for acl_id, _ in gone])))
        changed(conn)
    return [b for _, b in gone]


def _scram_salt(conn: Connection, principal: str) -> tuple[bytes, int] | None:
    """The SCRAM salt and iteration count the principal's live keys share, None if it has
    none with SCRAM credentials."""
    row = conn.execute(select(api_keys.c.scram_salt, api_keys.c.scram_iterations)
                       .where(api_keys.c.principal == principal, api_keys.c.revoked_ms.is_(None),
                              api_keys.c.scram_salt.is_not(None))
                       .order_by(api_keys.c.created_ms, api_keys.c.key_id).limit(1)).first()
    return None if row is None else (bytes(row.scram_salt), row.scram_iterations)


def add_api_key(conn: Connection, key_id: str, principal: str, secret_hash: str, now_ms: int,
                scram_of: Callable[[tuple[bytes, int] | None], dict[str, ScramCredential]]) -> None:
    """Store a key. `scram_of` gives its SCRAM credential per mechanism, given the salt and
    iteration count the principal's live keys share (None: it has none yet, a new salt), and
    must use them: a SCRAM server states one salt before it knows which key the client holds.
    The counter moves first: its row's lock makes two transactions adding keys take turns,
    and the second reads the salt the first wrote (PostgreSQL's READ COMMITTED reads afresh
    after the wait; SQLite has one writer), so a principal's keys never get two salts."""
    changed(conn)
    shared = _scram_salt(conn, principal)
    scram = scram_of(shared)
    salts = {(c.salt, c.iterations) for c in scram.values()}
    if set(scram) != set(_SCRAM_COLUMNS) or len(salts) != 1 or (shared is not None and salts != {shared}):
        raise ValueError("a key's SCRAM credentials are one per mechanism, with the principal's salt")
    ((salt, iterations),) = salts
    columns = {column: getattr(scram[mechanism], attribute) for mechanism, names in _SCRAM_COLUMNS.items()
               for column, attribute in zip(names, ("stored_key", "server_key"), strict=True)}
    conn.execute(insert(api_keys).values(key_id=key_id, principal=principal, secret_hash=secret_hash,
                                         created_ms=now_ms, scram_salt=salt, scram_iterations=iterations, **columns))


def list_api_keys(conn: Connection, principal: str | None = None) -> list[ApiKeyRow]:
    stmt = select(api_keys).order_by(api_keys.c.principal, api_keys.c.created_ms, api_keys.c.key_id)
    if principal is not None:
        stmt = stmt.where(api_keys.c.principal == principal)
    return [_api_key(r) for r in conn.execute(stmt)]


def revoke_api_keys(conn: Connection, now_ms: int, *, principal: str | None = None,
                    key_id: str | None = None) -> list[str]:
    """Revoke the live keys of a principal, or one key; the key ids revoked."""
    live = [api_keys.c.revoked_ms.is_(None)]
    if principal is not None:
        live.append(api_keys.c.principal == principal)
    if key_id is not None:
        live.append(api_keys.c.key_id == key_id)
    revoked = list(conn.execute(update(api_keys).where(and_(*live)).values(revoked_ms=now_ms)
                                .returning(api_keys.c.key_id)).scalars())
    if revoked:
        changed(conn)
    return sorted(revoked)
