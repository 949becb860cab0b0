"""Who a request is, and what it may do: credentials checked, ACLs decided, both cached.

`SecurityState` is one per process. It holds a snapshot of the stored ACL bindings and live
API keys (app.storage.security), reloaded when the counter `security_version` moves: at once
after a change made through this process, and within OUTBOX_SECURITY_REFRESH_INTERVAL_MS after
one made elsewhere (SecurityRefresher, app.worker.security). Every decision on the request path
is then a dictionary lookup: an API key verified once is remembered by the SHA-256 of the
presented key, and a decision by (principal, operation, resource), both forgotten on reload.

`SecurityService` changes what is stored: API keys and ACL bindings, each change one audit
line (logger `outbox.audit`) and counted in outbox_security_changes.

Secrets are never logged nor kept: an API key's secret exists only in the answer that creates
it, and in the database as a scrypt hash and as SCRAM's StoredKey and ServerKey (RFC 5802,
app.domain.scram), from which no key can be recovered.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import metrics
from app.domain import scram
from app.domain.acl import (
    AclBinding,
    AclFilter,
    Operation,
    Principal,
    Resource,
    check_binding,
    is_allowed,
    may_write_some_topic,
    principal_name,
    principal_name_problem,
)
from app.domain.clock import Clock
from app.domain.errors import AuthenticationFailed, IdentityProviderUnavailable, InvalidRequest, StorageUnavailable
from app.settings import Settings
from app.storage import security as store
from app.storage.engine import Database
from app.storage.security import ApiKeyRow, SecuritySnapshot

audit = logging.getLogger("outbox.audit")

API_KEY_PREFIX = "outbox_"
_KEY_ID_HEX = 16
# scrypt (RFC 7914) at the cost OWASP advises for it (N=2^14... 2^17, r=8, p=1): about 40 ms
# per check on the benchmark machine, paid once per key and process thanks to the cache below.
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1
# Remembered verdicts, bounded: past this many the memory is emptied (a new key costs one
# scrypt again), so a client sending random keys cannot grow it without end.
_MAX_REMEMBERED = 50_000
_LOOK_AGAIN_S = 0.1
_FAILED_KEY_DELAY_S = 1.0


def hash_secret(secret: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32)
    return "$".join(("scrypt", str(_SCRYPT_N), str(_SCRYPT_R), str(_SCRYPT_P),
                     base64.b64encode(salt).decode(), base64.b64encode(digest).decode()))


def secret_matches(secret: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(secret.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
                             dklen=len(expected))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)  # constant time: no timing tells how much matched


def new_api_key() -> tuple[str, str, str]:
    """(key_id, secret, the whole key to hand out): `outbox_<16 hex>_<43 base64url characters>`,
    256 random bits of secret."""
    key_id = secrets.token_hex(_KEY_ID_HEX // 2)
    secret = secrets.token_urlsafe(32)
    return key_id, secret, f"{API_KEY_PREFIX}{key_id}_{secret}"


# A key id as a caller names one to revoke it (the API's path parameter, `outbox principals
# revoke --key-id`): lowercase hex, as new_api_key makes them. The anchored form is the API's
# and the OpenAPI document's; a malformed id is then refused alike wherever it is given.
KEY_ID_PATTERN = r"^[0-9a-f]+$"
KEY_ID_MAX_LENGTH = 32


def is_key_id(text: str) -> bool:
    """Whether `text` has a key id's shape (KEY_ID_PATTERN, at most KEY_ID_MAX_LENGTH)."""
    # fullmatch: re's `$` also matches before a final newline, which the pattern would let through.
    return 0 < len(text) <= KEY_ID_MAX_LENGTH and re.fullmatch(KEY_ID_PATTERN, text) is not None


