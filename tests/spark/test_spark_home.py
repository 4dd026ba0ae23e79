"""The compiled SPARK_HOME: same installation, pyspark.zip with bytecode that workers use."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from processor_api.spark import spark_home


def test_the_compiled_home_links_the_installation_and_carries_bytecode(tmp_path, monkeypatch):
    monkeypatch.setenv(spark_home.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.delenv(spark_home.ENV_SWITCH, raising=False)
    home = spark_home.compiled_spark_home()
    assert home is not None and Path(home).parent == tmp_path
    installed = spark_home._installed_spark_home()
    assert (Path(home) / "jars").resolve() == (installed / "jars").resolve()
    assert (Path(home) / "bin").is_symlink()
    with zipfile.ZipFile(Path(home) / "python/lib/pyspark.zip") as archive:
        names = set(archive.namelist())
    with zipfile.ZipFile(installed / "python/lib/pyspark.zip") as archive:
        original = {n for n in archive.namelist() if not n.endswith("/")}
    assert original <= names  # every source is still there
    assert "pyspark/worker.pyc" in names and "pyspark/sql/pandas/serializers.pyc" in names
    assert spark_home.compiled_spark_home() == home  # built once, then reused
    # a worker imports pyspark from the zip, and the bytecode is what it runs
    probe = (
        "import pyspark.worker, sys; m = sys.modules['pyspark.worker']; "
        "print(m.__file__, type(m.__loader__).__name__, m.__spec__.cached)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(Path(home) / "python/lib/pyspark.zip"), "PATH": "/usr/bin"},
    ).stdout
    assert "pyspark.zip" in out and "zipimporter" in out, out


def test_switched_off_or_a_user_spark_home_keeps_sparks_own(tmp_path, monkeypatch):
    monkeypatch.setenv(spark_home.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(spark_home.ENV_SWITCH, "0")
    assert spark_home.compiled_spark_home() is None
    monkeypatch.delenv(spark_home.ENV_SWITCH)
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    assert spark_home.compiled_spark_home() is None
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_cache_falls_back_to_sparks_own(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(spark_home.CACHE_ENV, str(blocked / "cache"))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.delenv(spark_home.ENV_SWITCH, raising=False)
    assert spark_home.compiled_spark_home() is None
