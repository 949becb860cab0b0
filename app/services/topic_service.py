"""Topics: create, list, describe, and their administration (Kafka's
IncrementalAlterConfigs, CreatePartitions, DeleteTopics and DeleteRecords)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from app.domain.clock import Clock
from app.domain.errors import InvalidPartitions
from app.domain.log_start import AcrossAt, clean_cut_at_or_below
from app.domain.topic_admin import check_deletable, new_log_start, partitions_to_add
from app.domain.topic import PartitionInfo, Topic
from app.domain.topic_config import TopicConfig, new_topic_config
from app.domain.topic_names import check_new_topic_name
from app.settings import Settings
from app.storage import offsets, read_committed, topics
from app.storage.engine import Database



class _Validated(Exception):
    """Raised inside a write transaction to roll it back once every check passed: an admin
    request with validate_only runs the very code of the change, and keeps nothing of it."""

    def __init__(self, result: Any) -> None:
        self.result = result


class TopicService:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock

    def create(self, name: str, partition_count: int, config: TopicConfig | None = None,
               *, validate_only: bool = False) -> Topic:
        """CreateTopics; without a config, the defaults, max_message_bytes the service's
        OUTBOX_MESSAGE_MAX_BYTES. `validate_only`: every check made, nothing created (Kafka's
        validateOnly)."""
        if config is None:
            config = TopicConfig(max_message_bytes=self.settings.message_max_bytes)
        check_new_topic_name(name)
        if partition_count not in self.settings.partition_count_limit:
            raise InvalidPartitions(f"partitions must be in {self.settings.partition_count_limit}")
        return self._write(validate_only, lambda conn: topics.create_topic(
            conn, name=name, partition_count=partition_count, config=config, now_ms=self.clock()))

    def _write(self, validate_only: bool, change: Any) -> Any:
        """`change(conn)` in a write transaction, committed unless `validate_only`."""
        try:
            with self.db.write() as conn:
                result = change(conn)
                if validate_only:
                    raise _Validated(result)
                return result
        except _Validated as done:
            return done.result

    def list(self) -> list[Topic]:
        with self.db.read() as conn:
            return topics.list_topics(conn)

    def get(self, name: str) -> Topic:
        """The topic's id, partition count and config, without its partitions' offsets;
        UNKNOWN_TOPIC_OR_PARTITION if there is none."""
        with self.db.read() as conn:
            return topics.get_topic(conn, name)

    def describe(self, name: str) -> tuple[Topic, list[PartitionInfo]]:
        with self.db.read() as conn:
            topic = topics.get_topic(conn, name)
            return topic, topics.describe_partitions(conn, topic)

    # --- administration ---------------------------------------------------------------------

    def alter_config(self, name: str, changes: Mapping[str, Any] | Callable[[TopicConfig], Mapping[str, Any]], *,
                     validate_only: bool = False, replace: bool = False) -> tuple[Topic, list[PartitionInfo]]:
        """IncrementalAlterConfigs: the keys in `changes` set, every other kept (`validate_only`:
        checked, not stored). `replace` (Kafka's AlterConfigs): every other back to its default
        instead (TopicConfig.replaced). `changes` may be a function of the topic's config, called
        under the row lock with the config as the previous alter committed it: Kafka's APPEND and
        SUBTRACT change cleanup.policy from its current value, and computed from a read before
        the lock, of two at once the second would write over the first's.

        The row lock makes concurrent alters of one topic apply one after the other, so none
        undoes another's keys. A Send reads the config without a lock, once, in its own
        database transaction: a Send running while the alter commits acts wholly on the old
        config or wholly on the new one (check_expected_offsets, cleanup_policy's rule for
        keys), as if it had come just before or just after; either order is a correct one.
        The log cleaner reads the config on each pass."""
        def change(conn: Any) -> tuple[Topic, list[PartitionInfo]]:
            topic = topics.lock_topic(conn, name)
            given = dict(changes(topic.config) if callable(changes) else changes)
            config = (topic.config.replaced(given, new_topic_config({}, self.settings.message_max_bytes))
                      if replace else topic.config.altered(given))
            topic = dataclasses.replace(topic, config=config)
            topics.update_config(conn, topic.topic_id, topic.config)
            return topic, topics.describe_partitions(conn, topic)

        return self._write(validate_only, change)  # type: ignore[no-any-return]

    def create_partitions(self, name: str, partition_count: int, *,
                          validate_only: bool = False) -> tuple[Topic, list[PartitionInfo]]:
        """CreatePartitions: the topic grows to `partition_count` partitions, the new ones empty
        (`validate_only`: checked, not created). Two concurrent calls queue on the topic's row
        lock; the second then reads the count the first wrote, so no partition is created twice."""
        def change(conn: Any) -> tuple[Topic, list[PartitionInfo]]:
            topic = topics.lock_topic(conn, name)
            new = partitions_to_add(
                topic.name, topic.partition_count, partition_count, self.settings.max_partitions_per_topic
            )
            topics.add_partitions(conn, topic.topic_id, new)
            topic = dataclasses.replace(topic, partition_count=partition_count)
            return topic, topics.describe_partitions(conn, topic)

        return self._write(validate_only, change)  # type: ignore[no-any-return]

    def delete(self, name: str) -> None:
        """DeleteTopics, refused (TOPIC_HAS_OPEN_TRANSACTIONS) while unfinished transactions
        write to the topic or stage offsets for it.

        Lock order: the topic row, then its partition rows in partition order, then the
        reads. Appenders lock a transaction row, then partition rows in order; a Send never
        locks a topic row (it reads it without a lock), publish_pending (PostgreSQL's
        outbox.append, at the commit) locks it FOR SHARE before any partition row, as this
        does, and this never locks a transaction row, so there is no cycle: a Send holding a partition this waits for finishes, and
        one that comes later waits for this and then finds the partition gone. Only once
        every partition is held is the search for transactions sound: a Send that started a
        transaction in the topic has committed (and is found), and none can start one now.
        AddOffsets and offset commits hold the topic row FOR KEY SHARE, so their offsets are
        committed before this takes its FOR UPDATE, and found too."""
        with self.db.write() as conn:
            topic = topics.lock_topic(conn, name, for_delete=True)
            topics.lock_partitions(conn, topic.topic_id)
            check_deletable(topic.name, topics.unfinished_transactional_ids(conn, topic.topic_id))
            topics.delete_topic(conn, topic, now_ms=self.clock())

    def delete_consumed_records(self, name: str, partition: int, group_ids: list[str]) -> int:
        """DeleteRecords below what every one of these groups has consumed: the outbox's use,
        dropping what its readers are done with. Their lowest committed offset is a
        read_committed position, and a transaction committed at or past it may have records
        below it that none of them has read yet (they are shown at its marker): the log start
        goes to the highest clean cut (app.domain.log_start) at or below that offset and the
        last stable offset. A group with no committed offset for the partition has read nothing
        of it: nothing is deleted. Returns the log start."""
        with self.db.write() as conn:
            topic = topics.get_topic(conn, name)
            topics.check_partition(topic, partition)
            bounds = topics.lock_partition(conn, topic.topic_id, partition)
            consumed = offsets.lowest_committed(conn, sorted(set(group_ids)), topic.topic_id, partition)
            if consumed is None:
                return bounds.log_start_offset
            bound = min(consumed, topics.last_stable_offset(conn, topic.topic_id, partition))
            across = self._across(conn, topic.topic_id, partition, bounds.log_start_offset)
            return topics.advance_log_start(conn, topic.topic_id, partition, clean_cut_at_or_below(bound, across))

    def delete_records(self, name: str, partition: int, offset: int | None) -> int:
        """DeleteRecords: the partition's log start moves up to `offset` (never back, never
        past the last stable offset, only to a clean cut; None: as far as it may go, read under
        the lock below: app.domain.topic_admin.new_log_start); returns the log start. The
        records below it are garbage from then on: no read returns them, and the log cleaner
        deletes them.

        The last stable offset, and what lies across `offset`, are read under the partition's
        append lock, so no transaction can start or end below `offset` between the check and
        the commit (one that starts later takes offsets at the log end, past it, and a marker
        is appended at the log end too)."""
        with self.db.write() as conn:
            topic = topics.get_topic(conn, name)
            topics.check_partition(topic, partition)
            bounds = topics.lock_partition(conn, topic.topic_id, partition)
            log_start = new_log_start(
                offset,
                log_start=bounds.log_start_offset,
                last_stable=topics.last_stable_offset(conn, topic.topic_id, partition),
                log_end=bounds.log_end_offset,
                across=self._across(conn, topic.topic_id, partition, bounds.log_start_offset),
            )
            return topics.advance_log_start(conn, topic.topic_id, partition, log_start)

    @staticmethod
    def _across(conn: Any, topic_id: int, partition: int, log_start: int) -> AcrossAt:
        """What lies across an offset of the partition, as app.domain.log_start asks it."""
        return lambda offset: read_committed.committed_across(conn, topic_id, partition, offset, log_start)
