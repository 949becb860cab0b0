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


class GroupLagPointOut(BaseModel):
    group_id: str
    total_lag: int | None = Field(description="committed records the group has still to read, summed over its "
                                  "partitions (as GET /v1/groups/{group_id}/lag counts them); null: unknown, a "
                                  "partition has no committed offset, or some of the group's partitions were left out "
                                  "of the reading (`complete` false)")
    complete: bool = Field(description="false: some of the group's partitions were left out of the reading, past "
                           "OUTBOX_METRICS_MAX_GROUP_PARTITIONS group partitions: its total is not known (null)")


class LagSampleOut(BaseModel):
    time_ms: int = Field(description="when the sample was taken (ms since the epoch)")
    groups: list[GroupLagPointOut] = Field(description="the groups that lagged most then, most lag first, that the "
                                           "principal may describe along with every topic their lag counts")
    group_partitions_left_out: int | None = Field(
        description="group partitions the reading left out, past OUTBOX_METRICS_MAX_GROUP_PARTITIONS (taken by group id, "
        "not by lag): when not 0, a group that lags more than those shown may be missing; null where the principal "
        "may not describe the cluster")


class LagHistoryOut(BaseModel):
    interval_ms: int = Field(description="OUTBOX_CONSOLE_LAG_INTERVAL_MS: how often a sample is taken; 0: none is")
    window_ms: int = Field(description="OUTBOX_CONSOLE_HISTORY_WINDOW_MS: how far back samples are kept")
    max_groups: int = Field(description="OUTBOX_CONSOLE_LAG_MAX_GROUPS: the groups kept per sample, those that lag "
                            "most")
    samples: list[LagSampleOut] = Field(description="oldest first; only since this process started")