# Where an API key new_api_key made may stand in a text, whatever surrounds it: what a message
# hides (app.cli's redaction of a key that reached it some other way than as a flag's value).
API_KEY_IN_TEXT = re.compile(rf"{re.escape(API_KEY_PREFIX)}[0-9a-f]{{{_KEY_ID_HEX}}}_[A-Za-z0-9_-]+")


def split_api_key(key: str) -> tuple[str, str] | None:
    """(key_id, secret) of something shaped like an API key, else None."""
    if not key.startswith(API_KEY_PREFIX):
        return None
    rest = key[len(API_KEY_PREFIX):]
    key_id, sep, secret = rest[:_KEY_ID_HEX], rest[_KEY_ID_HEX:_KEY_ID_HEX + 1], rest[_KEY_ID_HEX + 1:]
    if sep != "_" or not secret or len(key_id) != _KEY_ID_HEX:
        return None
    return key_id, secret


def scram_credentials(key: str, shared: tuple[bytes, int] | None) -> dict[str, scram.ScramCredential]:
    """The SCRAM credential of the whole API key (the password SASL/PLAIN takes too) for each
    mechanism, with the salt and iteration count the principal's other keys share, or a new
    salt at scram.ITERATIONS (app.domain.scram says why PBKDF2's lower cost is safe here)."""
    salt, iterations = shared or (secrets.token_bytes(scram.SALT_BYTES), scram.ITERATIONS)
    return {mechanism: scram.credential(mechanism, key, salt, iterations) for mechanism in scram.HASHES}


def _scram_guess(user: str, client: str | None) -> tuple[str, str]:
    """The throttle's key (SecurityState._failed_at) of a SCRAM guess: the client's address and
    the principal, marked apart from a PLAIN guess's key id."""
    return client or "-", "scram " + principal_name(user)


def _digest(credential: str) -> bytes:
    return hashlib.sha256(credential.encode()).digest()


@dataclass(frozen=True, slots=True)
class IssuedApiKey:
    key_id: str
    principal: str
    api_key: str  # shown once, never stored
    created_ms: int


