"""The APIs the Kafka door serves: each by its key (ApiKey), the versions of it served (SERVED,
which ApiVersions advertises), and the versions that speak transaction version 2 (KIP-890).
app.kafka.protocol reads and writes the frames of these versions; app.kafka.apis answers them."""

from __future__ import annotations

import enum

from app.domain.types import TransactionVersion


@enum.unique
class ApiKey(enum.IntEnum):
    """The APIs the Kafka door serves, by the key that starts each request's header."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


# api_key -> (min, max) version served. ApiVersions advertises exactly this table. Fetch stops
# at 12 and Metadata at 12: Fetch 13 names topics by id, which the service does not give them
# yet. Produce stops at 12: 13 names topics by id.
SERVED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 12),  # magic v2 record batches only: 3 and up
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 12),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.SASL_HANDSHAKE: (0, 1),  # app.kafka.auth
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    # Both transaction versions (docs/ARCHITECTURE.md, "Transactions over the Kafka door"):
    # Produce 12, EndTxn 5 and TxnOffsetCommit 5 are version 2's (TRANSACTION_V2_SINCE).
    # AddPartitionsToTxn 4 and up is between brokers (a partition leader verifying with the
    # coordinator), which there are none of here.
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    # The classic group protocol (app/kafka/groups.py, its offsets app/kafka/group_offsets.py).
    # JoinGroup stops at 7: 8 adds a reason, 9 KIP-814's static leader; from 4 a new member
    # asks for its id first (KIP-394).
    # OffsetCommit 9 and OffsetFetch 8 and later are KIP-848's and batch groups; kio has no
    # OffsetCommit before 2 nor OffsetFetch before 1.
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 7),
    ApiKey.JOIN_GROUP: (0, 7),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 4),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    # Topic administration (app.kafka.topic_admin) and, from DescribeProducers, the transaction
    # descriptions (app.kafka.transaction_descriptions); the versions kio has schemas for.
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),  # by name: 6 can name a topic by id, which topics do not have here
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),  # 2 filters by a regular expression: not served
    # ACLs (app.kafka.acls): kio has no version 0 (before pattern types, KIP-290), which
    # clients since Kafka 2.0 do not send; 2 and 3 are the flexible ones.
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    # The administration of groups (app.kafka.groups; OffsetDelete app.kafka.group_offsets).
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.SASL_AUTHENTICATE: (0, 2),  # app.kafka.auth
}

# KIP-890: the first version of each API whose request speaks transaction version 2, as Kafka
# reads them: a client uses these only where ApiVersions finalizes `transaction.version` at 2
# (FINALIZED_FEATURES, app.kafka.protocol), and a client that does not read the feature never
# sends them in a transaction. Earlier versions speak version 1.
TRANSACTION_V2_SINCE: dict[ApiKey, int] = {ApiKey.PRODUCE: 12, ApiKey.END_TXN: 5, ApiKey.TXN_OFFSET_COMMIT: 5}


def transaction_version(api_key: int, version: int) -> TransactionVersion:
    """The transaction version a request of this API and version speaks (KIP-890), as Kafka's
    coordinator reads it: version 2 from TRANSACTION_V2_SINCE on, else version 1."""
    since = TRANSACTION_V2_SINCE.get(api_key)
    return TransactionVersion.V2 if since is not None and version >= since else TransactionVersion.V1


def is_served(api_key: int, api_version: int) -> bool:
    versions = SERVED.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]
