"""The manual's examples (docs/**/*.md) run as printed.

* Every fenced ```python block of a page is executed, in the order of the page, in one
  namespace per page (as a reader pasting the page's blocks into one file would); every
  ``test_*`` function they define is then called as its own pytest case.
* A block that is a fragment and does not run on its own (it needs a broker, a Spark session or
  names defined elsewhere) is marked by a line ``<!-- fragment -->`` directly before its fence.
  The marker is an HTML comment, so the rendered manual does not show it.
* Every ```text block preceded by ``<!-- describe: MODULE:FUNCTION -->`` must equal
  ``str(FUNCTION().describe())``.

* Every ``--flag`` the manual mentions is a ``run-topology``, ``read-store`` or ``processor-api``
  option (performance.md, which quotes the benchmarks' commands, aside).

Needs neither the broker nor Spark: a block that does goes behind ``<!-- fragment -->``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
FRAGMENT_MARKER = "<!-- fragment -->"
# A python fence at the start of a line, and the line before it (to see the fragment marker).
PYTHON_BLOCK = re.compile(r"(?:^([^\n]*)\n)?^```python[^\n]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)
DESCRIBE_BLOCK = re.compile(
    r"^<!-- describe: (\S+) -->\n```text\n(.*?)^```$", re.MULTILINE | re.DOTALL
)
TEST_FUNCTION = re.compile(r"^def (test_\w+)\(", re.MULTILINE)
# Pages whose ``--flags`` belong to other tools: the benchmarks' commands in bench/.
OTHER_TOOLS_PAGES = {"performance.md"}


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _page_id(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


def _runnable_blocks(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return [
        code for before, code in PYTHON_BLOCK.findall(text) if before.strip() != FRAGMENT_MARKER
    ]


def _pages_with_blocks() -> list[Path]:
    return [page for page in _pages() if _runnable_blocks(page)]


def _run_page(page: Path) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    for index, block in enumerate(_runnable_blocks(page), start=1):
        code = compile(block, f"docs/{_page_id(page)} (python block {index})", "exec")
        exec(code, namespace)  # noqa: S102 - the manual's own examples
    return namespace


_NAMESPACES: dict[Path, dict[str, Any]] = {}


def _namespace(page: Path) -> dict[str, Any]:
    if page not in _NAMESPACES:
        _NAMESPACES[page] = _run_page(page)
    return _NAMESPACES[page]


def _declared_tests() -> list[tuple[Path, str]]:
    return [
        (page, name)
        for page in _pages_with_blocks()
        for block in _runnable_blocks(page)
        for name in TEST_FUNCTION.findall(block)
    ]


def test_the_manual_has_pages_and_runnable_blocks():
    assert len(_pages()) >= 10
    assert len(_pages_with_blocks()) >= 3


def test_the_fence_pattern_sees_every_python_block():
    """A ```python fence the pattern misses would silently go untested."""
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        fences = re.findall(r"^```python", text, re.MULTILINE)
        assert len(fences) == len(PYTHON_BLOCK.findall(text)), _page_id(page)


def test_fragment_markers_precede_python_blocks():
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        markers = text.count(FRAGMENT_MARKER)
        marked = sum(1 for before, _ in PYTHON_BLOCK.findall(text) if before == FRAGMENT_MARKER)
        assert markers == marked, f"docs/{_page_id(page)}: a fragment marker not before ```python"


@pytest.mark.parametrize("page", _pages_with_blocks(), ids=_page_id)
def test_page_blocks_run(page):
    _namespace(page)


@pytest.mark.parametrize(
    ("page", "name"), _declared_tests(), ids=[f"{_page_id(p)}::{n}" for p, n in _declared_tests()]
)
def test_docs_example(page, name):
    _namespace(page)[name]()


def _describe_blocks() -> list[tuple[str, str, str]]:
    return [
        (_page_id(page), reference, printed)
        for page in _pages()
        for reference, printed in DESCRIBE_BLOCK.findall(page.read_text(encoding="utf-8"))
    ]


@pytest.mark.parametrize(("page", "reference", "printed"), _describe_blocks())
def test_printed_describe_output_is_current(page, reference, printed):
    from processor_api.topology.loader import load_topology

    actual = str(load_topology(reference).describe())
    assert printed.rstrip("\n") == actual.rstrip("\n"), page


def _without_bench_commands(page: Path) -> str:
    """The page's text without ``python -m bench.X ...`` commands (up to the end of the line or
    of the code span): their flags are the benchmark's, not the CLIs'."""
    return re.sub(r"python -m bench\.[^\n`]*", "", page.read_text(encoding="utf-8"))


def test_cli_flags_in_the_manual_exist():
    import argparse

    from processor_api.cli.read_store import build_parser as build_read_store_parser
    from processor_api.cli.run_topology import build_parser
    from processor_api.cli.tools import build_parser as build_tool_parser

    parsers = [build_parser(), build_read_store_parser(), build_tool_parser()]
    for action in parsers[-1]._actions:  # processor-api's sub-commands
        if isinstance(action, argparse._SubParsersAction):
            parsers.extend(action.choices.values())
    known = {
        option
        for parser in parsers
        for action in parser._actions
        for option in action.option_strings
    }
    unknown = {
        f"docs/{_page_id(page)}: {flag}"
        for page in _pages()
        if _page_id(page) not in OTHER_TOOLS_PAGES
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", _without_bench_commands(page))
        if flag not in known
    }
    assert sorted(unknown) == []