class SecurityState:
    """This process's view of the stored ACLs and API keys, and its caches (module docstring)."""

    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self.super_users = settings.super_user_list
        # The stored state and the decisions made on it, replaced together by reload(): a
        # request reads `_state` once, so a decision is always stored beside the snapshot it
        # was made on (written into the replaced cache, a stale decision is dropped with it).
        self._state = _DecidedOn(SecuritySnapshot(-1, (), {}))
        self._lock = threading.Lock()  # one reload at a time
        self._verified: dict[bytes, ApiKeyRow] = {}  # SHA-256 of a presented key → its row
        self._refused: set[bytes] = set()  # SHA-256 of keys that failed: no scrypt again
        self.jwt = JwtVerifier(settings, clock) if "jwt" in settings.authentication_methods else None
        self._looked_again = 0.0
        # One scrypt at a time in this process, and none for a client within
        # _FAILED_KEY_DELAY_S of a wrong secret it sent (Kafka's
        # connection.failed.authentication.delay.ms, in spirit): a client guessing secrets of
        # known key ids costs at most one hash per key id per interval. The guesser is
        # throttled by its address and the key id it guessed, not by the key alone: key ids
        # are public, and a delay per key id let anyone keep a key's owner out by sending
        # wrong secrets for it; nor by the address alone, which kept every other key sent
        # from that address (a gateway, another tenant behind the same NAT) out as well.
        # The hash runs on one thread of its own, its callers (the HTTP door's threadpool, the
        # Kafka door's SASL) waiting for it in turn: scrypt takes 16 MiB, and the C library
        # keeps a buffer of that size for every thread that ever ran it, so that one at a time
        # in forty threads still kept forty of them (60 connections sending wrong secrets took
        # a fresh process from 133 to 568 MiB, for good; docs/benchmarks.md). Its queue is
        # bounded by the threads that wait on it, as the semaphore's waiters were.
        self._hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox-scrypt")
        self._failed_at: dict[tuple[str, str], float] = {}
        # The key of the decoy salts scram_exchange answers for a principal without SCRAM
        # credentials, derived from a secret stored once for the whole deployment
        # (store.scram_decoy_seed) and read at first use: a real principal's salt is stored,
        # the same in every process and after a restart, so a decoy must be too, or asking
        # twice across a restart or two replicas would tell who is a principal.
        self._decoy_salt_key: bytes | None = None

    @property
    def _snapshot(self) -> SecuritySnapshot:
        return self._state.snapshot

    @property
    def version(self) -> int:
        return self._state.snapshot.version

    def reload(self, *, unless_unchanged: bool = True) -> bool:
        """Read the stored state again if its version moved (or always); whether it did."""
        with self._lock:
            with self.db.read() as conn:
                if unless_unchanged and store.version(conn) == self._snapshot.version:
                    return False
                snapshot = store.snapshot(conn)
            # Swapped whole, decisions with it: a request that raced the swap decided on the
            # old state, as it would have a moment earlier, and its decision goes with it.
            self._state = _DecidedOn(snapshot)
            self._refused = set()
            self._verified = {d: row for d, row in self._verified.items() if row.key_id in snapshot.keys}
            return True

    # -- authorization --------------------------------------------------------------------

    def is_allowed(self, principal: Principal, operation: Operation, resource: Resource) -> bool:
        if principal.name in self.super_users:
            return True
        state = self._state
        key = (principal.name, operation, resource)
        decision = state.decisions.get(key)
        if decision is None:
            decision = is_allowed(state.snapshot.bindings, principal.name, operation, resource)
            if len(state.decisions) >= _MAX_REMEMBERED:
                state.decisions.clear()
            state.decisions[key] = decision
        return decision

    def refused(self, principal: Principal, operation: Operation, resource: Resource, **extra: Any) -> None:
        """Count and audit a refusal, for a door that does not import this module (the Kafka
        door reaches the services only through the objects it is handed)."""
        metrics.AUTHORIZATION_REFUSALS.labels(resource.type.value, operation.value).inc()
        audit_line(principal, operation.value, str(resource), False, **extra)

    def authentication_failed(self, method: str, target: str, reason: str, client: str | None) -> None:
        """Count and audit credentials refused (never the credentials themselves)."""
        metrics.AUTHENTICATION_FAILURES.labels(method).inc()
        audit_line("-", "authenticate", target, False, reason=reason, client=client)

    def may_write_some_topic(self, principal: Principal) -> bool:
        return principal.name in self.super_users or may_write_some_topic(self._state.snapshot.bindings,
                                                                          principal.name)

    # -- authentication -------------------------------------------------------------------

    def api_key_principal(self, key: str, client: str | None = None) -> str:
        """The principal of a live API key, or AuthenticationFailed. May take one scrypt
        (tens of milliseconds): call it off the event loop unless remembered() says no.
        `client` is the caller's address, throttled for that key id after a wrong secret."""
        digest = _digest(key)
        row = self._verified.get(digest)
        if row is not None and row.key_id in self._snapshot.keys:
            return row.principal
        parts = split_api_key(key)
        if parts is None:
            raise AuthenticationFailed("not an API key (outbox_<key id>_<secret>)")
        if digest in self._refused:
            raise AuthenticationFailed("the API key is unknown, revoked or wrong")
        stored = self._snapshot.keys.get(parts[0])
        if stored is None and self._may_look_again():
            # A key created a moment ago by another process (`outbox principals create`): look
            # for changes now rather than at the next refresh, at most once per
            # _LOOK_AGAIN_S, so that unknown keys sent in a loop cost no query each.
            self.reload()
            stored = self._snapshot.keys.get(parts[0])
        if stored is None:
            raise AuthenticationFailed("the API key is unknown, revoked or wrong")
        guess = (client or "-", parts[0])
        if self._failed_lately(guess):
            raise AuthenticationFailed(
                "this client sent a wrong secret for this API key a moment ago: try again in a second")
        matches = self._secret_matches(parts[1], stored.secret_hash)
        if not matches:
            # Remembered, as a scrypt was paid for it; an unknown key id costs none and is not
            # (it may be a key created elsewhere that this process has not seen yet).
            if len(self._refused) >= _MAX_REMEMBERED:
                self._refused = set()
            self._refused.add(digest)
            self._failed(guess)
            raise AuthenticationFailed("the API key is unknown, revoked or wrong")
        if len(self._verified) >= _MAX_REMEMBERED:
            self._verified = {}
        self._verified[digest] = stored
        return stored.principal

    def _failed_lately(self, guess: tuple[str, str]) -> bool:
        """Whether `guess` (a client's address, and what it guessed for) failed within
        _FAILED_KEY_DELAY_S."""
        failed = self._failed_at.get(guess)
        return failed is not None and time.monotonic() - failed < _FAILED_KEY_DELAY_S

    def _failed(self, guess: tuple[str, str]) -> None:
        if len(self._failed_at) >= _MAX_REMEMBERED:
            self._failed_at = {}
        self._failed_at[guess] = time.monotonic()

    def scram_failed(self, user: str, client: str | None) -> None:
        """A SCRAM exchange of `client` for the principal `user` names failed at its proof:
        that client's next exchange for it waits _FAILED_KEY_DELAY_S, as after a wrong PLAIN
        secret (api_key_principal). The proof's check is cheap for the service, but each try
        is a guess of the key, which without the delay a client could make as fast as the
        door answers. Kept apart from PLAIN's by key id, as a SCRAM client names no key."""
        self._failed(_scram_guess(user, client))

    def _secret_matches(self, secret: str, secret_hash: str) -> bool:
        """secret_matches on the hashing thread; StorageUnavailable (retriable: another
        process, or this one started again, answers) once close() has stopped it, for a check
        that was waiting behind the hash running then and for any after: a check is answered,
        never left waiting for a thread that will not run it."""
        stopping = StorageUnavailable("this process is stopping: the API key was not checked; try again")
        try:
            future = self._hashing.submit(secret_matches, secret, secret_hash)
        except RuntimeError:  # shut down already: the executor takes nothing more
            raise stopping from None
        try:
            return future.result()
        except CancelledError:  # queued when close() cancelled what had not begun
            raise stopping from None

    def close(self) -> None:
        """Stops the hashing thread, as the process stops: the hash running finishes on its
        own (its caller gets its answer), those queued behind it are cancelled, and every
        check from now on is refused (_secret_matches). Not waited for: a hash takes tens of
        milliseconds, and the process is ending."""
        self._hashing.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def api_key_id(key: str) -> str | None:
        """The key id of something shaped like an API key (not secret: it names the key)."""
        parts = split_api_key(key)
        return None if parts is None else parts[0]

    def api_key_id_is_live(self, key_id: str) -> bool:
        """Whether a key api_key_principal took is still live here, by its id: a connection
        that authenticated once (the Kafka door's) asks before each request, so that a revoked
        key stops working there within the refresh interval too, without keeping the secret."""
        return key_id in self._snapshot.keys

    def scram_exchange(self, mechanism: str, client_first: bytes, client: str | None = None) -> scram.ServerExchange:
        """The server's side of a SCRAM exchange that begins with `client_first`, whose user
        names the principal: its candidates are the principal's live keys with SCRAM
        credentials. A principal without any gets a decoy salt, the same for it at every try
        in every process of the deployment, so that its exchange fails at the proof as a wrong
        key does, and an outsider learns no more of who exists than SASL/PLAIN tells.
        AuthenticationFailed for a malformed message, or for `client` (its address) within
        _FAILED_KEY_DELAY_S of a failed proof for the same principal (scram_failed), known or
        not. May read the database (the decoy's secret at first use; a key created a moment
        ago elsewhere, at the proof): call it and the exchange's final() off the event loop."""
        first = scram.ClientFirst.parse(client_first)
        principal = principal_name(first.user)
        if self._failed_lately(_scram_guess(first.user, client)):
            raise AuthenticationFailed(
                "this client failed a SCRAM proof for this principal a moment ago: try again in a second")
        # No reload here when the principal has no candidates: a known principal never causes
        # one, so the time a reload takes would tell an outsider which names are unknown. A
        # key created elsewhere since the last refresh is looked for at the proof instead
        # (look_again), where a known principal with a wrong key can cause it too.
        candidates = self._scram_candidates(principal, mechanism)
        if candidates:
            salt, iterations = candidates[0].credential.salt, candidates[0].credential.iterations
        else:
            # Of the principal alone, as a real principal's salt and iterations are the same for
            # every mechanism (scram_credentials): a decoy that differed between SCRAM-SHA-256
            # and SCRAM-SHA-512 told an unknown name from a known one in two exchanges.
            salt = hmac.new(self._decoy_key(), principal.encode(), "sha256").digest()
            salt, iterations = salt[:scram.SALT_BYTES], scram.ITERATIONS

        def look_again(salt: bytes, iterations: int) -> list[scram.Candidate]:
            # The proof matched no key this process knows: one made a moment ago by another
            # process (`outbox principals create`) may, as PLAIN finds such a key by reloading
            # on an unknown key id. At most once per _LOOK_AGAIN_S, as there. Only keys under
            # the salt already sent can match; so a principal's first key, created after this
            # exchange was handed the decoy salt, fails this once; the client's next try is
            # sent the key's salt once this process holds the key (after this reload, or the
            # next refresh), and succeeds.
            if not (self._may_look_again() and self.reload()):
                return []
            return [c for c in self._scram_candidates(principal, mechanism)
                    if (c.credential.salt, c.credential.iterations) == (salt, iterations)]

        return scram.ServerExchange(mechanism, first, secrets.token_urlsafe(24), salt, iterations,
                                    [c for c in candidates if (c.credential.salt, c.credential.iterations)
                                     == (salt, iterations)], look_again)

    def _decoy_key(self) -> bytes:
        """The HMAC key of the decoy salts, from the deployment's stored secret (written by the
        first process to need it). Two threads racing here read the same stored value."""
        if self._decoy_salt_key is None:
            with self.db.read() as conn:
                seed = store.scram_decoy_seed(conn)
            if seed is None:
                with self.db.write() as conn:
                    seed = store.add_scram_decoy_seed(conn, secrets.randbits(63))
            self._decoy_salt_key = hashlib.sha256(b"outbox scram decoy salt " + seed.to_bytes(8, "big")).digest()
        return self._decoy_salt_key

    def _scram_candidates(self, principal: str, mechanism: str) -> list[scram.Candidate]:
        """The principal's live keys with a credential for `mechanism`, oldest first (the
        oldest's salt is the one storage gives the principal's next key)."""
        rows = sorted((r for r in self._snapshot.keys.values() if r.principal == principal and mechanism in r.scram),
                      key=lambda r: (r.created_ms, r.key_id))
        return [scram.Candidate(r.key_id, r.scram[mechanism]) for r in rows]

    def _may_look_again(self) -> bool:
        now = time.monotonic()
        if now - self._looked_again < _LOOK_AGAIN_S:
            return False
        self._looked_again = now
        return True

    def remembers(self, key: str) -> bool:
        """Whether api_key_principal(key) answers without a scrypt."""
        digest = _digest(key)
        row = self._verified.get(digest)
        return digest in self._refused or (row is not None and row.key_id in self._snapshot.keys)


