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
    with pytest.raises(ValidationError, match="transactional_id_expiration_ms"):
        Settings(max_transaction_timeout_ms=10_000, transactional_id_expiration_ms=10_000)


def test_default_timeout_must_not_exceed_the_maximum() -> None:
    with pytest.raises(ValidationError, match="default_transaction_timeout_ms"):
        Settings(default_transaction_timeout_ms=20_000, max_transaction_timeout_ms=10_000)


def test_sqlite_database_migrates_itself_and_postgresql_does_not_by_default() -> None:
    assert Settings(database_url="sqlite:///x.db").should_auto_migrate is True
    assert Settings(database_url="postgresql://h/db").should_auto_migrate is False
    assert Settings(database_url="postgresql://h/db", auto_migrate=True).should_auto_migrate is True
