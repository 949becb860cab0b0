"""The log's settings (OUTBOX_LOG_LEVEL, OUTBOX_LOG_FORMAT), every process's: all that an admin
command over --url reads (LogSettings says why). app.settings.Settings extends LogSettings
(through app.settings.kafka.KafkaSettings, the Kafka listener's, and
app.settings.http.HttpSettings, the HTTP door's) with the service's own, and takes its
model_config (the OUTBOX_ prefix, values kept out of errors) from it."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


class LogSettings(BaseSettings):
    """The log's settings (app.logs), every process's: all that an admin command over --url
    reads, since the service's own settings (its database, its limits) are the service's
    business, and an operator's shell may carry a service's environment, or part of it."""

    # hide_input_in_errors: a refused setting's value is not repeated in the error, which a
    # traceback would print (OUTBOX_DATABASE_URL may hold a password).
    model_config = SettingsConfigDict(env_prefix="OUTBOX_", env_file=None, extra="ignore",
                                      hide_input_in_errors=True)

    log_level: str = "info"
    # text: one human-readable line per record; json: one JSON object per line (a log shipper's
    # format), uvicorn's own lines included.
    log_format: Literal["text", "json"] = "text"

    @field_validator("log_level")
    @classmethod
    def _check_log_level(cls, level: str) -> str:
        if level.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return level.lower()
