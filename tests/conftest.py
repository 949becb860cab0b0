"""Fixtures shared by every suite.

`db_url` is parametrized over SQLite and PostgreSQL, so every test that uses it (directly or
through `services`, `client`) runs on both. PostgreSQL is the real server named by
OUTBOX_TEST_POSTGRES_URL (default: the local one, trust auth); each test session gets its own
database, migrated once and truncated between tests.

What a test needs from outside Python (a PostgreSQL server, Java and the JDBC jars, chromium)
is checked once: where it is missing the test is skipped with the fix in its reason, which
pytest's summary shows (-ra), or, with OUTBOX_TEST_REQUIRE_ALL=1 (set by .ci/run), failed, so
that a run meant to be complete cannot pass by skipping.

Tests are marked by where they live: tests/e2e `e2e`, tests/fuzz `fuzz`, tests/spark `spark`,
tests/kafka `kafka`; a plain `pytest` (no paths, no -m) leaves them, and `cluster`, `slow` and
`browser`, out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from app.composition import Services
from app.settings import Settings
from app.storage import migrate
from app.storage.engine import Database, build_engine
from app.storage.tables import metadata, record_leaf_pattern
from tests.shared_app import SharedApp, replace_with_copy

ADMIN_URL = os.environ.get(
    "OUTBOX_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
BACKENDS = ["sqlite", "postgresql"]
REQUIRE_ALL = os.environ.get("OUTBOX_TEST_REQUIRE_ALL") == "1"
MARKER_OF_DIRECTORY = {"tests/e2e/": "e2e", "tests/fuzz/": "fuzz", "tests/spark/": "spark", "tests/kafka/": "kafka"}

# .ci/run runs the suite on two pytest-xdist workers, each test to whichever is free: nothing here
# keeps tests apart by worker. Two of Spark's tests (a JVM per worker) or two process-heavy e2e
# tests may run at once: slower on two cores than one after the other, and passed so. What must
# not run twice at once, librdkafka's build into its cache directory, takes a file lock
# (compat/librdkafka/run); every test that uses PostgreSQL has a database of its own per worker.
#
# The files whose tests take longest start first (`start_order`), by a table of seconds per
# test that a run's JUnit report refreshes (.ci/times.py --write-table): a minutes-long test
# that started last ended the run alone on one worker. --dist worksteal (.ci/run) splits the
# ordered tests by their count, the first half to worker 0 and the rest to worker 1, and an idle
# worker takes the other's queued tests from its end. A file keeps its tests together, in
# pytest's order, so that its module fixtures are set up once a worker. Spark's files keep
# their collection order at their tier's place: by their own times the stream tests (a JVM
# SIGKILLed and a stream restarted, minutes near their timeouts when the machine is loaded)
# would start first and pay the Spark session's start as well. With the order, CI's runs ended
# within about half a minute of a perfect split of their summed time over the two workers
# (docs/benchmarks.md, "The test suite's time"); a developer's run can leave it out with
# `-p no:outbox-start-order`.
TIMES_TABLE = Path(__file__).with_name("test_times.tsv")


def seconds_per_test(table: str) -> dict[str, float]:
    """Each file's and tier's (tests/<dir>) seconds per test, from the table's rows
    `seconds<TAB>tests<TAB>path`."""
    means = {}
    for row in table.splitlines():
        if row and not row.startswith("#"):
            seconds, tests, path = row.split("\t")
            means[path] = float(seconds) / int(tests)
    return means


IN_COLLECTION_ORDER = ("spark",)  # tiers whose files start in pytest's order, at the tier's place


def start_order(paths: list[str], means: dict[str, float]) -> list[int]:
    """The indices of `paths` (test files, as nodeids begin) in the order their tests should
    start: the longest seconds per test first, a file not in the table at its tier's, one not
    known at all last; each file's tests together and in their order, ties in the order given.
    A file of a tier IN_COLLECTION_ORDER takes its tier's time, whatever its own."""
    first_seen: dict[str, int] = {}
    for i, path in enumerate(paths):
        first_seen.setdefault(path, i)

    def key(i: int) -> tuple[float, int, int]:
        path = paths[i]
        parts = path.split("/")
        tier = "/".join(parts[:2])
        own = None if parts[1:2] and parts[1] in IN_COLLECTION_ORDER else means.get(path)
        return (-(own if own is not None else means.get(tier, 0.0)), first_seen[path], i)

    return sorted(range(len(paths)), key=key)


