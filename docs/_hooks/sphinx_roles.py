"""MkDocs hook: render the Sphinx roles of processor_api's docstrings as code.

The docstrings cross-reference with Sphinx roles (``:class:`Topology```,
``:meth:`~processor_api.Processor.init```). mkdocstrings passes them through as text, which
shows up as ``:meth:`` before the code; this hook keeps the code and drops the role, showing
the last dotted part for a ``~`` reference, as Sphinx does.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:meth|class|attr|func|exc|mod|data|obj):<code>(~?)([^<]+)</code>")


def _plain(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub(_plain, html)
