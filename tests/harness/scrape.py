"""Reading a run's ``/metrics`` and health endpoints over HTTP, as Prometheus would."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")

#: (sample name, sorted label pairs) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(port: int, path: str) -> tuple[int, str]:
    """(HTTP status, body) of ``GET http://127.0.0.1:port/path``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(port: int) -> Samples:
    """Every sample of ``/metrics``, parsed by prometheus_client's parser."""
    status, text = get(port, "/metrics")
    assert status == 200, f"/metrics answered {status}: {text}"
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def values(samples: Samples, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples called ``name`` whose labels include ``labels``."""
    return {
        key: value
        for (sample, key), value in samples.items()
        if sample == name and all((k, v) in key for k, v in labels.items())
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of :func:`values`."""
    return sum(values(samples, name, **labels).values())


def wait_for(
    what: str, probe: Callable[[], T | None], timeout_s: float = 90.0, alive: Any = None
) -> T:
    """Call ``probe`` until it returns something other than None (or fail naming ``what``
    and the last value seen)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if alive is not None:
            alive.check()
        result = probe()
        if result is not None:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
