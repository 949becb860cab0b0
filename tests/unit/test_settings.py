import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_is_documented_in_the_readme(name: str) -> None:
    assert re.search(rf"`OUTBOX_{name.upper()}`", README), f"OUTBOX_{name.upper()} missing from README"


def test_expiration_must_exceed_the_maximum_transaction_timeout() -> None:
    with pytest.raises(ValidationError, match="OUTBOX_TRANSACTIONAL_ID_EXPIRATION_MS"):
        Settings(max_transaction_timeout_ms=10_000, transactional_id_expiration_ms=10_000)


def test_default_timeout_must_not_exceed_the_maximum() -> None:
    with pytest.raises(ValidationError, match="OUTBOX_DEFAULT_TRANSACTION_TIMEOUT_MS"):
        Settings(default_transaction_timeout_ms=20_000, max_transaction_timeout_ms=10_000)


def test_the_kafka_frames_budget_must_hold_a_frame_of_the_largest_size() -> None:
    with pytest.raises(ValidationError, match="OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES is less than"):
        Settings(kafka_socket_request_max_bytes=4096, kafka_queued_max_request_bytes=4095)
    assert Settings(kafka_socket_request_max_bytes=4096, kafka_queued_max_request_bytes=4096)


def test_the_initial_rebalance_delay_is_bounded_as_a_rebalance_timeout_is() -> None:
    with pytest.raises(ValidationError, match="OUTBOX_GROUP_INITIAL_REBALANCE_DELAY_MS exceeds"):
        Settings(group_max_session_timeout_ms=10_000, group_initial_rebalance_delay_ms=10_001)


def test_the_initial_rebalance_delay_left_at_its_default_is_held_to_a_lower_session_bound() -> None:
    assert Settings(group_max_session_timeout_ms=2_000).group_initial_rebalance_delay_ms == 2_000


def test_sqlite_database_migrates_itself_and_postgresql_does_not_by_default() -> None:
    assert Settings(database_url="sqlite:///x.db").should_auto_migrate is True
    assert Settings(database_url="postgresql://h/db").should_auto_migrate is False
    assert Settings(database_url="postgresql://h/db", auto_migrate=True).should_auto_migrate is True


@pytest.mark.parametrize("url", ["nonsense", "mysql://u:p@h/db", "postgresql://u:p@h:port/db"])
def test_a_database_url_that_is_not_sqlite_or_postgresql_is_refused_without_repeating_it(url: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(database_url=url)
    (error,) = refused.value.errors()
    assert error["loc"] == ("database_url",)
    assert "u:p" not in error["msg"] and "nonsense" not in error["msg"]


def _database_url_refusal(url: str) -> str:
    with pytest.raises(ValidationError) as refused:
        Settings(database_url=url)
    (error,) = refused.value.errors()
    assert error["loc"] == ("database_url",)
    assert "s3cret" not in error["msg"]
    return error["msg"]


@pytest.mark.parametrize("url", ["sqlite:///x.db", "sqlite+pysqlite:///x.db", "postgresql://u:s3cret@h/db",
                                 "postgres://u:s3cret@h/db", "postgresql+psycopg://u:s3cret@h:5432/db"])
def test_a_database_url_of_the_drivers_the_service_runs_with_is_taken(url: str) -> None:
    assert Settings(database_url=url).database_url == url


@pytest.mark.parametrize("url", ["postgresql+psycopg2://u:s3cret@h/db", "postgresql+pg8000://u:s3cret@h/db",
                                 "postgresql+asyncpg://u:s3cret@h/db", "postgresql+psycopg_async://u:s3cret@h/db",
                                 "sqlite+aiosqlite:///x.db"])
def test_a_database_url_of_another_driver_is_refused_naming_the_accepted_ones(url: str) -> None:
    driver = url.partition(":")[0]
    assert _database_url_refusal(url) == (f"Value error, the driver {driver!r} is not supported; use "
                                          "sqlite:///path.db or postgresql+psycopg://user:password@host:5432/db")


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///", "sqlite:///file::memory:?uri=true",
                                 "sqlite:///file:x?mode=memory&cache=shared&uri=true"])
