"""The manual's configuration page (docs/operating/configuration.md) names every environment
variable of the library and every Spark setting the runner's session sets."""

from __future__ import annotations

import re
from pathlib import Path

from processor_api.logging import LEVEL_ENV

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "operating" / "configuration.md"
#: The library's own environment variables: every name with this prefix in its source.
ENV_NAME = re.compile(r"\bPROCESSOR_API_[A-Z0-9_]+\b")
#: A setting the session builder sets: ``.config("spark....", ...)`` or ``.config(f"spark....")``.
SESSION_SETTING = re.compile(r"""\.config\(\s*f?["'](spark\.[A-Za-z0-9_.{}]+)""")


def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_every_environment_variable_the_library_reads_is_on_the_page() -> None:
    found: dict[str, str] = {}
    for path in sorted((ROOT / "processor_api").rglob("*.py")):
        for name in ENV_NAME.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, str(path.relative_to(ROOT)))
    assert "PROCESSOR_API_LOG_LEVEL" in found  # the search itself works
    page = _page()
    missing = {name: where for name, where in found.items() if f"`{name}`" not in page}
    assert missing == {}, f"not named in {PAGE.relative_to(ROOT)}: {missing}"


def test_every_spark_setting_the_session_sets_is_on_the_page() -> None:
    source = (ROOT / "processor_api" / "spark" / "session.py").read_text(encoding="utf-8")
    # the one name built in an f-string: the log level's variable
    settings = {s.replace("{LEVEL_ENV}", LEVEL_ENV) for s in SESSION_SETTING.findall(source)}
    assert not any("{" in s for s in settings), settings
    assert "spark.ui.enabled" in settings  # the search itself works
    page = _page()
    missing = sorted(s for s in settings if s not in page)
    assert missing == [], f"not named in {PAGE.relative_to(ROOT)}: {missing}"
