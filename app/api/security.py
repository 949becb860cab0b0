"""Identity and permissions as dependencies: `CurrentPrincipal` and `AccessDep`.

Every API router is included by app.api.app.create_app with `Depends(authenticate)`, so no
route under /v1 can be reached without it, and create_app refuses to build an app where one
could. A route then states what it needs with its `AccessDep`: `access.require(Operation.WRITE,
acl.topic(name))`, which answers 403 with Kafka's error code for the resource type when no ACL
allows it. Which operation needs what is the table in README, "Authentication and ACLs"; the
test tests/integration/test_authorization.py holds every operation in openapi.yaml to it.

With authentication off (OUTBOX_AUTHENTICATION unset or `none`) every request is User:ANONYMOUS
and every check allows, as Kafka without an authorizer.

Credentials, in the order they are looked for:
- `Authorization: Bearer <token>`: an API key (`outbox_…`) with api_key on, else a JWT with
  jwt on;
- `Authorization: Basic <base64 of name:API key>` with api_key on: the password is the API key
  and the user name, if given, must be its principal's (browsers ask for these, so the docs
  pages and the console can be opened with an API key);
- the TLS client certificate with mtls on: User:<its subject, RFC 4514>.
A request that carries an Authorization header is judged by it, certificate or not.

Before any route, the body limit (app.api.body_limit) asks `principal_of` whose a large body is,
to count it in that principal's share of the body budget: the same credentials read the same
way (`_credited`), from the headers alone and only from the keys and tokens this process
remembers: a key or token not seen before is left to the route, whose `authenticate` checks
it once, counts and audits a refusal, and throttles a wrong secret (checked before the route,
a wrong secret sent to any path, a 404 or /healthz, throttled its key's owner with nothing
counted or audited); its first large body then takes from the total budget only.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from starlette.types import Scope

from app import metrics
from app.domain import acl
from app.domain.acl import ANONYMOUS, CLUSTER, Operation, Principal, Resource, ResourceType
from app.domain.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    OutboxError,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)
from app.api.request_metrics import route_template
from app.services.security import API_KEY_PREFIX, SecurityState, audit_line
from app.settings import Settings

NOBODY = Principal(ANONYMOUS, "none")

_REFUSAL: dict[ResourceType, type[AuthorizationFailed]] = {
    ResourceType.TOPIC: TopicAuthorizationFailed,
    ResourceType.GROUP: GroupAuthorizationFailed,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailed,
    ResourceType.CLUSTER: ClusterAuthorizationFailed,
}

_WHAT = {
    ResourceType.TOPIC: "topic", ResourceType.GROUP: "group",
    ResourceType.TRANSACTIONAL_ID: "transactional id", ResourceType.CLUSTER: "the cluster",
}


def challenge(methods: tuple[str, ...], request: Request | None = None) -> tuple[str, ...]:
    """The WWW-Authenticate headers of a 401: one per scheme this service takes (Chromium reads
    one challenge per header). Basic only when a browser navigates to a page (the docs, the
    console): it then asks its user for a name and an API key. A script's request (Swagger UI's
    Try it out, a client) is not offered Basic, or the browser would stop it with that dialog
    instead of handing the script its 401."""
    schemes = []
    if "api_key" in methods or "jwt" in methods:
        schemes.append('Bearer realm="outbox"')
    if "api_key" in methods and request is not None and _navigating(request):
        schemes.append('Basic realm="outbox", charset="UTF-8"')
    if not schemes:  # mtls alone: no HTTP scheme carries it; say which realm refused
        schemes.append('Mutual realm="outbox"')
    return tuple(schemes)


async def authenticate(request: Request) -> Principal:
    """The request's principal, or 401. Cached by FastAPI for the request, so a route that
    also takes AccessDep authenticates once."""
    state: SecurityState | None = request.app.state.security
    if state is None:
        if _local_callers_only(request):
            metrics.AUTHENTICATION_FAILURES.labels("none").inc()
            raise AuthenticationFailed(
                "authentication is not configured, so this service answers local callers only: set "
                "OUTBOX_AUTHENTICATION (or to none, to serve everyone on purpose)")
        return NOBODY
    methods = state.settings.authentication_methods
    header = request.headers.get("authorization")
    try:
        return await _credited(state, request)
    except AuthenticationFailed as e:
        method = e.details.get("method", "none") if e.details else ("none" if header is None else "unknown")
        metrics.AUTHENTICATION_FAILURES.labels(method).inc()
        audit_line("-", "authenticate", f"{request.method} {route_template(request.scope)}", False, reason=e.message,
                   client=request.client.host if request.client else None)
        e.details = {}  # the method was for the log and metric; the body says what to do
        if e.challenges is None:
            e.challenges = challenge(methods, request)
        raise


class _NotRemembered(AuthenticationFailed):
    """Credentials this process has not checked yet, where only remembered ones are looked at."""


async def _credited(state: SecurityState, request: Request, *, remembered_only: bool = False) -> Principal:
    """The principal the request's credentials name, or AuthenticationFailed (neither counted
    nor audited: the caller does that); with `remembered_only`, _NotRemembered for a key or
    token not checked before, which is then not checked (no scrypt, no signature, no JWKS
    fetch, no throttle of a wrong secret)."""
    methods = state.settings.authentication_methods
    header = request.headers.get("authorization")
    if header is not None:
        principal = await _from_header(state, methods, header, request.client.host if request.client else None,
                                       remembered_only=remembered_only)
        if header.lstrip()[:6].lower() == "basic ":
            _refuse_cross_site(request)
        return principal
    if "mtls" in methods:
        subject = _certificate_subject(request)
        if subject is not None:
            _refuse_cross_site(request)
            return Principal(acl.principal_name(subject), "mtls")
    raise AuthenticationFailed(
        "this operation needs credentials: " + _how(methods)
    )


async def principal_of(scope: Scope) -> str | None:
    """Whose a request is, from its headers alone, before anything of it is routed or read
    (app.api.body_limit: whose share of the body budget a large body takes): the principal
    `authenticate` finds for the same credentials, or None where authenticate would refuse
    them, where this process has not checked them yet (they are then left to the route's
    authenticate, whose refusal is counted, audited and throttled), and where it cannot tell
    yet (the database's schema not at head: the route answers SCHEMA_NOT_MIGRATED first; the
    database unavailable). None is neither counted nor
    audited, nor answered here: the request goes on to its route, whose own authenticate
    refuses it once, as it would have without this look (or a route that takes no
    credentials answers it as before)."""
    request = Request(scope)
    state: SecurityState | None = request.app.state.security
    if state is None:
        return None if _local_callers_only(request) else str(NOBODY)
    if not request.app.state.schema_gate.open:
        return None
    try:
        return str(await _credited(state, request, remembered_only=True))
    except OutboxError:  # AuthenticationFailed, or the database's error: the route answers it
        return None


def _local_callers_only(request: Request) -> bool:
    """Authentication off, and a caller this service does not answer: unset (not `none`) means
    local callers only, whatever started the app (`outbox serve` refuses to listen elsewhere,
    and this holds for `uvicorn app.main:app` too)."""
    return request.app.state.settings.authentication is None and _remote(request)


def _navigating(request: Request) -> bool:
    mode = request.headers.get("sec-fetch-mode")
    if mode is not None:
        return mode == "navigate"
    return "text/html" in request.headers.get("accept", "")  # a browser without Fetch Metadata


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _refuse_cross_site(request: Request) -> None:
    """Credentials a browser sends by itself (Basic it cached, a client certificate) must not
    let another site's page change anything (CSRF: a form that POSTs to the operator abort):
    an unsafe method from another site is refused. What a browser says about the request's
    origin decides (Fetch Metadata's Sec-Fetch-Site, else Origin); a client that is not a
    browser sends neither and is not refused."""
    if request.method in _SAFE_METHODS:
        return
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        cross = site not in ("same-origin", "none")
    else:
        origin = request.headers.get("origin")
        cross = origin is not None and origin.split("://", 1)[-1] != request.headers.get("host")
    if cross:
        raise AuthenticationFailed(
            "a request from another site may not use the credentials a browser sends by itself (Basic, a client "
            "certificate) to change anything: send an Authorization: Bearer header", method="cross_site")


_LOOPBACK: dict[str, bool] = {}


def _remote(request: Request) -> bool:
    """A caller from another host: its address is an IP address and not a loopback one (a
    test client's made-up host name is local)."""
    host = request.client.host if request.client else None
    if host is None:
        return False
    remote = _LOOPBACK.get(host)
    if remote is None:
        try:
            remote = not ipaddress.ip_address(host).is_loopback
        except ValueError:
            remote = False
        if len(_LOOPBACK) < 10_000:
            _LOOPBACK[host] = remote
    return remote


def _how(methods: tuple[str, ...]) -> str:
    ways = []
    if "api_key" in methods:
        ways.append("an API key (Authorization: Bearer outbox_…)")
    if "jwt" in methods:
        ways.append("a JWT (Authorization: Bearer …)")
    if "mtls" in methods:
        ways.append("a TLS client certificate")
    return ", or ".join(ways)


async def _from_header(state: SecurityState, methods: tuple[str, ...], header: str,
                       client: str | None, *, remembered_only: bool = False) -> Principal:
    scheme, _, credentials = header.strip().partition(" ")
    credentials = credentials.strip()
    scheme = scheme.lower()
    if scheme == "bearer" and credentials:
        if credentials.startswith(API_KEY_PREFIX) and "api_key" in methods:
            return Principal(await _api_key(state, credentials, client, remembered_only), "api_key")
        if state.jwt is not None:
            try:
                if state.jwt.remembers(credentials):
                    return Principal(state.jwt.principal(credentials), "jwt")
                if remembered_only:
                    raise _NotRemembered("a token not checked yet")
                return Principal(await run_in_threadpool(state.jwt.principal, credentials), "jwt")
            except AuthenticationFailed as e:
                e.details = {"method": "jwt"}
                raise
        raise AuthenticationFailed(
            "the bearer token is not an API key (outbox_…)" if "api_key" in methods
            else "bearer tokens are not accepted here: " + _how(methods),
            method="api_key" if "api_key" in methods else "unknown",
        )
    if scheme == "basic" and credentials and "api_key" in methods:
        try:
            # At the last colon: a key never holds one, and the user may be User:<name>.
            user, sep, key = base64.b64decode(credentials, validate=True).decode("utf-8").rpartition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            # ValueError: b64decode refuses a str holding anything but ASCII before it decodes.
            user, sep, key = "", "", ""
        if not sep or not key:
            raise AuthenticationFailed("Basic credentials must be <principal>:<API key>, base64-encoded",
                                       method="api_key")
        principal = await _api_key(state, key, client, remembered_only)
        if user and acl.principal_name(user) != principal:
            raise AuthenticationFailed("the API key belongs to another principal than the user name given",
                                       method="api_key")
        return Principal(principal, "api_key")
    raise AuthenticationFailed(
        "unsupported Authorization header: " + _how(methods), method="unknown"
    )


async def _api_key(state: SecurityState, key: str, client: str | None, remembered_only: bool = False) -> str:
    try:
        if state.remembers(key):
            return state.api_key_principal(key, client)
        if remembered_only:
            raise _NotRemembered("an API key not checked yet")
        # A key not seen before costs one scrypt (tens of milliseconds): off the event loop.
        return await run_in_threadpool(state.api_key_principal, key, client)
    except AuthenticationFailed as e:
        e.details = {"method": "api_key"}
        raise


def _certificate_subject(request: Request) -> str | None:
    """The verified client certificate's subject, from the ASGI TLS extension (which
    app.api.tls adds to uvicorn's scope); None without one."""
    tls = request.scope.get("extensions", {}).get("tls") or {}
    name = tls.get("client_cert_name")
    return name or None


CurrentPrincipal = Annotated[Principal, Depends(authenticate)]


class Access:
    """What the request's principal may do (SecurityState's cached decisions)."""

    __slots__ = ("principal", "_state")

    def __init__(self, principal: Principal, state: SecurityState | None) -> None:
        self.principal = principal
        self._state = state

    @property
    def unchecked(self) -> bool:
        """Authentication is off: everything is allowed, nothing is filtered."""
        return self._state is None

    def allows(self, operation: Operation, resource: Resource) -> bool:
        return self._state is None or self._state.is_allowed(self.principal, operation, resource)

    def require(self, operation: Operation, resource: Resource) -> None:
        if not self.allows(operation, resource):
            self._refuse(operation, resource)

    def require_any(self, needs: list[tuple[Operation, Resource]]) -> None:
        """Allowed the first (operation, resource), or the second, …: one refusal, counted,
        audited and answered naming the last (the ones before are asked silently)."""
        if not any(self.allows(op, r) for op, r in needs):
            self._refuse(*needs[-1])

    def require_idempotent_write(self) -> None:
        """An idempotent producer id: IDEMPOTENT_WRITE on the cluster, or (Kafka 3.0, KIP-679)
        WRITE on any topic; each Send is still checked for WRITE on its topics."""
        if self._state is None or self.allows(Operation.IDEMPOTENT_WRITE, CLUSTER) \
                or self._state.may_write_some_topic(self.principal):
            return
        self._refuse(Operation.IDEMPOTENT_WRITE, CLUSTER)

    def refusal(self, operation: Operation, resource: Resource) -> None:
        """Count and audit a refusal answered in place (a partition of a multi-partition Fetch)."""
        metrics.AUTHORIZATION_REFUSALS.labels(resource.type.value, operation.value).inc()
        audit_line(self.principal, operation.value, str(resource), False)

    def _refuse(self, operation: Operation, resource: Resource) -> None:
        self.refusal(operation, resource)
        what = _WHAT[resource.type]
        target = what if resource.type is ResourceType.CLUSTER else f"{what} {resource.name!r}"
        raise _REFUSAL[resource.type](
            f"{self.principal} is not authorized for {operation.value} on {target}: no ACL allows it"
        )


async def get_access(principal: CurrentPrincipal, request: Request) -> Access:
    return Access(principal, request.app.state.security)


AccessDep = Annotated[Access, Depends(get_access)]


async def still_allowed(request: Request, access: Access, operation: Operation, resource: Resource) -> None:
    """For an answer that goes on long after its request was checked (a stream of records):
    the request's credentials authenticated again, as they would be now, and the operation
    checked again; AuthenticationFailed or the refusal as the request would get it now. Without
    it a stream opened before its key was revoked, its token expired or its ACL removed would
    go on delivering records for as long as it stays open. Costs a dictionary lookup while
    nothing changed (a verified credential is remembered)."""
    if access.unchecked:
        return
    # The same credentials name the same principal: `access` holds it, and its checks now.
    await authenticate(request)
    access.require(operation, resource)


def requires(operation: Operation, resource: Resource) -> Any:
    """A route-level dependency for a fixed resource: `dependencies=[requires(...)]`."""

    async def check(access: AccessDep) -> None:
        access.require(operation, resource)

    return Depends(check)


def metrics_dependencies(settings: Settings) -> list[Any]:
    """Who may read /metrics: with authentication on a principal allowed describe on the
    cluster, unless OUTBOX_PROTECT_METRICS=false opens it to anyone (Settings.metrics_protected).
    The one rule for every process's /metrics (`outbox serve`'s, and `outbox coordinator`'s on
    its own port, app.api.coordinator_metrics): what the service does and holds is the same
    secret through either door, so neither may be more open."""
    return [requires(Operation.DESCRIBE, CLUSTER)] if settings.metrics_protected else []