class _StartOrder:
    @pytest.hookimpl(trylast=True)  # after -m and pytest's own grouping by fixture parameters
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        try:
            means = seconds_per_test(TIMES_TABLE.read_text())
        except (OSError, ValueError, ArithmeticError) as e:  # without the order a run is slower, not wrong
            warnings.warn(f"{TIMES_TABLE.name} cannot be read ({e}): the tests start in "
                          "pytest's order", pytest.PytestWarning, stacklevel=1)
            return
        paths = [item.nodeid.replace("\\", "/").split("::")[0] for item in items]
        items[:] = [items[i] for i in start_order(paths, means)]


def pytest_configure(config: pytest.Config) -> None:
    from tests import fastapi_memo

    config.pluginmanager.register(_StartOrder(), "outbox-start-order")
    fastapi_memo.install()


def unavailable(reason: str) -> None:
    """What the test needs is missing: skip with `reason` (the fix), or fail where the run
    must be complete (OUTBOX_TEST_REQUIRE_ALL=1)."""
    if REQUIRE_ALL:
        pytest.fail(f"{reason} (OUTBOX_TEST_REQUIRE_ALL=1: nothing may be skipped)", pytrace=False)
    pytest.skip(reason)


def npm_installed_copy(package_dir: Path, into: Path, needs: str) -> Path:
    """A copy of `package_dir` (a Node.js package with its lock file) under `into`, with its
    dependencies installed by `npm ci`; skipped (or failed, see `unavailable`) without Node.js
    and npm or the npm registry. `needs` names what the lock file brings, for the message."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        unavailable(f"Node.js and npm are needed to install {needs} (Debian: apt-get install nodejs npm)")
    copy = into / package_dir.name
    shutil.copytree(package_dir, copy, ignore=shutil.ignore_patterns("node_modules"))
    installed = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=copy,
                               capture_output=True, text=True, timeout=300)
    if installed.returncode != 0:
        unavailable(f"npm ci could not install {needs} from the npm registry: {installed.stderr.strip()[-300:]}")
    return copy


_postgres_problem: list[str | None] = []


def require_postgres() -> None:
    if not _postgres_problem:
        engine = create_engine(ADMIN_URL)
        try:
            with engine.connect():
                _postgres_problem.append(None)
        except OperationalError as e:
            url = make_url(ADMIN_URL).render_as_string(hide_password=True)
            _postgres_problem.append(
                f"PostgreSQL is not reachable at {url} ({str(e.orig).strip().splitlines()[0]}): "
                "start it (Debian: apt-get install postgresql; pg_ctlcluster 15 main start) or "
                "point OUTBOX_TEST_POSTGRES_URL at one; `bash .ci/run` starts the local one"
            )
        finally:
            engine.dispose()
    if _postgres_problem[0] is not None:
        unavailable(_postgres_problem[0])


SLOW_TIERS = ("e2e", "fuzz", "spark", "cluster", "slow", "browser", "kafka")


@pytest.hookimpl(tryfirst=True)  # before -m reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.replace("\\", "/")
        for directory, marker in MARKER_OF_DIRECTORY.items():
            if path.startswith(directory):
                item.add_marker(marker)
    # A plain `pytest`, no paths and no -m: the fast tier. `pytest tests/spark`, `pytest -m e2e`
    # or `pytest tests` (what .ci/run runs) choose for themselves.
    if config.args_source is pytest.Config.ArgsSource.TESTPATHS and not config.option.markexpr:
        slow = [item for item in items if any(item.get_closest_marker(m) for m in SLOW_TIERS)]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item not in set(slow)]


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Every test parametrized over the databases (db_url, the e2e backend, the bad-input
    # world…) takes "postgresql" as a parameter: one check covers them all.
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "postgresql" in callspec.params.values():
        require_postgres()


class FakeClock:
    """Milliseconds that move only when a test moves them."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    name = f"outbox_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(url)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "outbox.db"
    migrate.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_engine(postgres_url: str) -> Iterator[Engine]:
    """The test session's own connection to its PostgreSQL database, for what the fixtures do
    between tests (the reset before, the batch-row check after). Kept for the session: an
    engine's first connection asks the server a handful of questions of its own, which an
    engine per statement made every test on PostgreSQL pay twice. Pre-pinged: a test may
    terminate backends."""
    engine = create_engine(postgres_url, pool_size=1, pool_pre_ping=True)
    yield engine
    engine.dispose()


