"""Partition logs, producers, transactions and group offsets.

The same statements build the schema on SQLite and PostgreSQL; tests compare the migrated
database with app.storage.tables on both.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('counters',
    sa.Column('name', sa.String(length=32), nullable=False),
    sa.Column('value', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_counters'))
    )
    op.create_table('group_offsets',
    sa.Column('group_id', sa.String(length=255), nullable=False),
    sa.Column('topic_id', sa.Integer(), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('committed_offset', sa.BigInteger(), nullable=False),
    sa.Column('metadata', sa.Text(), nullable=True),
    sa.Column('committed_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('group_id', 'topic_id', 'partition', name=op.f('pk_group_offsets'))
    )
    op.create_table('producer_partitions',
    sa.Column('producer_id', sa.BigInteger(), nullable=False),
    sa.Column('topic_id', sa.Integer(), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('producer_epoch', sa.Integer(), nullable=False),
    sa.Column('last_sequence', sa.Integer(), nullable=False),
    sa.Column('last_batch_base_sequence', sa.Integer(), nullable=False),
    sa.Column('last_batch_record_count', sa.Integer(), nullable=False),
    sa.Column('last_batch_base_offset', sa.BigInteger(), nullable=False),
    sa.Column('updated_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('producer_id', 'topic_id', 'partition', name=op.f('pk_producer_partitions'))
    )
    op.create_table('producers',
    sa.Column('producer_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('producer_epoch', sa.Integer(), nullable=False),
    sa.Column('transactional_id', sa.String(length=255), nullable=True),
    sa.Column('created_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('producer_id', name=op.f('pk_producers'))
    )
    op.create_table('records',
    sa.Column('topic_id', sa.Integer(), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('offset', sa.BigInteger(), nullable=False),
    sa.Column('timestamp_ms', sa.BigInteger(), nullable=False),
    sa.Column('key', sa.Text(), nullable=True),
    sa.Column('value', sa.Text(), nullable=True),
    sa.Column('headers', sa.Text(), nullable=True),
    sa.Column('producer_id', sa.BigInteger(), nullable=True),
    sa.Column('producer_epoch', sa.Integer(), nullable=True),
    sa.Column('sequence', sa.Integer(), nullable=True),
    sa.Column('txn_id', sa.BigInteger(), nullable=True),
    sa.Column('control_type', sa.String(length=8), nullable=True),
    sa.CheckConstraint("control_type IS NULL OR control_type IN ('COMMIT', 'ABORT')", name=op.f('ck_records_control_type')),
    sa.PrimaryKeyConstraint('topic_id', 'partition', 'offset', name=op.f('pk_records'))
    )
    op.create_index('ix_records_txn', 'records', ['topic_id', 'partition', 'txn_id', 'offset'], unique=False, sqlite_where=sa.text('txn_id IS NOT NULL'), postgresql_where=sa.text('txn_id IS NOT NULL'))
    op.create_table('topics',
    sa.Column('topic_id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=249), nullable=False),
    sa.Column('partition_count', sa.Integer(), nullable=False),
    sa.Column('cleanup_policy', sa.String(length=16), nullable=False),
    sa.Column('retention_ms', sa.BigInteger(), nullable=False),
    sa.Column('check_expected_offsets', sa.Boolean(), nullable=False),
    sa.Column('created_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('topic_id', name=op.f('pk_topics')),
    sa.UniqueConstraint('name', name=op.f('uq_topics_name'))
    )
    op.create_table('transaction_offsets',
    sa.Column('transactional_id', sa.String(length=255), nullable=False),
    sa.Column('group_id', sa.String(length=255), nullable=False),
    sa.Column('topic_id', sa.Integer(), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('txn_id', sa.BigInteger(), nullable=False),
    sa.Column('committed_offset', sa.BigInteger(), nullable=False),
    sa.Column('metadata', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('transactional_id', 'group_id', 'topic_id', 'partition', name=op.f('pk_transaction_offsets'))
    )
    op.create_index('ix_transaction_offsets_group', 'transaction_offsets', ['group_id', 'topic_id', 'partition'], unique=False)
    op.create_table('transaction_partitions',
    sa.Column('transactional_id', sa.String(length=255), nullable=False),
    sa.Column('topic_id', sa.Integer(), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('txn_id', sa.BigInteger(), nullable=False),
    sa.Column('first_offset', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('transactional_id', 'topic_id', 'partition', name=op.f('pk_transaction_partitions'))
    )
    op.create_index('ix_transaction_partitions_partition', 'transaction_partitions', ['topic_id', 'partition'], unique=False)
    op.create_table('transactions',
    sa.Column('transactional_id', sa.String(length=255), nullable=False),
    sa.Column('producer_id', sa.BigInteger(), nullable=False),
    sa.Column('producer_epoch', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=24), nullable=False),
    sa.Column('txn_id', sa.BigInteger(), nullable=True),
    sa.Column('transaction_timeout_ms', sa.BigInteger(), nullable=False),
    sa.Column('txn_started_ms', sa.BigInteger(), nullable=True),
    sa.Column('updated_ms', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('transactional_id', name=op.f('pk_transactions'))
    )
    op.create_index('ix_transactions_state', 'transactions', ['state'], unique=False)
    counters = sa.table("counters", sa.column("name", sa.String), sa.column("value", sa.BigInteger))
    op.bulk_insert(counters, [{"name": "producer_id", "value": 0}, {"name": "txn_id", "value": 0}])
    op.create_table('partitions',
    sa.Column('topic_id', sa.Integer(), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('next_offset', sa.BigInteger(), nullable=False),
    sa.Column('log_start_offset', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['topic_id'], ['topics.topic_id'], name=op.f('fk_partitions_topic_id_topics'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('topic_id', 'partition', name=op.f('pk_partitions'))
    )


def downgrade() -> None:
    op.drop_table('partitions')
    op.drop_index('ix_transactions_state', table_name='transactions')
    op.drop_table('transactions')
    op.drop_index('ix_transaction_partitions_partition', table_name='transaction_partitions')
    op.drop_table('transaction_partitions')
    op.drop_index('ix_transaction_offsets_group', table_name='transaction_offsets')
    op.drop_table('transaction_offsets')
    op.drop_table('topics')
    op.drop_index('ix_records_txn', table_name='records')
    op.drop_table('records')
    op.drop_table('producers')
    op.drop_table('producer_partitions')
    op.drop_table('group_offsets')
    op.drop_table('counters')
