"""The driver's query thread: one thread that serves the HTTP clients and the worker hosts'
links together, over non-blocking sockets and one selector.

A lookup arrives on a client's connection, goes out on a host's link and comes back on it,
and its answer goes out on the client's connection, all on this thread: no thread hand-off,
no interpreter-lock hand-off and no wait on a condition per lookup. A thread per connection
and a reader thread per host cost the driver about twice the CPU per lookup on a small
machine (``bench/NOTES-issues-35-36.md``), CPU the worker hosts want.

Nothing on this thread may block: a connection writes what its socket takes and keeps the
rest until the socket is writable again (:meth:`Connection.write`); other threads hand work
to it with :meth:`EventLoop.call_soon` (woken through a socket pair).
"""

from __future__ import annotations

import heapq
import itertools
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

from processor_api.logging import get_logger

_log = get_logger("processor_api.query_loop")

#: How long closing the loop waits for its thread to end (seconds).
CLOSE_WAIT_S = 10.0
#: The most a connection reads at once (bytes).
READ_BYTES = 1 << 16


class Timer:
    """A call :meth:`EventLoop.call_later` will make, unless cancelled first."""

    __slots__ = ("when", "call", "cancelled")

    def __init__(self, when: float, call: Callable[[], None]) -> None:
        self.when = when
        self.call = call
        self.cancelled = False

    def cancel(self) -> None:
        """Do not make the call (safe on the loop's thread only)."""
        self.cancelled = True


class EventLoop:
    """A selector loop on a thread of its own (``name``), started at once."""

    def __init__(self, name: str) -> None:
        self._selector = selectors.DefaultSelector()
        self._waker, self._wake_reader = socket.socketpair()
        self._waker.setblocking(False)
        self._wake_reader.setblocking(False)
        self._selector.register(self._wake_reader, selectors.EVENT_READ, self._drain_wakes)
        self._calls: deque[Callable[[], None]] = deque()
        self._timers: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def on_loop(self) -> bool:
        """Whether the calling thread is the loop's."""
        return threading.current_thread() is self._thread

    def call_soon(self, call: Callable[[], None]) -> None:
        """Make ``call`` on the loop's thread, soon (from any thread)."""
        self._calls.append(call)
        if not self.on_loop:
            try:
                self._waker.send(b"\0")
            except (BlockingIOError, OSError):
                pass  # a wake is pending already, or the loop is closed

    def call_later(self, delay_s: float, call: Callable[[], None]) -> Timer:
        """Make ``call`` on the loop's thread after ``delay_s`` (on the loop's thread only)."""
        timer = Timer(time.monotonic() + delay_s, call)
        heapq.heappush(self._timers, (timer.when, next(self._order), timer))
        return timer

    def register(self, sock: socket.socket, events: int, ready: Callable[[int], None]) -> None:
        """Call ``ready(events)`` on the loop when ``sock`` is ready (loop's thread only)."""
        self._selector.register(sock, events, ready)

    def modify(self, sock: socket.socket, events: int, ready: Callable[[int], None]) -> None:
        """Change what ``sock`` is watched for (loop's thread only)."""
        self._selector.modify(sock, events, ready)

    def unregister(self, sock: socket.socket) -> None:
        """Stop watching ``sock`` (loop's thread only; a socket not watched is no error)."""
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass

    def run_sync(self, call: Callable[[], None], timeout_s: float = 10.0) -> None:
        """Make ``call`` on the loop's thread and wait until it is made (from another
        thread; on the loop's own thread, or once the loop has stopped, it is made at
        once)."""
        if self.on_loop or not self._thread.is_alive():
            call()  # on the loop, or the loop is gone: nothing runs beside the call
            return
        done = threading.Event()
        failure: list[BaseException] = []

        def make() -> None:
            try:
                call()
            except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
                failure.append(exc)
            finally:
                done.set()

        self.call_soon(make)
        if not done.wait(timeout_s):
            raise TimeoutError(f"the query loop did not run a call within {timeout_s:g}s")
        if failure:
            raise failure[0]

    def close(self) -> None:
        """Stop the loop (its connections are the owners' to close first) and wait for it."""
        self._closing = True
        self.call_soon(lambda: None)
        if not self.on_loop:
            self._thread.join(CLOSE_WAIT_S)
            if self._thread.is_alive():  # a call on it does not return: left behind
                _log.warning("query_loop_not_stopped", waited_s=CLOSE_WAIT_S)
        self._waker.close()

    # ------------------------------------------------------------------ loop
    def _drain_wakes(self, _events: int) -> None:
        try:
            while self._wake_reader.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _run(self) -> None:
        select = self._selector.select
        calls, timers = self._calls, self._timers
        try:
            while not self._closing:
                timeout = None
                if calls:
                    timeout = 0.0
                elif timers:
                    timeout = max(0.0, timers[0][0] - time.monotonic())
                for key, events in select(timeout):
                    self._guarded(key.data, events)
                while calls:
                    self._guarded(calls.popleft())
                if timers:
                    now = time.monotonic()
                    while timers and timers[0][0] <= now:
                        timer = heapq.heappop(timers)[2]
                        if not timer.cancelled:
                            self._guarded(timer.call)
        finally:
            self._selector.close()
            self._wake_reader.close()

    @staticmethod
    def _guarded(call: Callable[..., None], *args: int) -> None:
        try:
            call(*args)
        except Exception as exc:  # noqa: BLE001 - a bug in one connection must not stop all
            _log.warning("query_loop_call_failed", error=f"{type(exc).__name__}: {exc}")


