"""Outbox: Kafka-style transactions over HTTP, stored in SQLite or PostgreSQL."""
