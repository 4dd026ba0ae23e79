"""A worker host's owner (``worker_host.Owner``): the pyspark daemon that started it, under the
executor JVM it had. A killed executor leaves its daemon running for up to a second, but with
another parent at once: the host tells the driver its executor is gone from that."""

from __future__ import annotations

import subprocess
import sys
import time

from processor_api.runtime.worker_host import Owner

#: A parent (as the executor's JVM) that starts a child (as its pyspark daemon), prints the
#: child's pid and waits.
PARENT = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def test_an_owner_whose_parent_was_killed_is_not_alive_though_it_runs():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        owner = Owner(child)
        assert owner.parent == parent.pid and owner.alive()
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while owner.alive():  # reparented as soon as the parent is reaped
            assert time.monotonic() < deadline, "the orphaned owner still looks alive"
            time.sleep(0.01)
    finally:
        subprocess.run(["kill", "-9", str(child)], check=False)
    gone = Owner(child)
    deadline = time.monotonic() + 10
    while gone.alive():
        assert time.monotonic() < deadline, "a killed owner still looks alive"
        time.sleep(0.01)
