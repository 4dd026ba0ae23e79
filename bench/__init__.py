"""Benchmarks of processor_api: ``python -m bench.run --quick|--full`` and one module per benchmark.

Results go to ``bench/results/<benchmark>[-<variant>]-<YYYY-MM-DD>.json``; ``python -m bench.report``
writes the report to ``bench/RESULTS.md`` with plots in
``bench/results/*.png``. Logs of every contender run and py-spy profiles go to
``bench/results/raw/`` (not committed).
"""
