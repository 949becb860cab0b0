"""The service's database URLs: which it takes and the driver it opens each with, the SQLite
URLs that name no file, and how a URL is shown without its passwords.

The one definition of each, for the service (app.settings, app.storage, app.cli) and for the
Spark readers (spark_jobs.reader), which are given the same OUTBOX_DATABASE_URL and must take,
refuse and show it as the service does. So it imports nothing of app: the Spark jobs may import
it and no other module of the server (pyproject.toml, contract spark-through-client).
"""

from __future__ import annotations

from urllib.parse import quote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.util import asbool

# The database URLs the service runs with, each with the driver it is opened with: SQLite
# through Python's sqlite3 and PostgreSQL through psycopg 3, which postgresql:// and
# postgres:// are given too (app.storage.engine.normalise_url).
DRIVERS = {
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite+pysqlite",
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
}


def sqlite_in_memory(url: URL) -> bool:
    """Whether SQLite would open a database of its own for each connection: none named, or
    ":memory:" (also as a URI, file::memory:, or mode=memory); an empty name is a temporary one.
    The setting refuses such a URL, app.storage.engine.sqlite_path finds no file in it, and the
    Spark readers refuse it as the setting does."""
    database = url.database or ""
    if asbool(url.query.get("uri", False)):
        database = database.removeprefix("file:")
    return database in ("", ":memory:") or url.query.get("mode") == "memory"


def unencoded_at(url: str) -> bool:
    """Whether `url` holds an "@" as it is (not %40) in its password, or after it anywhere but in
    a parameter's value (split_password's spill): make_url takes the rest for the host, the
    database or a parameter's name, and libpq's error about that would show it. The setting
    refuses such a URL, and the Spark readers as it does."""
    return split_password(url)[2] is not None


# libpq's connection parameters that carry a secret: a URL's query passes them on to it as
# readily as its user:password@ part does. (`passfile` is only the path of a file.) Compared
# without case, to hide a mistyped one too.
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
_HIDDEN = "***"


def split_password(url: str) -> tuple[URL, str | None, str | None]:
    """`url` parsed, with the password its writer meant, and the part of it the parse took for
    the host, the database or a query parameter's name (the spill), if any.

    make_url ends a password at its first "@": one holding an unencoded "@" ("p@ss") is parsed
    as password "p" and host "ss@127.0.0.1", and "p@ss/x@h" as host "ss", database "x@h". The
    only "@" after that first one that belong to the URL are those inside a query parameter's
    value (?application_name=me@work); every other one, counted from the first, is the
    password's."""
    u = make_url(url)
    if u.password is None:
        return u, None, None
    # A username holds no ":", so the first ":" after the scheme starts the password.
    after_colon = url.split("://", 1)[1].split(":", 1)[1]
    first, _, rest = after_colon.partition("@")
    in_values = sum(v.count("@") for values in u.query.values()
                    for v in ((values,) if isinstance(values, str) else values))
    spilled = rest.count("@") - in_values
    if spilled <= 0:
        return u, u.password, None
    parts = rest.split("@")
    spill, tail = "@".join(parts[:spilled]), "@".join(parts[spilled:])
    return make_url(f"{u.drivername}://{tail}").set(username=u.username), f"{first}@{spill}", spill


def redacted_url(url: str) -> str:
    """The URL with every password libpq would take from it, whole, replaced by ***, for
    messages and logs."""
    try:
        u, password, _ = split_password(url)
        if password is not None:
            u = u.set(password=_HIDDEN)
        secret = {key: _HIDDEN for key in u.query if key.lower() in _SECRET_PARAMETERS}
        return u.update_query_dict(secret).render_as_string(hide_password=True).replace("%2A%2A%2A", _HIDDEN)
    except Exception:  # noqa: BLE001 - an unparsable URL may still hold a password
        return "<unparsable database URL>"


def hidden_passwords(url: str) -> list[tuple[str, str]]:
    """How to hide the passwords of `url` where a driver's message or a traceback repeats them:
    pairs (text, what to show instead), longest first. Each password stands in the context it
    has in a URL (":secret@", "password=secret"), so that one that is also a word of the URL
    ("postgres") is hidden only where it is the password; an unparsable URL is hidden whole."""
    try:
        _, password, spill = split_password(url)
        pairs = []
        for text in {password, make_url(url).password} - {None, ""}:
            pairs += [(f":{form}@", f":{_HIDDEN}@") for form in (text, quote(text, safe=""))]
        if spill:
            # What the driver took for the host: "failed to resolve host 'ss@127.0.0.1'".
            pairs.append((f"{spill}@", f"{_HIDDEN}@"))
        for key, values in make_url(url).query.items():
            if key.lower() in _SECRET_PARAMETERS:
                for value in (values,) if isinstance(values, str) else values:
                    if value:
                        pairs += [(f"{key}={form}", f"{key}={_HIDDEN}") for form in (value, quote(value, safe=""))]
        if pairs:
            pairs.append((url, redacted_url(url)))
    except Exception:  # noqa: BLE001 - unparsable: hide the whole value
        pairs = [(url, _HIDDEN)]
    return sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)