class _DecidedOn:
    """A snapshot of the stored ACLs and keys, and the decisions made on it."""

    __slots__ = ("snapshot", "decisions")

    def __init__(self, snapshot: SecuritySnapshot) -> None:
        self.snapshot = snapshot
        self.decisions: dict[tuple[str, Operation, Resource], bool] = {}


class JwtVerifier:
    """OAuth2 / OpenID Connect bearer tokens, with pyjwt: the signature against the JWKS URL's
    keys (fetched and cached by PyJWKClient, again when a token names a key it has not seen)
    or the PEM public key; then issuer, audience, expiry (and not-before), with a leeway for
    clocks. The principal is User:<the configured claim>."""

    def __init__(self, settings: Settings, clock: Clock) -> None:
        import jwt

        self._jwt = jwt
        self.settings = settings
        self.clock = clock
        self.algorithms = settings.jwt_algorithm_list
        # The key set is cached for 5 minutes and fetched again for a key id not in it; no
        # per-key cache beside it (cache_keys), whose entries never expire: a key the provider
        # withdraws stops verifying within those 5 minutes.
        self._jwks = jwt.PyJWKClient(settings.jwt_jwks_url, cache_keys=False, cache_jwk_set=True, lifespan=300,
                                     timeout=10) if settings.jwt_jwks_url else None
        self._key: Any = None
        if settings.jwt_public_key_file:
            from cryptography.hazmat.primitives.serialization import load_pem_public_key

            try:
                self._key = load_pem_public_key(Path(settings.jwt_public_key_file).read_bytes())
            except (OSError, ValueError) as e:
                raise ValueError(f"OUTBOX_JWT_PUBLIC_KEY_FILE: cannot read a PEM public key from "
                                 f"{settings.jwt_public_key_file}: {e}") from None
        # Verified tokens by SHA-256, with their principal and expiry: a client sends the
        # same token for minutes, and an RSA check per request would cost more than the rest.
        self._verified: dict[bytes, tuple[str, float]] = {}

    def remembers(self, token: str) -> bool:
        """Whether principal(token) answers from memory (no signature check, no JWKS fetch)."""
        hit = self._verified.get(_digest(token))
        return hit is not None and self.clock() / 1000 < hit[1] + self.settings.jwt_leeway_s

    def principal(self, token: str) -> str:
        now_s = self.clock() / 1000
        digest = _digest(token)
        hit = self._verified.get(digest)
        if hit is not None and now_s < hit[1] + self.settings.jwt_leeway_s:
            return hit[0]
        jwt = self._jwt
        try:
            key = self._jwks.get_signing_key_from_jwt(token).key if self._jwks is not None else self._key
            claims = jwt.decode(
                token, key, algorithms=self.algorithms, audience=self.settings.jwt_audience,
                issuer=self.settings.jwt_issuer, leeway=self.settings.jwt_leeway_s,
                options={"require": ["exp", "iss", "aud"], "verify_iat": False},
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationFailed("the bearer token has expired", challenges=_bearer("invalid_token")) from None
        except jwt.PyJWKClientConnectionError:
            # The provider, not the token: retriable, not a refusal of the caller's credentials.
            raise IdentityProviderUnavailable() from None
        except jwt.PyJWTError as e:
            # pyjwt's messages name the check that failed ("Invalid audience", "Signature
            # verification failed"), never the token.
            raise AuthenticationFailed(f"the bearer token was refused: {e}", challenges=_bearer("invalid_token")) from None
        subject = claims.get(self.settings.jwt_principal_claim)
        if not isinstance(subject, str) or not subject:
            raise AuthenticationFailed(f"the bearer token has no {self.settings.jwt_principal_claim!r} claim "
                                       "(OUTBOX_JWT_PRINCIPAL_CLAIM) naming the principal",
                                       challenges=_bearer("invalid_token"))
        name = principal_name(subject)
        problem = principal_name_problem(name)
        if problem is not None:
            raise AuthenticationFailed(f"the bearer token's {self.settings.jwt_principal_claim!r} claim is not a "
                                       f"principal's name ({problem})", challenges=_bearer("invalid_token"))
        if len(self._verified) >= _MAX_REMEMBERED:
            self._verified = {}
        self._verified[digest] = (name, float(claims["exp"]))
        return name


def _bearer(error: str) -> tuple[str, ...]:
    return (f'Bearer realm="outbox", error="{error}"',)


def audit_line(principal: Principal | str, action: str, target: str, allowed: bool, **extra: Any) -> None:
    """One line per security decision worth keeping: a refusal, or a change of what is stored."""
    audit.info("%s %s %s %s", principal, action, target, "allowed" if allowed else "refused",
               extra={"principal": str(principal), "action": action, "resource": target,
                      "allowed": allowed, **extra})


class SecurityService:
    """Changes to API keys and ACL bindings (the admin endpoints and `outbox principals` /
    `outbox acls`). `on_change` is the process's SecurityState.reload, so the change acts here
    at once (elsewhere within the refresh interval)."""

    def __init__(self, db: Database, clock: Clock, on_change: Callable[[], Any] | None = None) -> None:
        self.db = db
        self.clock = clock
        self.on_change = on_change or (lambda: None)

    def create_api_key(self, principal: str, *, by: Principal | str) -> IssuedApiKey:
        name = principal_name(principal.strip())
        problem = principal_name_problem(name)
        if problem is not None:
            # The API's pattern (app.api.schemas.acls.PRINCIPAL_PATTERN), for the CLI too.
            raise InvalidRequest(f"not a principal name: {principal!r} ({problem})")
        key_id, secret, key = new_api_key()
        now = self.clock()
        with self.db.write() as conn:
            store.add_api_key(conn, key_id, name, hash_secret(secret), now,
                              lambda shared: scram_credentials(key, shared))
        metrics.SECURITY_CHANGES.labels("api_key_created").inc()
        audit_line(by, "create_api_key", f"{name} key {key_id}", True)
        self.on_change()
        return IssuedApiKey(key_id, name, key, now)

    def list_api_keys(self, principal: str | None = None) -> list[ApiKeyRow]:
        with self.db.read() as conn:
            return store.list_api_keys(conn, None if principal is None else principal_name(principal))

    def revoke_api_keys(self, *, by: Principal | str, principal: str | None = None,
                        key_id: str | None = None) -> list[str]:
        with self.db.write() as conn:
            revoked = store.revoke_api_keys(conn, self.clock(), key_id=key_id,
                                            principal=None if principal is None else principal_name(principal))
        for k in revoked:
            metrics.SECURITY_CHANGES.labels("api_key_revoked").inc()
            audit_line(by, "revoke_api_key", f"key {k}", True)
        if revoked:
            self.on_change()
        return revoked

    def add_acls(self, bindings: list[AclBinding], *, by: Principal | str) -> list[bool]:
        for b in bindings:
            problem = check_binding(b)
            if problem is not None:
                raise InvalidRequest(f"invalid ACL binding ({b}): {problem}")
        with self.db.write() as conn:
            added = store.add_acls(conn, bindings, self.clock())
        for b, new in zip(bindings, added, strict=True):
            if new:
                metrics.SECURITY_CHANGES.labels("acl_added").inc()
                audit_line(by, "add_acl", str(b), True)
        if any(added):
            self.on_change()
        return added

    def list_acls(self, match: AclFilter) -> list[AclBinding]:
        with self.db.read() as conn:
            return store.list_acls(conn, match)

    def remove_acls(self, match: AclFilter, *, by: Principal | str) -> list[AclBinding]:
        with self.db.write() as conn:
            removed = store.remove_acls(conn, match)
        for b in removed:
            metrics.SECURITY_CHANGES.labels("acl_removed").inc()
            audit_line(by, "remove_acl", str(b), True)
        if removed:
            self.on_change()
        return removed