_TABLES = [t.name for t in metadata.sorted_tables]
# The tables with rows in them, in one statement. `counters` keeps its rows (set by the
# migrations) and has its values zeroed instead.
_TABLES_WITH_ROWS = text(" UNION ALL ".join(
    f"SELECT '{t}' WHERE EXISTS (SELECT FROM \"{t}\")" for t in _TABLES if t != "counters"))
# Every sequence a test drew from starts again: a rolled-back insert draws from its table's
# sequence and leaves the table empty, so truncating (RESTART IDENTITY) cannot be relied on
# for it. A sequence not drawn from since its start reads as NULL here.
_RESTART_DRAWN_SEQUENCES = text(
    "SELECT setval(format('%I.%I', schemaname, sequencename)::regclass, start_value, false) "
    "FROM pg_sequences WHERE schemaname = current_schema() AND last_value IS NOT NULL")


# The leaves of `records` a reset keeps for the next tests: topic ids start again at each reset,
# so the next test's topics take over the leaves of the same ids (outbox.create_record_leaf)
# rather than create them. Past this many, every one is dropped: a test that made topics of
# 1,024 partitions left 2,048 leaves, and every later reset's TRUNCATE of `records` then gave
# each a new file and synced it (seconds a test, CI slowed past an hour), and a statement that
# plans every leaf (the view of every partition) came near PostgreSQL's lock table.
LEAVES_KEPT = 64
# Leaves dropped a transaction: each holds a lock of the leaf, its indexes and its TOAST table
# until the commit, within PostgreSQL's lock table (max_locks_per_transaction, 64 a connection).
LEAVES_DROPPED_AT_ONCE = 100


def _drop_surplus_leaves(engine: Engine) -> None:
    with engine.connect() as conn:
        leaves = conn.execute(text("SELECT relname FROM pg_class WHERE relkind = 'r' AND relname ~ :leaf "
                                   "AND relnamespace = current_schema()::regnamespace"),
                              {"leaf": record_leaf_pattern()}).scalars().all()
    if len(leaves) <= LEAVES_KEPT:
        return
    for start in range(0, len(leaves), LEAVES_DROPPED_AT_ONCE):
        with engine.begin() as conn:
            # CASCADE: each leaf's view of its partition (committed_records.partition_<t>_<p>).
            names = ", ".join(f'"{leaf}"' for leaf in leaves[start:start + LEAVES_DROPPED_AT_ONCE])
            conn.execute(text(f"DROP TABLE {names} CASCADE"))


def _reset_postgres(engine: Engine) -> None:
    """The session's database as migrated, for the next test: only the tables with rows are
    truncated. TRUNCATE gives each table it names new files, which for all sixteen was most of
    the reset every PostgreSQL test paid (docs/benchmarks.md, the test suite's time); a test
    that stored nothing now has nothing written here. Leaves of `records` past LEAVES_KEPT are
    dropped first (every topic is gone after the reset, so none holds anything still meant)."""
    _drop_surplus_leaves(engine)
    with engine.begin() as conn:
        written = conn.execute(_TABLES_WITH_ROWS).scalars().all()
        if written:
            conn.execute(text("TRUNCATE " + ", ".join(f'"{t}"' for t in written) + " CASCADE"))
        conn.execute(_RESTART_DRAWN_SEQUENCES)
        conn.execute(text("UPDATE counters SET value = 0 WHERE value <> 0"))


# A test's service runs no background work the test does not drive: the coordinator's chores,
# and the console's lag sampler, which would fill the /metrics gauges' shared reading at start
# (and race the tests that count a scrape's statements) and, in a fixture that starts an app per
# test, reads every group's lag on its first pass while the test's first requests wait for the
# two cores. Tests of either turn them on. No initial rebalance delay: a group's first JoinGroup
# would wait for the test's clock to move (tests/integration/test_initial_rebalance_delay.py
# moves it).
QUIET = {"run_coordinator": False, "auto_migrate": False, "console_lag_interval_ms": 0,
         "group_initial_rebalance_delay_ms": 0}


