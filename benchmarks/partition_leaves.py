"""A `records` with one leaf per (topic, partition), on PostgreSQL: what the leaves' DDL locks,
whether it deadlocks with appenders, and what the leaf count costs the statements
(docs/DESIGN-partitioned-records.md, "The leaves"). A study of the design: the tables are this
script's own, shaped as `records` was at migration 0033, never the service's.

    .venv/bin/python benchmarks/partition_leaves.py [locks] [deadlock] [cost] [ddl] [--keep] [--reuse]
                                                    [--only=p2000,u2000]

Creates scratch databases leafstudy_locks, leafstudy_cost and leafstudy_ddl on 127.0.0.1:5432
(user postgres) and drops them at the end unless --keep.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time

import psycopg
from psycopg import errors

BASE = "host=127.0.0.1 port=5432 user=postgres"
COLS = ('topic_id, "partition", "offset", timestamp_ms, key, value, headers, control_type, '
        'message_id, key_bytes, value_bytes')
PARENT_DDL = """
CREATE TABLE records (
  topic_id int NOT NULL, "partition" int NOT NULL, "offset" bigint NOT NULL,
  timestamp_ms bigint NOT NULL, key text, value text, headers text,
  control_type varchar(8), message_id text, key_bytes bytea, value_bytes bytea,
  PRIMARY KEY (topic_id, "partition", "offset"),
  CONSTRAINT ck_control_type CHECK (control_type IN ('COMMIT', 'ABORT')),
  CONSTRAINT one_key CHECK (key IS NULL OR key_bytes IS NULL),
  CONSTRAINT one_value CHECK (value IS NULL OR value_bytes IS NULL)
) {part}"""


def dsn(db):
    return f"{BASE} dbname={db}"


def recreate_db(name):
    with psycopg.connect(dsn("postgres"), autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {name}")


def drop_db(name):
    with psycopg.connect(dsn("postgres"), autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def ins_sql(t, p, off):
    return (f"INSERT INTO records ({COLS}) VALUES ({t},{p},{off},0,'k','v',NULL,NULL,NULL,NULL,NULL)")


# ------------------------------------------------------------------ 1. locks
LOCKDB = "leafstudy_locks"


def locks_of(obs, pid):
    rows = obs.execute(
        "SELECT coalesce(c.relname, l.relation::text, l.locktype), l.mode, l.granted "
        "FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation "
        "WHERE l.pid = %s AND (l.locktype = 'relation' OR NOT l.granted) ORDER BY 3, 1", (pid,)).fetchall()
    return ", ".join(f"{r.replace('records_2_0_', '2_0_').replace('pg_toast_', 'toast')}:{m.replace('Lock', '')}{'' if g else '(WAIT)'}" for r, m, g in rows
                     if not r.startswith("pg_") or r.startswith("pg_toast_"))


def run_stmts(conn, stmts, result, key, commit=True):
    t0 = time.perf_counter()
    try:
        for s in stmts:
            conn.execute(s)
        if commit and not conn.autocommit:
            conn.commit()
        result[key] = f"ok {time.perf_counter() - t0:.2f}s"
    except errors.LockNotAvailable:
        result[key] = f"LOCK TIMEOUT after {time.perf_counter() - t0:.2f}s"
        conn.rollback()
    except psycopg.Error as e:
        result[key] = f"{type(e).__name__}: {str(e).splitlines()[0]} ({time.perf_counter() - t0:.2f}s)"
        if not conn.autocommit:
            conn.rollback()


def connect_lt(timeout, autocommit=False):
    c = psycopg.connect(dsn(LOCKDB), autocommit=autocommit)
    c.execute(f"SET lock_timeout = '{timeout}'")
    if not autocommit:
        c.commit()
    return c


def reset_locks_db():
    with psycopg.connect(dsn(LOCKDB), autocommit=True) as c:
        c.execute("SET lock_timeout = '20s'")
        for (name, pending) in c.execute(
                "SELECT c.relname, i.inhdetachpending FROM pg_inherits i JOIN pg_class c "
                "ON c.oid = i.inhrelid WHERE i.inhparent = 'records'::regclass AND "
                "c.relname = 'records_2_0'").fetchall():
            if pending:
                c.execute("ALTER TABLE records DETACH PARTITION records_2_0 FINALIZE")
        c.execute("DROP TABLE IF EXISTS records_2_0")


def setup_locks_db():
    recreate_db(LOCKDB)
    with psycopg.connect(dsn(LOCKDB), autocommit=True) as c:
        c.execute(PARENT_DDL.format(part='PARTITION BY RANGE (topic_id, "partition")'))
        for p in range(3):
            c.execute(f"CREATE TABLE records_1_{p} PARTITION OF records FOR VALUES FROM (1,{p}) TO (1,{p + 1})")
            c.execute(f"INSERT INTO records ({COLS}) SELECT 1,{p},g,0,'k','v',NULL,NULL,NULL,NULL,NULL "
                      "FROM generate_series(0, 999) g")
        c.execute("CREATE TABLE other (id int PRIMARY KEY)")


# DDL variants. setup: run (autocommit) before the measured statements.
CREATE_PART = "CREATE TABLE records_2_0 PARTITION OF records FOR VALUES FROM (2,0) TO (2,1)"
CREATE_LIKE = "CREATE TABLE records_2_0 (LIKE records INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
ATTACH = "ALTER TABLE records ATTACH PARTITION records_2_0 FOR VALUES FROM (2,0) TO (2,1)"
DETACH = "ALTER TABLE records DETACH PARTITION records_2_0"
DETACH_CONC = "ALTER TABLE records DETACH PARTITION records_2_0 CONCURRENTLY"
DROP_LEAF = "DROP TABLE records_2_0"
LEAF_ROWS = f"INSERT INTO records ({COLS}) SELECT 2,0,g,0,'k','v',NULL,NULL,NULL,NULL,NULL FROM generate_series(0,9) g"
VARIANTS = [
    ("a CREATE..PARTITION OF", [], [CREATE_PART], False),
    ("b1 CREATE (LIKE)", [], [CREATE_LIKE], False),
    ("b2 ATTACH (table exists)", [CREATE_LIKE], [ATTACH], False),
    ("b3 CREATE LIKE+ATTACH", [], [CREATE_LIKE, ATTACH], False),
    ("c1 DETACH", [CREATE_PART, LEAF_ROWS], [DETACH], False),
    ("c2 DROP leaf (attached)", [CREATE_PART, LEAF_ROWS], [DROP_LEAF], False),
    ("c3 DETACH+DROP", [CREATE_PART, LEAF_ROWS], [DETACH, DROP_LEAF], False),
    ("c4 DETACH CONCURRENTLY", [CREATE_PART, LEAF_ROWS], [DETACH_CONC], True),
]

READ_1_0 = 'SELECT count(*) FROM records WHERE topic_id = 1 AND "partition" = 0'
_seq = iter(range(100000, 10**9))


class _W(str):
    pass


def WRITE():
    return ins_sql(1, 2, next(_seq))
READ_ALL = "SELECT count(*) FROM records"  # an unpruned reader, e.g. a scan across partitions


def lock_scenario(label, setup, stmts, autocommit):
    out = {}
    # Phase 1: A reads leaf 1_0 and B writes leaf 1_1, both in open transactions; C runs the DDL
    # (lock_timeout 1.5s). Phase 2: C waits (lock_timeout 6s); new reader D and writer E arrive.
    reset_locks_db()
    with psycopg.connect(dsn(LOCKDB), autocommit=True) as s:
        for x in setup:
            s.execute(x)
    obs = psycopg.connect(dsn(LOCKDB), autocommit=True)
    A = connect_lt("10s"); B = connect_lt("10s")
    A.execute(READ_1_0); B.execute(ins_sql(1, 1, 100000))
    out["A locks"] = locks_of(obs, A.info.backend_pid)
    out["B locks"] = locks_of(obs, B.info.backend_pid)
    # phase 1
    C = connect_lt("1500ms", autocommit)
    th = threading.Thread(target=run_stmts, args=(C, stmts, out, "C with A+B open"))
    th.start(); time.sleep(0.5)
    out["C locks while waiting"] = locks_of(obs, C.info.backend_pid)
    th.join()
    if autocommit:
        out["leaf state after C's timeout"] = obs.execute(
            "SELECT CASE WHEN i.inhdetachpending THEN 'attached, DETACH PENDING (needs FINALIZE)' "
            "ELSE 'attached' END FROM pg_inherits i WHERE i.inhrelid = 'records_2_0'::regclass").fetchone()
    # which of A / B alone blocks C
    A.rollback(); B.rollback()
    for who, conn, q in (("A (reader)", A, READ_1_0), ("B (writer)", B, ins_sql(1, 1, 100000))):
        reset_locks_db()
        with psycopg.connect(dsn(LOCKDB), autocommit=True) as s:
            for x in setup:
                s.execute(x)
        conn.execute(q)
        run_stmts(C, stmts, out, f"C with only {who} open")
        conn.rollback()
    # phase 2: A open, C waiting, D and E arrive
    reset_locks_db()
    with psycopg.connect(dsn(LOCKDB), autocommit=True) as s:
        for x in setup:
            s.execute(x)
    A.execute(READ_1_0)
    C.execute("SET lock_timeout = '6s'")
    if not autocommit:
        C.commit()
    th = threading.Thread(target=run_stmts, args=(C, stmts, out, "C (A open, 6s timeout)"))
    th.start(); time.sleep(0.5)
    D = connect_lt("1s"); E = connect_lt("1s")
    run_stmts(D, [READ_1_0], out, "new reader D while C queued")
    run_stmts(E, [WRITE()], out, "new writer E while C queued")
    A.rollback(); th.join()
    C.close(); C = None
    # phase 3: the DDL in a transaction held open (not for CONCURRENTLY: no transaction block)
    if not autocommit:
        reset_locks_db()
        with psycopg.connect(dsn(LOCKDB), autocommit=True) as s:
            for x in setup:
                s.execute(x)
        C = connect_lt("2s")
        for x in stmts:
            C.execute(x)
        out["held-open C locks"] = locks_of(C, C.info.backend_pid)
        run_stmts(D, [READ_1_0], out, "reader D vs open C")
        run_stmts(E, [WRITE()], out, "writer E vs open C")
        run_stmts(D, [READ_ALL], out, "unpruned reader vs open C")
        C2 = connect_lt("1s")
        run_stmts(C2, ["CREATE TABLE records_3_0 PARTITION OF records FOR VALUES FROM (3,0) TO (3,1)"], out,
                  "another CREATE PARTITION OF vs open C")
        run_stmts(C2, ["CREATE TABLE records_3_0 (LIKE records INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
                       "ALTER TABLE records ATTACH PARTITION records_3_0 FOR VALUES FROM (3,0) TO (3,1)"], out,
                  "another CREATE LIKE+ATTACH vs open C")
        C.rollback(); C.close()
        C2.execute("DROP TABLE IF EXISTS records_3_0"); C2.commit(); C2.close()
    for c in (A, B, D, E, obs):
        c.close()
    print(f"\n== {label}: {' ; '.join(stmts)}" + (f"   [setup: {' ; '.join(setup)}]" if setup else ""))
    for k, v in out.items():
        print(f"   {k:40s} {v}")


def study_locks():
    setup_locks_db()
    for v in VARIANTS:
        lock_scenario(*v)
    reset_locks_db()


# --------------------------------------------------------------- 3. deadlock
def two_sessions(label, steps):
    """steps: list of (session index, sql or COMMIT). Each step runs in a thread after the
    same session's previous step returned; a blocked step stays blocked while the other
    session's steps run (0.6s apart); we report each step's outcome and duration."""
    reset_locks_db()
    with psycopg.connect(dsn(LOCKDB), autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS records_3_0, records_4_0")
        c.execute('DELETE FROM records WHERE "offset" >= 100000')
        c.execute("DELETE FROM other; INSERT INTO other VALUES (1)")
    S = [connect_lt("4s"), connect_lt("4s")]
    for s in S:
        s.execute("SET deadlock_timeout = '200ms'")
        s.commit()
    out = {}
    threads = [None, None]
    for i, (who, stmt) in enumerate(steps):
        if threads[who] is not None:
            threads[who].join()
        key = f"{i}: S{who} {stmt[:60]}"
        if stmt == "COMMIT":
            threads[who] = threading.Thread(target=lambda w=who, k=key: (S[w].commit(), out.__setitem__(k, "committed")))
        else:
            threads[who] = threading.Thread(target=run_stmts, args=(S[who], [stmt], out, key, False))
        threads[who].start()
        time.sleep(0.6)
    for t in threads:
        if t:
            t.join()
    for s in S:
        try:
            s.commit()
        except psycopg.Error:
            s.rollback()
        s.close()
    print(f"\n== deadlock: {label}")
    for k in sorted(out, key=lambda k: int(k.split(':')[0])):
        print(f"   {k:66s} {out[k]}")
    with psycopg.connect(dsn(LOCKDB), autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS records_3_0, records_4_0")


def study_deadlock():
    setup_locks_db()
    cp = lambda t: f"CREATE TABLE records_{t}_0 PARTITION OF records FOR VALUES FROM ({t},0) TO ({t},1)"
    cl = lambda t: f"CREATE TABLE records_{t}_0 (LIKE records INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
    at = lambda t: f"ALTER TABLE records ATTACH PARTITION records_{t}_0 FOR VALUES FROM ({t},0) TO ({t},1)"
    w = lambda p: ins_sql(1, p, next(_seq))
    lock_topic = "SELECT * FROM other WHERE id = 1 FOR UPDATE"      # CreatePartitions: topic row
    share_topic = "SELECT * FROM other WHERE id = 1 FOR KEY SHARE"  # an appender reading the topic row
    two_sessions("D1 PARTITION OF: both append to records, then each creates a leaf",
                 [(0, w(1)), (1, w(2)), (0, cp(3)), (1, cp(4)), (0, "COMMIT"), (1, "COMMIT")])
    two_sessions("D2 LIKE+ATTACH: both append to records, then each creates+attaches a leaf",
                 [(0, w(1)), (1, w(2)), (0, cl(3)), (1, cl(4)), (0, at(3)), (1, at(4)), (0, w(1)),
                  (0, "COMMIT"), (1, "COMMIT")])
    two_sessions("D3 PARTITION OF: each creates a leaf then appends to it",
                 [(0, cp(3)), (1, cp(4)), (0, ins_sql(3, 0, 0)), (0, "COMMIT"), (1, ins_sql(4, 0, 0)),
                  (1, "COMMIT")])
    two_sessions("D4 PARTITION OF in a txn that locked the topic row vs appender that reads it",
                 [(0, lock_topic), (1, w(2)), (0, cp(3)), (1, share_topic), (0, "COMMIT"), (1, "COMMIT")])
    two_sessions("D5 LIKE+ATTACH in a txn that locked the topic row vs appender that reads it",
                 [(0, lock_topic), (1, w(2)), (0, cl(3)), (0, at(3)), (1, share_topic), (0, "COMMIT"),
                  (1, "COMMIT")])
    two_sessions("D6 PARTITION OF after own append vs appender holding records + appending again",
                 [(1, w(2)), (0, w(1)), (0, cp(3)), (1, w(2)), (1, "COMMIT"), (0, "COMMIT")])


# ------------------------------------------------------------------- 2. cost
COSTDB = "leafstudy_cost"
ROWS_PER_LEAF = 2000
BIG_ROWS = 200_000
LEAF_COUNTS = [8, 200, 2000]


def leaves(n):
    return [(1 + i // 20, i % 20) for i in range(n)] if n > 8 else [(1, i) for i in range(n)]


def build_cost_db():
    recreate_db(COSTDB)
    with psycopg.connect(dsn(COSTDB), autocommit=True) as c:
        for n in LEAF_COUNTS:
            for kind in ("p", "u"):
                sch = f"{kind}{n}"
                t0 = time.perf_counter()
                c.execute(f"CREATE SCHEMA {sch}; SET search_path = {sch}")
                c.execute(PARENT_DDL.format(part='PARTITION BY RANGE (topic_id, "partition")' if kind == "p" else ""))
                if kind == "p":
                    for t, p in leaves(n):
                        c.execute(f"CREATE TABLE records_{t}_{p} PARTITION OF records "
                                  f"FOR VALUES FROM ({t},{p}) TO ({t},{p + 1})")
                    # the unique (topic_id, message_id) index cannot exist on the parent
                    try:
                        c.execute("CREATE UNIQUE INDEX ON records (topic_id, message_id) WHERE message_id IS NOT NULL")
                    except psycopg.Error as e:
                        if n == 8:
                            print("   unique (topic_id, message_id) on parent:", str(e).splitlines()[0])
                    c.execute('CREATE UNIQUE INDEX ON records (topic_id, "partition", message_id) '
                              "WHERE message_id IS NOT NULL")
                else:
                    c.execute("CREATE UNIQUE INDEX ON records (topic_id, message_id) WHERE message_id IS NOT NULL")
                c.execute("CREATE TEMP TABLE lv (t int, p int) ON COMMIT DROP" if False else
                          "CREATE TABLE lv (t int, p int)")
                with c.cursor().copy("COPY lv FROM STDIN") as cp:
                    for t, p in leaves(n):
                        cp.write_row((t, p))
                c.execute(f"INSERT INTO records ({COLS}) SELECT t, p, g, 1700000000000 + g, 'key-' || g, "
                          f"repeat('v', 60), NULL, NULL, NULL, NULL, NULL FROM lv, "
                          f"generate_series(0, CASE WHEN t = 1 AND p = 0 THEN {BIG_ROWS} ELSE {ROWS_PER_LEAF} END - 1) g")
                c.execute("CREATE TABLE batches (topic_id int, \"partition\" int, base_offset bigint, "
                          "record_count int, txn_id bigint, PRIMARY KEY (topic_id, \"partition\", base_offset))")
                c.execute("INSERT INTO batches SELECT t, p, g * 100, 100, (t * 100 + p) * 10000 + g FROM lv, "
                          f"generate_series(0, {ROWS_PER_LEAF // 100} - 1) g")
                c.execute("CREATE INDEX ON batches (txn_id)")
                c.execute("VACUUM ANALYZE records"); c.execute("VACUUM ANALYZE batches")
                print(f"   built {sch} in {time.perf_counter() - t0:.1f}s")


def med(xs):
    return statistics.median(xs)


def explain_times(conn, q, params, n=15):
    plan = []
    ex = []
    for _ in range(n):
        j = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + q, params).fetchone()[0][0]
        plan.append(j["Planning Time"]); ex.append(j["Execution Time"])
    return med(plan), med(ex)


SELECT_Q = ('SELECT "offset", timestamp_ms, key, value, headers, control_type, key_bytes, value_bytes '
            'FROM records WHERE topic_id = %s AND "partition" = %s AND "offset" >= %s AND "offset" < %s')
JOIN_CONST = ('SELECT r."offset", r.value FROM records r JOIN batches b ON r.topic_id = b.topic_id '
              'AND r."partition" = b."partition" AND r."offset" = b.base_offset '
              'WHERE b.topic_id = %s AND b."partition" = %s')
JOIN_RT = ('SELECT r."offset", r.value FROM records r JOIN batches b ON r.topic_id = b.topic_id '
           'AND r."partition" = b."partition" AND r."offset" = b.base_offset WHERE b.txn_id = %s')
DELETE_Q = 'DELETE FROM records WHERE topic_id = %s AND "partition" = %s AND "offset" >= %s AND "offset" < %s'


class Loop(str):
    pass


def timed_loop(conn, q, params_fn, n, prepare):
    """Mean, median and max microseconds per execution (the max shows a one-off such as the
    generic plan the plan cache builds at a prepared statement's 6th execution)."""
    ts = []
    for i in range(n):
        t0 = time.perf_counter()
        cur = conn.execute(q, params_fn(i), prepare=prepare)
        if q.startswith("SELECT"):
            cur.fetchall()
        ts.append((time.perf_counter() - t0) * 1e6)
    return Loop(f"mean {statistics.mean(ts):9.0f}  median {med(ts):9.0f}  max {max(ts):9.0f}")


def plan_kinds(conn):
    rows = conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements").fetchall()
    return f"generic={sum(r[0] for r in rows)} custom={sum(r[1] for r in rows)}"


def locks_in_txn(conn, q, params):
    with conn.transaction():
        conn.execute(q, params, prepare=True)
        return conn.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() "
                            "AND locktype = 'relation'").fetchone()[0]


