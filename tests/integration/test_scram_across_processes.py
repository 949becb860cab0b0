"""SCRAM as two processes of one deployment serve it (two SecurityStates on one database, on
SQLite and PostgreSQL): an unknown principal's decoy salt is the deployment's, not the
process's, and a key created in one process authenticates through the other at once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from scramp import ScramClient

from app.services.security import SecurityService, SecurityState
from app.settings import Settings
from app.storage import security as store
from app.storage.engine import Database, build_engine
from tests.conftest import FakeClock

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.fixture(autouse=True)
def cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.services.security._SCRYPT_N", 2)


@pytest.fixture
def other_database(settings: Settings) -> Iterator[Database]:
    """The database as a second process reaches it: an engine of its own."""
    db = Database(build_engine(settings.database_url, pool_size=2))
    yield db
    db.dispose()


def _salt(state: SecurityState, mechanism: str, user: str) -> str:
    """The salt `state` states in its server-first message to `user`."""
    exchange = state.scram_exchange(mechanism, ScramClient([mechanism], user, "x").get_client_first().encode())
    return dict(a.split("=", 1) for a in exchange.first().decode().split(","))["s"]


def _salt_and_iterations(state: SecurityState, mechanism: str, user: str) -> tuple[str, str]:
    exchange = state.scram_exchange(mechanism, ScramClient([mechanism], user, "x").get_client_first().encode())
    first = dict(a.split("=", 1) for a in exchange.first().decode().split(","))
    return first["s"], first["i"]


def test_a_known_and_an_unknown_principal_answer_alike_for_both_mechanisms(
        settings: Settings, database: Database, clock: FakeClock) -> None:
    # A known principal's keys share one salt and iteration count across the mechanisms: an
    # unknown one's decoy must too, or asking for both told the two apart.
    SecurityService(database, clock).create_api_key("alice", by="test")
    state = SecurityState(database, settings, clock)
    state.reload()
    answers = {user: [_salt_and_iterations(state, mechanism, user) for mechanism in MECHANISMS * 2]
               for user in ("alice", "mallory")}
    assert {user: len(set(said)) for user, said in answers.items()} == {"alice": 1, "mallory": 1}
    assert answers["alice"][0][1] == answers["mallory"][0][1] == "4096"
    assert answers["alice"][0][0] != answers["mallory"][0][0]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_an_unknown_principal_gets_the_same_decoy_salt_from_every_process(
        settings: Settings, database: Database, other_database: Database, clock: FakeClock, mechanism: str) -> None:
    here, there = SecurityState(database, settings, clock), SecurityState(other_database, settings, clock)
    assert _salt(here, mechanism, "mallory") == _salt(there, mechanism, "mallory")


def test_two_unknown_principals_get_different_decoy_salts(
        settings: Settings, database: Database, clock: FakeClock) -> None:
    state = SecurityState(database, settings, clock)
    assert _salt(state, "SCRAM-SHA-256", "mallory") != _salt(state, "SCRAM-SHA-256", "trudy")


def test_the_client_first_of_an_unknown_principal_reloads_nothing(
        settings: Settings, database: Database, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    state = SecurityState(database, settings, clock)
    state.reload()
    reloads: list[bool] = []
    monkeypatch.setattr(state, "reload", lambda **_: reloads.append(True) or True)
    _salt(state, "SCRAM-SHA-256", "mallory")
    assert reloads == []


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_key_created_in_another_process_authenticates_over_scram_at_once(
        settings: Settings, database: Database, other_database: Database, clock: FakeClock, mechanism: str) -> None:
    elsewhere = SecurityService(other_database, clock)
    elsewhere.create_api_key("alice", by="test")
    state = SecurityState(database, settings, clock)
    state.reload()
    new = elsewhere.create_api_key("alice", by="test")  # not yet in `state`'s snapshot
    client = ScramClient([mechanism], "alice", new.api_key)
    exchange = state.scram_exchange(mechanism, client.get_client_first().encode())
    client.set_server_first(exchange.first().decode())
    key_id, server_final = exchange.final(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # the client verifies the server too
    assert key_id == new.key_id


def test_the_decoy_secret_first_stored_is_the_one_every_later_writer_gets(database: Database) -> None:
    with database.write() as conn:
        first = store.add_scram_decoy_seed(conn, 1)
    with database.write() as conn:
        assert store.add_scram_decoy_seed(conn, 2) == first
    with database.read() as conn:
        assert store.scram_decoy_seed(conn) == first
