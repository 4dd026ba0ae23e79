"""Benchmarks of processor_api (issue #5): ``python -m bench.run --quick|--full``.

Raw results go to ``bench/results/*.json``, the report to ``bench/RESULTS.md`` with plots in
``bench/results/*.png``. Logs of every contender run and py-spy profiles go to
``bench/results/raw/`` (not committed).
"""
