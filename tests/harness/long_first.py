"""A pytest plugin that runs the long test files first, so two xdist workers end together.

``make test`` runs the suite on two pytest-xdist workers (``--dist load --maxschedchunk 1``:
the controller hands out tests one at a time in collection order, to whichever worker is
free; without the chunk limit the first worker gets the first quarter of the tests at once).
Left in path order, the long fault scenarios of ``tests/reliability`` come last, and one
worker runs the last of them alone while the other has nothing left. Here the files are ordered by a rank each gets from
where it lives and what it needs, long kinds first, so the short unit tests fill the end:

0. ``tests/reliability``: fault scenarios, each several ``run-topology`` processes;
1. ``tests/integration``: runs on Spark and the broker;
2. other files with a test marked ``integration``;
3. everything else (unit tests, a few seconds per file).

Files stay whole and keep pytest's order within a rank, so without xdist a module fixture is
still set up once. (``--dist loadfile`` would keep a file on one worker, but it hands out the
files with the most tests first, whatever their order.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: Test directories whose files come first, longest kind first.
LONG_DIRECTORIES = ("reliability", "integration")


def file_rank(items: list[pytest.Item]) -> int:
    """The rank of one test file, from its path and its tests' markers (0 runs first)."""
    path = items[0].path
    root = items[0].config.rootpath
    parts = path.relative_to(root).parts if path.is_relative_to(root) else path.parts
    for rank, directory in enumerate(LONG_DIRECTORIES):
        if directory in parts:
            return rank
    if any(item.get_closest_marker("integration") for item in items):
        return len(LONG_DIRECTORIES)
    return len(LONG_DIRECTORIES) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    by_file: dict[Path, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.path, []).append(item)
    files = sorted(by_file.values(), key=file_rank)  # stable: pytest's order within a rank
    items[:] = [item for file_items in files for item in file_items]
