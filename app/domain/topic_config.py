"""A topic's configuration and its rules: one place that says what a valid config is, used by
CreateTopics and IncrementalAlterConfigs alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, get_type_hints

import msgspec

from app.domain.errors import InvalidConfig, InvalidRecord, InvalidRequest, MessageTooLarge
from app.domain.types import MAX_INT32, MAX_INT64, CleanupPolicy, ValueFormat

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000  # Kafka's retention.ms
DEFAULT_DELETE_RETENTION_MS = 24 * 3600 * 1000  # Kafka's delete.retention.ms
# Kafka's message.max.bytes (a batch of 1 MiB and its 12-byte log overhead): what a topic
# created without max_message_bytes gets unless OUTBOX_MESSAGE_MAX_BYTES says otherwise.
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
NO_LIMIT = -1


@dataclass(frozen=True, slots=True)
class TopicConfig:
    cleanup_policy: CleanupPolicy = CleanupPolicy.DELETE
    retention_ms: int = DEFAULT_RETENTION_MS  # -1: no time limit
    retention_bytes: int = NO_LIMIT  # per partition; -1: no size limit
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    check_expected_offsets: bool = False  # KIP-27: every Send must carry expected_offset
    # Kafka's max.message.bytes: the largest record a Send may append (record_size).
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    # What the topic's records are (docs/ARCHITECTURE.md#record-formats): set at creation only.
    value_format: ValueFormat = ValueFormat.JSON

    def __post_init__(self) -> None:
        for name in ("retention_ms", "retention_bytes"):
            value = getattr(self, name)
            if not (value == NO_LIMIT or 0 < value <= MAX_INT64):
                raise InvalidConfig(f"{name} must be positive (at most 2**63 - 1), or -1 for no limit")
        if not 0 <= self.delete_retention_ms <= MAX_INT64:
            raise InvalidConfig("delete_retention_ms must be in 0..2**63 - 1")
        if not 0 < self.max_message_bytes <= MAX_INT32:
            raise InvalidConfig("max_message_bytes must be in 1..2**31 - 1")

    def altered(self, changes: dict[str, Any]) -> TopicConfig:
        """IncrementalAlterConfigs: these keys set, every other kept; checked as a whole."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise InvalidConfig(f"unknown config key(s): {', '.join(sorted(unknown))}")
        if changes.get("value_format", self.value_format) != self.value_format:
            # Stored records are in the format they were written in; a JSON column cannot
            # take bytes, nor bytes become JSON, without rewriting the log.
            raise InvalidConfig(f"value_format is set when a topic is created and cannot change "
                                f"(this topic's is {self.value_format.value})")
        return dataclasses.replace(self, **changes)

    def replaced(self, values: dict[str, Any], defaults: TopicConfig) -> TopicConfig:
        """AlterConfigs: these keys set, every other back to its value in `defaults`, except
        value_format, which is fixed when the topic is created; checked as a whole."""
        reset = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(self) if f.name != "value_format"}
        return self.altered({**reset, **values})


# The keys a topic's config has, in the order messages list them.
CONFIG_KEYS = tuple(field.name for field in dataclasses.fields(TopicConfig))


class ConfigTextError(ValueError):
    """A config given as text that names an unknown key or a value its key's type does not
    parse from; the message says which."""


@cache
def _key_types() -> dict[str, Any]:
    return get_type_hints(TopicConfig)


def parse_config_text(pairs: Mapping[str, str]) -> dict[str, Any]:
    """Config keys given as text (`outbox topics create|alter --config KEY=VALUE`), each value
    parsed as its key's type: numbers and booleans from their text, cleanup_policy by its
    value. In the words msgspec uses for the same mistake in a JSON body, so the command line
    and the HTTP API explain it alike."""
    types = _key_types()
    values: dict[str, Any] = {}
    for key, text in pairs.items():
        if key not in types:
            raise ConfigTextError(f"Object contains unknown field `{key}`; known fields: {', '.join(CONFIG_KEYS)}")
        try:
            values[key] = msgspec.convert(text, types[key], strict=False)
        except msgspec.ValidationError as e:
            raise ConfigTextError(f"{e} - at `$.{key}`") from None
    return values


def new_topic_config(values: Mapping[str, Any], message_max_bytes: int,
                     value_format: ValueFormat = ValueFormat.JSON) -> TopicConfig:
    """CreateTopics' config: the keys given, the defaults for the others, max_message_bytes
    when not given `message_max_bytes` (the service's OUTBOX_MESSAGE_MAX_BYTES, as a Kafka
    topic takes the broker's message.max.bytes) and value_format when not given the door's
    (`value_format`: json for HTTP and the CLI, bytes for the Kafka door, app.kafka.topic_admin)."""
    return TopicConfig(**{"max_message_bytes": message_max_bytes, "value_format": value_format, **values})


def check_record_size(topic: str, partition: int, index: int, size_bytes: int, max_message_bytes: int) -> None:
    """Kafka's max.message.bytes, the one check every append makes: a record whose bytes
    (app.domain.log_cleaning.record_size: its key, value and headers as stored) are more than
    its topic's max_message_bytes is refused with MESSAGE_TOO_LARGE, and with it the whole
    request, before anything is written. Not retriable: the same record is refused again.
    `index` is the record's place in its batch."""
    if size_bytes > max_message_bytes:
        raise MessageTooLarge(
            f"record {index} of {topic}/{partition} is {size_bytes} bytes (key, value and headers), more than "
            f"topic {topic!r}'s max_message_bytes {max_message_bytes}"
        )


def check_keys(topic: str, cleanup_policy: CleanupPolicy, keys: Iterable[object]) -> None:
    """A compacted topic takes keyed records only, as Kafka: compaction keeps each key's latest
    record, and a record without a key has nothing to be compacted against. Refused with
    INVALID_RECORD naming the records at fault by their index in the batch: Kafka's Produce
    answers each (KIP-467), and a client fails those and the rest of the batch with an error of
    its own. PostgreSQL's outbox.check_topic_config holds a copy in SQL (the appenders' table of
    cases holds it to this one)."""
    # Only a compacted topic's keys are walked (give them lazily): a Send's hot path to every
    # other topic.
    if cleanup_policy.compacts and (keyless := tuple(i for i, key in enumerate(keys) if key is None)):
        raise InvalidRecord(f"topic {topic!r} is compacted (cleanup_policy {cleanup_policy.value}): "
                            "every record needs a key", record_indexes=keyless)


def check_expected_offset(topic: str, check_expected_offsets: bool, expected_offset: int | None) -> None:
    """A topic with check_expected_offsets takes batches that say the offset they expect only."""
    if check_expected_offsets and expected_offset is None:
        raise InvalidRequest(f"topic {topic!r} has check_expected_offsets: every batch needs expected_offset")
