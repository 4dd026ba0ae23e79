"""pyspark's worker daemon, with the epoch function's imports made before it forks workers.

Spark starts one daemon per executor (``spark.python.daemon.module``, set by session.py) and
asks it for a Python worker per task; the daemon forks one. pyspark's own daemon forks a bare
interpreter, and each worker then imports pandas, pyarrow and the epoch function itself: some
110 MiB that every worker holds on its own. Imported here, before the first fork, the workers
share those pages with the daemon copy-on-write, and each worker's own memory is what its
epochs allocate.

pyspark imports the worker module only after the fork because pandas and pyarrow may start
threads, which a fork does not copy. The imports here start none that a worker needs: numpy's
OpenBLAS pool is kept to one thread (the epoch function does no linear algebra) unless the
environment says otherwise, and jemalloc (pyarrow's allocator) restarts its background thread
in a forked child itself.
"""

from __future__ import annotations

import gc
import os


def preload() -> None:
    """Import what a worker needs for an epoch, then freeze the heap's objects.

    ``gc.freeze()`` keeps the collector from writing to the imported objects' headers in the
    workers, which would copy the shared pages one by one.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    import pyspark.sql.pandas.serializers  # noqa: F401
    import pyspark.worker  # noqa: F401

    import processor_api.spark.epoch_function  # noqa: F401

    gc.collect()
    gc.freeze()


def main() -> None:
    """Preload, then run pyspark's daemon loop (it forks the workers)."""
    preload()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
