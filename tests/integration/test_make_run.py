"""``make run``, the README's first command: the seed's sales aggregation end to end
(``python -m topologies.sales_demo``: its own embedded broker and local Spark) prints the two
expected notifications and exits 0.

Before 2026-11-27 its notification printer joined a consumer group, which the embedded broker
answers only after ~23 s: the run had ended by then and the demo exited 1 with no notification.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_the_sales_demo_prints_both_notifications_and_exits_0():
    done = subprocess.run(
        [sys.executable, "-m", "topologies.sales_demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    lines = done.stdout.splitlines()
    notifications = [line.split() for line in lines if line.strip().startswith("notification")]
    assert sorted(n[1] for n in notifications) == ["product1", "product2"], done.stdout
    assert any(line.startswith("result     : OK") for line in lines), done.stdout
