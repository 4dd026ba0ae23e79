"""The sections of ``bench/RESULTS.md``, one module per report; ``bench/report.py`` puts them
together and is the command (``python -m bench.report``).

* :mod:`~bench.reports.shared`: reading result files, number formats, plots, targets tables;
* :mod:`~bench.reports.first_round`: throughput, punctuation, restore (``bench.run``), the
  what-if prototypes and the profiles;
* :mod:`~bench.reports.window_store`: the window store in-process;
* :mod:`~bench.reports.windowed_global`: a windowed aggregation on Spark, a 1M-entry global store;
* :mod:`~bench.reports.into_kafka`: punctuation that ends in Kafka, wall-clock lag, timers;
* :mod:`~bench.reports.task_hosts`: long-lived task hosts (2M end to end, start-up, latency);
* :mod:`~bench.reports.snapshots`: warm restore from snapshots, their cost, executor loss.
"""
