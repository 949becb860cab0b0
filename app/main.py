"""The ASGI app for `uvicorn app.main:app`, configured from OUTBOX_* environment variables.

uvicorn has configured its logging by the time it imports this; the service's configuration
(app.logs: OUTBOX_LOG_FORMAT, the access log, alembic quiet) replaces it, as in `outbox serve`.
"""

import logging
import os

from app.settings import Settings
from app.settings.misspelt import warn_of_misspelt_settings

# The settings of the server `outbox serve` runs around the app, which uvicorn, running the app
# alone, would ignore without a word: its own address, keep-alive and TLS are its command
# line's (it has no request or send timeout nor head bound, OUTBOX_HTTP_REQUEST_TIMEOUT_S,
# OUTBOX_HTTP_SEND_TIMEOUT_S and OUTBOX_HTTP_MAX_HEAD_BYTES being app.api.http_protocol's; its
# --limit-concurrency answers 503 where OUTBOX_HTTP_MAX_CONNECTIONS closes), and the Kafka
# door (OUTBOX_KAFKA_LISTENER, and every OUTBOX_KAFKA_ setting with it) is not started at all.
# TLS above all: a service its operator believes to speak HTTPS would answer in plain text.
SERVE_ONLY = {"host": "--host", "port": "--port", "http_keep_alive_timeout_s": "--timeout-keep-alive",
              "http_request_timeout_s": None, "http_send_timeout_s": None, "http_max_head_bytes": None,
              "http_max_connections": "--limit-concurrency", "http_max_connections_per_ip": None,
              "tls_cert_file": "--ssl-certfile", "tls_key_file": "--ssl-keyfile",
              "tls_client_ca_file": "--ssl-ca-certs", "kafka_listener": None}

settings = Settings()
if "mtls" in settings.authentication_methods:
    # uvicorn verifies a client certificate but puts none in the request: every caller would
    # be refused (`outbox serve` adds it, app.api.tls).
    raise SystemExit("OUTBOX_AUTHENTICATION: mtls is `outbox serve`'s; `uvicorn app.main:app` cannot tell the app "
                     "a client certificate: run `outbox serve`, or authenticate with api_key or jwt here")
ignored = [name for name in Settings.model_fields
           if name in settings.model_fields_set and (name in SERVE_ONLY or name in Settings.kafka_door_settings())]
if ignored:
    own = ", ".join(flag for name in ignored if (flag := SERVE_ONLY.get(name)))
    raise SystemExit(
        f"{', '.join(f'OUTBOX_{name.upper()}' for name in ignored)}: `outbox serve`'s, which `uvicorn app.main:app` "
        "would ignore (it serves the HTTP API alone" + (f"; give uvicorn {own} instead" if own else "")
        + "): unset them here, or run `outbox serve`")
# The app (most of the import time) once the settings above were not refused: a refusal is its
# line without waiting for it.
from app import logs  # noqa: E402
from app.api.app import create_app  # noqa: E402
from app.gc_tuning import tune_for_service  # noqa: E402

logs.configure(settings)
warn_of_misspelt_settings(os.environ, logging.getLogger("app.main"))
app = create_app(settings)
tune_for_service()
