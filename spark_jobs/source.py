"""Where Spark reads from: the service's database, as a JDBC URL with its properties.

The jobs take the same database URL as the service (`OUTBOX_DATABASE_URL`, SQLAlchemy
syntax) and turn it into JDBC: `sqlite:///outbox.db` → `jdbc:sqlite:/abs/path/outbox.db`,
`postgresql+psycopg://user:pw@host:5432/db?sslmode=require` →
`jdbc:postgresql://host:5432/db?sslmode=require` with user and password as properties (never
in the URL, so they stay out of Spark's logs and UI). A `jdbc:postgresql:` or `jdbc:sqlite:`
URL is taken as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

from sqlalchemy.engine import make_url

from spark_jobs.errors import SparkJobError
from spark_jobs.jars import DRIVERS

# pgjdbc buffers a whole result set unless autocommit is off and a fetch size is set; Spark's
# PostgreSQL dialect turns autocommit off when fetchsize > 0. So every read sets one.
DEFAULT_FETCHSIZE = 10_000


@dataclass(frozen=True, slots=True)
class JdbcSource:
    database: str  # "postgresql" or "sqlite"
    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def driver_class(self) -> str:
        return DRIVERS[self.database].driver_class

    def properties(self, *, fetchsize: int = DEFAULT_FETCHSIZE) -> dict[str, str]:
        props = {"driver": self.driver_class, "fetchsize": str(fetchsize)}
        if self.user is not None:
            props["user"] = self.user
        if self.password is not None:
            props["password"] = self.password
        return props

    @classmethod
    def from_url(cls, url: str, *, user: str | None = None, password: str | None = None) -> JdbcSource:
        """From a service database URL (SQLAlchemy syntax) or a JDBC URL."""
        if url.startswith("jdbc:postgresql:"):
            return cls("postgresql", url, user, password)
        if url.startswith("jdbc:sqlite:"):
            return cls("sqlite", url)
        if url.startswith("jdbc:"):
            raise SparkJobError(f"unsupported JDBC URL {url!r}: use jdbc:postgresql: or jdbc:sqlite:")
        u = make_url(url)
        backend = u.get_backend_name()
        if backend == "sqlite":
            if not u.database or u.database == ":memory:":
                raise SparkJobError(f"{url!r} is an in-memory SQLite database; Spark needs a file")
            # Relative paths are relative to the current directory, as for the service; the
            # executors of a local[*] master share it, a cluster's do not (see docs/SPARK.md).
            return cls("sqlite", f"jdbc:sqlite:{Path(u.database).resolve()}")
        if backend == "postgresql":
            host = u.host or "localhost"
            if ":" in host:  # IPv6 literal
                host = f"[{host}]"
            query = urlencode({k: v for k, v in u.query.items() if isinstance(v, str)})
            jdbc = f"jdbc:postgresql://{host}:{u.port or 5432}/{quote(u.database or '')}"
            if query:
                jdbc += f"?{query}"
            return cls("postgresql", jdbc, user if user is not None else u.username,
                       password if password is not None else u.password)
        raise SparkJobError(f"unsupported database URL {url!r}: use sqlite:///… or postgresql://…")
