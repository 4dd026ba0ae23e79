"""A TCP proxy that injects broker faults: outages, latency, throttling.

:class:`FaultProxy` listens on a loopback port and forwards every connection to an upstream
``host:port`` (the broker), one thread per direction. A test can

* :meth:`~FaultProxy.cut` every open connection (both ends see a reset);
* :meth:`~FaultProxy.refuse` new connections (the listening socket is closed, so a connect
  gets ``ECONNREFUSED``) until :meth:`~FaultProxy.accept_again`;
* run an :meth:`~FaultProxy.outage` of N seconds (cut + refuse, then accept again, in the
  background) and wait for its end (:meth:`~FaultProxy.wait_outage_over`);
* add ``latency_s`` to every chunk a client sends (a request reaches the broker that much
  later) and throttle both directions to ``bytes_per_s``.

:func:`broker_behind_proxy` starts an :class:`~processor_api.testing.embedded.EmbeddedKafka`
that advertises the proxy's address: a client bootstrapped at either address then talks to
the broker through the proxy only, as it would to a broker across a network.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
from collections.abc import Iterator

from processor_api.testing.embedded import EmbeddedKafka, free_port

_CHUNK = 16_384


class FaultProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream`` (see the module docs)."""

    def __init__(self, upstream: tuple[str, int], port: int | None = None) -> None:
        self.upstream = upstream
        self.port = port if port is not None else free_port()
        self.latency_s = 0.0
        self.bytes_per_s: float | None = None
        self.connections_accepted = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._server: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._closed = False
        self._outage_over = threading.Event()
        self._outage_over.set()

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT`` of the proxy."""
        return f"127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FaultProxy:
        """Listen and forward (idempotent)."""
        with self._lock:
            if self._server is not None:
                return self
            self._closed = False
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            deadline = time.monotonic() + 10
            while True:
                try:
                    server.bind(("127.0.0.1", self.port))
                    break
                except OSError as exc:  # the port lingers after a cut for a moment
                    if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                        server.close()
                        raise
                    time.sleep(0.05)
            server.listen(64)
            self._server = server
            self._acceptor = threading.Thread(
                target=self._accept, args=(server,), daemon=True, name=f"proxy-{self.port}"
            )
            self._acceptor.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every connection."""
        self._closed = True
        self.refuse()
        self._outage_over.set()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --------------------------------------------------------------------- faults
    def cut(self) -> int:
        """Reset every open connection; returns how many sockets were closed."""
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                # linger 0: the peer gets a RST, as when a broker host disappears
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
        return len(sockets)

    def refuse(self) -> None:
        """Cut every connection and refuse new ones (until :meth:`accept_again`)."""
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        if self._acceptor is not None:
            self._acceptor.join(5)
            self._acceptor = None
        self.cut()

    def accept_again(self) -> None:
        """Listen again after :meth:`refuse`."""
        if not self._closed:
            self.start()

    def outage(self, seconds: float) -> None:
        """Cut and refuse for ``seconds`` (in the background), then accept again."""
        self._outage_over.clear()
        self.refuse()

        def restore() -> None:
            time.sleep(seconds)
            try:
                self.accept_again()
            finally:
                self._outage_over.set()

        threading.Thread(target=restore, daemon=True, name="proxy-outage").start()

    def wait_outage_over(self, timeout_s: float) -> None:
        """Wait until the running :meth:`outage` ended (``TimeoutError`` after ``timeout_s``)."""
        if not self._outage_over.wait(timeout_s):
            raise TimeoutError(f"the outage of proxy {self.address} lasted over {timeout_s:g}s")

    # ---------------------------------------------------------------- forwarding
    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._server is not server:  # refused meanwhile
                    client.close()
                    upstream.close()
                    return
                self._sockets.update((client, upstream))
                self.connections_accepted += 1
            for source, target, delayed in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=self._pump, args=(source, target, delayed), daemon=True
                ).start()

    def _pump(self, source: socket.socket, target: socket.socket, delayed: bool) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                if delayed and self.latency_s > 0:
                    time.sleep(self.latency_s)
                rate = self.bytes_per_s
                if rate:
                    time.sleep(len(data) / rate)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._sockets.discard(source)
                self._sockets.discard(target)
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.close()


@contextlib.contextmanager
def broker_behind_proxy() -> Iterator[tuple[EmbeddedKafka, FaultProxy]]:
    """A fresh embedded broker whose advertised address is a :class:`FaultProxy`'s.

    Give clients ``proxy.address`` as bootstrap servers; the broker's own address also works
    for a first connection, after which librdkafka uses the advertised (proxy) address.
    """
    broker_port = free_port()
    with FaultProxy(("127.0.0.1", broker_port)) as proxy:
        with EmbeddedKafka(broker_port, advertised_port=proxy.port) as broker:
            yield broker, proxy
