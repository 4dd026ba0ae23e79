"""The manual's configuration page (docs/operating/configuration.md) names every environment
variable of the library and every Spark setting the runner's session sets."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "operating" / "configuration.md"
#: The library's own environment variables: every name with this prefix in its source.
ENV_NAME = re.compile(r"\bPROCESSOR_API_[A-Z0-9_]+\b")


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
    from processor_api.spark.session import session_conf
    from processor_api.spark.settings import RunSettings

    # a cluster master: the executors' JVM options are set too
    run = RunSettings(bootstrap_servers="127.0.0.1:9092", master="local-cluster[2,2,1024]")
    settings = {
        key
        for quiet in (True, False)
        for key in session_conf(run, worker_count=2, workers_path="/x", quiet=quiet)
    }
    assert "spark.ui.enabled" in settings  # the search itself works
    page = _page()
    missing = sorted(s for s in settings if s not in page)
    assert missing == [], f"not named in {PAGE.relative_to(ROOT)}: {missing}"