class Connection:
    """One non-blocking socket on the loop: what arrives goes to :meth:`received`; what is
    written goes out as the socket takes it. Subclasses say what the data means."""

    def __init__(self, loop: EventLoop, sock: socket.socket) -> None:
        self.loop = loop
        self.sock = sock
        self.closed = False
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._out = bytearray()
        #: When the socket last took bytes while more waited (monotonic), or None: none wait.
        self.stalled_since: float | None = None
        loop.register(sock, selectors.EVENT_READ, self._ready)

    @property
    def unsent(self) -> int:
        """Bytes written and not yet taken by the socket."""
        return len(self._out)

    def write(self, data: bytes) -> None:
        """Send ``data`` after what waits; what the socket does not take now waits."""
        if self.closed:
            return
        if self._out:
            self._out += data
            return
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self.close(f"{type(exc).__name__}: {exc}")
            return
        if sent < len(data):
            self._out += data[sent:]
            self.stalled_since = time.monotonic()
            self.loop.modify(self.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, self._ready)

    def _ready(self, events: int) -> None:
        if events & selectors.EVENT_WRITE and self._out:
            self._flush()
        if events & selectors.EVENT_READ and not self.closed:
            try:
                data = self.sock.recv(READ_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.close(f"{type(exc).__name__}: {exc}")
                return
            if not data:
                self.close("the peer closed the connection")
                return
            self.received(data)

    def _flush(self) -> None:
        try:
            sent = self.sock.send(self._out)
        except BlockingIOError:
            return
        except OSError as exc:
            self.close(f"{type(exc).__name__}: {exc}")
            return
        del self._out[:sent]
        if sent:
            self.stalled_since = time.monotonic() if self._out else None
        if not self._out and not self.closed:
            self.loop.modify(self.sock, selectors.EVENT_READ, self._ready)
            self.drained()

    def received(self, data: bytes) -> None:
        """What arrived (subclasses)."""

    def drained(self) -> None:
        """Everything written was taken by the socket (subclasses may act on it)."""

    def close(self, reason: str) -> None:
        """Close the socket (once); ``reason`` goes to :meth:`ended`."""
        if self.closed:
            return
        self.closed = True
        self.loop.unregister(self.sock)
        try:
            self.sock.close()
        except OSError:
            pass
        self.ended(reason)

    def ended(self, reason: str) -> None:
        """The connection is closed (subclasses)."""
