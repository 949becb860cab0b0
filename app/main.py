"""The ASGI app for `uvicorn app.main:app`, configured from OUTBOX_* environment variables."""

from app.api.app import create_app
from app.gc_tuning import tune_for_service

app = create_app()
tune_for_service()