def test_an_in_memory_sqlite_database_is_refused(url: str) -> None:
    assert _database_url_refusal(url) == ("Value error, SQLite needs a database file, not an in-memory database "
                                          "(each process would have its own, empty): sqlite:///path.db")


@pytest.mark.parametrize("url", ["sqlite://u:s3cret@host/x.db", "sqlite://host/x.db"])
def test_a_sqlite_url_with_a_host_or_user_is_refused(url: str) -> None:
    assert _database_url_refusal(url).startswith("Value error, a SQLite URL names a file only")


@pytest.mark.parametrize("url", ["postgresql+psycopg://u:s3c@ret@h/db", "postgresql+psycopg://u:s3cret@@h:5432/db",
                                 # parsed as host "ret", database "x@h": the host alone has no "@"
                                 "postgresql+psycopg://u:s3c@ret/x@h/db",
                                 # parsed as host "ret" and a parameter named "x@h/db"
                                 "postgresql+psycopg://u:s3c@ret?x@h/db"])
def test_an_unencoded_at_sign_in_the_password_is_refused_without_showing_it(url: str) -> None:
    message = _database_url_refusal(url)
    assert message == "Value error, the user, password or database holds an '@' as it is: write it %40"
    assert "ret" not in message


def test_an_at_sign_in_a_parameters_value_is_taken() -> None:
    url = "postgresql+psycopg://u:s3cret@h/db?application_name=me@work"
    assert Settings(database_url=url).database_url == url


@pytest.mark.parametrize("host", ["a..b", "x" * 64 + ".example", "ok.example,a..b"])
def test_a_database_host_no_resolver_takes_is_refused_naming_it(host: str) -> None:
    assert _database_url_refusal(f"postgresql+psycopg://u:s3cret@{host}/db").startswith(
        "Value error, 'a..b' is not a valid host name" if "a..b" in host else
        f"Value error, {'x' * 64 + '.example'!r} is not a valid host name")


@pytest.mark.parametrize("host", ["", " "])
def test_an_empty_host_is_refused_rather_than_bound_to_every_interface(host: str) -> None:
    with pytest.raises(ValidationError, match=r"empty; give an address, e\.g\. 127\.0\.0\.1 \(0\.0\.0\.0 for every interface\)"):
        Settings(host=host)


def test_log_level_is_one_of_pythons_levels_in_any_case() -> None:
    assert Settings(log_level="WARNING").log_level == "warning"
    with pytest.raises(ValidationError, match="must be one of critical, error, warning, info, debug"):
        Settings(log_level="verbose")


@pytest.mark.parametrize("name", ["fetch_max_bytes", "fetch_max_partition_bytes"])
def test_a_fetch_byte_default_above_its_limit_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match=f"OUTBOX_{name.upper()}_DEFAULT exceeds OUTBOX_{name.upper()}_LIMIT"):
        Settings(**{f"{name}_default": 2000, f"{name}_limit": 1000})


