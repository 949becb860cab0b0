"""A topic's configuration and its rules: one place that says what a valid config is, used by
CreateTopics and IncrementalAlterConfigs alike."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from app.domain.errors import InvalidConfig
from app.domain.types import MAX_INT64, CleanupPolicy

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000  # Kafka's retention.ms
DEFAULT_DELETE_RETENTION_MS = 24 * 3600 * 1000  # Kafka's delete.retention.ms
NO_LIMIT = -1


@dataclass(frozen=True, slots=True)
class TopicConfig:
    cleanup_policy: CleanupPolicy = CleanupPolicy.DELETE
    retention_ms: int = DEFAULT_RETENTION_MS  # -1: no time limit
    retention_bytes: int = NO_LIMIT  # per partition; -1: no size limit
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    check_expected_offsets: bool = False  # KIP-27: every Send must carry expected_offset

    def __post_init__(self) -> None:
        for name in ("retention_ms", "retention_bytes"):
            value = getattr(self, name)
            if not (value == NO_LIMIT or 0 < value <= MAX_INT64):
                raise InvalidConfig(f"{name} must be positive (at most 2**63 - 1), or -1 for no limit")
        if not 0 <= self.delete_retention_ms <= MAX_INT64:
            raise InvalidConfig("delete_retention_ms must be in 0..2**63 - 1")

    def altered(self, changes: dict[str, Any]) -> TopicConfig:
        """IncrementalAlterConfigs: these keys set, every other kept; checked as a whole."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise InvalidConfig(f"unknown config key(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)
