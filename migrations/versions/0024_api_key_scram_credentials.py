"""SCRAM credentials of API keys: SASL SCRAM-SHA-256 and SCRAM-SHA-512 at the Kafka door.

api_keys gains a salt and an iteration count (shared by the keys of one principal) and, per
mechanism, StoredKey and ServerKey (RFC 5802), written by every key created from this revision
on. All nullable: a key created before has none, and nothing can compute them from its scrypt
hash; it keeps authenticating with SASL/PLAIN and over HTTP, and with SCRAM once replaced by a
new key (`outbox principals create`, then revoke the old one).

The downgrade drops the columns: the keys stay, SASL/PLAIN only.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

# Frozen: the columns as this revision adds them.
_COLUMNS = (
    ("scram_salt", sa.LargeBinary),
    ("scram_iterations", sa.Integer),
    ("scram_sha_256_stored_key", sa.LargeBinary),
    ("scram_sha_256_server_key", sa.LargeBinary),
    ("scram_sha_512_stored_key", sa.LargeBinary),
    ("scram_sha_512_server_key", sa.LargeBinary),
)


def upgrade() -> None:
    for name, type_ in _COLUMNS:
        op.add_column("api_keys", sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    # SQLite 3.35 and later drop a column in place (as 0023 does); no index names these.
    for name, _ in reversed(_COLUMNS):
        op.drop_column("api_keys", name)
