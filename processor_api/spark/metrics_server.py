"""The run's HTTP endpoint (``run-topology --metrics-port``): ``/metrics`` in the Prometheus
text format (written by ``prometheus_client``), ``/health/live`` and ``/health/ready``.

Probes answer 200 when the state holds and 503 otherwise, with one line saying why.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from processor_api.logging import get_logger

Probe = Callable[[], tuple[bool, str]]

_log = get_logger("processor_api.metrics")


class MetricsServer:
    """Serves ``registry`` and the two probes on ``host:port`` (port 0: a free one)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        live: Probe,
        ready: Probe,
        port: int = 0,
        host: str = "0.0.0.0",
    ) -> None:
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
            "/health/live": lambda: _probe(live),
            "/health/ready": lambda: _probe(ready),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    status, content_type, body = 404, "text/plain", b"not found\n"
                else:
                    try:
                        status, content_type, body = route()
                    except Exception as exc:  # noqa: BLE001 - the scraper sees a 500, the log why
                        _log.warning("metrics_request_failed", path=self.path, error=str(exc))
                        status, content_type, body = 500, "text/plain", f"{exc}\n".encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass  # one line per scrape would drown the run's own events

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-server", daemon=True
        )
        self._thread.start()
        _log.info(
            "metrics_server_started", port=self.port, paths="/metrics /health/live /health/ready"
        )

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


def _probe(check: Probe) -> tuple[int, str, bytes]:
    ok, reason = check()
    return (200 if ok else 503), "text/plain; charset=utf-8", f"{reason}\n".encode()
