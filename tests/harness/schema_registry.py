"""A Confluent Schema Registry REST server for tests, in a thread of the test process.

No Confluent-compatible registry server installs here from the package registries without a
JVM (Karapace is not on PyPI), and ``confluent_kafka``'s ``mock://`` registry lives inside one
process, which Spark's Python workers and the task host processes cannot see. So the tests
run this: plain HTTP on a loopback port, speaking the part of the REST API that
``confluent_kafka``'s ``SchemaRegistryClient`` uses to register, look up and fetch schemas:

* ``POST /subjects/{subject}/versions`` registers (``{"id": N}``), the same schema under
  another subject gets the same id, as the real registry does;
* ``POST /subjects/{subject}`` looks a schema up in a subject (404, error 40401 / 40403);
* ``GET /schemas/ids/{id}`` (and ``.../subjects``, ``.../versions``) fetches by id (40403);
* ``GET /subjects``, ``GET /subjects/{subject}/versions``, ``GET
  /subjects/{subject}/versions/{version|latest}``; ``GET /config`` answers ``BACKWARD``.

Compatibility is not checked. Every registry URL :meth:`SchemaRegistryServer.new_url` hands
out (``http://127.0.0.1:PORT/r/<name>``) is a registry of its own, so tests do not see each
other's subjects; the server logs every request path (``requests``) for tests to inspect.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass
class _Registered:
    id: int
    schema: str
    schema_type: str
    references: list[dict[str, Any]]

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": self.schema}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = self.references
        return out


@dataclass
class _Registry:
    """One registry: schemas by id (global ids) and each subject's versions (ids in order)."""

    by_id: dict[int, _Registered] = field(default_factory=dict)
    by_identity: dict[tuple[str, str, str], int] = field(default_factory=dict)
    subjects: dict[str, list[int]] = field(default_factory=dict)