def test_a_fetch_record_default_above_its_limit_is_refused(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OUTBOX_FETCH_MAX_RECORDS_DEFAULT", "20000")
    with pytest.raises(ValidationError, match="OUTBOX_FETCH_MAX_RECORDS_DEFAULT exceeds OUTBOX_FETCH_MAX_RECORDS_LIMIT"):
        Settings()


def test_the_fetch_record_default_left_at_its_default_is_held_to_a_lower_limit() -> None:
    assert Settings(fetch_max_records_limit=50).fetch_max_records_default == 50


@pytest.mark.parametrize("timeout_ms", ["999", "1800001"], ids=["below the minimum", "above the maximum"])
def test_a_default_session_timeout_outside_the_groups_range_is_refused(timeout_ms: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Taken, it would have every HTTP join that names no session timeout refused, as the client's fault.
    monkeypatch.setenv("OUTBOX_DEFAULT_SESSION_TIMEOUT_MS", timeout_ms)
    with pytest.raises(ValidationError, match=r"OUTBOX_DEFAULT_SESSION_TIMEOUT_MS must be within 1000\.\.1800000 "
                                              r"\(OUTBOX_GROUP_MIN_SESSION_TIMEOUT_MS\.\.OUTBOX_GROUP_MAX_SESSION_TIMEOUT_MS\)"):
        Settings()


def test_the_default_session_timeout_left_at_its_default_is_held_to_the_groups_range() -> None:
    assert Settings(group_min_session_timeout_ms=100, group_max_session_timeout_ms=200).default_session_timeout_ms == 200
    assert Settings(group_min_session_timeout_ms=60_000).default_session_timeout_ms == 60_000


@pytest.mark.parametrize(("name", "value"), [("host", "not..a..host"), ("kafka_listener", "not..a..host:9092")])
def test_a_host_name_no_resolver_takes_is_refused_naming_it(name: str, value: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(f"OUTBOX_{name.upper()}", value)
    with pytest.raises(ValidationError) as refused:
        Settings()
    (error,) = refused.value.errors()
    assert error["loc"] == (name,)
    assert error["msg"] == "Value error, 'not..a..host' is not a valid host name (label empty or too long)"


def test_the_waiting_requests_per_principal_must_not_exceed_those_in_all() -> None:
    with pytest.raises(ValidationError, match="OUTBOX_MAX_WAITING_REQUESTS_PER_PRINCIPAL exceeds"):
        Settings(max_waiting_requests=10, max_waiting_requests_per_principal=11)


def test_the_waiting_requests_must_leave_http_connections_to_requests_that_do_not_wait() -> None:
    # Each waiting HTTP request holds a connection: as many waits as connections would leave a
    # Send or a health check none.
    with pytest.raises(ValidationError, match=r"OUTBOX_MAX_WAITING_REQUESTS \(100\) is not below "
                                              r"OUTBOX_HTTP_MAX_CONNECTIONS \(100\)"):
        Settings(http_max_connections=100, max_waiting_requests=100, max_waiting_requests_per_principal=10)
    with pytest.raises(ValidationError, match="OUTBOX_MAX_WAITING_REQUESTS_PER_PRINCIPAL exceeds"):
        Settings(http_max_connections=100, max_waiting_requests=99, max_waiting_requests_per_principal=100)
    settings = Settings(http_max_connections=100, max_waiting_requests=99, max_waiting_requests_per_principal=99)
    assert settings.max_waiting_requests == 99


@pytest.mark.parametrize(("connections", "waiting", "per_principal"), [(500, 375, 75), (60, 45, 45), (1, 1, 1)])
def test_the_waiting_bounds_left_unset_follow_a_lower_connection_limit(
        connections: int, waiting: int, per_principal: int) -> None:
    # A deployment that had lowered OUTBOX_HTTP_MAX_CONNECTIONS alone, before the waiting bound
    # had to be below it, starts as it did (a limit of 1 cannot leave room: refused, below).
    if connections == 1:
        with pytest.raises(ValidationError, match=r"OUTBOX_MAX_WAITING_REQUESTS \(1\) is not below"):
            Settings(http_max_connections=connections)
        return
    settings = Settings(http_max_connections=connections)
    assert (settings.max_waiting_requests, settings.max_waiting_requests_per_principal) == (waiting, per_principal)
    assert {"max_waiting_requests", "max_waiting_requests_per_principal"} & settings.model_fields_set == set()


def test_by_default_one_principals_waits_leave_most_places_and_connections_to_others() -> None:
    settings = Settings()
    assert settings.max_waiting_requests < settings.http_max_connections
    assert settings.max_waiting_requests_per_principal * 10 <= settings.max_waiting_requests
    # Even with every other principal's waits, one principal's requests that do not wait find
    # a connection.
    assert settings.http_max_connections - settings.max_waiting_requests >= settings.http_max_connections // 4


def test_the_http_body_budget_holds_at_least_one_body_of_the_largest_size() -> None:
    settings = Settings()
    assert (settings.http_max_queued_body_bytes, settings.max_request_bytes) == (256 * 1024 * 1024, 32 * 1024 * 1024)
    with pytest.raises(ValidationError, match="OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES is less than OUTBOX_MAX_REQUEST_BYTES"):
        Settings(max_request_bytes=2_000_000, http_max_queued_body_bytes=1_999_999)
    assert Settings(max_request_bytes=2_000_000, http_max_queued_body_bytes=2_000_000).http_max_queued_body_bytes == 2_000_000


def test_one_principals_share_of_the_http_body_budget_is_a_quarter_of_it_by_default() -> None:
    settings = Settings()
    assert settings.http_max_queued_body_bytes_per_principal == 64 * 1024 * 1024
    assert settings.http_max_queued_body_bytes_per_principal * 4 == settings.http_max_queued_body_bytes


def test_one_principals_share_of_the_http_body_budget_must_not_exceed_the_budget() -> None:
    with pytest.raises(ValidationError, match="OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL exceeds "
                                              "OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES"):
        Settings(http_max_queued_body_bytes=100_000_000, http_max_queued_body_bytes_per_principal=100_000_001)
    assert Settings(http_max_queued_body_bytes=100_000_000,
                    http_max_queued_body_bytes_per_principal=100_000_000).http_max_queued_body_bytes_per_principal \
        == 100_000_000


def test_one_principals_share_of_the_http_body_budget_holds_at_least_one_body_of_the_largest_size() -> None:
    with pytest.raises(ValidationError, match="OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL is less than "
                                              "OUTBOX_MAX_REQUEST_BYTES"):
        Settings(max_request_bytes=2_000_000, http_max_queued_body_bytes_per_principal=1_999_999)
    with pytest.raises(ValidationError, match="greater than or equal to 1024"):
        Settings(max_request_bytes=1024, http_max_queued_body_bytes=1024, http_max_queued_body_bytes_per_principal=1023)


@pytest.mark.parametrize(("max_request", "total", "share"), [
    (2_000_000, 10_000_000, 10_000_000),  # a lower budget: its share is all of it, as the waiting bounds' is
    (100_000_000, 1_000_000_000, 100_000_000),  # a larger body: the share holds one
])
def test_one_principals_share_left_unset_follows_a_lower_body_budget_or_a_larger_body(
        max_request: int, total: int, share: int) -> None:
    # A deployment that had set either alone before the share existed starts as it did.
    settings = Settings(max_request_bytes=max_request, http_max_queued_body_bytes=total)
    assert settings.http_max_queued_body_bytes_per_principal == share
    assert "http_max_queued_body_bytes_per_principal" not in settings.model_fields_set


def test_the_http_head_bound_is_64_kib_and_refused_below_1_kib_or_above_16_mib() -> None:
    assert Settings().http_max_head_bytes == 65536
    for refused in (1023, 16 * 1024 * 1024 + 1):
        with pytest.raises(ValidationError):
            Settings(http_max_head_bytes=refused)
    assert Settings(http_max_head_bytes=1024).http_max_head_bytes == 1024
    assert Settings(http_max_head_bytes=16 * 1024 * 1024).http_max_head_bytes == 16 * 1024 * 1024


def test_the_http_send_timeout_is_at_least_a_second() -> None:
    assert Settings().http_send_timeout_s == 60
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Settings(http_send_timeout_s=0)
    assert Settings(http_send_timeout_s=1).http_send_timeout_s == 1


@pytest.mark.parametrize("name", ["max_waiting_requests", "max_waiting_requests_per_principal"])
def test_a_bound_on_waiting_requests_is_at_least_one(name: str) -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Settings(**{name: 0})


def test_the_kafka_request_entries_bound_is_at_least_one() -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Settings(kafka_max_request_entries=0)


def test_the_kafka_connections_per_address_bound_is_at_least_one_or_unset() -> None:
    assert Settings().kafka_max_connections_per_ip is None
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Settings(kafka_max_connections_per_ip=0)


def test_the_kafka_connections_per_address_must_not_exceed_those_in_all() -> None:
    # Past OUTBOX_KAFKA_MAX_CONNECTIONS every connection is closed first: a larger bound per
    # address would never close one.
    with pytest.raises(ValidationError, match="OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP exceeds OUTBOX_KAFKA_MAX_CONNECTIONS"):
        Settings(kafka_max_connections=10, kafka_max_connections_per_ip=11)
    with pytest.raises(ValidationError, match="OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP exceeds"):
        Settings(kafka_max_connections_per_ip=1001)
    assert Settings(kafka_max_connections=10, kafka_max_connections_per_ip=10).kafka_max_connections_per_ip == 10


def test_the_http_connections_per_address_bound_is_unset_by_default_and_at_least_one() -> None:
    # Unset as the Kafka door's OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP is.
    assert Settings().http_max_connections_per_ip is None
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Settings(http_max_connections_per_ip=0)
    assert Settings(http_max_connections_per_ip=1).http_max_connections_per_ip == 1


def test_the_http_connections_per_address_must_not_exceed_those_in_all() -> None:
    with pytest.raises(ValidationError, match="OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP exceeds OUTBOX_HTTP_MAX_CONNECTIONS"):
        Settings(http_max_connections=10, http_max_connections_per_ip=11, max_waiting_requests=5,
                 max_waiting_requests_per_principal=5)
    with pytest.raises(ValidationError, match="OUTBOX_HTTP_MAX_CONNECTIONS_PER_IP exceeds"):
        Settings(http_max_connections_per_ip=1001)
    settings = Settings(http_max_connections=10, http_max_connections_per_ip=10)
    assert settings.http_max_connections_per_ip == 10


def test_offsets_are_never_expired_by_default() -> None:
    # Kafka's default is 7 days; here memberless groups carry the Spark jobs' and the sinks'
    # exactly-once positions (docs/SPARK.md), so retention is off unless set.
    assert Settings().offsets_retention_minutes is None


def test_an_offsets_retention_in_kafkas_range_is_taken(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OUTBOX_OFFSETS_RETENTION_MINUTES", "10080")
    assert Settings().offsets_retention_minutes == 10_080


@pytest.mark.parametrize("minutes", ["0", "-1", str(2**31)])
def test_an_offsets_retention_outside_kafkas_range_is_refused_at_startup(minutes: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OUTBOX_OFFSETS_RETENTION_MINUTES", minutes)
    with pytest.raises(ValidationError) as refused:
        Settings()
    (error,) = refused.value.errors()
    assert error["loc"] == ("offsets_retention_minutes",)


@pytest.mark.parametrize(("url", "given", "refused"), [
    ("postgresql+psycopg://u@h/db", {"sqlite_synchronous": "NORMAL"}, "OUTBOX_SQLITE_SYNCHRONOUS"),
    ("postgresql+psycopg://u@h/db", {"sqlite_busy_timeout_ms": 100, "sqlite_synchronous": "NORMAL"},
     "OUTBOX_SQLITE_BUSY_TIMEOUT_MS, OUTBOX_SQLITE_SYNCHRONOUS"),
    ("sqlite:///x.db", {"db_pool_pre_ping": True}, "OUTBOX_DB_POOL_PRE_PING"),
    # SQLite's writers wait on OUTBOX_SQLITE_BUSY_TIMEOUT_MS instead.
    ("sqlite:///x.db", {"db_lock_timeout_ms": 1_000}, "OUTBOX_DB_LOCK_TIMEOUT_MS"),
])
def test_a_setting_of_the_other_kind_of_database_is_refused(url: str, given: dict, refused: str) -> None:  # type: ignore[type-arg]
    # Taken and ignored, OUTBOX_SQLITE_SYNCHRONOUS=FULL would promise flushes PostgreSQL's own
    # settings decide.
    with pytest.raises(ValidationError, match=f"{refused} set, but OUTBOX_DATABASE_URL is an? (SQLite|PostgreSQL) "
                                              "database, where (it does|they do) nothing"):
        Settings(database_url=url, **given)


def test_each_kind_of_database_takes_its_own_settings_and_the_other_s_at_their_defaults() -> None:
    assert Settings(database_url="sqlite:///x.db", sqlite_synchronous="NORMAL",
                    db_pool_pre_ping=False).sqlite_synchronous == "NORMAL"
    assert Settings(database_url="postgresql+psycopg://u@h/db", db_pool_pre_ping=True,
                    sqlite_synchronous="FULL", sqlite_busy_timeout_ms=30_000).db_pool_pre_ping


@pytest.mark.parametrize("advertised", ["0.0.0.0:9092", "[::]:9092", "kafka.example.com:0", "kafka.example.com"])
def test_an_advertised_listener_no_client_can_connect_to_is_refused(advertised: str) -> None:
    with pytest.raises(ValidationError, match="kafka_advertised_listener"):
        Settings(kafka_advertised_listener=advertised)


def test_an_advertised_listener_is_a_host_and_a_port() -> None:
    settings = Settings(kafka_advertised_listener="kafka.example.com:19092")
    assert settings.kafka_advertised_address == ("kafka.example.com", 19092)


def test_a_kafka_partition_count_above_the_topics_bound_is_refused() -> None:
    # Every auto-created topic and every CreateTopics leaving the count to the broker would be
    # refused with INVALID_PARTITIONS.
    with pytest.raises(ValidationError, match="OUTBOX_KAFKA_NUM_PARTITIONS exceeds OUTBOX_MAX_PARTITIONS_PER_TOPIC"):
        Settings(kafka_num_partitions=8, max_partitions_per_topic=4)
    assert Settings(kafka_num_partitions=4, max_partitions_per_topic=4).kafka_num_partitions == 4


@pytest.mark.parametrize("name", ["group_min_session_timeout_ms", "group_max_session_timeout_ms",
                                  "default_session_timeout_ms"])
def test_a_session_timeout_setting_past_kafkas_int_is_refused(name: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A member's session timeout is a 32-bit column: past it, PostgreSQL refuses the join.
    monkeypatch.setenv("OUTBOX_GROUP_MAX_SESSION_TIMEOUT_MS", str(2**31 - 1))
    monkeypatch.setenv(f"OUTBOX_{name.upper()}", str(2**31))
    with pytest.raises(ValidationError, match="less than or equal to 2147483647"):
        Settings()


@pytest.mark.parametrize(("name", "beside"), [
    ("coordinator_interval_ms", {}), ("cleaner_interval_ms", {}),
    ("security_refresh_interval_ms", {"authentication": "api_key"}),  # refreshed only with authentication
])
def test_a_chore_interval_past_kafkas_int_is_refused(name: str, beside: dict) -> None:
    # A chore waits it out on a thread, whose wait fails past a platform's bound and ends the chore.
    assert getattr(Settings(**{name: 2**31 - 1}, **beside), name) == 2**31 - 1
    with pytest.raises(ValidationError, match="less than or equal to 2147483647"):
        Settings(**{name: 10**13}, **beside)


def test_an_offset_fetch_wait_bound_past_what_a_request_may_ask_is_refused() -> None:
    # A request's wait_ms is at most 600000: a larger bound would never be reached.
    assert Settings(max_offset_fetch_wait_ms=600_000).max_offset_fetch_wait_ms == 600_000
    with pytest.raises(ValidationError, match="less than or equal to 600000"):
        Settings(max_offset_fetch_wait_ms=900_000)


def test_probes_in_the_access_log_without_the_access_log_are_refused() -> None:
    # With OUTBOX_ACCESS_LOG=false no request is logged, probes or not.
    with pytest.raises(ValidationError, match="OUTBOX_ACCESS_LOG_PROBES set, but OUTBOX_ACCESS_LOG is false"):
        Settings(access_log=False, access_log_probes=True)
    assert Settings(access_log=False).access_log_probes is False


def test_a_lag_history_with_no_group_partition_to_read_is_refused() -> None:
    # The lag history reads the gauges' group partitions, none of them with the bound at 0:
    # every sample would be empty, read from the database all the same.
    with pytest.raises(ValidationError, match="OUTBOX_METRICS_MAX_GROUP_PARTITIONS is 0, but OUTBOX_CONSOLE_LAG_INTERVAL_MS"):
        Settings(metrics_max_group_partitions=0)
    with pytest.raises(ValidationError, match="OUTBOX_METRICS_MAX_GROUP_PARTITIONS is 0"):
        Settings(metrics_max_group_partitions=0, console_lag_interval_ms=5_000)
    assert Settings(metrics_max_group_partitions=0, console_lag_interval_ms=0).console_lag_samples == 0


def test_a_lag_history_group_count_without_a_lag_history_is_refused() -> None:
    # OUTBOX_CONSOLE_LAG_INTERVAL_MS=0 keeps no lag history: the count would do nothing.
    with pytest.raises(ValidationError, match="OUTBOX_CONSOLE_LAG_MAX_GROUPS set, but OUTBOX_CONSOLE_LAG_INTERVAL_MS is 0"):
        Settings(console_lag_interval_ms=0, console_lag_max_groups=50)
    assert Settings(console_lag_interval_ms=0).console_lag_max_groups == 20


def test_a_sqlite_busy_timeout_past_sqlites_int_is_refused() -> None:
    # SQLite reads a busy_timeout past 2^31-1 as 0: a writer would not wait at all.
    assert Settings(sqlite_busy_timeout_ms=2**31 - 1).sqlite_busy_timeout_ms == 2**31 - 1
    with pytest.raises(ValidationError, match="less than or equal to 2147483647"):
        Settings(sqlite_busy_timeout_ms=3_000_000_000)


@pytest.mark.parametrize("name", ["transactional_id_expiration_ms", "producer_id_expiration_ms"])
def test_an_expiration_past_the_databases_integers_is_refused(name: str) -> None:
    # The expiry's cut-off (now minus it) is a 64-bit integer: past it every pass failed.
    with pytest.raises(ValidationError, match="less than or equal to 4611686018427387904"):
        Settings(**{name: 10**20})
    assert getattr(Settings(**{name: 2**62}), name) == 2**62


def test_a_variable_near_a_settings_name_is_named_as_that_setting_misspelt() -> None:
    from app.settings.misspelt import misspelt_settings

    environ = {"OUTBOX_FETCH_MAX_WAIT": "1000", "OUTBOX_KAFKA_LISTENERS": "127.0.0.1:9092",
               "outbox_loglevel": "debug", "OUTBOX_LOG_LEVEL": "info", "PATH": "/usr/bin",
               # Other tools' variables, and the admin commands' own: no setting's name is near.
               "OUTBOX_URL": "http://127.0.0.1:8000", "OUTBOX_API_KEY": "k", "OUTBOX_SPARK_JDBC_DIR": "/x",
               "OUTBOX_TEST_WORKERS": "1"}

    assert misspelt_settings(environ) == [("OUTBOX_FETCH_MAX_WAIT", "OUTBOX_FETCH_MAX_WAIT_MS"),
                                          ("OUTBOX_KAFKA_LISTENERS", "OUTBOX_KAFKA_LISTENER"),
                                          ("outbox_loglevel", "OUTBOX_LOG_LEVEL")]


def test_one_principals_share_of_the_kafka_frame_budget_is_a_quarter_of_it_by_default() -> None:
    settings = Settings()
    assert settings.kafka_queued_max_request_bytes_per_principal == 128 * 1024 * 1024
    assert settings.kafka_queued_max_request_bytes_per_principal * 4 == settings.kafka_queued_max_request_bytes


def test_one_principals_share_of_the_kafka_frame_budget_is_between_one_frame_and_the_budget() -> None:
    with pytest.raises(ValidationError, match="OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES_PER_PRINCIPAL exceeds "
                                              "OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES"):
        Settings(kafka_queued_max_request_bytes=200_000_000, kafka_queued_max_request_bytes_per_principal=200_000_001)
    assert Settings(kafka_queued_max_request_bytes=200_000_000, kafka_queued_max_request_bytes_per_principal=200_000_000
                    ).kafka_queued_max_request_bytes_per_principal == 200_000_000
    with pytest.raises(ValidationError, match="OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES_PER_PRINCIPAL is less than "
                                              "OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES"):
        Settings(kafka_socket_request_max_bytes=2_000_000, kafka_queued_max_request_bytes_per_principal=1_999_999)
    with pytest.raises(ValidationError, match="greater than or equal to 1024"):
        Settings(kafka_socket_request_max_bytes=1024, kafka_queued_max_request_bytes=1024,
                 kafka_queued_max_request_bytes_per_principal=1023)


@pytest.mark.parametrize(("frame", "total", "share"), [
    (2_000_000, 10_000_000, 10_000_000),  # a lower budget: its share is all of it
    (1_000_000_000, 2_000_000_000, 1_000_000_000),  # a larger frame: the share holds one
])
def test_one_principals_share_left_unset_follows_a_lower_frame_budget_or_a_larger_frame(
        frame: int, total: int, share: int) -> None:
    # A deployment that had set either alone before the share existed starts as it did, and
    # `outbox serve` without a listener does not name the share as given.
    settings = Settings(kafka_socket_request_max_bytes=frame, kafka_queued_max_request_bytes=total)
    assert settings.kafka_queued_max_request_bytes_per_principal == share
    assert "kafka_queued_max_request_bytes_per_principal" not in settings.model_fields_set
    assert settings.kafka_settings_without_listener() == [
        "OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES", "OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES"]


def test_the_group_metadata_bound_is_at_least_1024_and_at_most_the_frame_limit() -> None:
    assert Settings().kafka_group_max_metadata_bytes == 1_048_576
    with pytest.raises(ValidationError, match="kafka_group_max_metadata_bytes"):
        Settings(kafka_group_max_metadata_bytes=1023)
    assert Settings(kafka_group_max_metadata_bytes=1024).kafka_group_max_metadata_bytes == 1024
    with pytest.raises(ValidationError, match="OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES exceeds"):
        Settings(kafka_socket_request_max_bytes=4096, kafka_queued_max_request_bytes=4096,
                 kafka_group_max_metadata_bytes=4097)


def test_the_groups_total_metadata_bound_is_at_least_one_members() -> None:
    assert Settings().kafka_group_max_total_metadata_bytes == 16 * 1_048_576
    with pytest.raises(ValidationError, match="kafka_group_max_total_metadata_bytes"):
        Settings(kafka_group_max_total_metadata_bytes=0)
    with pytest.raises(ValidationError, match="OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES is less than "
                                              "OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES"):
        Settings(kafka_group_max_total_metadata_bytes=1_048_575)
    assert Settings(kafka_group_max_total_metadata_bytes=1_048_576).kafka_group_max_total_metadata_bytes == 1_048_576
    # Against the member's bound as it acts: left unset below a lower frame limit, that limit.
    assert Settings(kafka_socket_request_max_bytes=4096, kafka_queued_max_request_bytes=4096,
                    kafka_group_max_total_metadata_bytes=4096).kafka_group_max_total_metadata_bytes == 4096


def test_the_group_metadata_bound_left_unset_is_a_lower_frame_limit_and_not_counted_as_set() -> None:
    # A deployment whose frames are bounded below 1 MiB starts as it did, and `outbox serve`
    # without a listener names only what was given.
    settings = Settings(kafka_socket_request_max_bytes=4096, kafka_queued_max_request_bytes=4096)
    assert settings.kafka_group_max_metadata_bytes == 4096
    assert settings.kafka_settings_without_listener() == [
        "OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES", "OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES"]


def accepted_range(name: str) -> str | None:
    """What a bounded setting's README row says it accepts: "Accepted: 1 to 65,535." or
    "Accepted: at least 1." (the upper bound of a 64-bit integer is not one an operator meets)."""
    low = high = None
    for constraint in Settings.model_fields[name].metadata:
        low = getattr(constraint, "ge", None) if getattr(constraint, "ge", None) is not None else low
        high = getattr(constraint, "le", None) if getattr(constraint, "le", None) is not None else high
    if low is None and high is None:
        return None
    if high is not None and high >= 2**63 - 1:
        high = None
    if high is None:
        return f"Accepted: at least {low:,}."
    if low is None:
        return f"Accepted: at most {high:,}."
    return f"Accepted: {low:,} to {high:,}."


README_ROWS = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(OUTBOX_[A-Z0-9_]+)` \|.*$", README, re.MULTILINE)}


@pytest.mark.parametrize("name", sorted(n for n in Settings.model_fields if accepted_range(n)))
def test_a_bounded_settings_readme_row_says_what_it_accepts(name: str) -> None:
    # Settings refuses a value out of range at start (exit 2): the row tells the operator first.
    row = README_ROWS.get(f"OUTBOX_{name.upper()}", "")
    said = accepted_range(name).removesuffix(".")
    assert re.search(rf" {re.escape(said)}( \([^)]*\))?\. \|$", row), f"OUTBOX_{name.upper()}: its row should end {said!r}"


def test_the_groups_total_metadata_bound_left_unset_follows_a_larger_members_bound() -> None:
    # A deployment that raised a member's bound past 16 MiB starts as it did before this bound.
    raised = Settings(kafka_group_max_metadata_bytes=32 << 20)
    assert (raised.kafka_group_max_total_metadata_bytes, raised.kafka_settings_without_listener()) == (
        32 << 20, ["OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES"])
