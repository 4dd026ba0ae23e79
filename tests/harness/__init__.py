"""The test harness: plain modules, each with one job, imported by tests and conftests.

* :mod:`~tests.harness.topics`: unique names, producing, reading topics back;
* :mod:`~tests.harness.wire`: a raw Kafka Fetch client (transaction markers, high watermarks);
* :mod:`~tests.harness.logs`: structlog events from ``run-topology``'s output;
* :mod:`~tests.harness.processes`: ``run-topology`` in a subprocess, killing its process tree;
* :mod:`~tests.harness.runs`: a topology run in a thread of this process;
* :mod:`~tests.harness.folds`: seed 000's sales and the reference fold of its output;
* :mod:`~tests.harness.crash`: kill-and-restart scenarios over that topology;
* :mod:`~tests.harness.word_count`: the session's word count run on local Spark;
* :mod:`~tests.harness.object_store`: an S3-compatible server (moto) and the options reaching it.

Fixtures built on these live in the conftests (``tests/conftest.py``: the broker and the
SparkSession; ``tests/integration/conftest.py``: the word count run).
"""
