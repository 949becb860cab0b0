"""The HTTP session shared by Producer and Consumer: JSON in and out, retries with backoff
inside a deadline for retriable answers and transport errors."""

from __future__ import annotations

import random
import time
from typing import Any

import httpx

from app.client.errors import ClientError, RetriableError, classify

RETRY_BACKOFF_MIN_S = 0.02
RETRY_BACKOFF_MAX_S = 1.0


class Session:
    def __init__(
        self,
        base_url: str,
        *,
        request_timeout_s: float = 30.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.http = client or httpx.Client(base_url=base_url.rstrip("/"), timeout=request_timeout_s)
        self._owns = client is None

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
        """One request, retried on retriable errors until `deadline_s` has passed.

        Transport errors are retried too: every mutating call of this protocol is safe to
        repeat (sequence numbers make Send idempotent; Commit and Abort answer a retry as the
        first time; AddOffsets overwrites).
        """
        deadline = time.monotonic() + deadline_s
        backoff = RETRY_BACKOFF_MIN_S
        while True:
            try:
                response = self.http.request(method, path, json=json, params=params)
            except httpx.TransportError as e:
                error: ClientError = RetriableError("NETWORK_EXCEPTION", str(e) or type(e).__name__)
            else:
                if response.status_code in ok_status:
                    return response.json() if response.content else None
                error = _error_of(response)
            if not isinstance(error, RetriableError) or time.monotonic() + backoff > deadline:
                raise error
            time.sleep(backoff * (0.5 + random.random() / 2))
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)

    def close(self) -> None:
        if self._owns:
            self.http.close()


def _error_of(response: httpx.Response) -> ClientError:
    try:
        body = response.json()
        code, message, retriable = body["error_code"], body["message"], bool(body["retriable"])
    except Exception:  # not one of ours (a proxy?): 5xx may pass, the rest will not
        code, message = f"HTTP_{response.status_code}", response.text[:200]
        retriable = response.status_code >= 500
    return classify(code, message, retriable, response.status_code)
