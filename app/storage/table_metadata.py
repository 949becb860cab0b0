"""The one MetaData every table of the schema is defined on (app.storage.tables, and the
producer tables of app.storage.producer_tables), with the naming convention of its indexes and
constraints. In a module of its own so that both modules define their tables on it without
importing each other's; app.storage.tables imports the producer tables, and is where alembic
and the tests read the whole schema from."""

from __future__ import annotations

from sqlalchemy import MetaData

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)
