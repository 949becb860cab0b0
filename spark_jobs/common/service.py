"""The outbox service, as the data source sees it: one HTTP session (app.client.http, the
project's client) for every request a read or a write makes on the driver, and the few
questions they ask of it.

    topics = list_topics(url, api_key, OutboxSourceError)   # the service answers, or one line
    with service_session(url, api_key) as session:
        bounds = log_bounds(session, "orders")                # spark_jobs.common.positions

A task's transactions, and the driver's commit, go through the client's Producer, which holds
its own session.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from app.client.errors import ClientError
from app.client.http import Session, credentials
from spark_jobs.errors import SparkJobError

# A check on the driver before Spark runs anything: one attempt, not the client's retries.
PROBE_TIMEOUT_S = 5


@contextmanager
def service_session(url: str, api_key: str | None, *, request_timeout_s: float = 30.0) -> Iterator[Session]:
    session = Session(url, auth=credentials(api_key, None), request_timeout_s=request_timeout_s)
    try:
        yield session
    finally:
        session.close()


def list_topics(url: str, api_key: str | None, error: type[SparkJobError]) -> list[dict]:
    """The service answers (GET /v1/topics), with the credentials given: its topics. Else
    `error`, one line naming the fix."""
    with service_session(url, api_key, request_timeout_s=PROBE_TIMEOUT_S) as session:
        try:
            answer = session.call("GET", "/v1/topics", deadline_s=0)
        except ClientError as e:
            if e.status is None:
                raise error(f"cannot reach the outbox service at {url}: {e.message}") from None
            if e.status in (401, 403):
                raise error(f"the outbox service at {url} refused the credentials (HTTP {e.status}): "
                            "set the option apiKey (or OUTBOX_API_KEY)") from None
            raise error(f"the outbox service at {url} answered GET /v1/topics with HTTP {e.status}: "
                        "is it an outbox service?") from None
        except ValueError:
            answer = None
    try:
        return list(answer["topics"])  # type: ignore[index]
    except (KeyError, TypeError):
        raise error(f"the outbox service at {url} answered GET /v1/topics with no topic list: "
                    "is it an outbox service?") from None
