"""The ASGI app for `uvicorn app.main:app`, configured from OUTBOX_* environment variables."""

from app.api.app import create_app

app = create_app()
