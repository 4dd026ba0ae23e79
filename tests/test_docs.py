"""The examples of the README and of the manual (``docs/``) run as printed.

For each document (README.md, every ``docs/**/*.md``):

* Every ```python block directly preceded by a line ``<!-- test -->`` is executed, in the
  order of the document, in one namespace per document (as a reader pasting them into one file
  would); every ``test_*`` function they define is then called as its own pytest case. A block
  without the marker is a fragment (it needs a broker, a cluster, or names from the text).
* Every ```text block preceded by ``<!-- describe: MODULE:FUNCTION -->`` must equal
  ``str(FUNCTION().describe())``.
* Every ``--flag`` a document mentions is an option of ``run-topology``, ``read-store`` or
  ``processor-api``.

Needs neither the broker nor Spark.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TEST_MARKER = "<!-- test -->"
TESTED_BLOCK = re.compile(r"^<!-- test -->\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
DESCRIBE_BLOCK = re.compile(
    r"^<!-- describe: (\S+) -->\n```text\n(.*?)^```$", re.MULTILINE | re.DOTALL
)
TEST_FUNCTION = re.compile(r"^def (test_\w+)\(", re.MULTILINE)
# ``--`` options the README may mention that are not run-topology flags.
OTHER_FLAGS: set[str] = {"--check", "--strict"}  # ruff format --check, mkdocs build --strict


def _name(document: Path) -> str:
    return str(document.relative_to(ROOT))


def _text(document: Path) -> str:
    return document.read_text(encoding="utf-8")


def _tested_blocks(document: Path) -> list[str]:
    return TESTED_BLOCK.findall(_text(document))


def _declared_tests() -> list[tuple[str, str]]:
    return [
        (_name(document), name)
        for document in DOCUMENTS
        for block in _tested_blocks(document)
        for name in TEST_FUNCTION.findall(block)
    ]


_NAMESPACES: dict[str, dict[str, Any]] = {}


def _namespace(document_name: str) -> dict[str, Any]:
    """The namespace left by executing every tested block of the document in order."""
    if document_name not in _NAMESPACES:
        namespace: dict[str, Any] = {"__name__": "documented_examples"}
        for index, block in enumerate(_tested_blocks(ROOT / document_name), start=1):
            code = compile(block, f"{document_name} (tested block {index})", "exec")
            exec(code, namespace)  # noqa: S102 - the documents' own examples
        _NAMESPACES[document_name] = namespace
    return _NAMESPACES[document_name]


def test_there_are_documents_with_tested_examples():
    assert len(DOCUMENTS) > 5
    assert _tested_blocks(ROOT / "README.md"), "the README runs no example"


@pytest.mark.parametrize("document", DOCUMENTS, ids=_name)
def test_every_test_marker_is_followed_by_a_python_block(document):
    markers = re.findall(rf"^{re.escape(TEST_MARKER)}$", _text(document), re.MULTILINE)
    assert len(markers) == len(_tested_blocks(document))


@pytest.mark.parametrize("document", [d for d in DOCUMENTS if _tested_blocks(d)], ids=_name)
def test_the_tested_blocks_run_and_define_their_tests(document):
    namespace = _namespace(_name(document))
    defined = [
        name for name, obj in namespace.items() if name.startswith("test_") and callable(obj)
    ]
    declared = [name for doc, name in _declared_tests() if doc == _name(document)]
    assert sorted(defined) == sorted(declared)


@pytest.mark.parametrize(("document", "name"), _declared_tests())
def test_documented_example(document, name):
    _namespace(document)[name]()


def _describe_blocks() -> list[tuple[str, str, str]]:
    return [
        (_name(document), reference, printed)
        for document in DOCUMENTS
        for reference, printed in DESCRIBE_BLOCK.findall(_text(document))
    ]


@pytest.mark.parametrize(("document", "reference", "printed"), _describe_blocks())
def test_printed_describe_output_is_current(document, reference, printed):
    from processor_api.loader import load_topology

    actual = str(load_topology(reference).describe())
    assert printed.rstrip("\n") == actual.rstrip("\n")


def test_some_describe_output_is_checked():
    assert _describe_blocks(), "no document shows describe() output to check"


@pytest.mark.parametrize("document", DOCUMENTS, ids=_name)
def test_cli_flags_mentioned_exist(document):
    from processor_api.broker_cli import build_parser as build_tool_parser
    from processor_api.cli import build_parser
    from processor_api.read_store_cli import build_parser as build_read_store_parser

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
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", _text(document)))
    assert sorted(mentioned - known - OTHER_FLAGS) == []
