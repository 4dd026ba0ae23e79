"""``tests/harness/long_first.py``: test files are collected long kinds first, each file whole."""

from __future__ import annotations

import pytest

UNIT = "def test_one():\n    pass\n\ndef test_two():\n    pass\n"
MARKED = "import pytest\n\npytestmark = pytest.mark.integration\n\n" + UNIT
PARTLY_MARKED = "import pytest\n\ndef test_plain():\n    pass\n\n@pytest.mark.integration\ndef test_marked():\n    pass\n"


def test_long_kinds_come_first_and_files_stay_whole(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nmarkers =\n    integration: needs a broker or Spark\n")
    for path, text in {
        "a_unit/test_a.py": UNIT,
        "b_kafka/test_b.py": PARTLY_MARKED,
        "c_unit/test_c.py": UNIT,
        "integration/test_d.py": MARKED,
        "reliability/test_e.py": MARKED,
        "reliability/test_f.py": UNIT,
    }.items():
        target = pytester.path / path
        target.parent.mkdir(exist_ok=True)
        target.write_text(text)
    result = pytester.runpytest("-p", "tests.harness.long_first", "--collect-only", "-q")
    files = [line.split("::")[0] for line in result.outlines if "::" in line]
    assert list(dict.fromkeys(files)) == [
        "reliability/test_e.py",
        "reliability/test_f.py",
        "integration/test_d.py",
        "b_kafka/test_b.py",
        "a_unit/test_a.py",
        "c_unit/test_c.py",
    ]
    assert len(files) == 12  # nothing lost
    assert files == sorted(files, key=list(dict.fromkeys(files)).index)  # each file whole
