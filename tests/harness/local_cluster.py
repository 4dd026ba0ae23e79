"""The executors of ``local-cluster[...]`` runs: their work directories, and one run at a time.

A ``local-cluster`` master is started by each run and numbers its applications from 0, and
every standalone worker keeps its executors' working directories under
``$SPARK_HOME/work/app-<yyyyMMddHHmmss>-<n>/<executor id>``: two runs started in the same
second (the two pytest-xdist workers of ``make test``) get the same application directory and
the same executor directories. An executor's Python workers run in that directory (pyspark
puts ``.`` on their ``sys.path``), so a run that removes it while another's executor still
runs there makes every import of that executor fail (``FileNotFoundError``). The tests that
start ``local-cluster`` take :func:`one_cluster_at_a_time` and remove only their own
executors' directories.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import time
from collections.abc import Iterator
from pathlib import Path


def spark_homes() -> list[Path]:
    """Where the run's executors may have their work dirs: the compiled home, or pyspark's."""
    from pyspark.find_spark_home import _find_spark_home

    from processor_api.spark.spark_home import compiled_spark_home

    compiled = compiled_spark_home()
    return [Path(home) for home in (compiled, _find_spark_home()) if home]


def executor_dirs(marker: str) -> list[Path]:
    """``$SPARK_HOME/work/<app>/<executor>`` of the executors started with ``marker`` (a
    ``-D`` option of theirs, on the first line of their ``stderr``)."""
    found = []
    for home in spark_homes():
        for stderr in (home / "work").glob("app-*/*/stderr"):
            try:
                with open(stderr, errors="replace") as handle:
                    if marker in handle.readline():  # "Spark Executor Command: ..."
                        found.append(stderr.parent)
            except OSError:
                continue
    return sorted(found)


def remove_executor_dirs(marker: str) -> None:
    """Remove the work directories of the executors started with ``marker``, and their
    application's directory once nothing else is in it."""
    directories = executor_dirs(marker)
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)
    for app_dir in {d.parent for d in directories}:
        with contextlib.suppress(OSError):  # another run's executors are still in it
            app_dir.rmdir()


@contextlib.contextmanager
def one_cluster_at_a_time(lock_file: Path, timeout_s: float = 1200.0) -> Iterator[None]:
    """Hold the lock of ``local-cluster`` runs (a file every pytest-xdist worker sees) while
    the block runs; raises ``TimeoutError`` after ``timeout_s`` without it."""
    deadline = time.monotonic() + timeout_s
    with open(lock_file, "a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"another test held the local-cluster lock {lock_file} for more than "
                        f"{timeout_s:.0f} s"
                    ) from None
                time.sleep(0.2)  # polling the lock another worker holds
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
