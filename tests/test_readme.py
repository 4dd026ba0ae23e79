"""The README's examples run as printed.

* Every ```python block directly preceded by a line ``<!-- test -->`` is executed, in the
  order of the README, in one shared namespace (as a reader pasting them into one file would);
  every ``test_*`` function they define is then called as its own pytest case.
* Every ``--flag`` the README mentions is a ``run-topology``, ``read-store`` or
  ``processor-api`` option.

The manual's examples (docs/) are run by tests/test_docs.py.

Needs neither the broker nor Spark.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
TEST_MARKER = "<!-- test -->"
TESTED_BLOCK = re.compile(r"^<!-- test -->\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
TEST_FUNCTION = re.compile(r"^def (test_\w+)\(", re.MULTILINE)
# ``--`` options the README may mention that are not run-topology flags.
OTHER_FLAGS: set[str] = {"--check", "--strict"}  # ruff format --check, mkdocs build --strict


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _tested_blocks() -> list[str]:
    return TESTED_BLOCK.findall(_readme())


def _declared_tests() -> list[str]:
    return [name for block in _tested_blocks() for name in TEST_FUNCTION.findall(block)]


@pytest.fixture(scope="module")
def readme_namespace() -> dict[str, Any]:
    """The namespace left by executing every tested block in order."""
    namespace: dict[str, Any] = {"__name__": "readme_examples"}
    for index, block in enumerate(_tested_blocks(), start=1):
        code = compile(block, f"README.md (tested block {index})", "exec")
        exec(code, namespace)  # noqa: S102 - the README's own examples
    return namespace


def test_every_test_marker_is_followed_by_a_python_block():
    markers = re.findall(rf"^{re.escape(TEST_MARKER)}$", _readme(), re.MULTILINE)
    assert len(markers) == len(_tested_blocks()) >= 1


def test_the_tested_blocks_define_tests(readme_namespace):
    defined = [
        name for name, obj in readme_namespace.items() if name.startswith("test_") and callable(obj)
    ]
    assert defined, "the README's tested blocks define no test_* function"
    assert sorted(defined) == sorted(_declared_tests())


@pytest.mark.parametrize("name", _declared_tests())
def test_readme_example(readme_namespace, name):
    readme_namespace[name]()


def test_cli_flags_in_readme_exist():
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
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", _readme()))
    assert mentioned, "the README mentions no run-topology flag"
    assert sorted(mentioned - known - OTHER_FLAGS) == []
