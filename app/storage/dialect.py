"""Statements whose spelling differs between SQLite and PostgreSQL.

Both speak INSERT … ON CONFLICT; SQLAlchemy keeps the constructs in per-dialect modules, so
the choice is made here once.

Statements are built once per dialect and reused (functools.cache): building a Core
statement costs more Python time than executing a cached one, and the hot paths (Send,
Begin, Commit) run several per request. Callers pass values as bind parameters.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

from psycopg.rows import namedtuple_row
from sqlalchemy import BigInteger, Connection, Table, func, true
from sqlalchemy.exc import MultipleResultsFound
from sqlalchemy.types import _Binary
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.selectable import Join


def relax_commit() -> Any:
    """PostgreSQL: an expression that, when evaluated, makes the database transaction it runs in
    commit without waiting for the disk (synchronous_commit off, LOCAL: this transaction only; the
    setting in effect at its commit is the one applied). Its value is the setting's new value.
    The one way a write is relaxed here: a write that need not be durable or a background chore's
    (Database.write(durable=False), Database.write(background=True): in a statement of its own, or
    in one it runs anyway, owe_relax), and a transactional Send of durability COMMIT
    (storage.transactions.get_with_topics), which evaluates it inside a statement it runs anyway."""
    return func.set_config("synchronous_commit", "off", true())


# conn.info's key: the write transaction the connection is in is to commit without waiting for
# the disk, and no statement of it has evaluated relax_commit yet.
_RELAX_OWED = "outbox_relax_owed"


def owe_relax(conn: Connection) -> None:
    """PostgreSQL: the write transaction `conn` is in is to be relaxed (Database.write of a write
    that need not be durable, or a background one). A statement it runs anyway may evaluate
    relax_commit for it, having taken the debt (take_relax_owed: the transaction row's read of a
    Begin, storage.transactions.get); else the write runs one of its own before it commits."""
    conn.info[_RELAX_OWED] = True


def take_relax_owed(conn: Connection) -> bool:
    """Whether the write transaction `conn` is in is still to be relaxed (owe_relax), the debt
    taken: the caller evaluates relax_commit, or owes it again (owe_relax) if it did not."""
    return bool(conn.info.pop(_RELAX_OWED, False))


def relaxes_sends(dialect_name: str) -> bool:
    """Whether a transactional Send of a producer of durability COMMIT commits here without
    waiting for the disk (PostgreSQL: synchronous_commit off for its transaction). On SQLite
    every Send waits for it. Both the Send that relaxes its commit
    (storage.transactions.get_with_topics) and the high watermark that keeps readers off what
    such a Send wrote (storage.topics.high_watermark) ask this, so they cannot disagree."""
    return dialect_name == "postgresql"


class OuterFirstJoin(Join):
    """An inner join whose left side the database loops over first.

    SQLite plans without statistics (the service never runs ANALYZE), so for a self-join of
    `records` it cannot tell that the left side, read through a small partial index, is the
    selective one, and may loop over the whole partition instead. Its CROSS JOIN keeps the
    written order (https://sqlite.org/optoverview.html#crossjoin). Other databases compile it
    as a plain JOIN, which PostgreSQL may reorder: where the order matters there, use a
    LATERAL subquery (storage.read_committed.batch_runs).
    """

    inherit_cache = True


@compiles(OuterFirstJoin, "sqlite")
def _sqlite_outer_first(join: OuterFirstJoin, compiler: Any, **kw: Any) -> str:
    kw["asfrom"] = True
    left = join.left._compiler_dispatch(compiler, **kw)
    right = join.right._compiler_dispatch(compiler, **kw)
    kw.pop("asfrom")
    return f"{left} CROSS JOIN {right} ON {join.onclause._compiler_dispatch(compiler, **kw)}"


class utf8_bytes(FunctionElement):  # noqa: N801 - named as the SQL function it stands for
    """The bytes of a text in UTF-8, or of a binary value, NULL as 0: PostgreSQL's
    octet_length; SQLite's length() counts a text's characters, but the length of the text as
    a BLOB counts bytes. A binary column's length() is its bytes already, and SQLite reads it
    from the row's header without loading the value (CAST would load it, overflow pages and
    all: a fetch sizing large records would read them)."""

    type = BigInteger()
    inherit_cache = True


@compiles(utf8_bytes, "postgresql")
def _pg_utf8_bytes(element: utf8_bytes, compiler: Any, **kw: Any) -> str:
    return f"coalesce(octet_length({compiler.process(element.clauses, **kw)}), 0)"


@compiles(utf8_bytes, "sqlite")
def _sqlite_utf8_bytes(element: utf8_bytes, compiler: Any, **kw: Any) -> str:
    (argument,) = element.clauses.clauses
    if isinstance(argument.type, _Binary):
        return f"coalesce(length({compiler.process(element.clauses, **kw)}), 0)"
    return f"coalesce(length(CAST({compiler.process(element.clauses, **kw)} AS BLOB)), 0)"


class greatest(FunctionElement):  # noqa: N801 - named as the SQL function it stands for
    """The largest of its (non-NULL) arguments: PostgreSQL's greatest, SQLite's scalar max.
    One bound written as one expression, so that neither database chooses between two bounds
    on one index column (read_committed's runs)."""

    type = BigInteger()
    inherit_cache = True


class least(FunctionElement):  # noqa: N801 - named as the SQL function it stands for
    """The smallest of its (non-NULL) arguments: PostgreSQL's least, SQLite's scalar min."""

    type = BigInteger()
    inherit_cache = True


@compiles(greatest, "postgresql")
def _pg_greatest(element: greatest, compiler: Any, **kw: Any) -> str:
    return f"greatest({compiler.process(element.clauses, **kw)})"


@compiles(greatest, "sqlite")
def _sqlite_greatest(element: greatest, compiler: Any, **kw: Any) -> str:
    return f"max({compiler.process(element.clauses, **kw)})"


@compiles(least, "postgresql")
def _pg_least(element: least, compiler: Any, **kw: Any) -> str:
    return f"least({compiler.process(element.clauses, **kw)})"


@compiles(least, "sqlite")
def _sqlite_least(element: least, compiler: Any, **kw: Any) -> str:
    return f"min({compiler.process(element.clauses, **kw)})"


def _insert(dialect_name: str, table: Table) -> Any:
    return sqlite.insert(table) if dialect_name == "sqlite" else postgresql.insert(table)


def insert_on_conflict(dialect_name: str, table: Table) -> Any:
    """The dialect's INSERT, which has ON CONFLICT (spelt alike by both), for an upsert that
    insert_ignore and upsert do not cover."""
    return _insert(dialect_name, table)


def insert_ignore(conn: Connection, table: Table) -> Any:
    """INSERT that does nothing when the primary key already exists."""
    return _insert_ignore(conn.dialect.name, table)


@cache
def _insert_ignore(dialect_name: str, table: Table) -> Any:
    return _insert(dialect_name, table).on_conflict_do_nothing()


def upsert(conn: Connection, table: Table, update_columns: Sequence[str]) -> Any:
    """INSERT that overwrites `update_columns` when the primary key already exists."""
    return _upsert(conn.dialect.name, table, tuple(update_columns))


@cache
def _upsert(dialect_name: str, table: Table, update_columns: tuple[str, ...]) -> Any:
    stmt = _insert(dialect_name, table)
    keys = [c.name for c in table.primary_key.columns]
    return stmt.on_conflict_do_update(
        index_elements=keys, set_={name: stmt.excluded[name] for name in update_columns}
    )


class RowLock(enum.Enum):
    """The lock a read of one row takes until its transaction ends, where the caller chooses
    between the two: a member, not a string, so that a misspelt mode fails where it is written
    instead of reading the row unlocked."""

    SHARE = "share"  # FOR SHARE: the writers that check the row (Send), which a state change waits for
    UPDATE = "update"  # FOR UPDATE: the state change itself
    # FOR KEY SHARE: an idempotent Send's hold on its producer's row, which only the row's
    # deletion (producer expiry, FOR UPDATE) waits for.
    KEY_SHARE = "key share"
    # FOR NO KEY UPDATE: a change of the row's other columns (an idempotent producer's epoch
    # bump), which waits for none of those Sends.
    NO_KEY_UPDATE = "no key update"


def lock_row(dialect_name: str, stmt: Any, lock: RowLock | None) -> Any:
    """stmt with `lock` taken on the rows it reads; stmt itself when lock is None."""
    if lock is RowLock.SHARE:
        return lock_for_share(dialect_name, stmt)
    if lock is RowLock.UPDATE:
        return lock_for_update(dialect_name, stmt)
    if lock is RowLock.KEY_SHARE:
        return stmt if dialect_name == "sqlite" else stmt.with_for_update(read=True, key_share=True)
    if lock is RowLock.NO_KEY_UPDATE:
        return stmt if dialect_name == "sqlite" else stmt.with_for_update(key_share=True)
    if lock is not None:  # a string would read the row unlocked: the bug the enum is for
        raise TypeError(f"lock must be a RowLock or None, not {lock!r}")
    return stmt


def lock_for_share(dialect_name: str, stmt: Any) -> Any:
    """SELECT … FOR SHARE on PostgreSQL; SQLite's write transaction already holds the whole-database lock."""
    return stmt if dialect_name == "sqlite" else stmt.with_for_update(read=True)


def lock_for_update(dialect_name: str, stmt: Any, of: Any = None) -> Any:
    """SELECT … FOR UPDATE [OF table] on PostgreSQL; SQLite's write lock covers it."""
    return stmt if dialect_name == "sqlite" else stmt.with_for_update(of=of)


def lock_for_update_skip_locked(dialect_name: str, stmt: Any) -> Any:
    """SELECT … FOR UPDATE SKIP LOCKED on PostgreSQL: the rows no other transaction holds,
    locked, without waiting for the others; SQLite's write lock covers it (nothing is held by
    another)."""
    return stmt if dialect_name == "sqlite" else stmt.with_for_update(skip_locked=True)


def lock_for_key_share(dialect_name: str, stmt: Any) -> Any:
    """SELECT … FOR KEY SHARE on PostgreSQL: the row may not be deleted (FOR UPDATE waits for
    it) but may be updated; SQLite's write lock covers it."""
    return stmt if dialect_name == "sqlite" else stmt.with_for_update(read=True, key_share=True)


def lock_for_no_key_update(dialect_name: str, stmt: Any) -> Any:
    """SELECT … FOR NO KEY UPDATE on PostgreSQL: the lock an UPDATE of non-key columns takes,
    which FOR KEY SHARE does not wait for; SQLite's write lock covers it."""
    return stmt if dialect_name == "sqlite" else stmt.with_for_update(key_share=True)


def execute_rows(conn: Connection, stmt: Any, rows: list[dict[str, Any]], *, on_driver: bool = False) -> None:
    """Run a write statement for each row. A single row goes as a plain execute: a one-row
    list would take the driver's executemany path (psycopg's pipeline mode), which costs
    more than the statement itself on the Send and Commit paths. `on_driver`: a single row
    goes on the driver's cursor (rows_on_driver, whose rules `stmt` must keep, every row
    giving every column it sets)."""
    if on_driver and len(rows) == 1:
        rows_on_driver(conn, stmt, rows[0])
    else:
        conn.execute(stmt, rows[0] if len(rows) == 1 else rows)


def first_row_on_driver(conn: Connection, stmt: Any, params: dict[str, Any]) -> Sequence[Any] | None:
    """The first row `stmt` answers for `params` on the driver (rows_on_driver), or None."""
    rows = rows_on_driver(conn, stmt, params)
    return rows[0] if rows else None


def sole_row_on_driver(conn: Connection, stmt: Any, params: dict[str, Any]) -> Sequence[Any] | None:
    """The one row `stmt` answers for `params` on the driver (rows_on_driver), or None;
    MultipleResultsFound if it answers more, as SQLAlchemy's one_or_none raises: a statement
    meant to match one row that matched two has written both, and its transaction must not
    commit."""
    rows = rows_on_driver(conn, stmt, params)
    if len(rows) > 1:
        raise MultipleResultsFound("Multiple rows were found when one or none was required")
    return rows[0] if rows else None


def rows_on_driver(conn: Connection, stmt: Any, params: dict[str, Any]) -> list[Sequence[Any]]:
    """Every row `stmt` (a statement over bind parameters, such as a write with RETURNING)
    answers for `params`; each row's columns by position, and on PostgreSQL by name too (a
    named tuple, as SQLAlchemy's rows are).

    Run on the driver's cursor, as compiled once for the dialect, with the values as given
    (integers, strings and None: `stmt` may have no bind parameter that SQLAlchemy would
    convert or expand, checked when it is compiled; a bind parameter that carries its own
    value, such as a literal, takes it where `params` does not). For a statement run once per
    Send, SQLAlchemy's execution of it (an execution context, its bind parameters, the result's
    metadata) cost about 100 µs of CPU where SQLite spends about 30 (docs/benchmarks.md, the
    idempotent Send on SQLite), and on PostgreSQL about 110 of the 180 µs the client spends on
    the statement that takes a Send's offsets (docs/benchmarks.md, branch sendcost2). Seen by
    SQLAlchemy's before_cursor_execute and after_cursor_execute events as a statement that
    SQLAlchemy runs is (_fetch_all); a driver error is translated as SQLAlchemy's are
    (app.storage.errors).

    Build `stmt` once (a module constant, or a function under functools.cache): its compiled
    form is kept for as long as the process runs, keyed on the statement object itself, so a
    statement built afresh for each call would be compiled each time and kept each time."""
    # SQLite: the driver runs in autocommit mode and SQLAlchemy sent the BEGIN, so outside a
    # transaction the statement would commit alone; PostgreSQL: it would begin one that
    # SQLAlchemy does not know of.
    if not conn.in_transaction():
        raise RuntimeError("rows_on_driver runs inside the caller's transaction: begin one first")
    sql, names, fixed, unset = _on_driver(conn.dialect, stmt)
    # SQLAlchemy compiles a top-level UPDATE or INSERT for the keys it is given, so that a key
    # naming a column the statement does not set sets it; compiled once, without them, the
    # statement would leave the column be. Other keys it passes over, as SQLAlchemy does:
    # callers give one dict to the variants of a statement (sequence_state.batch_state_params).
    if not unset.isdisjoint(params):
        raise TypeError("rows_on_driver was given values for columns the statement does not set: "
                        f"{sorted(unset.intersection(params))}")
    driver = conn.connection.driver_connection
    if conn.dialect.name == "postgresql":
        with driver.cursor(row_factory=namedtuple_row) as cursor:  # type: ignore[union-attr]
            return _fetch_all(conn, cursor, sql, {**fixed, **params})
    cursor = driver.cursor()  # type: ignore[union-attr]
    try:
        return _fetch_all(conn, cursor, sql, [params[name] if name in params else fixed[name] for name in names])
    finally:
        cursor.close()


def _fetch_all(conn: Connection, cursor: Any, sql: str, values: Any) -> list[Any]:
    """Every row `sql` answers on the driver's `cursor` for `values` (all of them, so that the
    statement runs to its end before its cursor closes), with `conn`'s before_cursor_execute
    and after_cursor_execute events dispatched around the execution as SQLAlchemy dispatches
    them for its own: what counts or times statements (the tests, benchmarks/profile_paths.py)
    sees this one without knowing it ran here. A listener registered with retval=True may
    change the SQL and the values, as it may SQLAlchemy's. The events' execution context is
    None: SQLAlchemy made none for it."""
    # SQLAlchemy's own test before it dispatches (its flags, set by a listener on the
    # connection, the engine or their classes): the dispatch alone, to no listener, cost about
    # 2 µs a call, the test 0.2. The flags are private: an upgrade that renames them, or stops
    # setting them, fails tests/integration/test_statements_on_the_driver.py's cursor-events
    # test (a listener on the engine, and one on a connection, on SQLite and PostgreSQL), and
    # pyproject.toml keeps SQLAlchemy below 2.2: private names change between its minor series.
    listened = conn._has_events or conn.engine._has_events
    if listened:
        for listener in conn.dispatch.before_cursor_execute:
            sql, values = listener(conn, cursor, sql, values, None, False)
    cursor.execute(sql, values)
    if listened:
        conn.dispatch.after_cursor_execute(conn, cursor, sql, values, None, False)
    # A write without RETURNING answers no rows (psycopg's fetchall would refuse it).
    return cursor.fetchall() if cursor.description is not None else []


_ON_DRIVER: dict[tuple[type, str, Any], tuple[str, tuple[str, ...], dict[str, Any], frozenset[str]]] = {}


def _on_driver(dialect: Any, stmt: Any) -> tuple[str, tuple[str, ...], dict[str, Any], frozenset[str]]:
    """`stmt` compiled for `dialect`: its SQL, the names of the bind parameters its positional
    placeholders take, in order (none for PostgreSQL's named ones), the values of the bind
    parameters that carry their own, and (a top-level INSERT or UPDATE) the keys of its table's
    columns that name none of its bind parameters."""
    # The dialect's class and paramstyle are what the compiled SQL depends on (two engines of
    # one database may differ in either); its name alone would not tell them apart.
    key = (type(dialect), dialect.paramstyle, stmt)
    found = _ON_DRIVER.get(key)
    if found is None:
        compiled = stmt.compile(dialect=dialect)
        converted = [name for name, process in compiled._bind_processors.items() if process is not None]
        converted += [name for name, bind in compiled.binds.items() if bind.callable]
        if converted or compiled.literal_execute_params or compiled.post_compile_params:
            raise TypeError("rows_on_driver runs statements whose bind values go to the driver as given; "
                            f"this one has parameters SQLAlchemy converts, expands or fills: {converted or 'expanding'}")
        # The values go to the driver by the names SQLAlchemy gives them: a name it had to
        # rewrite for the driver would not be found under the caller's.
        if compiled.escaped_bind_names:
            raise TypeError("rows_on_driver takes bind parameter names as the driver reads them; "
                            f"these are rewritten for it: {sorted(compiled.escaped_bind_names)}")
        # PostgreSQL's values go by name, SQLite's by position (positiontup): a dialect set to
        # the other paramstyle would be given them the wrong way.
        if compiled.positional != (dialect.name != "postgresql"):
            raise TypeError(f"rows_on_driver gives {dialect.name}'s driver its values "
                            f"{'by position' if dialect.name != 'postgresql' else 'by name'}; "
                            f"this dialect's paramstyle is {dialect.paramstyle}")
        names = tuple(compiled.positiontup or ())
        bound = frozenset(names if compiled.positional else compiled.bind_names.values())
        # compiled.binds holds a bind parameter under its key and under the name the SQL
        # gives it, which for an anonymous one (a literal) differ: only the SQL's are sent.
        fixed = {name: bind.value for name, bind in compiled.binds.items() if not bind.required and name in bound}
        unset = frozenset()
        if compiled.isinsert or compiled.isupdate:
            unset = frozenset(column.key for column in stmt.table.columns) - bound
        found = _ON_DRIVER[key] = (compiled.string, names, fixed, unset)
    return found


def bulk_insert(conn: Connection, table: Table, columns: Sequence[str], rows: list[tuple],
                constants: Mapping[str, int] | None = None) -> None:
    """The hot path of Send: many rows into one table, at close to the database's own rate.

    PostgreSQL: COPY FROM STDIN over the connection's open transaction (measured on this machine
    at about 2.5x executemany). SQLite: the driver's executemany on a prepared INSERT, with
    no per-row SQLAlchemy parameter processing.

    `constants`: more columns, each with one integer (or bool) value in every row. SQLite's
    INSERT writes them as literals, bound once rather than once a row: a self-committed
    record's two (self_committed, an idempotent one's producer_id) cost a 1,000-record Send
    about 300 µs bound a row (docs/benchmarks.md, 2026-12-06).
    """
    fixed = dict(constants or {})
    if conn.dialect.name == "postgresql":
        more = tuple(fixed.values())
        with _copy_from_stdin(conn, table, (*columns, *fixed)) as copy:
            for row in rows:
                copy.write_row(row + more if more else row)
        return
    quote = conn.dialect.identifier_preparer.quote
    cols = ", ".join(quote(c) for c in (*columns, *fixed))
    marks = ", ".join(["?"] * len(columns) + [_int_literal(v) for v in fixed.values()])
    conn.exec_driver_sql(f"INSERT INTO {quote(table.name)} ({cols}) VALUES ({marks})", rows)


def _int_literal(value: int) -> str:
    """An integer (a bool as 1 or 0) as SQL text; nothing else is written into a statement."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if type(value) is not int:
        raise TypeError(f"a constant column's value must be an integer, not {type(value).__name__}")
    return str(value)


# A field of COPY's text format that is NULL: what copy_texts writes for None.
COPY_NULL = "\\N"


def copy_texts(texts: Sequence[str | None]) -> list[str] | None:
    """Each text as a field of PostgreSQL's COPY text format (None: \\N), or None if one holds
    NUL, which that format cannot carry, or is not a str (the caller then goes through
    bulk_insert, whose driver refuses or adapts it as before).

    The fields are escaped all at once, joined by NUL: psycopg's write_row, which adapts and
    escapes field by field, cost the service 0.7-1.4 µs a row of a 1,000-record Send
    (docs/benchmarks.md, 2026-11-30), more than its decoding. The join splits back into as many
    pieces exactly when no text holds NUL. The join takes 4 bytes a character for all the texts
    if one holds a character outside the Basic Multilingual Plane: give a bounded number of
    them at a time (app.storage.record_rows._copy_pieces gives about COPY_PIECE_CHARS of them).

    Most texts need no escape at all (a JSON value holds a backslash only in a string's escape,
    a line break or tab only as whitespace between tokens): texts joined with nothing between
    them and holding none of the characters escaped nor NUL are their own fields, and are given
    back without the split, which made a string of every text again (about half of this
    function's time for a 1,000-record Send, docs/benchmarks.md, 2026-12-01)."""
    nulls = None in texts
    present = [t for t in texts if t is not None] if nulls else texts
    if not present:
        return [COPY_NULL] * len(texts)
    try:
        whole = "".join(present)  # type: ignore[arg-type]
    except TypeError:  # not all texts (bytes: a bytes topic's), for bulk_insert to adapt
        return None
    if not any(char in whole for char in _COPY_SPECIALS):
        return [COPY_NULL if t is None else t for t in texts] if nulls else list(present)  # type: ignore[misc]
    joined = "\x00".join(present)  # type: ignore[arg-type]
    for char, escaped in _COPY_ESCAPES:
        if char in joined:
            joined = joined.replace(char, escaped)
    fields = joined.split("\x00")
    if len(fields) != len(present):
        return None
    if not nulls:
        return fields
    pieces = iter(fields)
    return [COPY_NULL if t is None else next(pieces) for t in texts]


# What COPY's text format escapes in a field: the backslash first, then the characters that
# would end a field or a row.
_COPY_ESCAPES = (("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"))
# Those, and NUL, which no field can carry: a text holding none of them is its own field.
_COPY_SPECIALS = (*(char for char, _ in _COPY_ESCAPES), "\x00")


def copy_pieces(conn: Connection, table: Table, columns: Sequence[str],
                pieces: Iterable[str | Iterable[tuple]]) -> None:
    """PostgreSQL: one COPY of rows given in pieces, each written as it comes: a str is lines
    already in COPY's text format (copy_texts), anything else rows for the driver's write_row.
    Give rows after lines, not before: psycopg holds rows back in a buffer of its own, which
    lines written later would overtake (harmless to a table whose rows carry their offsets,
    but not the order given)."""
    with _copy_from_stdin(conn, table, columns) as copy:
        for piece in pieces:
            if isinstance(piece, str):
                copy.write(piece)
            else:
                for row in piece:
                    copy.write_row(row)


@contextmanager
def _copy_from_stdin(conn: Connection, table: Table, columns: Sequence[str]) -> Iterator[Any]:
    """PostgreSQL's COPY FROM STDIN into `columns` of `table`, on the driver's cursor, over the
    connection's open transaction."""
    quote = conn.dialect.identifier_preparer.quote
    cols = ", ".join(quote(c) for c in columns)
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        with cursor.copy(f"COPY {quote(table.name)} ({cols}) FROM STDIN") as copy:
            yield copy
    finally:
        cursor.close()
