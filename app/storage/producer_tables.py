"""The producer tables: the producer ids handed out, what producer expiry keeps of a forgotten
one, and each producer's idempotence state per partition. Defined on the schema's one MetaData
(app.storage.table_metadata) and re-exported by app.storage.tables, the schema as a whole."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, PrimaryKeyConstraint, String, Table

from app.storage.table_metadata import metadata

producers = Table(
    "producers",
    metadata,
    Column("producer_id", BigInteger, primary_key=True, autoincrement=False),
    # An idempotent producer's current epoch. A transactional id's producer has its epoch in
    # transactions.producer_epoch; here it keeps the one it was made with
    # (storage.transactions.apply_transit).
    Column("producer_epoch", Integer, nullable=False),
    Column("transactional_id", String(255), nullable=True),
    # When the producer was last made: its creation, or an idempotent producer's epoch bump
    # (KIP-360; storage.producers.bump_producer_epoch). Producer expiry counts it as use.
    Column("created_ms", BigInteger, nullable=False),
    # The principal InitProducerId handed the id to (migration 0010): an id without a
    # transactional id is its holder's alone (app.domain.producer.StoredProducer).
    Column("principal", String(255), nullable=True),
    # When an idempotent Send last took the id back after producer expiry forgot it
    # (storage.producers.take_back_producer; migration 0043); NULL: made by InitProducerId, or
    # its epoch bumped since. A partition without its state then takes its batch at any sequence
    # (app.domain.producer.check_sequence).
    Column("taken_back_ms", BigInteger, nullable=True),
)

# What producer expiry keeps of a forgotten producer that had a holder (migration 0046, renamed
# from producer_tombstones by 0047): its holder, so that while this row lives no other principal
# takes the id back
# (storage.producers.take_back_producer); dropped once the producer has been forgotten for
# FORGOTTEN_PRODUCER_EXPIRATIONS expirations (app.services.producer_expiry).
forgotten_producers = Table(
    "forgotten_producers",
    metadata,
    Column("producer_id", BigInteger, primary_key=True, autoincrement=False),
    Column("principal", String(255), nullable=False),
    # When producer expiry last forgot the id; the chore drops the oldest first, by this index.
    Column("forgotten_ms", BigInteger, nullable=False),
    Index("ix_forgotten_producers_forgotten_ms", "forgotten_ms"),
)

# Per (producer, partition): the idempotence state (docs/GUARANTEES.md#no-duplicates).
producer_partitions = Table(
    "producer_partitions",
    metadata,
    Column("producer_id", BigInteger, nullable=False),
    Column("topic_id", Integer, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("producer_epoch", Integer, nullable=False),
    Column("last_sequence", Integer, nullable=False),
    Column("last_batch_base_sequence", Integer, nullable=False),
    Column("last_batch_record_count", Integer, nullable=False),
    Column("last_batch_base_offset", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("producer_id", "topic_id", "partition"),
)
