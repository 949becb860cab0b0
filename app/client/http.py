"""The HTTP session shared by Producer and Consumer: JSON in and out, retries of retriable
answers and transport errors inside a deadline, with the client's one backoff between them."""

from __future__ import annotations

import logging
import re
import ssl
import time
from collections.abc import Callable
from typing import Any

import httpx

from app.client.backoff import ExponentialBackoff
from app.client.errors import ClientError, FatalError, RetriableError, classify
from app.client.json_text import json_content

# A connection idle for as long as the service keeps it (its http_keep_alive_timeout_s, 5 s by
# default) may be closed by the service just as a request is written on it: the request then
# fails with "Server disconnected without sending a response". httpx keeps an idle connection 5 s
# too, so its default meets that race; closed by the client first, it never does.
KEEP_ALIVE_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=4.0)

logger = logging.getLogger(__name__)


def shown_address(url: str | httpx.URL) -> str:
    """The service's address as a message names it: without credentials, a query or a fragment,
    any of which may hold a secret. Works on an address no parser takes, to name it in the
    error that refuses it."""
    scheme, sep, rest = str(url).partition("://")
    if not sep:
        scheme, rest = "", scheme
    # Everything up to the last '@', wherever it is: a password may hold '/', '?' or '#', so
    # where the authority ends cannot be told, and a part of the address left out is better
    # than a part of a password shown.
    rest = rest.rpartition("@")[2]
    return f"{scheme}{sep}{re.split(r'[?#]', rest, maxsplit=1)[0]}"


