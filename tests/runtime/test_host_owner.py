"""A worker host's owner (``worker_host.Owner``): the pyspark daemon that started it, under the
executor JVM it had. A killed executor leaves its daemon running for up to a second, but with
another parent at once: the host tells the driver its executor is gone from that. A driver
that started its hosts itself is not a daemon: another parent (its shell ended) is no loss."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processor_api.runtime.worker_host import Owner

pytestmark = pytest.mark.integration  # a process named as a JVM is taken for one

#: A parent that starts a child (as an executor's JVM starts its pyspark daemon), prints the
#: child's pid and waits.
PARENT = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def _orphan_after_parent_killed(parent_executable: str) -> tuple[Owner, int]:
    """Start a parent (run as ``parent_executable``) and its child; the child's ``Owner``,
    taken while the parent runs, and the child's pid once the parent was killed."""
    parent = subprocess.Popen([parent_executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    owner = Owner(child)
    parent.kill()
    parent.wait(10)
    return owner, child


def _wait_until_not_alive(owner: Owner) -> None:
    deadline = time.monotonic() + 10
    while owner.alive():
        assert time.monotonic() < deadline, f"owner {owner.pid} still looks alive"
        time.sleep(0.01)


def test_a_daemon_whose_jvm_was_killed_is_not_alive_though_it_runs(tmp_path):
    java = tmp_path / "java"  # the command name an executor JVM has
    java.symlink_to(sys.executable)
    owner, child = _orphan_after_parent_killed(str(java))
    try:
        assert owner.parent is not None
        _wait_until_not_alive(owner)  # reparented as soon as the JVM is reaped
        os.kill(child, 0)  # while the daemon itself still runs
    finally:
        subprocess.run(["kill", "-9", str(child)], check=False)
    _wait_until_not_alive(Owner(child))


def test_a_driver_given_another_parent_is_still_alive():
    owner, child = _orphan_after_parent_killed(sys.executable)
    try:
        assert owner.parent is None  # not a JVM's child: only the process itself is watched
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[1] != "1":
            if time.monotonic() > deadline:
                break  # reparented to a subreaper rather than init: the same for the owner
            time.sleep(0.01)
        assert owner.alive()
    finally:
        subprocess.run(["kill", "-9", str(child)], check=False)
    _wait_until_not_alive(Owner(child))
