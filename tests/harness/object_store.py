"""An S3-compatible object store for tests: moto's server, a real HTTP server process.

:func:`moto_server` starts it on a free loopback port and yields its endpoint;
:func:`s3_options` are the ``pyarrow.fs.S3FileSystem`` arguments that reach it (what a run
takes as ``state.snapshot.filesystem.options``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 server until the block ends; yields its ``http://127.0.0.1:<port>``."""
    port = _free_port()
    server = Path(sys.executable).with_name("moto_server")
    process = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "MOTO_CALL_RESET_API": "false"},
    )
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    _, err = process.communicate(timeout=5)
                    pytest.fail(f"moto_server did not listen on {port}: {err.decode()[-2000:]}")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def s3_options(endpoint: str) -> dict[str, object]:
    """``pyarrow.fs.S3FileSystem`` arguments for the server at ``endpoint``."""
    return {
        "endpoint_override": endpoint,
        "access_key": "testing",
        "secret_key": "testing",
        "region": "us-east-1",
        "scheme": "http",
        "allow_bucket_creation": True,
    }
