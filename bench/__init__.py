"""Benchmarks of processor_api: ``python -m bench.run --quick|--full`` and one module per benchmark.

Results go to ``bench/results/<benchmark>[-<variant>]-<YYYY-MM-DD>.json``; ``python -m bench.report``
writes the report to ``bench/RESULTS.md`` with plots in
``bench/results/*.png``. Logs of every contender run and py-spy profiles go to
``bench/results/raw/``, which git ignores: the result files hold every figure the report
reads, and the paths of raw logs that the notes and result files name are on the machine that
ran the benchmark, not in the repository.
"""
