"""Background chores (app.worker.chore): the coordinator worker, group expiry, producer
expiry, the log cleaner and the security refresher, each a Chore with its own config. app.composition makes
the set that `outbox serve` and `outbox coordinator` run."""
