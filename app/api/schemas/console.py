from __future__ import annotations

from pydantic import BaseModel, Field


class RateSampleOut(BaseModel):
    time_ms: int = Field(description="when the sample was taken (ms since the epoch); its rates are over the "
                         "interval that ended then")
    records_produced_per_s: float
    records_fetched_per_s: float
    transactions_committed_per_s: float
    transactions_aborted_per_s: float


class RateHistoryOut(BaseModel):
    interval_ms: int = Field(description="OUTBOX_CONSOLE_HISTORY_INTERVAL_MS: how often a sample is taken")
    window_ms: int = Field(description="OUTBOX_CONSOLE_HISTORY_WINDOW_MS: how far back samples are kept")
    samples: list[RateSampleOut] = Field(description="oldest first; only since this process started")
