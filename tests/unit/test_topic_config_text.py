"""A topic config given as text (`outbox topics create|alter --config KEY=VALUE`): each value
parsed as its key's type, and a mistake named the way msgspec names it in a JSON body."""

from __future__ import annotations

import pytest

from app.domain.topic_config import ConfigTextError, TopicConfig, new_topic_config, parse_config_text
from app.domain.types import CleanupPolicy


def test_values_are_parsed_as_their_keys_types() -> None:
    parsed = parse_config_text({"cleanup_policy": "compact,delete", "retention_ms": "5000",
                                "check_expected_offsets": "true"})
    assert parsed == {"cleanup_policy": CleanupPolicy.COMPACT_DELETE, "retention_ms": 5000,
                      "check_expected_offsets": True}


def test_an_unknown_key_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ConfigTextError) as refused:
        parse_config_text({"retention_ms": "1", "segment_ms": "5"})
    assert str(refused.value) == ("Object contains unknown field `segment_ms`; known fields: cleanup_policy, "
                                  "retention_ms, retention_bytes, delete_retention_ms, check_expected_offsets, "
                                  "max_message_bytes, value_format")


def test_a_value_that_does_not_parse_names_its_key() -> None:
    with pytest.raises(ConfigTextError) as refused:
        parse_config_text({"retention_ms": "a week"})
    assert str(refused.value) == "Expected `int`, got `str` - at `$.retention_ms`"


def test_a_new_topic_s_max_message_bytes_is_the_service_s_unless_given() -> None:
    assert new_topic_config({"retention_ms": 5}, 300) == TopicConfig(retention_ms=5, max_message_bytes=300)
    assert new_topic_config({"max_message_bytes": 7}, 300).max_message_bytes == 7
