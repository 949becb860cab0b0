"""The Kafka-protocol door (OUTBOX_KAFKA_LISTENER): Kafka's clients speak to the same services,
database and coordinator as the HTTP API. Thin: each request is decoded (kio), handed to the
service the HTTP door also calls, and its answer encoded; no rule of the log lives here."""
