"""`outbox serve` and `outbox coordinator` say at start when their connection bounds and their
database pool could take more file descriptors than the process may open (`ulimit -n`): a flood
would then fail on the limit, health checks included, before the bounds refuse it
(app.cli.server.open_file_limit_warning)."""

from __future__ import annotations

from app.cli.server import PROCESS_OWN_FILES, open_file_limit_warning
from app.settings import Settings

SQLITE = "sqlite:///./outbox.db"
POSTGRESQL = "postgresql+psycopg://postgres@127.0.0.1:5432/outbox"


def test_the_defaults_pass_a_limit_of_1024_and_the_warning_names_what_takes_the_descriptors() -> None:
    # 1,000 HTTP connections, a pool of 10 and up to 50 connections of two files each on SQLite.
    warning = open_file_limit_warning(Settings(database_url=SQLITE), http=True, pool_size=10, limit=1024)

    assert warning is not None
    assert f"may need {1000 + 100 + PROCESS_OWN_FILES} file descriptors" in warning
    assert "OUTBOX_HTTP_MAX_CONNECTIONS=1000" in warning and "OUTBOX_DB_POOL_SIZE=10" in warning
    assert "open-file limit of 1024" in warning
    assert "OUTBOX_KAFKA_MAX_CONNECTIONS" not in warning  # no Kafka listener, no Kafka connections


def test_the_kafka_listener_s_connections_count_only_with_the_listener() -> None:
    settings = Settings(database_url=POSTGRESQL, kafka_listener="127.0.0.1:9092", kafka_max_connections=500)
    needed = 1000 + 500 + 50 + PROCESS_OWN_FILES

    warning = open_file_limit_warning(settings, http=True, pool_size=10, limit=needed - 1)
    assert warning is not None and "OUTBOX_KAFKA_MAX_CONNECTIONS=500" in warning
    assert open_file_limit_warning(settings, http=True, pool_size=10, limit=needed) is None


def test_a_postgresql_connection_is_one_descriptor_and_a_sqlite_one_two() -> None:
    needed_on_postgresql = 1000 + 50 + PROCESS_OWN_FILES
    for url, fits in ((POSTGRESQL, True), (SQLITE, False)):
        warning = open_file_limit_warning(Settings(database_url=url), http=True, pool_size=10,
                                          limit=needed_on_postgresql)
        assert (warning is None) is fits, url


def test_a_limit_above_every_bound_says_nothing() -> None:
    settings = Settings(database_url=SQLITE, kafka_listener="127.0.0.1:9092")
    assert open_file_limit_warning(settings, http=True, pool_size=10, limit=1_048_576) is None


def test_a_coordinator_without_its_metrics_port_counts_its_pool_alone() -> None:
    settings = Settings(database_url=SQLITE, http_max_connections=5000)
    assert open_file_limit_warning(settings, http=False, pool_size=2, limit=1024) is None
    assert open_file_limit_warning(settings, http=True, pool_size=2, limit=1024) is not None
