"""The floor of a lookup on this machine: an HTTP server in a process of its own that
answers every request at once with a constant body shaped like a point lookup's answer
(no routing, no worker, no store), as cheaply as Python answers HTTP (a thread per
connection, the request head found and dropped, the answer sent in one piece).

``bench.interactive_queries --floor`` sends the same load to it beside the run's endpoint:
what 500 lookups/s cost a saturated run's processing, and their latency while the run is
fed, when each lookup costs only a client's request and one Python process's answer.
Whatever the endpoint costs above that is the query path's (driver, router, hosts); what the
floor costs is this machine's, which no query path in Python gets under.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

#: The body of every answer: as long as a lookup's answer of the bench's store.
BODY = (
    b'{"key": "key-00001", "value": 17, "task": "0_1", "position": 123456, '
    b'"input_position": null, "consistency": "live"}'
)
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
    + BODY
)


def _answer_connection(connection: socket.socket) -> None:
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = b""
    with connection:
        while True:
            while b"\r\n\r\n" not in buffer:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            _, _, buffer = buffer.partition(b"\r\n\r\n")
            connection.sendall(ANSWER)


def serve(ports: Any, stop: Any) -> None:
    """Serve on a free port of 127.0.0.1 (put on ``ports``) until ``stop`` is set."""
    listener = socket.create_server(("127.0.0.1", 0))
    ports.put(listener.getsockname()[1])

    def accept() -> None:
        while True:
            connection, _ = listener.accept()
            threading.Thread(target=_answer_connection, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    stop.wait()
    listener.close()


class FloorServer:
    """The floor's process, started at once; :attr:`url` to ask it; :meth:`stop` ends it."""

    def __init__(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        ports, self._stop = context.Queue(), context.Event()
        self._process = context.Process(target=serve, args=(ports, self._stop), daemon=True)
        self._process.start()
        self.url = f"http://127.0.0.1:{ports.get(timeout=60)}"
        self.pid = self._process.pid

    def stop(self) -> None:
        """End the floor's process."""
        self._stop.set()
        self._process.join(10)
