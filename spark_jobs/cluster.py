"""A Spark standalone cluster on this machine: one master and one worker, on 127.0.0.1.

    python -m spark_jobs.cluster start [--dir .spark-cluster] [--cores 2] [--memory 1g]
    python -m spark_jobs.cluster status [--dir .spark-cluster]
    python -m spark_jobs.cluster stop [--dir .spark-cluster]

`start` runs PySpark's bundled launcher, `spark-class org.apache.spark.deploy.master.Master`
and `spark-class org.apache.spark.deploy.worker.Worker`, each bound to 127.0.0.1 on ports free
when it starts (none of Spark's fixed defaults, 7077 and 8080, which another cluster may hold;
the master's REST submission server, on a fixed 6066, is off: spark-submit in client mode does
not use it). It returns once the master's JSON view (http://127.0.0.1:UI/json/) lists the
worker as ALIVE, and prints the master URL to pass to `spark-submit --master`. What it started
is in DIR/cluster.json (master URL, web UI, pids); logs in DIR/master.log and DIR/worker.log;
the executors' work directories under DIR/work.

`stop` sends SIGTERM to the worker (its shutdown hook stops the executors it runs), then to the
master, SIGKILL to whichever is still there after STOP_GRACE_S, and removes DIR/cluster.json.

A job on this cluster runs its Python in executors the worker starts: give spark-submit the
interpreter that has this package and the spark extra, PYSPARK_PYTHON=.venv/bin/python (Spark
starts `python3` from PATH otherwise). docs/SPARK.md, "Standalone cluster".
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from spark_jobs.errors import SparkJobError

DEFAULT_DIR = ".spark-cluster"
STATE_FILE = "cluster.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT_S = 90.0
STOP_GRACE_S = 15.0
# Spark's daemons move to the next port when theirs is taken (spark.port.maxRetries): then
# the URLs written here would be wrong. No retries: a port taken between choosing it and
# binding it fails the start, which is tried again with new ports.
DAEMON_OPTS = "-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false"
START_ATTEMPTS = 3


class ClusterError(SparkJobError):
    """The local cluster cannot start or stop as asked."""


@dataclass(frozen=True)
class Cluster:
    """A running master and worker, as DIR/cluster.json records them."""

    directory: str
    master_url: str  # spark://127.0.0.1:PORT
    web_ui: str  # http://127.0.0.1:PORT
    master_pid: int
    worker_pid: int
    cores: int
    memory: str


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _daemon(directory: Path, name: str, args: list[str]) -> subprocess.Popen:
    """spark-class CLASS ARGS in its own session (a Ctrl-C of `start` does not reach it),
    output to DIR/NAME.log. spark-class execs java: the pid is the daemon's."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_OPTS": DAEMON_OPTS,
           "SPARK_WORKER_OPTS": DAEMON_OPTS, "SPARK_WORKER_DIR": str(directory / "work")}
    log = open(directory / f"{name}.log", "ab")  # noqa: SIM115 - the daemon keeps writing to it
    try:
        return subprocess.Popen([str(spark_class()), *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=directory)
    finally:
        log.close()


def master_state(web_ui: str) -> dict | None:
    """The master's JSON view, or None while it does not answer it: no answer, another status,
    or a body that is not JSON. CI saw a 200 whose body was not JSON at start-up on a loaded
    machine (the UI still starting, or, the port having been taken between free_port and the
    master's bind, something else there while Spark moved its UI to the next port); reading it
    as JSON ended `cluster start` with a traceback instead of waiting, or failing with the
    master's log named."""
    import httpx

    try:
        r = httpx.get(f"{web_ui}/json/", timeout=2)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        state = r.json()
    except ValueError:
        return None
    return state if isinstance(state, dict) else None


def _wait(proc: subprocess.Popen, java_class: str, log: Path, what: str, ready, deadline: float) -> bool:  # type: ignore[no-untyped-def]
    """Poll `ready()` until it is true (True), or `proc` exits (False). At the deadline, or
    interrupted, the daemon is stopped (nothing would stop it later) and the error raised."""
    try:
        while time.monotonic() < deadline:
            if ready():
                return True
            if proc.poll() is not None:
                return False
            time.sleep(0.25)
        raise ClusterError(f"the {what} did not come up in {START_TIMEOUT_S:.0f} s; see {log}")
    except BaseException:
        _terminate(proc.pid, java_class)
        raise


def _last_error(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if "ERROR" in line or "Exception" in line]
    return lines[-1].strip() if lines else "no error logged"


def _start_master(directory: Path, deadline: float) -> tuple[subprocess.Popen, str, str]:
    log = directory / "master.log"
    for _ in range(START_ATTEMPTS):
        port, ui_port = free_port(), free_port()
        web_ui = f"http://127.0.0.1:{ui_port}"
        proc = _daemon(directory, "master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port),
                                             "--webui-port", str(ui_port)])
        def alive() -> bool:
            return (master_state(web_ui) or {}).get("status") == "ALIVE"

        if _wait(proc, MASTER_CLASS, log, "master", alive, deadline):
            return proc, f"spark://127.0.0.1:{port}", web_ui
    raise ClusterError(f"the master exited {START_ATTEMPTS} times: {_last_error(log)} (see {log})")