class BearerAuth(httpx.Auth):
    """`Authorization: Bearer <token>` on every request: an API key, or a JWT. A callable is
    asked for the token before each request, so a client can hand over a refreshed JWT."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        self._token = token

    def auth_flow(self, request: httpx.Request):  # type: ignore[no-untyped-def]
        token = self._token() if callable(self._token) else self._token
        request.headers["Authorization"] = f"Bearer {token}"
        yield request


def credentials(api_key: str | None, token: str | Callable[[], str] | None) -> httpx.Auth | None:
    if api_key is not None and token is not None:
        raise ValueError("give api_key or token, not both")
    credential = api_key if api_key is not None else token
    return None if credential is None else BearerAuth(credential)


class Session:
    def __init__(
        self,
        base_url: str,
        *,
        request_timeout_s: float = 30.0,
        client: httpx.Client | None = None,
        backoff: ExponentialBackoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        auth: httpx.Auth | None = None,
        tls: ssl.SSLContext | bool = True,
        say_unreachable: bool = True,
    ) -> None:
        """`auth`: credentials (credentials()); `tls`: True to verify the service's
        certificate against certifi's CAs (or those of the file SSL_CERT_FILE or the directory
        SSL_CERT_DIR names, where set), or an SSLContext (a private CA, a client
        certificate for mtls). `say_unreachable`: a call that cannot reach the service logs a
        WARNING as its retries begin (False for a consumer's heartbeat thread, whose calls
        repeat every few seconds in the background: the consumer's own calls say it)."""
        if client is not None and tls is not True:
            # A client is used as its maker built it: its certificate checks are its own.
            raise ValueError("tls: the client given verifies as it was made (httpx.Client(verify=...)); "
                             "give tls without a client, or make the client with it")
        self.http = client or httpx.Client(base_url=base_url.rstrip("/"), timeout=request_timeout_s, auth=auth,
                                           verify=tls, limits=KEEP_ALIVE_LIMITS)
        self._owns = client is None
        # The credentials go on each request of a client given (one made here has them): left
        # to it, they would be dropped, and every call refused as unauthenticated.
        self._auth = {"auth": auth} if client is not None and auth is not None else {}
        self.backoff = backoff or ExponentialBackoff()
        self.sleep = sleep
        self.clock = clock
        self.say_unreachable = say_unreachable

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict | None = None,
        deadline_s: float = 60.0,
        ok_status: tuple[int, ...] = (200, 201, 204),
    ) -> Any:
        """One request, retried on retriable errors until `deadline_s` has passed; any other
        refusal is raised at once.

        Transport errors are retried too: every mutating call of this protocol is safe to
        repeat (sequence numbers make Send idempotent; Commit and Abort answer a retry as the
        first time; AddOffsets overwrites). The service's `Retry-After: 1` is not followed:
        the backoff starts lower and spreads the retries of many clients (KIP-580).
        """
        deadline = self.clock() + deadline_s
        attempts = 0
        unreachable_said = False
        # Encoded here, once, rather than by httpx: a record's value given as JsonText goes in as
        # its text (app.client.json_text), where httpx's json.dumps would refuse it.
        payload: dict[str, Any] = {} if json is None else {
            "content": json_content(json), "headers": {"Content-Type": "application/json"}}
        while True:
            try:
                response = self.http.request(method, path, params=params, **payload, **self._auth)
            except httpx.UnsupportedProtocol as e:
                # No http:// or https:// in the service's address (`127.0.0.1:8000`,
                # `localhost:8000`): no retry can send the request anywhere, so it is said at
                # once rather than retried, with a warning, until the deadline.
                raise FatalError(
                    "INVALID_URL", f"{shown_address(self.http.base_url)!r} is not a service address: give its "
                    f"http:// or https:// address, e.g. http://127.0.0.1:8000 ({e})") from e
            except httpx.TransportError as e:
                error: ClientError = RetriableError("NETWORK_EXCEPTION", str(e) or type(e).__name__)
                # Raised below, outside this handler: the transport's exception named as the
                # cause, so a caller can tell a timeout from a refused connection.
                error.__cause__ = e
            else:
                if response.status_code in ok_status:
                    return response.json() if response.content else None
                error = _error_of(response)
            if not isinstance(error, RetriableError):
                raise error
            pause = self.backoff.backoff_s(attempts)
            if self.clock() + pause > deadline:
                raise error
            if self.say_unreachable and isinstance(error.__cause__, httpx.TransportError) and not unreachable_said:
                # Said once, as a retry begins: a wrong URL would otherwise be a silence as long
                # as the deadline (a minute by default).
                logger.warning("cannot reach %s (%s); retrying %s %s for up to %g s",
                               shown_address(self.http.base_url), error.message, method, path, deadline_s)
                unreachable_said = True
            self.sleep(pause)
            attempts += 1

    def close(self) -> None:
        if self._owns:
            self.http.close()


# The error code prefix of an answer that is not the service's error body (a proxy, or
# another server at that address): HTTP_<status>.
FOREIGN_ERROR_PREFIX = "HTTP_"


def _error_of(response: httpx.Response) -> ClientError:
    details = None
    try:
        body = response.json()
        code, message, retriable = body["error_code"], body["message"], bool(body["retriable"])
        if isinstance(body.get("details"), dict):
            details = body["details"]
    except Exception:  # not one of ours (a proxy?): 5xx may pass, the rest will not
        # Not the page it sent (HTML, many lines, on a program's one error line): who answered.
        code, message = f"{FOREIGN_ERROR_PREFIX}{response.status_code}", _foreign_answer(response)
        retriable = response.status_code >= 500
    return classify(code, message, retriable, response.status_code, details)


def _foreign_answer(response: httpx.Response) -> str:
    """One line for an answer that is not the service's error body: another server at the
    address (a URL with a path after the service's address, another web server), or a proxy
    in front of the service."""
    try:
        request = f"{response.request.method} {shown_address(response.request.url)}"
    except RuntimeError:  # a response built without its request
        request = "the request"
    return (f"{request} was answered HTTP {response.status_code} without an outbox error: not the service's "
            "answer (is the URL the outbox service's address, e.g. http://127.0.0.1:8000, with no path? a proxy "
            "in front of it?)")