def lock_table_test(sch):
    """Sessions holding transactions open after running the SELECT with a generic plan (which
    locks every leaf): how many fit in the shared lock table (max_locks_per_transaction)."""
    conns, out = [], []
    for k in range(5):
        c = psycopg.connect(dsn(COSTDB), options=f"-c search_path={sch} -c plan_cache_mode=force_generic_plan")
        conns.append(c)
        try:
            c.execute(SELECT_Q, (1, 0, 0, 10), prepare=True).fetchall()
            out.append("ok")
        except psycopg.Error as e:
            out.append(type(e).__name__ + ": " + str(e).splitlines()[0])
            c.rollback()
    for c in conns:
        c.rollback(); c.close()
    return "; ".join(f"s{i}: {o}" for i, o in enumerate(out))


def study_cost():
    if "--reuse" not in sys.argv:
        build_cost_db()
    rows = [(1, 1, 0, 1700000000000, "k", "v" * 60, None, None, None, None, None)] * 1000
    for n in LEAF_COUNTS:
        for kind in ("u", "p"):
            sch = f"{kind}{n}"
            only = [a.split("=")[1] for a in sys.argv if a.startswith("--only=")]
            if only and sch not in only[0].split(","):
                continue
            conn = psycopg.connect(dsn(COSTDB), autocommit=True, options=f"-c search_path={sch}")
            conn.prepare_threshold = 0  # prepare=True: server-side prepared from the 1st execution
            res = {}
            # first statement on a fresh connection (relcache / partition descriptor load)
            firsts = []
            for _ in range(10):
                with psycopg.connect(dsn(COSTDB), autocommit=True, options=f"-c search_path={sch}") as f:
                    t0 = time.perf_counter(); f.execute(SELECT_Q, (1, 1, 0, 100)).fetchall()
                    firsts.append((time.perf_counter() - t0) * 1e3)
            # 2a COPY 1000 rows to leaf (1,1)
            base = conn.execute('SELECT max("offset") + 1 FROM records WHERE topic_id=1 AND "partition"=1').fetchone()[0]
            ts = []
            for k in range(50):
                off = base + k * 1000
                t0 = time.perf_counter()
                with conn.cursor().copy(f"COPY records ({COLS}) FROM STDIN") as cp:
                    for i, r in enumerate(rows):
                        cp.write_row((1, 1, off + i) + r[3:])
                ts.append((time.perf_counter() - t0) * 1e3)
            res["copy1000_ms"] = med(ts)
            if kind == "p":  # the same COPY straight into the leaf
                ts = []
                for k in range(50, 100):
                    off = base + k * 1000
                    t0 = time.perf_counter()
                    with conn.cursor().copy(f"COPY records_1_1 ({COLS}) FROM STDIN") as cp:
                        for i, r in enumerate(rows):
                            cp.write_row((1, 1, off + i) + r[3:])
                    ts.append((time.perf_counter() - t0) * 1e3)
                res["copy1000_into_leaf_ms"] = med(ts)
            # 2b select
            res["sel_plan_ms"], res["sel_exec_ms"] = explain_times(conn, SELECT_Q, (1, 0, 5000, 5100))
            pf = lambda i: (1, 0, (i * 100) % BIG_ROWS, (i * 100) % BIG_ROWS + 100)
            conn.execute("DEALLOCATE ALL")
            res["sel_unprep_us"] = timed_loop(conn, SELECT_Q, pf, 1000, False)
            res["sel_prep_us"] = timed_loop(conn, SELECT_Q, pf, 1000, True)
            res["sel_prep_plans"] = plan_kinds(conn)
            conn.execute("DEALLOCATE ALL")
            conn.execute("SET plan_cache_mode = force_generic_plan")
            res["sel_generic_us"] = timed_loop(conn, SELECT_Q, pf, 1000, True)
            res["sel_generic_locks"] = locks_in_txn(conn, SELECT_Q, (1, 0, 0, 100))
            conn.execute("RESET plan_cache_mode"); conn.execute("DEALLOCATE ALL")
            # 2c joins
            res["jc_plan_ms"], res["jc_exec_ms"] = explain_times(conn, JOIN_CONST, (1, 3))
            txn = (1 * 100 + 3) * 10000 + 5
            res["jrt_plan_ms"], res["jrt_exec_ms"] = explain_times(conn, JOIN_RT, (txn,))
            if kind == "p":
                txt = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + JOIN_RT, (txn,)))
                res["jrt_plan_shape"] = (f"{txt.count('Index Scan') + txt.count('Index Only Scan') - 1} leaf scans in plan, "
                                         f"{txt.count('never executed')} never executed; "
                                         + " / ".join(l.strip() for l in txt.splitlines()[:2]))
            tf = lambda i: ((((1 + (i % n) // 20) * 100 + (i % n) % 20) * 10000 + i % 20,) if n > 8 else
                            ((100 + i % n) * 10000 + i % 20,))
            res["jrt_unprep_us"] = timed_loop(conn, JOIN_RT, tf, 30, False)
            res["jrt_prep_us"] = timed_loop(conn, JOIN_RT, tf, 100, True)
            res["jrt_prep_plans"] = plan_kinds(conn)
            conn.execute("DEALLOCATE ALL")
            # 2d delete of 10-row offset ranges on the big leaf
            with conn.transaction():
                res["del_plan_ms"], res["del_exec_ms"] = explain_times(conn, DELETE_Q, (1, 0, 100000, 100010), n=5)
                raise psycopg.Rollback()
            df = lambda i: (1, 0, i * 10, i * 10 + 10)
            res["del_unprep_us"] = timed_loop(conn, DELETE_Q, df, 300, False)
            df2 = lambda i: (1, 0, 3000 + i * 10, 3000 + i * 10 + 10)
            res["del_prep_us"] = timed_loop(conn, DELETE_Q, df2, 300, True)
            res["del_prep_plans"] = plan_kinds(conn)
            res["first_query_fresh_conn_ms"] = med(firsts)
            conn.close()
            if kind == "p" and n == 2000:
                res["generic plans, 5 sessions"] = lock_table_test(sch)
            print(f"\n== {sch} ({'partitioned, ' + str(n) + ' leaves' if kind == 'p' else 'unpartitioned, same rows'})")
            for k, v in res.items():
                print(f"   {k:28s} {v:.3f}" if isinstance(v, float) else f"   {k:28s} {v}")
            sys.stdout.flush()


# --------------------------------------------------- DDL duration vs leaf count
DDLDB = "leafstudy_ddl"


def study_ddl():
    recreate_db(DDLDB)
    with psycopg.connect(dsn(DDLDB), autocommit=True) as c:
        c.execute(PARENT_DDL.format(part='PARTITION BY RANGE (topic_id, "partition")'))
        c.execute('CREATE UNIQUE INDEX ON records (topic_id, "partition", message_id) WHERE message_id IS NOT NULL')
        made = 0
        for n in (8, 2000):
            for t, p in leaves(n)[made:]:
                c.execute(f"CREATE TABLE records_{t}_{p} PARTITION OF records FOR VALUES FROM ({t},{p}) TO ({t},{p + 1})")
            made = n
            res = {}
            for label, stmts in [
                ("CREATE PARTITION OF", [CREATE_PART.replace("2_0", "999_0").replace("(2,", "(999,")]),
                ("CREATE LIKE + ATTACH (1 txn)", [CREATE_LIKE.replace("2_0", "999_0"),
                                                   ATTACH.replace("2_0", "999_0").replace("(2,", "(999,")]),
                ("DETACH + DROP (1 txn)", [DETACH.replace("2_0", "999_0"), DROP_LEAF.replace("2_0", "999_0")]),
            ]:
                ts = []
                for _ in range(10):
                    if label.startswith("DETACH"):
                        c.execute(CREATE_PART.replace("2_0", "999_0").replace("(2,", "(999,"))
                    t0 = time.perf_counter()
                    with c.transaction():
                        for x in stmts:
                            c.execute(x)
                    ts.append((time.perf_counter() - t0) * 1e3)
                    if not label.startswith("DETACH"):
                        c.execute("DROP TABLE records_999_0")
                res[label] = med(ts)
            print(f"\n== DDL with {n} leaves (median of 10, ms): " + "; ".join(f"{k} {v:.1f}" for k, v in res.items()))
        # a prepared statement's executions (ms) in one session around another session's ATTACH
        r = psycopg.connect(dsn(DDLDB), autocommit=True)
        def run(k):
            out = []
            for _ in range(k):
                t0 = time.perf_counter()
                r.execute(SELECT_Q, (1, 0, 0, 10), prepare=True).fetchall()
                out.append(f"{(time.perf_counter() - t0) * 1e3:.1f}")
            return " ".join(out)
        before = run(8)
        c.execute(CREATE_LIKE.replace("2_0", "999_0"))
        c.execute(ATTACH.replace("2_0", "999_0").replace("(2,", "(999,"))
        after = run(8)
        print(f"   prepared SELECT, ms per execution, 2000 leaves: new session: {before} | "
              f"after another session's ATTACH: {after}")
        r.close()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")] or ["locks", "deadlock", "cost", "ddl"]
    try:
        if "locks" in args:
            study_locks()
        if "deadlock" in args:
            study_deadlock()
        if "cost" in args:
            study_cost()
        if "ddl" in args:
            study_ddl()
    finally:
        if "--keep" not in sys.argv:
            drop_db(LOCKDB); drop_db(COSTDB); drop_db(DDLDB)