def shares_app(request: pytest.FixtureRequest) -> bool:
    """The test is in a module marked shared_app: its `client` is the module's app of its
    settings, built once (tests/shared_app.py says what each test gets afresh and what is put
    back), on a database at the same place for every test, as new."""
    return request.node.get_closest_marker("shared_app") is not None


@pytest.fixture(scope="module")
def shared_sqlite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SQLite database's path in a module whose tests share an app: a new copy of the
    template in its place before each test."""
    return tmp_path_factory.mktemp("shared_app") / "outbox.db"


@pytest.fixture(scope="module")
def shared_apps() -> dict[str, SharedApp]:
    """A module's apps that its tests share, by their settings."""
    return {}


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        if shares_app(request):
            path = request.getfixturevalue("shared_sqlite_file")
            replace_with_copy(request.getfixturevalue("sqlite_template"), path)
        else:
            path = tmp_path / "outbox.db"
            shutil.copy(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    url = request.getfixturevalue("postgres_url")
    _reset_postgres(request.getfixturevalue("postgres_engine"))
    return url


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings(db_url: str, request: pytest.FixtureRequest) -> Iterator[Settings]:
    from tests.batch_rows import assert_batch_rows_match

    checked: str | Engine = db_url
    if db_url.startswith("postgresql") and db_url == request.getfixturevalue("postgres_url"):
        checked = request.getfixturevalue("postgres_engine")
    yield Settings(database_url=db_url, **QUIET)
    # Whatever a test did through the service (its client, its services, its database), every
    # writer left the batch rows that describe the records it wrote (tests/batch_rows.py),
    # checked once the test's processes are done with the database. A test that writes records
    # with SQL of its own says so with the raw_records marker; one that unflags self-committed
    # batches, as a writer before their migration left them, with unflagged_records.
    if request.node.get_closest_marker("raw_records") is None:
        assert_batch_rows_match(checked, sequence_restarts=request.node.stash.get(SEQUENCE_RESTARTS, set()),
                                unflagged_allowed=request.node.get_closest_marker("unflagged_records") is not None)


SEQUENCE_RESTARTS = pytest.StashKey[set]()


@pytest.fixture
def sequence_restarts(request: pytest.FixtureRequest) -> set[tuple[int, int, int]]:
    """The batch rows, as (producer id, partition, base offset), that the test expects to go back
    in their producer's sequences: a retry of a batch already written that arrived after its
    producer id was forgotten and taken back, written again (tests/batch_rows.py allows exactly
    these, and requires each to be one)."""
    return request.node.stash.setdefault(SEQUENCE_RESTARTS, set())


@pytest.fixture
def database(settings: Settings) -> Iterator[Database]:
    db = Database(build_engine(settings.database_url, pool_size=5))
    yield db
    db.dispose()


@pytest.fixture
def services(settings: Settings, database: Database, clock: FakeClock) -> Services:
    return Services.build(settings, database, clock)


@pytest.fixture
def client(settings: Settings, clock: FakeClock, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from app.api.app import create_app

    if not shares_app(request):
        with TestClient(create_app(settings, clock)) as c:
            yield c
        return
    apps = request.getfixturevalue("shared_apps")
    key = settings.model_dump_json()
    if key not in apps:
        apps[key] = SharedApp(lambda shared_clock: create_app(settings, shared_clock))
    shared = apps[key]
    app = shared.as_built(clock)
    try:
        with TestClient(app) as c:
            yield c
    finally:
        shared.as_built(clock)  # fails the test that left state behind, not the next one


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """`outbox ARGS…` run by app.cli.main in this process, answering as the process does
    (tests/outbox_command.py, `in_process`)."""
    from tests.outbox_command import in_process

    return in_process(capsys, monkeypatch)


@pytest.fixture(autouse=True)
def no_handler_left_on_a_closed_stream() -> Iterator[None]:
    """A test that leaves a logging handler on a stream it closed (a StreamHandler on the stderr
    pytest captured for it, put there by app.cli.main or app.logs.configure) fails, and the
    handler is taken away: a later test's thread (the Kafka listener's access line) would
    otherwise log through it, and each line be lost as "--- Logging error ---". Run the command
    with `cli`, which puts the loggers back."""
    from tests.outbox_command import take_away_closed_stream_handlers

    yield
    take_away_closed_stream_handlers()