class _Error(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _identity(schema: str, schema_type: str, references: list[dict[str, Any]]) -> tuple:
    text = schema
    if schema_type in ("AVRO", "JSON"):
        try:  # whitespace and key order do not make another schema
            text = json.dumps(json.loads(schema), sort_keys=True, separators=(",", ":"))
        except ValueError:
            pass
    return (schema_type, text, json.dumps(references, sort_keys=True))


class SchemaRegistryServer:
    """The server; ``with SchemaRegistryServer() as server: url = server.new_url()``."""

    def __init__(self) -> None:
        self._registries: dict[str, _Registry] = {}
        self._lock = threading.Lock()
        self._next_id = 1
        self.requests: list[tuple[str, str]] = []
        handler = type("Handler", (_Handler,), {"server_state": self})
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, daemon=True, name="schema-registry"
        )

    @property
    def port(self) -> int:
        return self._http.server_address[1]

    def new_url(self) -> str:
        """The URL of a new, empty registry served by this server."""
        return f"http://127.0.0.1:{self.port}/r/{uuid.uuid4().hex[:12]}"

    def subjects(self, url: str) -> list[str]:
        """The subjects of the registry at ``url`` (read directly, not over HTTP)."""
        with self._lock:
            return sorted(self._registry(url.rstrip("/").rsplit("/", 1)[-1]).subjects)

    def __enter__(self) -> SchemaRegistryServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(10)

    # ------------------------------------------------------------ the API
    def _registry(self, name: str) -> _Registry:
        return self._registries.setdefault(name, _Registry())

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> Any:
        match = re.fullmatch(r"/r/([^/]+)(/.*)?", path)
        if match is None:
            raise _Error(404, 404, f"no registry at {path}: use /r/<name>/...")
        parts = [unquote(p) for p in (match.group(2) or "/").strip("/").split("/") if p]
        with self._lock:
            self.requests.append((method, path))
            return self._route(self._registry(match.group(1)), method, parts, query, body)

    def _route(
        self, reg: _Registry, method: str, parts: list[str], query: dict[str, str], body: Any
    ) -> Any:
        if method == "GET" and parts == ["subjects"]:
            return sorted(reg.subjects)
        if method == "GET" and parts in (["config"], ["schemas", "types"]):
            return (
                {"compatibilityLevel": "BACKWARD"}
                if parts == ["config"]
                else ["AVRO", "JSON", "PROTOBUF"]
            )
        if parts[:2] == ["schemas", "ids"] and len(parts) >= 3 and method == "GET":
            return self._by_id(reg, parts[2], parts[3:])
        if parts and parts[0] == "subjects" and len(parts) >= 2:
            subject = parts[1]
            if method == "POST" and parts[2:] == ["versions"]:
                return {"id": self._register(reg, subject, body)}
            if method == "POST" and len(parts) == 2:
                return self._lookup(reg, subject, body)
            if method == "GET" and parts[2:] == ["versions"]:
                return list(range(1, len(self._versions(reg, subject)) + 1))
            if method == "GET" and len(parts) == 4 and parts[2] == "versions":
                return self._version(reg, subject, parts[3])
        raise _Error(404, 404, f"{method} /{'/'.join(parts)} is not served by the test registry")

    def _register(self, reg: _Registry, subject: str, body: dict[str, Any]) -> int:
        schema_type = body.get("schemaType") or "AVRO"
        references = body.get("references") or []
        identity = _identity(body["schema"], schema_type, references)
        schema_id = reg.by_identity.get(identity)
        if schema_id is None:
            schema_id = self._next_id
            self._next_id += 1
            reg.by_identity[identity] = schema_id
            reg.by_id[schema_id] = _Registered(schema_id, body["schema"], schema_type, references)
        versions = reg.subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id

    def _lookup(self, reg: _Registry, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        versions = self._versions(reg, subject)
        identity = _identity(
            body["schema"], body.get("schemaType") or "AVRO", body.get("references") or []
        )
        schema_id = reg.by_identity.get(identity)
        if schema_id not in versions:
            raise _Error(404, 40403, "Schema not found")
        return self._subject_version(reg, subject, versions.index(schema_id) + 1)

    def _versions(self, reg: _Registry, subject: str) -> list[int]:
        versions = reg.subjects.get(subject)
        if not versions:
            raise _Error(404, 40401, f"Subject '{subject}' not found.")
        return versions

    def _version(self, reg: _Registry, subject: str, version: str) -> dict[str, Any]:
        versions = self._versions(reg, subject)
        number = len(versions) if version in ("latest", "-1") else int(version)
        if not 1 <= number <= len(versions):
            raise _Error(404, 40402, f"Version {version} not found.")
        return self._subject_version(reg, subject, number)

    @staticmethod
    def _subject_version(reg: _Registry, subject: str, number: int) -> dict[str, Any]:
        registered = reg.by_id[reg.subjects[subject][number - 1]]
        return {"subject": subject, "version": number, "id": registered.id, **registered.body()}

    @staticmethod
    def _by_id(reg: _Registry, raw_id: str, rest: list[str]) -> Any:
        registered = reg.by_id.get(int(raw_id)) if raw_id.isdigit() else None
        if registered is None:
            raise _Error(404, 40403, f"Schema {raw_id} not found")
        pairs = [
            (subject, versions.index(registered.id) + 1)
            for subject, versions in sorted(reg.subjects.items())
            if registered.id in versions
        ]
        if rest == ["subjects"]:
            return [subject for subject, _ in pairs]
        if rest == ["versions"]:
            return [{"subject": subject, "version": version} for subject, version in pairs]
        return registered.body()


class _Handler(BaseHTTPRequestHandler):
    server_state: SchemaRegistryServer
    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connection

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        try:
            status, answer = 200, self.server_state.handle(method, url.path, query, body)
        except _Error as exc:
            status, answer = exc.status, {"error_code": exc.code, "message": exc.message}
        except (KeyError, ValueError, TypeError) as exc:
            status, answer = 422, {"error_code": 42201, "message": f"bad request: {exc!r}"}
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: requests are kept in ``server.requests`` instead."""
