"""``run-topology`` in a subprocess, and killing a whole process tree.

* :class:`CliRun` starts ``python -m processor_api.cli.run_topology`` from the repository root in its own
  session, parses its structlog events from stderr in a thread (:mod:`tests.harness.logs`),
  lets a caller wait for an event and ``kill -9`` the *whole process tree*: the CLI's process
  group (driver + JVM) and the process group of PySpark's worker daemon, which puts itself in
  a group of its own;
* :func:`run_cli` runs it to the end (a :class:`CliRun`) and returns what
  ``subprocess.run(..., capture_output=True)`` would;
* :func:`cli_args` builds the arguments of a run (JSON log, local[2], ...).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from tests.harness.logs import LoggedEvent, parse_log_line

REPO_ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------------------ process tree


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgid) of every process we can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        fields_ = stat[stat.rfind(")") + 2 :].split()
        table[int(entry)] = (int(fields_[1]), int(fields_[2]))
    return table


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (children, grandchildren, ...)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _task_host_argvs() -> list[tuple[int, list[str]]]:
    """``(pid, argv)`` of every worker host process (``python -m ...worker_host NAME
    WORKER_KEY DAEMON_PID LOG_FORMAT``)."""
    hosts = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "processor_api.runtime.worker_host" in argv and len(argv) >= 7:
            hosts.append((int(entry), argv))
    return hosts


def _task_hosts_of(daemons: set[int]) -> list[int]:
    """Task hosts started under one of the pyspark ``daemons`` (their last-but-one argument).

    A host runs in its own session and outlives the worker that started it, so once that
    worker exited it is no descendant of the CLI any more; it stops by itself only when it
    sees its daemon gone (within ``worker_host.WATCH_INTERVAL_S``), time enough to finish and
    commit the work a crash should have cut off.
    """
    hosts = []
    for pid, argv in _task_host_argvs():
        with contextlib.suppress(ValueError):
            if int(argv[-3]) in daemons:
                hosts.append(pid)
    return hosts


def task_host_workers(application_id: str) -> list[int]:
    """The pyspark worker processes of the daemons whose task hosts serve
    ``application_id`` (their worker keys are ``<state>/<application_id>/.worker-<id>``)."""
    daemons = set()
    for _, argv in _task_host_argvs():
        if f"/{application_id}/" in argv[-4] + "/":
            with contextlib.suppress(ValueError):
                daemons.add(int(argv[-3]))
    table = _proc_table()
    return [pid for pid, (parent, _) in table.items() if parent in daemons]


def kill_tree(pid: int, sig: int = signal.SIGKILL, first: Iterable[int] = ()) -> set[int]:
    """Send ``sig`` to the process group of ``pid``, to every descendant and to its group;
    returns the process groups signalled. Call it while ``pid`` is not reaped yet.

    ``first`` (process groups found earlier, see ``CliRun.process_groups``) are signalled
    before the scan of ``/proc``, which takes tens of milliseconds on a busy machine: time
    in which a task host could still commit what the kill was meant to cut off.

    PySpark's worker daemon calls ``setpgid(0, 0)``, so killing the CLI's group alone would
    leave the Python workers running a task (holding its lock, producing) until the daemon
    notices its JVM is gone. A crash kills them all at once; so does this, task hosts that
    no longer descend from the CLI included.
    """
    early = {pid, *first}
    for group in early:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
    tree = descendants(pid)
    tree += [h for h in _task_hosts_of(set(tree)) if h not in tree]
    table = _proc_table()
    groups = early | {table[p][1] for p in tree if p in table}
    for group in groups - early:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
    for child in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, sig)
    return groups


def _alive(pid: int) -> bool:
    """Running (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return b") Z " not in handle.read()
    except OSError:
        return False


# ------------------------------------------------------------------------------- the CLI run


def cli_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment, the repository root first on ``PYTHONPATH``, plus ``env``."""
    environment = dict(os.environ)
    root = str(REPO_ROOT)
    paths = [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    environment["PYTHONPATH"] = os.pathsep.join([root, *paths])
    environment.update(env or {})
    return environment


class RunEnded(Exception):
    """The process exited before the awaited event appeared."""


class CliRun:
    """``python -m processor_api.cli.run_topology ARGS`` in its own session; stderr parsed into events.

    ``log_path``: a copy of the output (appended). ``stdout_apart``: stdout is kept apart in
    ``stdout_lines`` (default: merged into stderr, in the order written).
    """

    def __init__(
        self,
        args: list[str],
        log_path: Path | None,
        env: dict[str, str] | None = None,
        *,
        stdout_apart: bool = False,
    ) -> None:
        self.args = list(args)
        self.log_path = log_path
        self.extra_env = dict(env or {})
        self.stdout_apart = stdout_apart
        self.process: subprocess.Popen[str] | None = None
        self.events: list[LoggedEvent] = []
        self.lines: list[str] = []
        self.stdout_lines: list[str] = []
        self._cond = threading.Condition()
        self._log: IO[str] | None = None
        self._readers: list[threading.Thread] = []
        self.started_at = 0.0
        self.ended_at: float | None = None
        self.killed_with: int | None = None

    # -- lifecycle
    def start(self) -> CliRun:
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115
            self._log.write(f"### {' '.join(self.args)}\n")
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "processor_api.cli.run_topology", *self.args],
            cwd=REPO_ROOT,
            env=cli_environment(self.extra_env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if self.stdout_apart else subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
            bufsize=1,
        )
        streams = [(self.process.stdout, True)]
        if self.stdout_apart:
            streams = [(self.process.stderr, True), (self.process.stdout, False)]
        for stream, events in streams:
            reader = threading.Thread(
                target=self._read, args=(stream, events), daemon=True, name="cli-output"
            )
            reader.start()
            self._readers.append(reader)
        return self

    def _read(self, stream: IO[str], events: bool) -> None:
        for line in stream:
            event = parse_log_line(line) if events else None
            with self._cond:
                if self._log is not None:
                    self._log.write(line)
                (self.lines if events else self.stdout_lines).append(line.rstrip("\n"))
                if event is not None:
                    self.events.append(LoggedEvent(len(self.events), time.monotonic(), event))
                self._cond.notify_all()
        if not events:
            return
        assert self.process is not None
        self.process.wait()
        with self._cond:
            self.ended_at = time.monotonic()
            self._cond.notify_all()

    def _join_readers(self) -> None:
        for reader in self._readers:
            reader.join(30)
        with self._cond:
            if self._log is not None and not any(r.is_alive() for r in self._readers):
                self._log.close()
                self._log = None

    def __enter__(self) -> CliRun:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill9()
        self._join_readers()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # -- waiting
    def wait_event(
        self,
        predicate: Callable[[LoggedEvent], bool] | str,
        timeout_s: float,
        after: int = 0,
    ) -> LoggedEvent:
        """The first event (index >= ``after``) matching ``predicate`` (an event name or a
        function). Raises :class:`RunEnded` if the process exits first, ``TimeoutError`` after
        ``timeout_s``."""
        if isinstance(predicate, str):
            name = predicate
            predicate = lambda e: e.name == name  # noqa: E731
        deadline = time.monotonic() + timeout_s
        position = after
        with self._cond:
            while True:
                while position < len(self.events):
                    candidate = self.events[position]
                    position += 1
                    if predicate(candidate):
                        return candidate
                if self.ended_at is not None:
                    raise RunEnded(f"exited with {self.returncode} before the event")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no such event within {timeout_s:g}s; {self.tail()}")
                self._cond.wait(min(remaining, 0.5))

    def processed(self) -> int:
        """Input records the run's ended epochs processed so far (its ``batch_done`` events)."""
        return sum(int(e.get("records", 0)) for e in self.find("batch_done"))

    def wait_processed(self, total: int, timeout_s: float) -> int:
        """Wait until the run's ended epochs processed at least ``total`` records; fail if
        the run ends first or after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while (processed := self.processed()) < total:
            if not self.is_alive():
                raise AssertionError(f"the run ended early; {self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{processed} of {total} records processed in {timeout_s:g}s; {self.tail()}"
                )
            with self._cond:
                self._cond.wait(0.2)
        return processed

    def wait(self, timeout_s: float) -> int:
        """Wait for the process to exit; kill the tree and fail after ``timeout_s``."""
        assert self.process is not None
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise TimeoutError(
                f"run-topology did not exit within {timeout_s:g}s; {self.tail()}"
            ) from None
        self._join_readers()
        return code

    # -- signals
    def process_groups(self) -> set[int]:
        """The process groups of the run's tree now (task hosts included), for a quicker
        ``kill9(first=...)`` later."""
        tree = descendants(self.pid)
        tree += [h for h in _task_hosts_of(set(tree)) if h not in tree]
        table = _proc_table()
        return {table[p][1] for p in tree if p in table}

    def kill9(self, first: Iterable[int] = ()) -> float:
        """``kill -9`` the whole tree (the groups ``first`` before anything else); returns the
        monotonic time of the kill."""
        assert self.process is not None
        at = time.monotonic()
        groups = kill_tree(self.pid, signal.SIGKILL, first)
        self.killed_with = signal.SIGKILL
        self.process.wait(30)
        # stragglers (e.g. a worker forked meanwhile): live members of the groups signalled;
        # a group id cannot be reused while it has members, so these are ours
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = [p for p, (_, group) in _proc_table().items() if group in groups and _alive(p)]
            if not left:
                break
            for straggler in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(straggler, signal.SIGKILL)
            time.sleep(0.05)
        self._join_readers()
        return at

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the CLI process only (as ``kill PID`` does)."""
        os.kill(self.pid, sig)

    # -- reporting
    def names(self, after: int = 0) -> list[str]:
        with self._cond:
            return [e.name for e in self.events[after:]]

    def find(self, name: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e.event for e in self.events if e.name == name]

    def error_line(self) -> str | None:
        """The ``run-topology: error|failed: ...`` line, if any."""
        with self._cond:
            lines = [line for line in self.lines if line.startswith("run-topology: ")]
        return lines[-1] if lines else None

    def tail(self, lines: int = 25) -> str:
        with self._cond:
            text = "\n".join(self.lines[-lines:])
        return f"log {self.log_path}; last lines:\n{text}"


def run_cli(
    args: list[str],
    timeout_s: float,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m processor_api.cli.run_topology ARGS`` to the end (the tree is killed after
    ``timeout_s``); stdout and stderr captured apart."""
    with CliRun(args, log_path, env, stdout_apart=True) as run:
        code = run.wait(timeout_s)
    return subprocess.CompletedProcess(
        [sys.executable, "-m", "processor_api.cli.run_topology", *args],
        code,
        "".join(f"{line}\n" for line in run.stdout_lines),
        "".join(f"{line}\n" for line in run.lines),
    )


def cli_args(
    topology: str,
    bootstrap: str,
    app_id: str,
    state_dir: Path,
    checkpoint_dir: Path | None = None,
    *,
    guarantee: str = "at_least_once",
    available_now: bool = True,
    topology_args: dict[str, Any] | None = None,
    config: dict[str, str] | None = None,
    extra: Iterable[str] = (),
) -> list[str]:
    """``run-topology`` arguments: JSON log, ``local[2]``, no console progress."""
    args = [
        topology,
        "--bootstrap-servers",
        bootstrap,
        "--application-id",
        app_id,
        "--state-dir",
        str(state_dir),
        "--master",
        "local[2]",
        "--log-format",
        "json",
        "--processing-guarantee",
        guarantee,
        "--spark-conf",
        "spark.ui.showConsoleProgress=false",
    ]
    if checkpoint_dir is not None:
        args += ["--checkpoint-dir", str(checkpoint_dir)]
    if available_now:
        args.append("--available-now")
    for key, value in (topology_args or {}).items():
        text = value if isinstance(value, str) else json.dumps(value)
        args += ["--topology-arg", f"{key}={text}"]
    for key, value in (config or {}).items():
        args += ["--config", f"{key}={value}"]
    return [*args, *extra]
