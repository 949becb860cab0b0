"""A Python client with the shape Kafka users know: Producer and Consumer over the HTTP API.

    producer = Producer(url, transactional_id="pizza-income-0")
    producer.init_transactions()
    consumer = Consumer(url, group_id="pizza-income")
    consumer.subscribe(["orders"])
    while True:
        records = consumer.poll()
        producer.begin_transaction()
        for r in records: producer.send("income", {"amount": r.value["price"]}, key=r.key)
        producer.send_offsets_to_transaction(consumer.position_offsets(), consumer.group_metadata())
        producer.commit_transaction()
"""

from app.client.backoff import ExponentialBackoff
from app.client.consumer import Consumer, ConsumerRecord, GroupMetadata
from app.client.errors import (
    AbortableError,
    AuthenticationError,
    AuthorizationError,
    ClientError,
    FatalError,
    InvalidOffsetError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    RetriableError,
    UnknownTopicOrPartitionError,
)
from app.client.json_text import JsonText
from app.client.producer import PreparedTxnState, Producer

__all__ = [
    "AbortableError",
    "AuthenticationError",
    "AuthorizationError",
    "ClientError",
    "Consumer",
    "ConsumerRecord",
    "ExponentialBackoff",
    "FatalError",
    "GroupMetadata",
    "InvalidOffsetError",
    "JsonText",
    "NoOffsetForPartitionError",
    "OffsetOutOfRangeError",
    "PreparedTxnState",
    "Producer",
    "ProducerFencedError",
    "RetriableError",
    "UnknownTopicOrPartitionError",
]
