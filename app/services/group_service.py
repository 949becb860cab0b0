"""Consumer-group offsets outside transactions (commit, fetch)."""

from __future__ import annotations

from app.domain.clock import Clock
from app.domain.errors import UnstableOffsetCommit
from app.services.transaction_coordinator import OffsetToStage, check_distinct_partitions
from app.settings import Settings
from app.storage import offsets, topics
from app.storage.engine import Database


class GroupService:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock

    def commit(self, group_id: str, to_commit: list[OffsetToStage]) -> None:
        check_distinct_partitions(to_commit)
        now = self.clock()
        with self.db.write() as conn:
            by_name = topics.get_topics(conn, {o.topic for o in to_commit})
            rows = []
            for o in to_commit:
                topic = by_name[o.topic]
                topics.check_partition(topic, o.partition)
                rows.append(
                    {
                        "group_id": group_id,
                        "topic_id": topic.topic_id,
                        "partition": o.partition,
                        "committed_offset": o.committed_offset,
                        "metadata": o.metadata,
                        "committed_ms": now,
                    }
                )
            offsets.commit(conn, rows)

    def fetch(
        self, group_id: str, *, topic: str | None, require_stable: bool
    ) -> list[offsets.CommittedOffset]:
        """The group's committed offsets. With require_stable (the default, as in KIP-447), a
        partition with offsets pending in an unfinished transaction is refused with
        UNSTABLE_OFFSET_COMMIT instead of answering the value that transaction is replacing."""
        with self.db.read() as conn:
            topic_id = None if topic is None else topics.get_topic(conn, topic).topic_id
            if require_stable:
                pending = offsets.pending_partitions(conn, group_id, None)
                if topic is not None:
                    pending = [p for p in pending if p[0] == topic]
                if pending:
                    raise UnstableOffsetCommit(
                        "offsets pending in an unfinished transaction for "
                        + ", ".join(f"{t}/{p}" for t, p in sorted(pending)),
                        partitions=[{"topic": t, "partition": p} for t, p in sorted(pending)],
                    )
            return offsets.fetch(conn, group_id, topic_id)