def _start_worker(directory: Path, master_url: str, web_ui: str, cores: int, memory: str,
                  deadline: float) -> subprocess.Popen:
    log = directory / "worker.log"

    def registered() -> bool:
        state = master_state(web_ui) or {}
        return any(w.get("state") == "ALIVE" and w.get("port") == port for w in state.get("workers", []))

    for _ in range(START_ATTEMPTS):
        port = free_port()
        proc = _daemon(directory, "worker", [WORKER_CLASS, master_url, "--host", "127.0.0.1", "--port", str(port),
                                             "--webui-port", str(free_port()), "--cores", str(cores),
                                             "--memory", memory, "--work-dir", str(directory / "work")])
        if _wait(proc, WORKER_CLASS, log, "worker", registered, deadline):
            return proc
    raise ClusterError(f"the worker exited {START_ATTEMPTS} times: {_last_error(log)} (see {log})")


def start(directory: str | Path = DEFAULT_DIR, *, cores: int = 2, memory: str = "1g") -> Cluster:
    """Start a master and a worker, wait until the worker registered, record them."""
    import pyspark

    from spark_jobs.jars import check_java, required_java_major

    directory = Path(directory).resolve()
    existing = load(directory)
    if existing is not None and (is_running(existing.master_pid, MASTER_CLASS)
                                 or is_running(existing.worker_pid, WORKER_CLASS)):
        raise ClusterError(f"a cluster started from {directory} is running ({existing.master_url}): "
                           f"stop it first: python -m spark_jobs.cluster stop --dir {directory}")
    check_java(required_java_major(pyspark.__version__))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "work").mkdir(exist_ok=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    master, master_url, web_ui = _start_master(directory, deadline)
    try:
        worker = _start_worker(directory, master_url, web_ui, cores, memory, deadline)
    except BaseException:
        _terminate(master.pid, MASTER_CLASS)
        raise
    cluster = Cluster(str(directory), master_url, web_ui, master.pid, worker.pid, cores, memory)
    (directory / STATE_FILE).write_text(json.dumps(asdict(cluster), indent=2) + "\n")
    return cluster


def load(directory: str | Path = DEFAULT_DIR) -> Cluster | None:
    path = Path(directory).resolve() / STATE_FILE
    if not path.is_file():
        return None
    return Cluster(**json.loads(path.read_text()))


def is_running(pid: int, java_class: str | None = None) -> bool:
    """The process is running (and, with java_class, is that daemon: a pid may have been reused).
    A daemon that exited but is not reaped yet (a zombie: no command line) is not running."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return java_class is None or java_class.encode() in cmdline


def _terminate(pid: int, java_class: str) -> bool:
    """SIGTERM, then SIGKILL after STOP_GRACE_S; False if it was not running."""
    if not is_running(pid, java_class):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while is_running(pid, java_class) and time.monotonic() < deadline:
        time.sleep(0.2)
        _reap(pid)
    if is_running(pid, java_class):
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        _reap(pid)
    return True


def _reap(pid: int) -> None:
    """Collect the exit status when this process started the daemon (else it stays a zombie)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def stop(directory: str | Path = DEFAULT_DIR) -> list[str]:
    """Stop what `start` recorded in `directory`: the worker, then the master. Returns what
    was stopped, e.g. ["worker 1234", "master 1230"]."""
    cluster = load(directory)
    if cluster is None:
        raise ClusterError(f"no cluster recorded in {Path(directory).resolve()} ({STATE_FILE} is missing)")
    stopped = [f"{name} {pid}" for name, pid, java_class in (("worker", cluster.worker_pid, WORKER_CLASS),
                                                               ("master", cluster.master_pid, MASTER_CLASS))
               if _terminate(pid, java_class)]
    (Path(cluster.directory) / STATE_FILE).unlink()
    return stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("start", "status", "stop"))
    parser.add_argument("--dir", default=DEFAULT_DIR,
                        help=f"where the cluster's state, logs and work directories go (default {DEFAULT_DIR})")
    parser.add_argument("--cores", type=int, default=2, help="the worker's cores (start; default 2)")
    parser.add_argument("--memory", default="1g", help="the worker's memory for executors (start; default 1g)")
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            began = time.monotonic()
            c = start(args.dir, cores=args.cores, memory=args.memory)
            print(f"master {c.master_url} (web UI {c.web_ui}); worker with {c.cores} cores and {c.memory} "
                  f"registered in {time.monotonic() - began:.1f} s")
            print(f"state and logs in {c.directory}; stop with: {sys.executable} -m spark_jobs.cluster stop --dir {args.dir}")
        elif args.command == "status":
            c = load(args.dir)
            if c is None:
                raise ClusterError(f"no cluster recorded in {Path(args.dir).resolve()}: start one with "
                                   f"python -m spark_jobs.cluster start --dir {args.dir}")
            state = master_state(c.web_ui)
            if state is None:
                raise ClusterError(f"the master at {c.web_ui} does not answer (see {c.directory}/master.log)")
            print(f"master {state['url']} {state['status']}: {state['aliveworkers']} alive worker(s), "
                  f"{state['cores']} cores, {len(state['activeapps'])} running application(s)")
        else:
            stopped = stop(args.dir)
            print("stopped " + (", ".join(stopped) if stopped else "nothing (neither was running)"))
    except SparkJobError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
