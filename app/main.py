"""The ASGI app for `uvicorn app.main:app`, configured from OUTBOX_* environment variables.

uvicorn has configured its logging by the time it imports this; the service's configuration
(app.logs: OUTBOX_LOG_FORMAT, the access log, alembic quiet) replaces it, as in `outbox serve`.
"""

from app import logs
from app.api.app import create_app
from app.gc_tuning import tune_for_service
from app.settings import Settings

settings = Settings()
if settings.kafka_listener is not None:
    # uvicorn runs the HTTP app only: the Kafka door would be missing without a word.
    raise SystemExit("OUTBOX_KAFKA_LISTENER is served by `outbox serve` only; `uvicorn app.main:app` serves "
                     "the HTTP API alone: unset it here, or run `outbox serve`")
logs.configure(settings)
app = create_app(settings)
tune_for_service()
